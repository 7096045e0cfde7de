"""What a caller sees when the function itself fails, or is called in a way Python allows but the
native path cannot describe: eager's own exception, or an eager run that says why; never a wrapped
internal error."""
import warnings

import pytest
import torch

import trident


def _too_big(x):
    if x.shape[0] > 2:
        raise ValueError("too big: the caller's own check")
    return x + 1


def _list_index(x):
    return [x, x][x.shape[0]]


@pytest.mark.parametrize("fn, error, says", [
    (_too_big, ValueError, "too big: the caller's own check"),
    (lambda x: x[5], IndexError, "index 5 is out of bounds"),
    (_list_index, IndexError, "list index out of range"),
    (lambda x: x.view(5, -1), RuntimeError, "shape '[5, -1]' is invalid"),
], ids=["raise", "tensor_index", "list_index", "bad_view"])
def test_an_exception_the_function_raises_comes_out_as_eager_raises_it(fn, error, says):
    fast = trident.compile(fn)
    for _ in range(2):
        with pytest.raises(error) as info:
            fast(torch.ones(3))
        assert says in str(info.value) and not isinstance(info.value, trident.TridentError)
    # the traceback reaches the line of the function that raised
    assert any(entry.frame.code.raw is fn.__code__ for entry in info.traceback), info.traceback
    assert torch.equal(fast(torch.ones(2)), fn(torch.ones(2))) if fn is _too_big else True


def test_a_transform_of_torch_func_runs_the_function_eagerly_and_says_so():
    fn = lambda x: torch.sin(x) * 2  # noqa: E731
    fast = trident.compile(fn)
    x = torch.linspace(0, 1, 6).reshape(2, 3)
    with pytest.warns(RuntimeWarning, match="torch.func transform"):
        assert torch.equal(torch.func.vmap(fast)(x), torch.func.vmap(fn)(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.allclose(torch.func.grad(lambda v: fast(v).sum())(x[0]),
                              torch.func.grad(lambda v: fn(v).sum())(x[0]))
    assert trident.counters(fast)["fallbacks"] == 2
    assert torch.equal(fast(x), fn(x)) and trident.counters(fast)["compiles"] == 1


def _kw_sum(x, **kw):
    return x + sum(v * (k + 1) for k, v in enumerate(kw.values()))


@pytest.mark.parametrize("names", [("class",), ("self",), ("a0", "k0"), ("é", "名前"), ("fn", "owner", "kwnames")],
                         ids=["keyword", "self", "wrapper_names", "non_ascii", "wrapper_attributes"])
def test_keyword_names_python_accepts_work(names):
    fast = trident.compile(_kw_sum)
    kwargs = {n: torch.full((2,), float(k + 1)) for k, n in enumerate(names)}
    for _ in range(2):
        assert torch.equal(fast(torch.ones(2), **kwargs), _kw_sum(torch.ones(2), **kwargs))
    c = trident.counters(fast)
    assert c["compiles"] == 1 and c["hits"] == 1 and c["fallbacks"] == 0


def test_an_aten_error_on_a_hit_has_the_type_eager_raises():
    """c10's IndexError (an index tensor out of range, found only at run time) is Python's
    IndexError, as in eager; the function stays usable."""
    fn = lambda x, idx: x[idx] * 2  # noqa: E731
    fast = trident.compile(fn)
    x = torch.arange(3.0)
    assert torch.equal(fast(x, torch.tensor([2, 0])), fn(x, torch.tensor([2, 0])))
    with pytest.raises(IndexError) as eager:
        fn(x, torch.tensor([5, 0]))
    with pytest.raises(IndexError) as ours:
        fast(x, torch.tensor([5, 0]))
    assert "out of bounds" in str(eager.value) and "out of bounds" in str(ours.value)
    assert torch.equal(fast(x, torch.tensor([1, 1])), fn(x, torch.tensor([1, 1])))
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"]) == (1, 2), c


def _cond(x):
    y = x * 2
    return torch.cond(y.sum() > 0, lambda t: t * 2, lambda t: t - 1, (y,))  # the line the error names


def test_a_construct_the_lowering_cannot_take_is_named_by_the_users_line_first():
    """UnsupportedError's message starts with the user's file, line and code, then says what the
    lowering cannot take (here: torch.cond's branch subgraphs)."""
    fast = trident.compile(_cond, fullgraph=True)
    with pytest.raises(trident.UnsupportedError) as info:
        fast(torch.ones(3))
    msg = str(info.value)
    line = _cond.__code__.co_firstlineno + 2
    assert msg.startswith(f'File "{__file__}", line {line}, in _cond: return torch.cond('), msg
    assert "true_graph_0" in msg
