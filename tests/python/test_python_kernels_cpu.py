"""ATen ops whose kernel for the device is a Python function (a library's override through
torch.library, as `flag_gems.enable()` registers its Triton operators for CUDA): the capture
inlines the kernel's own ATen calls (python_kernels.py), so a hit runs no Python. Here the device
is the CPU and the overridden op `aten::hypot`, which no other test uses; the override is
registered only for the test's duration."""
import contextlib
import logging

import pytest
import torch

import trident
from trident import python_kernels


@contextlib.contextmanager
def python_kernel_for(op_name, fn, key="CPU"):
    lib = torch.library.Library("aten", "IMPL")
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            lib.impl(op_name, fn, key)
        yield
    finally:
        lib._destroy()


CALLS = []


def py_hypot(a, b):
    """Not ATen's hypot: a different, recognisable computation, with a size branch."""
    CALLS.append(a.shape)
    out = torch.empty_like(a)
    if a.shape[-1] > 4:
        out.copy_(torch.sqrt(a * a + b * b) * 2)
    else:
        out.copy_(a - b)
    return out


def f(x, y):
    return torch.hypot(x, y) + 1


def test_the_op_is_recognised_only_while_its_python_kernel_is_registered():
    op = torch.ops.aten.hypot.default
    assert python_kernel_site(op) is None
    with python_kernel_for("hypot", py_hypot):
        site = python_kernel_site(op)
        assert site is not None and __file__.rsplit("/", 1)[-1] in site, site
        assert python_kernels.python_kernel_site(op, "cuda") is None  # registered for the CPU only
    assert python_kernel_site(op) is None


def test_saved_specializations_are_keyed_on_a_librarys_python_kernels_not_torchs_own():
    assert "aten::hypot/CPU" not in python_kernels.registrations()
    with python_kernel_for("hypot", py_hypot):
        assert "aten::hypot/CPU" in python_kernels.registrations()
    # torch registers a few Python kernels itself at import (2.13: _foreach_mm for CUDA); they are
    # the same in every process and do not enter the key
    assert all("_foreach" not in r for r in python_kernels.registrations())


def python_kernel_site(op):
    return python_kernels.python_kernel_site(op, "cpu")


def test_a_python_kernel_is_inlined_and_a_hit_runs_no_python():
    with python_kernel_for("hypot", py_hypot):
        fast = trident.compile(f)
        x, y = torch.randn(3, 8), torch.randn(3, 8)
        CALLS.clear()
        want = f(x, y)
        assert len(CALLS) == 1  # eager runs the Python kernel
        got = fast(x, y)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        CALLS.clear()
        for _ in range(3):
            x, y = torch.randn(3, 8), torch.randn(3, 8)
            torch.testing.assert_close(fast(x, y), f(x, y), rtol=0, atol=0)
        assert len(CALLS) == 3  # eager's three; none from the native calls
        c = trident.counters(fast)
        assert c["hits"] == 3 and c["fallbacks"] == 0, c
        text = trident.explain(fast)
        assert "aten::hypot" in text and "Python kernels inlined" in text, text
        # the kernel's branch on the last size is the specialization's own: a short row is
        # another specialization, computed the other way
        x, y = torch.randn(3, 2), torch.randn(3, 2)
        torch.testing.assert_close(fast(x, y), x - y + 1, rtol=0, atol=0)


def test_a_symbolic_capture_guards_the_kernels_size_branch():
    with python_kernel_for("hypot", py_hypot):
        fast = trident.compile(f, dynamic=True)
        for n in (8, 9, 16, 3, 2, 5):
            x, y = torch.randn(2, n), torch.randn(2, n)
            torch.testing.assert_close(fast(x, y), f(x, y), rtol=0, atol=0)
        assert trident.counters(fast)["fallbacks"] == 0


def py_hypot_writes_its_input(a, b):
    a.mul_(1)  # harmless, but a Python kernel that mutates cannot be traced functionally here
    return torch.sqrt(a * a + b * b) + torch.tensor(0.0)  # and a tensor constant: kept as a call


