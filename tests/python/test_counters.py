"""Specialization cache behaviour as observed through ``trident.counters``.

Every test uses its own function body (distinct constants) so that a
persistent on-disk cache shared by the session cannot turn a compile in one
test into a cache load in another.
"""

import gc
import sys

import pytest
import torch
import torch.nn as nn

import trident
from corpus import assert_tree_close, clone_tree

KEYS = ("hits", "misses", "compiles", "specializations", "fallbacks")
NEW_SPECIALIZATION = {"hits": 0, "misses": 1, "compiles": 1, "specializations": 1, "fallbacks": 0}
HIT = {"hits": 1, "misses": 0, "compiles": 0, "specializations": 0, "fallbacks": 0}


def snap(fast):
    c = trident.counters(fast)
    assert isinstance(c, dict)
    for k in KEYS:
        assert isinstance(c[k], int) and not isinstance(c[k], bool), f"counters()[{k!r}] = {c[k]!r}"
    return {k: c[k] for k in KEYS}


def delta(after, before):
    return {k: after[k] - before[k] for k in KEYS}


def checked_call(fast, fn, args, expect, atol=1e-5, rtol=1e-5):
    """Call ``fast`` and eager ``fn`` on clones of ``args``; compare results
    and assert the counter delta of this one call."""
    before = snap(fast)
    eager_args = clone_tree(args)
    fast_args = clone_tree(args)
    expected = fn(*eager_args)
    actual = fast(*fast_args)
    assert_tree_close(actual, expected, atol, rtol)
    assert_tree_close(fast_args, eager_args, atol, rtol, path="inputs")
    d = delta(snap(fast), before)
    assert d == expect, f"counter delta {d}, expected {expect}"
    return actual


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


# ---------------------------------------------------------------------------


def test_first_call_compiles_once():
    def fn(x):
        return x * 3.0 + 1.0

    fast = trident.compile(fn)
    assert snap(fast) == dict.fromkeys(KEYS, 0)
    with torch.no_grad():
        checked_call(fast, fn, (randn(4, 5),), NEW_SPECIALIZATION)
    assert snap(fast) == {"hits": 0, "misses": 1, "compiles": 1, "specializations": 1, "fallbacks": 0}


def test_identical_calls_are_hits():
    def fn(x, y):
        return (x - y).relu() * 5.0

    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, (randn(3, 7), randn(3, 7, seed=1)), NEW_SPECIALIZATION)
        for seed in range(2, 6):  # fresh tensors, same signature
            checked_call(fast, fn, (randn(3, 7, seed=seed), randn(3, 7, seed=seed + 10)), HIT)
        x, y = randn(3, 7, seed=20), randn(3, 7, seed=21)
        expected = fn(x, y)
        for _ in range(3):  # the very same tensor objects
            before = snap(fast)
            torch.testing.assert_close(fast(x, y), expected)
            assert delta(snap(fast), before) == HIT
    assert snap(fast) == {"hits": 7, "misses": 1, "compiles": 1, "specializations": 1, "fallbacks": 0}


def test_new_dtype_adds_exactly_one_specialization():
    def fn(x):
        return torch.tanh(x) * 7.0

    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, (randn(4, 6),), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(4, 6, dtype=torch.float64, seed=1),), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(4, 6, seed=2),), HIT)  # the old one still hits
        checked_call(fast, fn, (randn(4, 6, dtype=torch.float64, seed=3),), HIT)
        checked_call(fast, fn, (randn(4, 6, dtype=torch.bfloat16, seed=4),), NEW_SPECIALIZATION,
                     atol=2e-2, rtol=2e-2)
        checked_call(fast, fn, (randn(4, 6, seed=5),), HIT)
    c = snap(fast)
    assert c["specializations"] == 3 and c["misses"] == 3 and c["hits"] == 3


def test_new_rank_adds_exactly_one_specialization():
    def fn(x):
        return x.sum(-1) * 9.0

    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, (randn(4, 5),), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(2, 4, 5, seed=1),), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(4, 5, seed=2),), HIT)
        checked_call(fast, fn, (randn(2, 4, 5, seed=3),), HIT)
    assert snap(fast)["specializations"] == 2


@pytest.mark.parametrize(
    "first,second,specs",
    [(2, 3, 2), (0.5, 2.25, 1), (True, False, 2)],
    ids=["int", "float", "bool"],
)
def test_python_scalar_value_adds_one_specialization(first, second, specs):
    # A float is a run-time value from the first call: its second value hits.
    def fn(x, s):
        return x * s + 11.0

    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, (randn(3, 4), first), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(3, 4, seed=1), first), HIT)
        checked_call(fast, fn, (randn(3, 4, seed=2), second), NEW_SPECIALIZATION if specs == 2 else HIT)
        checked_call(fast, fn, (randn(3, 4, seed=3), first), HIT)
        checked_call(fast, fn, (randn(3, 4, seed=4), second), HIT)
    assert snap(fast)["specializations"] == specs


def test_int_used_in_shape_adds_one_specialization():
    def fn(x, n):
        return x.reshape(n, -1).sum(0) + 13.0

    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, (randn(6, 4), 2), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(6, 4, seed=1), 3), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(6, 4, seed=2), 2), HIT)


