"""The Python objects a compiled call returns: a value named several times in the output is one
object, as in eager; a fresh result is held by nothing but the caller; an argument returned is the
argument itself (python/bindings/outputs.cpp moves the frame's values into their objects)."""
import gc
import sys
import weakref

import torch

import trident


def named_three_times(x):
    y = x * 2
    return y, (y, x + 1), {"again": y}


def test_a_value_returned_several_times_is_one_object_on_every_hit():
    fast = trident.compile(named_three_times)
    for _ in range(3):  # a compile, then hits
        x = torch.randn(4, 3)
        want = named_three_times(x)
        got = fast(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got[0] is got[1][0] is got[2]["again"]
        assert got[1][1] is not got[0]
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (1, 2, 0)


def fresh_and_argument(x):
    return x.sin(), x


def test_a_fresh_result_is_held_only_by_the_caller_and_an_argument_comes_back_as_itself():
    fast = trident.compile(fresh_and_argument)
    x = torch.randn(8)
    for _ in range(3):
        out, same = fast(x)
        assert same is x
        torch.testing.assert_close(out, x.sin(), rtol=0, atol=0)
        # this frame's name and getrefcount's argument: no reference left behind in the module
        assert sys.getrefcount(out) == 2
        ref = weakref.ref(out)
        enabled = gc.isenabled()
        gc.disable()
        try:
            del out
            assert ref() is None
        finally:
            if enabled:
                gc.enable()
    assert trident.counters(fast)["hits"] == 2


def scaled_flat(x):
    x.mul_(2)
    return x.view(-1)


def bumped_views(x):
    x.add_(1)
    return x[0], x.t()[1:]


def test_a_view_of_a_mutated_argument_is_a_view_of_the_argument_as_in_eager():
    """Not a view of a separate new value: writing through the result writes the argument."""
    for fn in (scaled_flat, bumped_views):
        fast = trident.compile(fn)
        for _ in range(2):  # the capturing call and a hit
            x, y = torch.ones(2, 2), torch.ones(2, 2)
            got, want = fast(x), fn(y)
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            for a, b in zip(got, want):
                assert torch.equal(a, b) and a.stride() == b.stride(), fn.__name__
                assert a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(), fn.__name__
            got[0].view(-1)[0], want[0].view(-1)[0] = 100.0, 100.0
            assert torch.equal(x, y), fn.__name__


Pair = __import__("collections").namedtuple("Pair", "first second")


def tuple_classes(x):
    return torch.topk(x * 2, 3), Pair(x + 1, x.sum()), torch.sort(x, -1)


def test_namedtuples_and_torch_return_types_come_back_as_their_classes_with_no_split():
    """torch.topk's torch.return_types.topk (a structseq) and a user's namedtuple, returned as
    they are: built natively from their items (outputs.cpp), so the call is one native program."""
    fast = trident.compile(tuple_classes)
    for _ in range(3):
        x = torch.randn(4, 8)
        got, want = fast(x), tuple_classes(x)
        assert [type(g) for g in got] == [type(w) for w in want] == [torch.return_types.topk, Pair,
                                                                    torch.return_types.sort]
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got[0].indices.dtype == torch.int64 and got[1].first is got[1][0]
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"], c["split_calls"]) == (1, 2, 0, 0), c


def test_a_returned_shape_is_a_torch_size_of_this_calls_sizes_with_no_split():
    """`return y, y.shape`: a torch.Size built natively from the symbolic sizes (it split the call
    at the size and was refused symbolically: 'output container Size is not supported')."""
    def f(x):
        y = x * 2
        return y, y.shape, y.shape[0] * 2

    fast = trident.compile(f)
    for n in (3, 4, 5, 6):
        x = torch.randn(n, 2)
        got, want = fast(x), f(x)
        assert type(got[1]) is torch.Size and got[1] == want[1] and got[2] == want[2]
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"], c["split_calls"]) == (2, 2, 0, 0), c
