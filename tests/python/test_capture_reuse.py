"""A new specialization that differs from an earlier capture only in symbolic values is lowered
from the program already captured (trident/compiled.py capture_key); a call outside that program's
own shape assumptions is captured again."""
import torch

import trident
from trident import _compat


def count_exports(monkeypatch):
    exports = []
    orig = _compat.export_program
    monkeypatch.setattr(_compat, "export_program", lambda *a, **k: (exports.append(1), orig(*a, **k))[1])
    return exports


def scale(x):
    return x * 2 + 1


def test_call_outside_the_programs_shape_assumptions_is_captured_again(monkeypatch):
    exports = count_exports(monkeypatch)
    fast = trident.compile(scale, dynamic=True)
    for n in (8, 9, 1, 1, 12):  # size 1 is outside a symbolic capture's assumptions (0/1 specialization)
        x = torch.randn(n)
        torch.testing.assert_close(fast(x), scale(x))
    c = trident.counters(fast)
    assert c["specializations"] == 2 and len(exports) == 2


def test_captured_program_keeps_no_call_tensor_alive(monkeypatch):
    import weakref
    fast = trident.compile(scale)
    x = torch.randn(16)
    ref = weakref.ref(x)
    fast(x)
    del x
    assert ref() is None, "the compiled function keeps the first call's argument alive"


def test_key_masks_only_marked_values():
    from trident.compiled import capture_key
    _, a = trident._C.describe_args(torch.randn(4, 8), 3)
    _, b = trident._C.describe_args(torch.randn(5, 8), 4)
    _, c = trident._C.describe_args(torch.randn(5, 8).t().contiguous().t(), 4)  # same sizes, other layout
    marks = {("size", 0, 0), ("int", 1)}
    assert capture_key("Ti", a, marks, False) == capture_key("Ti", b, marks, False)
    assert capture_key("Ti", a, marks, False) != capture_key("Ti", c, marks, False)
    assert capture_key("Ti", a, marks, False) != capture_key("Ti", a, marks, True)
    assert capture_key("Ti", a, set(), False) != capture_key("Ti", b, set(), False)