def test_noncontiguous_input_adds_one_specialization():
    def fn(x, y):
        return x * 2.0 + y * 17.0

    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, (randn(6, 6), randn(6, 6, seed=1)), NEW_SPECIALIZATION)
        # same shape/dtype, transposed strides
        xt = randn(6, 6, seed=2).t()
        assert not xt.is_contiguous() and xt.shape == (6, 6)
        checked_call(fast, fn, (xt, randn(6, 6, seed=3)), NEW_SPECIALIZATION)
        checked_call(fast, fn, (randn(6, 6, seed=4), randn(6, 6, seed=5)), HIT)
        checked_call(fast, fn, (randn(6, 6, seed=6).t(), randn(6, 6, seed=7)), HIT)
    assert snap(fast)["specializations"] == 2


def test_grad_mode_adds_one_specialization():
    def fn(x, w):
        return (x @ w).sigmoid() * 19.0

    fast = trident.compile(fn)

    def args(seed):
        return (
            randn(3, 4, seed=seed).requires_grad_(True),
            randn(4, 2, seed=seed + 100).requires_grad_(True),
        )

    with torch.no_grad():
        out = checked_call(fast, fn, args(0), NEW_SPECIALIZATION)
        assert not out.requires_grad
    with torch.enable_grad():
        out = checked_call(fast, fn, args(1), NEW_SPECIALIZATION)
        assert out.requires_grad
    with torch.no_grad():
        checked_call(fast, fn, args(2), HIT)
    with torch.enable_grad():
        out = checked_call(fast, fn, args(3), HIT)
        assert out.requires_grad
    assert snap(fast)["specializations"] == 2


def test_size_change_is_correct_and_counted():
    """A different size is a different signature: the call must be correct and
    counted exactly once (as a miss, or as a hit if an existing entry covers
    it); the original entry keeps hitting."""

    def fn(x):
        return x.softmax(-1) * 23.0

    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, (randn(4, 5),), NEW_SPECIALIZATION)
        before = snap(fast)
        x = randn(6, 5, seed=1)
        torch.testing.assert_close(fast(x.clone()), fn(x))
        d = delta(snap(fast), before)
        assert d["hits"] + d["misses"] == 1 and d["fallbacks"] == 0, d
        assert d["specializations"] in (0, 1) and d["compiles"] in (0, 1), d
        checked_call(fast, fn, (randn(4, 5, seed=2),), HIT)


def test_counters_are_per_compiled_callable():
    def fn(x):
        return x.exp() - 29.0

    fast1 = trident.compile(fn)
    fast2 = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast1, fn, (randn(5),), NEW_SPECIALIZATION)
        checked_call(fast1, fn, (randn(5, seed=1),), HIT)
        before1 = snap(fast1)
        torch.testing.assert_close(fast2(randn(5, seed=2)), fn(randn(5, seed=2)))
        assert snap(fast1) == before1, "calling one compiled callable changed another's counters"
        c2 = snap(fast2)
        assert c2["misses"] == 1 and c2["hits"] == 0 and c2["specializations"] == 1


def test_module_compile_counts_like_function():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(31)
        mod = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    fast = trident.compile(mod)
    with torch.no_grad():
        checked_call(fast, mod, (randn(2, 8),), NEW_SPECIALIZATION)
        checked_call(fast, mod, (randn(2, 8, seed=1),), HIT)
        checked_call(fast, mod, (randn(2, 8, seed=2),), HIT)


def test_explain_returns_str():
    def fn(x):
        return x.cos() + 37.0

    fast = trident.compile(fn)
    with torch.no_grad():
        fast(randn(3))
        fast(randn(3, seed=1))
        fast(randn(3, dtype=torch.float64))
    text = trident.explain(fast)
    assert isinstance(text, str) and text.strip()


# ---------------------------------------------------------------------------
# A hit must not run Python code.
# ---------------------------------------------------------------------------


def _fn_for_profile(x, w, b):
    return torch.nn.functional.gelu(x @ w + b).sum(-1) * 41.0


def _module_for_profile():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(43)
        return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).eval()


def _fn_of_dict_for_profile(x, params):
    return _fn_for_profile(x, params["w"], params["b"])


@pytest.mark.parametrize("kind", ["function", "module", "dict argument"])
def test_hit_runs_no_python_frames(kind):
    if kind == "function":
        fn = _fn_for_profile
        make_args = lambda s: (randn(4, 16, seed=s), randn(16, 8, seed=s + 1), randn(8, seed=s + 2))  # noqa: E731
    elif kind == "dict argument":
        fn = _fn_of_dict_for_profile
        make_args = lambda s: (randn(4, 16, seed=s), {"w": randn(16, 8, seed=s + 1), "b": randn(8, seed=s + 2)})  # noqa: E731
    else:
        fn = _module_for_profile()
        make_args = lambda s: (randn(4, 16, seed=s),)  # noqa: E731
    fast = trident.compile(fn)
    with torch.no_grad():
        checked_call(fast, fn, make_args(0), NEW_SPECIALIZATION)
        checked_call(fast, fn, make_args(1), HIT)  # warm the hit path

        args = make_args(2)
        expected = fn(*clone_tree(args))
        before = snap(fast)
        events = []

        def profiler(frame, event, arg):
            if event == "call":
                code = frame.f_code
                events.append((event, code.co_name, code.co_filename, frame.f_lineno))

        gc.collect()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            sys.setprofile(profiler)
            out = fast(*args)
            sys.setprofile(None)
        finally:
            sys.setprofile(None)
            if gc_was_enabled:
                gc.enable()

    python_calls = [e for e in events if e[0] == "call"]
    assert python_calls == [], (
        f"{len(python_calls)} Python frames executed during a hit, first ones: {python_calls[:15]}"
    )
    assert delta(snap(fast), before) == HIT
    torch.testing.assert_close(out, expected)
