"""Graph breaks under trident.compile (python/trident/graph_breaks.py): a call that cannot be captured
as one program runs split where torch.compile splits it, the pieces native, Python between them,
said once with the user's line; fullgraph=True raises instead. And a trident-compiled function
called inside someone else's torch.compile region is not traced by Dynamo."""
import warnings

import pytest
import torch

import trident


@torch.compiler.disable
def opaque_extension(x):
    """Stands for a call Dynamo cannot enter (a C extension, a library that disables compilation)."""
    return x * 2 + 1


def calls_an_opaque_extension(x, y):
    a = torch.sin(x) + y
    b = opaque_extension(a)  # the break
    return torch.cos(b) * y


def test_the_pieces_around_an_opaque_call_run_natively():
    fast = trident.compile(calls_an_opaque_extension)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with pytest.warns(RuntimeWarning) as record:
        torch.testing.assert_close(fast(x, y), calls_an_opaque_extension(x, y), rtol=0, atol=0)
    said = [str(w.message) for w in record if "run split there" in str(w.message)]
    line = calls_an_opaque_extension.__code__.co_firstlineno + 2
    assert len(said) == 1 and f'File "{__file__}", line {line}, in calls_an_opaque_extension: ' \
        "b = opaque_extension(a)" in said[0], said
    for _ in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        torch.testing.assert_close(fast(x, y), calls_an_opaque_extension(x, y), rtol=0, atol=0)
    c = trident.counters(fast)
    # two pieces (before and after the call), each a native module; every call after the first hits both
    assert (c["split_calls"], c["split_pieces"], c["split_piece_fallbacks"], c["fallbacks"]) == (4, 2, 0, 0), c
    assert c["split_piece_hits"] == 6, c
    assert "run split there" in trident.explain(fast)


def test_fullgraph_raises_at_the_users_line():
    fast = trident.compile(calls_an_opaque_extension, fullgraph=True)
    with pytest.raises(trident.UnsupportedError) as info:
        fast(torch.randn(3), torch.randn(3))
    line = calls_an_opaque_extension.__code__.co_firstlineno + 2
    assert str(info.value).startswith(f'File "{__file__}", line {line}, in calls_an_opaque_extension'), info.value
    assert trident.counters(fast)["split_calls"] == 0


def branches_with_cond(x):
    y = x * 2
    return torch.cond(y.sum() > 0, lambda t: t * 2, lambda t: t - 1, (y,))


def test_a_graph_the_lowering_cannot_take_runs_eagerly_and_the_rest_stays_correct():
    fast = trident.compile(branches_with_cond)
    with pytest.warns(RuntimeWarning, match="run split there"):
        fast(torch.ones(3))
    for v in (1.0, -1.0, 3.0):
        x = torch.full((3,), v)
        torch.testing.assert_close(fast(x), branches_with_cond(x), rtol=0, atol=0)
    c = trident.counters(fast)
    assert c["split_calls"] == 4 and c["split_piece_fallbacks"] > 0, c


def test_calls_that_capture_whole_stay_native_beside_calls_that_split():
    def sometimes_opaque(x, go_out: bool):
        y = x + 1
        if go_out:
            y = opaque_extension(y)
        return y * 3

    fast = trident.compile(sometimes_opaque)
    x = torch.randn(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for go_out in (False, True, False, True):
            torch.testing.assert_close(fast(x, go_out), sometimes_opaque(x, go_out), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["split_calls"]) == (1, 1, 2), c


def test_inside_another_torch_compile_the_miss_path_is_not_traced():
    def f(x, y):
        return torch.sin(x) * y + 1

    fast = trident.compile(f)

    def outer(x, y):
        return fast(x, y) * 2

    compiled_outer = torch.compile(outer, backend="eager")
    x, y = torch.randn(8), torch.randn(8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(compiled_outer(x, y), f(x, y) * 2, rtol=0, atol=0)
    traced_ours = [str(w.message) for w in record if "trident" in str(w.message) and "Dynamo" in str(w.message)]
    assert not traced_ours, traced_ours[:1]
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (1, 2, 0), c


def sums_per_group(x, groups):
    sizes = torch.bincount(groups).tolist()  # as many ints as the largest group id says
    return torch.stack([part.sum(0) for part in x.split(sizes)])


def test_a_tolist_whose_length_depends_on_data_splits_as_torch_compile_does():
    """torch.compile runs it (a graph break at the `.tolist()`); so does trident: split there, each
    call with eager's result whatever the list's length, never an error."""
    fast = trident.compile(sums_per_group)
    with pytest.warns(RuntimeWarning, match="run split there"):
        x, g = torch.randn(10, 4), torch.tensor([0, 0, 1, 2, 2, 2, 3, 3, 3, 3])
        torch.testing.assert_close(fast(x, g), sums_per_group(x, g), rtol=0, atol=0)
    for groups in ([0, 1, 1, 0, 2, 2, 2, 1, 0, 0], [0] * 10, [5, 4, 3, 2, 1, 0, 0, 1, 2, 3]):
        x, g = torch.randn(10, 4), torch.tensor(groups)
        torch.testing.assert_close(fast(x, g), sums_per_group(x, g), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["split_calls"], c["fallbacks"], c["split_piece_fallbacks"]) == (4, 0, 0), c
