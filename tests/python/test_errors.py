"""Error behaviour of compiled functions: errors surface as ordinary Python
exceptions (never a crash), unsupported programs fail loudly or fall back
to eager correctly, and a compiled function stays usable after any error."""

import re
import warnings

import pytest
import torch
import torch._dynamo.exc as dynamo_exc
import torch.nn.functional as F

import trident
from corpus import assert_tree_close, clone_tree

KEYS = ("hits", "misses", "compiles", "specializations", "fallbacks", "split_calls")
HIT = {"hits": 1, "misses": 0, "compiles": 0, "specializations": 0, "fallbacks": 0, "split_calls": 0}

TridentError = trident.TridentError
UNSUPPORTED_ERRORS = (TridentError, NotImplementedError, dynamo_exc.Unsupported, dynamo_exc.UserError)


def snap(fast):
    c = trident.counters(fast)
    return {k: c[k] for k in KEYS}


def delta(after, before):
    return {k: after[k] - before[k] for k in KEYS}


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def full_message(exc):
    """The exception's message plus those of its chained causes/contexts
    (what a user sees in the traceback)."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def assert_valid_call(fast, fn, args, expect_hit=True):
    """A valid call after an error: correct result, and (for a signature that
    was compiled before the error) served as a hit."""
    before = snap(fast)
    expected = fn(*clone_tree(args))
    actual = fast(*clone_tree(args))
    assert_tree_close(actual, expected, 1e-5, 1e-5)
    if expect_hit:
        assert delta(snap(fast), before) == HIT, f"expected a hit, counters moved by {delta(snap(fast), before)}"


# ---------------------------------------------------------------------------
# wrong number of arguments
# ---------------------------------------------------------------------------


def _two_args(x, y):
    return x * y + 2.0


@pytest.mark.parametrize("bad", [1, 3, 0], ids=["too_few", "too_many", "none"])
def test_wrong_arg_count_before_first_compile(bad):
    x, y = randn(3, 4), randn(3, 4, seed=1)
    bad_args = (x, y, randn(3, 4, seed=2))[:bad]
    with pytest.raises(TypeError):
        _two_args(*bad_args)  # sanity: eager raises TypeError too
    fast = trident.compile(_two_args)
    with torch.no_grad():
        with pytest.raises(TypeError):
            fast(*bad_args)
        assert_valid_call(fast, _two_args, (x, y), expect_hit=False)
        assert_valid_call(fast, _two_args, (randn(3, 4, seed=3), y))


@pytest.mark.parametrize("bad", [1, 3], ids=["too_few", "too_many"])
def test_wrong_arg_count_on_hit_path(bad):
    def fn(x, y):
        return x - y * 3.0

    x, y = randn(2, 5), randn(2, 5, seed=1)
    fast = trident.compile(fn)
    with torch.no_grad():
        assert_valid_call(fast, fn, (x, y), expect_hit=False)
        assert_valid_call(fast, fn, (x, y))
        bad_args = (x, y, y)[:bad]
        with pytest.raises(TypeError):
            fn(*bad_args)
        for _ in range(2):
            with pytest.raises(TypeError):
                fast(*bad_args)
        assert_valid_call(fast, fn, (randn(2, 5, seed=5), y))


def test_wrong_arg_count_module():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        mod = torch.nn.Linear(4, 3).eval()
    fast = trident.compile(mod)
    x = randn(2, 4)
    with torch.no_grad():
        assert_valid_call(fast, mod, (x,), expect_hit=False)
        with pytest.raises(TypeError):
            fast(x, x)
        with pytest.raises(TypeError):
            fast()
        assert_valid_call(fast, mod, (randn(2, 4, seed=1),))


# ---------------------------------------------------------------------------
# errors inside ATen ops
# ---------------------------------------------------------------------------

MATMUL_OP_RE = re.compile(r"\b(mm|bmm|addmm|matmul)\b")


def _mm(a, b):
    return torch.mm(a, b) + 1.0


def _matmul(a, b):
    return (a @ b) * 2.0


@pytest.mark.parametrize("fn", [_mm, _matmul], ids=["torch.mm", "matmul_operator"])
def test_matmul_shape_mismatch_at_first_capture(fn):
    bad = (randn(3, 4), randn(5, 6, seed=1))
    with pytest.raises(RuntimeError):
        fn(*bad)  # sanity: eager fails too
    fast = trident.compile(fn)
    with torch.no_grad():
        for _ in range(2):
            with pytest.raises((RuntimeError, TridentError)) as info:
                fast(*clone_tree(bad))
            msg = full_message(info.value)
            assert MATMUL_OP_RE.search(msg), f"error does not name the op:\n{msg}"
        assert_valid_call(fast, fn, (randn(3, 4), randn(4, 6, seed=1)), expect_hit=False)
        assert_valid_call(fast, fn, (randn(3, 4, seed=2), randn(4, 6, seed=3)))


@pytest.mark.parametrize("fn", [_mm, _matmul], ids=["torch.mm", "matmul_operator"])
def test_matmul_shape_mismatch_in_new_specialization(fn):
    fast = trident.compile(fn)
    good = (randn(3, 4), randn(4, 5, seed=1))
    bad = (randn(3, 4, seed=2), randn(6, 5, seed=3))  # inner dims 4 vs 6
    with torch.no_grad():
        assert_valid_call(fast, fn, good, expect_hit=False)
        with pytest.raises((RuntimeError, TridentError)) as info:
            fast(*bad)
        msg = full_message(info.value)
        assert MATMUL_OP_RE.search(msg), f"error does not name the op:\n{msg}"
        assert_valid_call(fast, fn, good)  # the existing specialization survives
        with pytest.raises((RuntimeError, TridentError)):
            fast(*bad)
        assert_valid_call(fast, fn, (randn(3, 4, seed=4), randn(4, 5, seed=5)))


def _embed(ids, w):
    return F.embedding(ids, w) * 2.0


def _gather(x, idx):
    return torch.gather(x, 1, idx) + 1.0


@pytest.mark.parametrize(
    "fn,good,bad",
    [
        (
            _embed,
            lambda: (torch.tensor([[1, 4], [0, 9]]), randn(10, 3)),
            lambda: (torch.tensor([[1, 4], [0, 42]]), randn(10, 3)),
        ),
        (
            _gather,
            lambda: (randn(4, 5), torch.tensor([[0, 1], [2, 3], [4, 0], [1, 1]])),
            lambda: (randn(4, 5), torch.tensor([[0, 1], [2, 3], [4, 17], [1, 1]])),
        ),
    ],
    ids=["embedding", "gather"],
)
def test_runtime_index_error_on_hit_path(fn, good, bad):
    """Out-of-range indices with the *same* signature as a compiled call:
    the error happens inside the native module at run time and must surface
    as a Python exception, not a crash or garbage."""
    with pytest.raises((IndexError, RuntimeError)):
        fn(*bad())  # sanity: eager fails
    fast = trident.compile(fn)
    with torch.no_grad():
        assert_valid_call(fast, fn, good(), expect_hit=False)
        assert_valid_call(fast, fn, good())
        for _ in range(2):
            with pytest.raises((IndexError, RuntimeError, TridentError)) as info:
                fast(*bad())
            msg = full_message(info.value)
            assert re.search(r"index|out of range|out of bounds", msg, re.I), msg
        assert_valid_call(fast, fn, good())


# ---------------------------------------------------------------------------
# unsupported graph content: loud error naming the construct, or a correct
# eager fallback that is counted and warned about
# ---------------------------------------------------------------------------


def _item_branch(x, dynamic):
    if dynamic:
        if x.sum().item() > 0:
            return x * 2.0
        return x - 1.0
    return x * 3.0 + 0.5


def _tolist(x, dynamic):
    if dynamic:
        vals = x.tolist()
        return x + float(len([v for row in vals for v in row if v > 0]))
    return x * 5.0 - 0.5


def _tensor_if(x, dynamic):
    if dynamic:
        if (x > 0).all():
            return x.exp()
        return x.abs()
    return x * 7.0 + 0.25


def _branch_after_write(x, dynamic):
    if dynamic:
        x.add_(1.0)
        if x.sum() > 0:
            return x * 2.0
        return x
    return x * 7.0 + 0.25


UNSUPPORTED = [
    pytest.param(_tolist, r"tolist|item|data.?dependent|_local_scalar_dense", id="tolist"),
    pytest.param(_branch_after_write, r"data.?dependent|control.?flow|branch|__bool__|bool\(",
                 id="branch_on_a_tensor_written_before"),
]


@pytest.mark.parametrize("fn", [_item_branch, _tensor_if], ids=["item_branch", "tensor_if"])
def test_branches_on_data_run_natively_each_way(fn):
    """Branches on a tensor's value or on an `.item()` are traced per branch taken
    (python/trident/lowering/data_values.py): both ways give eager's result, every call native."""
    fast = trident.compile(fn)
    pos = randn(3, 4).abs() + 0.1
    with torch.no_grad():
        for x in (pos, -pos, pos, -pos):
            assert_valid_call(fast, fn, (x, True), expect_hit=False)
    c = trident.counters(fast)
    assert (c["specializations"], c["fallbacks"]) == (2, 0), c


