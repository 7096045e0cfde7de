"""Run every corpus case through ``trident.compile`` on CPU and compare with
eager PyTorch: outputs (values, container types, dict keys, dtypes, shapes),
in-place mutations of the inputs, aliasing of outputs with inputs and with
each other, and the cache counters."""

import pytest
import torch
import torch.nn as nn

import trident
from corpus import (
    CORPUS,
    alias_signature,
    assert_tree_close,
    clone_tree,
    instantiate,
    tensor_leaves,
    tolerances,
)

SEEDS = (0, 1, 2)  # same signature, different values
COUNTER_KEYS = ("hits", "misses", "compiles", "specializations", "fallbacks")


def _dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def _variants():
    params = []
    for case in CORPUS:
        params.append(pytest.param(case, None, id=case.name))
        for dtype in case.dtypes:
            params.append(
                pytest.param(case, dtype, id=f"{case.name}-{_dtype_id(dtype)}", marks=pytest.mark.dtype_variant)
            )
    return params


def _grad_ctx(case):
    return torch.enable_grad() if case.grad else torch.no_grad()


def _counters(fast):
    c = trident.counters(fast)
    assert isinstance(c, dict), f"counters() returned {type(c).__name__}"
    for k in COUNTER_KEYS:
        assert k in c, f"counters() has no {k!r} key: {c}"
        assert isinstance(c[k], int) and not isinstance(c[k], bool), f"counters()[{k!r}] = {c[k]!r}"
    return {k: c[k] for k in COUNTER_KEYS}


def test_corpus_size():
    assert len(CORPUS) >= 36
    assert len({c.name for c in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case,dtype", _variants())
def test_corpus_matches_eager(case, dtype):
    fn = instantiate(case, dtype)
    fast = trident.compile(fn)
    assert callable(fast)
    atol, rtol = tolerances(case, dtype)

    assert _counters(fast) == dict.fromkeys(COUNTER_KEYS, 0), "counters must start at zero"

    history = []
    for i, seed in enumerate(SEEDS):
        original = case.make_inputs(seed, dtype)
        eager_in = clone_tree(original)
        fast_in = clone_tree(original)
        with _grad_ctx(case):
            expected = fn(*eager_in)
            actual = fast(*fast_in)
        where = f"{case.name}[{_dtype_id(dtype)}, seed={seed}]"

        assert_tree_close(actual, expected, atol, rtol, path=f"{where} output")
        # in-place mutations (and the absence of unwanted ones)
        assert_tree_close(fast_in, eager_in, atol, rtol, path=f"{where} inputs after call")
        # aliasing: outputs that share storage with inputs / each other in
        # eager must do so in trident (same offsets, sizes, strides), and
        # outputs that do not alias in eager must not alias in trident.
        got_alias = alias_signature(actual, fast_in)
        want_alias = alias_signature(expected, eager_in)
        assert got_alias == want_alias, (
            f"{where}: aliasing differs from eager\n  trident: {got_alias}\n  eager:   {want_alias}"
        )

        c = _counters(fast)
        want = {"hits": i, "misses": 1, "compiles": 1, "specializations": 1, "fallbacks": 0}
        assert c == want, f"{where}: counters {c}, expected {want}"
        history.append((where, actual, expected, fast_in, eager_in))

    # Results handed out earlier must not be clobbered by later calls (e.g.
    # by reusing output or workspace buffers across calls).
    for where, actual, expected, fast_in, eager_in in history:
        assert_tree_close(actual, expected, atol, rtol, path=f"{where} output (re-checked after later calls)")
        assert_tree_close(fast_in, eager_in, atol, rtol, path=f"{where} inputs (re-checked after later calls)")

    text = trident.explain(fast)
    assert isinstance(text, str) and text.strip()


def _cotangents(outputs, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    return [torch.randn(t.shape, generator=g).to(t.dtype) for t in outputs]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CORPUS if c.grad])
def test_corpus_backward_matches_eager(case):
    """For grad=True cases the trident outputs must be differentiable like the
    eager ones, with the same gradients for the inputs and parameters."""
    fn = instantiate(case, None)
    fast = trident.compile(fn)
    params = [p for p in fn.parameters() if p.requires_grad] if isinstance(fn, nn.Module) else []
    atol, rtol = tolerances(case, None)
    for seed in SEEDS:
        original = case.make_inputs(seed)
        eager_in = clone_tree(original)
        fast_in = clone_tree(original)
        with torch.enable_grad():
            expected = fn(*eager_in)
            actual = fast(*fast_in)
        e_outs = [t for _, t in tensor_leaves(expected) if t.requires_grad]
        f_outs = [t for _, t in tensor_leaves(actual) if t.requires_grad]
        assert e_outs, "grad case without differentiable outputs"
        assert len(f_outs) == len(e_outs), "trident outputs do not require grad like eager's"
        e_wrt = [t for _, t in tensor_leaves(eager_in) if t.requires_grad] + params
        f_wrt = [t for _, t in tensor_leaves(fast_in) if t.requires_grad] + params
        cot = _cotangents(e_outs, seed)
        e_grads = torch.autograd.grad(e_outs, e_wrt, grad_outputs=cot, materialize_grads=True)
        f_grads = torch.autograd.grad(f_outs, f_wrt, grad_outputs=cot, materialize_grads=True)
        assert_tree_close(list(f_grads), list(e_grads), atol, rtol, path=f"{case.name}[seed={seed}] grads")
