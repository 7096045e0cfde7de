"""Python int arguments a capture holds as constants: a capture reused for a call with another value
must be refused and redone (the branch, loop count or index the trace took belongs to its value),
and a symbolic capture that excludes its own example falls back to a static one."""
import torch
import torch.nn.functional as F

import trident


def branch(x, n: int):
    return x * 2 if n > 2 else x * 3


def loop(x, n: int):
    for _ in range(n):
        x = x + 1
    return x


def index(x, n: int):
    return x * [10, 20, 30, 40, 50, 60][n]


def pad(a, p: int):
    return F.pad(a, (p, p))


def test_an_int_the_trace_branched_loops_or_indexed_on_is_guarded_at_its_traced_value():
    for fn, values in ((branch, [1, 2, 3, 4, 1]), (loop, [1, 2, 3, 5, 2]), (index, [0, 1, 2, 3, 1])):
        for dynamic in (None, True):
            fast = trident.compile(fn, dynamic=dynamic)
            for n in values:
                x = torch.ones(3)
                assert torch.equal(fast(x, n), fn(x, n)), (fn.__name__, dynamic, n)


def test_a_symbolic_capture_that_excludes_its_example_is_redone_statically():
    fast = trident.compile(pad)
    x = torch.arange(4.0)
    for p in (1, 2, -1, 3, -1):
        assert torch.equal(fast(x, p), pad(x, p)), p
    assert trident.counters(fast)["specializations"] == 3  # symbolic p >= 0, then -1 statically, once