FALLBACK_WARNING_RE = r"eager|fall.?back|falling back|unsupported|not supported"


def _call_unsupported(fast, fn, args, pattern):
    """Returns 'raised', 'split' (run split at its graph breaks, graph_breaks.py) or 'fallback' after
    checking the behaviour is one of the accepted ones."""
    expected = fn(*clone_tree(args))
    before = snap(fast)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            actual = fast(*clone_tree(args))
        except UNSUPPORTED_ERRORS as exc:
            msg = full_message(exc)
            assert re.search(pattern, msg, re.I), f"error does not name the construct:\n{msg}"
            return "raised"
    assert_tree_close(actual, expected, 1e-6, 1e-6, path="fallback result")
    d = delta(snap(fast), before)
    texts = [str(w.message) for w in caught]
    if d["split_calls"] == 1:
        assert d["hits"] == 0 and d["fallbacks"] == 0, d
        said = set(fast.on_miss.__self__.said)
        assert any(re.search(pattern, t, re.I) and "run split there" in t for t in said), said
        return "split"
    assert d["fallbacks"] == 1 and d["hits"] == 0, f"eager fallback not counted: {d}"
    assert any(re.search(FALLBACK_WARNING_RE + "|" + pattern, t, re.I) for t in texts), (
        f"eager fallback without a warning that says so; warnings: {texts}"
    )
    return "fallback"