def test_a_python_kernel_that_cannot_be_inlined_stays_a_call_and_says_so(caplog):
    with python_kernel_for("hypot", py_hypot_writes_its_input), caplog.at_level(logging.WARNING, "trident"):
        fast = trident.compile(f)
        x, y = torch.randn(4), torch.randn(4)
        torch.testing.assert_close(fast(x, y), f(x, y))
        torch.testing.assert_close(fast(x, y), f(x, y))
    said = [r.getMessage() for r in caplog.records if "runs its Python kernel on every call" in r.getMessage()]
    assert len(said) == 1 and "aten::hypot" in said[0], said
    assert "ATen ops that run their Python kernel on every call: aten::hypot" in trident.explain(fast)


ATAN2_CALLS = []


def py_atan2(a, b):
    ATAN2_CALLS.append(a.shape)
    return a * 2 - b


def py_atan2_making_a_constant(a, b):
    ATAN2_CALLS.append(a.shape)
    return a * 2 - b + torch.tensor(0.0)  # a tensor constant: cannot be inlined


def py_hypot_calling_atan2_in_a_loop(a, b):
    CALLS.append(a.shape)
    out = a
    for _ in range(3):
        out = torch.atan2(out, b)
    return out


@pytest.mark.parametrize("inner", [py_atan2, py_atan2_making_a_constant])
def test_a_python_kernel_is_inlined_only_when_all_of_it_becomes_native(inner):
    """A Python kernel whose own ATen calls have Python kernels: inlined through them when they
    can be inlined too; when one cannot, inlining the outer one would run the inner Python three
    times per hit, so the outer op stays one call, eager's cost, and explain says why."""
    with python_kernel_for("hypot", py_hypot_calling_atan2_in_a_loop), python_kernel_for("atan2", inner):
        fast = trident.compile(f)
        x, y = torch.randn(3, 8), torch.randn(3, 8)
        want = f(x.clone(), y)
        torch.testing.assert_close(fast(x.clone(), y), want, rtol=0, atol=0)
        CALLS.clear(), ATAN2_CALLS.clear()
        torch.testing.assert_close(fast(x.clone(), y), want, rtol=0, atol=0)
        text = trident.explain(fast)
        if inner is py_atan2:
            assert (CALLS, ATAN2_CALLS) == ([], []), (CALLS, ATAN2_CALLS)
            assert "aten::hypot" in text and "aten::atan2" in text and "x3" in text, text
        else:
            assert (len(CALLS), len(ATAN2_CALLS)) == (1, 3)  # what eager makes
            assert "ATen ops that run their Python kernel on every call: aten::hypot" in text, text
            assert "its kernel calls aten::atan2" in text and "tensor constants" in text, text
        assert trident.counters(fast)["hits"] == 1


def py_softmax(x, dim, half_to_float):
    CALLS.append(x.shape)
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True) + 1  # recognisably not ATen's


def softmax_twice(x):
    return torch.softmax(x, -1) * 2


def test_a_composite_op_whose_decomposition_reaches_a_python_kernel_is_decomposed_and_inlined():
    """torch.softmax is captured as the composite `softmax.int`, whose decomposition calls
    `_softmax`, the op a library overrides (FlagGems registers `_softmax`, not `softmax.int`)."""
    with python_kernel_for("_softmax", py_softmax):
        fast = trident.compile(softmax_twice)
        x = torch.randn(4, 16)
        CALLS.clear()
        want = softmax_twice(x)
        assert len(CALLS) == 1
        torch.testing.assert_close(fast(x), want)
        CALLS.clear()
        for _ in range(2):
            torch.testing.assert_close(fast(x), want)
        assert CALLS == [] and trident.counters(fast)["hits"] == 2
        assert "aten::_softmax" in trident.explain(fast)


def test_the_backend_inlines_python_kernels_too():
    with python_kernel_for("hypot", py_hypot):
        torch._dynamo.reset()
        opt = torch.compile(f, backend="trident")
        x, y = torch.randn(3, 8), torch.randn(3, 8)
        want = f(x, y)
        torch.testing.assert_close(opt(x, y), want, rtol=0, atol=0)
        CALLS.clear()
        for _ in range(2):
            torch.testing.assert_close(opt(x, y), want, rtol=0, atol=0)
        assert CALLS == []
    torch._dynamo.reset()
