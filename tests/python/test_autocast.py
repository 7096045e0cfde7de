"""Calls under torch.autocast run the original function eagerly, with a warning (once) that says why, in
either order with compiled calls: a specialization traced with autocast bakes its casts in, and one
traced without it has typed paths autocast would not see."""
import warnings

import pytest
import torch

import trident


def mm(a, b):
    return torch.mm(a, b)


@pytest.mark.parametrize("autocast_first", [True, False])
def test_autocast_calls_run_eagerly_and_plain_calls_stay_compiled(autocast_first):
    fast = trident.compile(mm)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    order = (True, False, True) if autocast_first else (False, True, False)
    said = []
    for under in order:
        if under:
            with torch.autocast("cpu", dtype=torch.bfloat16), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = fast(a, b)
            said += [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                want = mm(a, b)
        else:
            got, want = fast(a, b), mm(a, b)
        assert got.dtype == want.dtype and torch.equal(got, want), under
    assert len(said) == 1 and "torch.autocast is enabled" in said[0], said
    c = trident.counters(fast)
    assert c["specializations"] == 1 and c["fallbacks"] == order.count(True), c