@pytest.mark.parametrize("fn,pattern", UNSUPPORTED)
@pytest.mark.parametrize("first", ["supported_first", "unsupported_first"])
def test_unsupported_construct(fn, pattern, first):
    fast = trident.compile(fn)
    x_pos = randn(3, 4).abs() + 0.1  # makes the data-dependent tests take one branch
    x = randn(3, 4, seed=1)
    with torch.no_grad():
        if first == "supported_first":
            assert_valid_call(fast, fn, (x, False), expect_hit=False)
        outcome1 = _call_unsupported(fast, fn, (x_pos, True), pattern)
        outcome2 = _call_unsupported(fast, fn, (x, True), pattern)
        assert outcome1 == outcome2, "unsupported call behaved differently the second time"
        # the supported specialization still works afterwards
        assert_valid_call(fast, fn, (randn(3, 4, seed=2), False), expect_hit=(first == "supported_first"))
        assert_valid_call(fast, fn, (randn(3, 4, seed=3), False))


# ---------------------------------------------------------------------------
# argument kinds changing between calls
# ---------------------------------------------------------------------------


def _scaled(x, n):
    return x * n + n


@pytest.mark.parametrize(
    "traced,other",
    [(3, torch.tensor(3)), (torch.tensor(2.0), 2.0), (torch.tensor(4), 4)],
    ids=["int_then_tensor", "tensor_then_float", "int_tensor_then_int"],
)
def test_argument_kind_change(traced, other):
    """Calling with a tensor where an int was traced (or vice versa): either a
    new specialization (or counted fallback) with the eager result, or a clear
    exception; never a crash or a wrong result."""
    fast = trident.compile(_scaled)
    with torch.no_grad():
        assert_valid_call(fast, _scaled, (randn(2, 3), traced), expect_hit=False)
        args = (randn(2, 3, seed=1), other)
        expected = _scaled(*clone_tree(args))
        before = snap(fast)
        try:
            actual = fast(*clone_tree(args))
        except (TypeError, ValueError, NotImplementedError, TridentError) as exc:
            assert str(exc).strip(), "exception without a message"
        else:
            assert_tree_close(actual, expected, 1e-6, 1e-6)
            d = delta(snap(fast), before)
            assert d["specializations"] == 1 or d["fallbacks"] == 1, (
                f"a changed argument kind must not be served by the old specialization: {d}"
            )
        assert_valid_call(fast, _scaled, (randn(2, 3, seed=2), traced))


STR_ARG_RE = r"\bstr\b|\bstring\b|\bother\b|oops"


def test_string_where_tensor_was_traced():
    def fn(x, other):
        return x + other

    fast = trident.compile(fn)
    with torch.no_grad():
        assert_valid_call(fast, fn, (randn(2, 3), randn(2, 3, seed=1)), expect_hit=False)
        with pytest.raises(TypeError):
            fn(randn(2, 3), "oops")  # sanity: eager raises TypeError
        for _ in range(2):
            with pytest.raises((TypeError, TridentError)) as info:
                fast(randn(2, 3), "oops")
            msg = full_message(info.value)
            assert re.search(STR_ARG_RE, msg), f"error does not name the argument:\n{msg}"
        assert_valid_call(fast, fn, (randn(2, 3, seed=2), randn(2, 3, seed=3)))


def test_string_mode_argument():
    """A string that is valid for the eager function: the result must equal
    eager's (eager fallback, or a specialization on the value), or a
    TypeError/TridentError naming the argument is raised."""

    def fn(x, mode):
        if mode == "double":
            return x * 2.0
        if mode == "neg":
            return -x
        return x + 1.0

    fast = trident.compile(fn)
    with torch.no_grad():
        assert_valid_call(fast, fn, (randn(2, 3), None), expect_hit=False)
        for mode in ("double", "neg", "double"):
            args = (randn(2, 3, seed=4), mode)
            expected = fn(*clone_tree(args))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    actual = fast(*clone_tree(args))
                except (TypeError, TridentError) as exc:
                    msg = full_message(exc)
                    assert re.search(r"\bmode\b|\bstr\b|\bstring\b", msg), (
                        f"error does not name the argument:\n{msg}"
                    )
                    continue
            assert_tree_close(actual, expected, 1e-6, 1e-6, path=f"mode={mode!r}")
        assert_valid_call(fast, fn, (randn(2, 3, seed=5), None))


@pytest.mark.parametrize("fn, args, says", [
    (lambda x, y: x * y, (torch.randn(3), None), "TypeError: unsupported operand type(s) for *: 'Tensor' and 'NoneType'"),
    (lambda x: x.view(5, -1), (torch.randn(12),), "RuntimeError: shape '[5, -1]' is invalid for input of size 12"),
])
def test_a_capture_that_fails_on_the_calls_own_error_raises_that_error(fn, args, says):
    """Not Dynamo's "RuntimeError when making fake tensor call": the error eager raises, of its type."""
    with pytest.raises(Exception) as eager:
        fn(*args)  # sanity: eager fails too
    fast = trident.compile(fn)
    with pytest.raises(type(eager.value)) as info:
        fast(*args)
    assert f"{type(info.value).__name__}: {info.value}".startswith(says), str(info.value)
    assert not isinstance(info.value, trident.TridentError)


def test_a_nested_tensor_runs_eagerly_with_a_warning_saying_so():
    """It may report the strided layout, but has no sizes to read (before: ATen's internal error)."""
    fast = trident.compile(lambda x: x * 2)
    nt = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    with pytest.warns(RuntimeWarning, match="nested tensor is not supported natively"):
        got = fast(nt)
    assert [t.tolist() for t in got.unbind()] == [[2.0, 2.0], [2.0, 2.0, 2.0]]
    assert torch.equal(fast(torch.ones(2)), torch.full((2,), 2.0))


def test_a_fallback_is_said_once_on_stderr():
    """As a RuntimeWarning, not also as a log line that Python's last-resort handler prints."""
    import subprocess
    import sys
    script = ("import warnings, torch, trident\n"
              "warnings.simplefilter('default', RuntimeWarning)\n"
              "f = trident.compile(lambda x: x * 2)\n"
              "f(torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.count("is not supported natively") == 1, run.stderr[-2000:]


@pytest.mark.parametrize("options, says", [
    ({"max_specializations": 0}, "max_specializations must be a positive int"),
    ({"max_specializations": True}, "max_specializations must be a positive int"),   # a bool is not a count
    ({"max_specializations": 2.0}, "max_specializations must be a positive int"),
    ({"on_miss": "retry"}, "on_miss"),
    ({"dynamic": "auto"}, "dynamic must be None, True or False"),
])
def test_bad_options_are_refused_naming_the_option(options, says):
    with pytest.raises((ValueError, TypeError), match=says):
        trident.compile(lambda x: x + 1, **options)


def test_an_unknown_keyword_is_named_as_python_names_it():
    def two(x, y):
        return x + y

    fast = trident.compile(two)
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        fast(torch.ones(1), z=torch.ones(1))
    assert torch.equal(fast(torch.ones(1), y=torch.ones(1)), torch.full((1,), 2.0))
