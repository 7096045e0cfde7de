"""A module passed as an argument (`step(model, ids, cache)`, `f(x, lin)`): guarded by identity in
the native structure string (flatten.h "M<N>"), no leaf; its parameters and buffers are the
specialization's state, as a closure's module's are (compiled.py: _bind_arguments). Each
module gets its own specialization, a hit never runs Python, and the module's parameters, training
mode and state changes are followed as eager follows them. Constants the same way: a str, dtype,
device, class or enum member passed alone or as an object's attribute, and a str inside a list or
dict, guarded by value (flatten.cpp: add_constant), the capture binding an argument itself into the
call (_bind_arguments)."""
import dataclasses
import enum
import warnings

import pytest
import torch

import trident
from tiny_models import tiny_cpu_llama

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers' renamed cache argument


def twice(x, lin):
    return lin(x) * 2


def _linears():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)


def test_each_module_passed_gets_its_own_specialization_and_hits_natively():
    a, b = _linears()
    fast = trident.compile(twice)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, nothing said
        for m in (a, b, a, b, a):
            x = torch.randn(3, 8)
            torch.testing.assert_close(fast(x, m), twice(x, m), rtol=0, atol=0)
        torch.testing.assert_close(fast(x, lin=b), twice(x, lin=b), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (3, 3, 0), c  # a, b, and b by keyword
    text = trident.explain(fast)
    assert "spec 0 serves calls where: grad mode off; x: float32 tensor on cpu" in text, text
    assert "lin: the Linear it was captured with (by identity)" in text, text


def test_a_module_argument_follows_its_parameters():
    a, _ = _linears()
    fast = trident.compile(twice)
    x = torch.randn(3, 8)
    with torch.no_grad():
        fast(x, a)
        a.weight.add_(1.0)  # in place: the same spec sees it
        torch.testing.assert_close(fast(x, a), twice(x, a), rtol=0, atol=0)
        assert trident.counters(fast)["specializations"] == 1
        a.weight = torch.nn.Parameter(torch.randn(4, 8))  # a new tensor: recaptured
        torch.testing.assert_close(fast(x, a), twice(x, a), rtol=0, atol=0)
        torch.testing.assert_close(fast(x, a), twice(x, a), rtol=0, atol=0)


def test_another_module_at_a_freed_modules_address_is_not_served_by_its_specialization():
    """The compiled function holds the modules it was passed (their state is its specializations'),
    so none is freed under it; once the function is dropped, a module at a reused address is new."""
    fast = trident.compile(twice)
    x = torch.randn(3, 8)
    with torch.no_grad():
        for _ in range(3):
            m = torch.nn.Linear(8, 4)  # each may reuse the last one's memory
            torch.testing.assert_close(fast(x, m), twice(x, m), rtol=0, atol=0)
    assert trident.counters(fast)["specializations"] == 3


def dropout_through(x, mod):
    return mod(x)


def test_train_mode_of_a_module_argument_or_a_closures_module_recaptures():
    """`model.train()` changes what dropout traces to: the spec captured in eval mode must not serve
    (before, a function reaching a module through its closure kept its eval-mode program)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Dropout(0.5)).eval()

    def closure(x):
        return m(x)

    for fast, call in ((trident.compile(dropout_through), lambda f, x: f(x, m)),
                       (trident.compile(closure), lambda f, x: f(x))):
        x = torch.ones(2, 8)
        with torch.no_grad():
            m.eval()
            torch.testing.assert_close(call(fast, x), m(x), rtol=0, atol=0)
            m.train()
            torch.manual_seed(1)
            got = call(fast, x)
            torch.manual_seed(1)
            want = m(x)
            assert (got == 0).sum() > 0  # dropout ran
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            m.eval()
            torch.testing.assert_close(call(fast, x), m(x), rtol=0, atol=0)


def test_a_module_inside_a_container_still_runs_eagerly_and_says_so():
    a, b = _linears()

    def both(x, mods):
        return mods[0](x) + mods[1](x)

    fast = trident.compile(both)
    x = torch.randn(3, 8)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match=r"argument 1\[0\]: Linear is not supported natively"):
        torch.testing.assert_close(fast(x, [a, b]), both(x, [a, b]), rtol=0, atol=0)


def test_module_argument_specializations_are_not_saved_to_disk(tmp_path):
    a, _ = _linears()
    fast = trident.compile(twice)
    with torch.no_grad():
        fast(torch.randn(3, 8), a)
    with pytest.raises(Exception, match="modules passed as arguments"):
        trident.save(fast, tmp_path / "f.trd")


def test_a_transformers_decode_step_taking_the_model_as_an_argument():
    """`step(model, ids, cache)`, as a decode loop is often written: every step native, logits and
    the cache equal eager's over a StaticCache."""
    pytest.importorskip("transformers")
    from transformers import StaticCache
    cfg, model = tiny_cpu_llama()

    def step(model, ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    mine, theirs = StaticCache(config=cfg, max_cache_len=16), StaticCache(config=cfg, max_cache_len=16)
    ids = torch.tensor([[5]])
    with torch.no_grad():
        for _ in range(6):
            got, want = fast(model, ids, mine), step(model, ids, theirs)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            ids = want[:, -1:].argmax(-1)
    c = trident.counters(fast)
    # the first step (the cache's layers made lazily), then every later step (test_hf_caches.py)
    assert (c["specializations"], c["hits"], c["fallbacks"], c["split_calls"]) == (2, 4, 0, 0), c
    for a, b in zip(mine.layers, theirs.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-5, atol=1e-5)


def scaled_by_its_own_weight(w, lin):
    return lin(w) * 2  # w is lin's own weight, passed beside it


def test_an_argument_that_is_the_module_arguments_own_parameter():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    fast = trident.compile(scaled_by_its_own_weight)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(lin.weight, lin), scaled_by_its_own_weight(lin.weight, lin),
                                       rtol=0, atol=0)
            lin.weight.mul_(0.5)
    assert trident.counters(fast)["fallbacks"] == 0


def test_a_partial_binding_the_module_is_captured_natively():
    """`trident.compile(functools.partial(twice_of, lin))`: the module the partial binds is reached as
    a closure's is (before, the capture failed on its parameter's name and every call ran split)."""
    import functools
    a, _ = _linears()

    def twice_of(lin, x):
        return lin(x) * 2

    fast = trident.compile(functools.partial(twice_of, a))
    x = torch.randn(3, 8)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            torch.testing.assert_close(fast(x), twice_of(a, x), rtol=0, atol=0)
            a.weight.mul_(0.5)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"], c["split_calls"]) == (1, 2, 0, 0), c


def by_mode(x, mode: str, dtype=torch.float32):
    y = x.to(dtype)
    return y.sum() if mode == "sum" else y.mean() if mode == "mean" else y * len(mode)


def test_str_dtype_and_device_arguments_are_guarded_by_value():
    """A str, dtype or device passed as an argument itself (`reduction="mean"`, `dtype=torch.half`):
    guarded by value in the structure string, no leaf, a specialization per value, each call native.
    A string with quotes, a newline, a backslash, a C comment's end and non-ASCII reaches the
    generated C only escaped (the module compiles and selects by it)."""
    fast = trident.compile(by_mode)
    x = torch.randn(4, 3)
    odd = 'a"b\\nc\n*/ é'
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for mode, dtype in (("sum", torch.float32), ("mean", torch.float64), ("sum", torch.float32), (odd, torch.float16),
                            ("mean", torch.float64), (odd, torch.float16)):
            torch.testing.assert_close(fast(x, mode, dtype=dtype), by_mode(x, mode, dtype=dtype), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (3, 3, 0), c
    text = trident.explain(fast)
    assert "mode == 'sum'; dtype == torch.float32" in text, text
    assert trident.explain(fast, x, "max").count("fails") == 3  # a fourth value selects nothing


def on_device(x, device):
    return torch.ones(2, device=device) + x.to(device)


def test_a_device_argument():
    fast = trident.compile(on_device)
    x = torch.randn(2)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x, torch.device("cpu")), on_device(x, torch.device("cpu")), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (1, 2, 0), c



class Act(enum.Enum):
    DOUBLE = "double"
    PLUS = "plus"


class Level(enum.IntEnum):  # an int too: still guarded by identity, never an int leaf
    LOW = 1
    HIGH = 2


def configured(x, opts, acts):
    for a in acts:
        x = x * 2 if a == "double" else x + 1
    return x * opts["scale"] if opts["act"] == "double" else x - opts["scale"]


def test_str_items_of_lists_and_dicts_are_guarded_by_value():
    """A str inside a list or dict argument (`{"act": "gelu"}`, a list of layer kinds) is a constant
    of the call like one passed alone: a specialization per value, no leaf (such calls ran eagerly:
    'str is not supported natively'). A str of quotes, a backslash, a newline and non-ASCII compiles
    (escaped in the C; torch.export's own guard text of it is dropped, _compat.py) and selects."""
    fast = trident.compile(configured)
    x = torch.randn(4)
    odd = 'q"\\x\n*/ é'  # a quote, a backslash, a newline, a C comment's end, non-ASCII
    calls = [({"act": "double", "scale": 3}, ["plus", "double"]), ({"act": "plus", "scale": 3}, ("double",)),
             ({"act": odd, "scale": 3}, [odd])] * 2
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, nothing said
        for opts, acts in calls:
            torch.testing.assert_close(fast(x, opts, acts), configured(x, opts, acts), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (3, 3, 0), c
    assert trident.explain(fast, x, {"act": "other", "scale": 1}, ["plus"]).count("fails") == 3


@dataclasses.dataclass
class Options:
    act: Act
    scale: float


def by_level(x, level, opts):
    return x * int(level) + (opts.scale if opts.act is Act.PLUS else 0)


def test_enum_members_as_arguments_and_attributes_select_by_identity():
    fast = trident.compile(by_level)
    x = torch.randn(3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for level, act in [(Level.LOW, Act.PLUS), (Level.HIGH, Act.PLUS), (Level.LOW, Act.DOUBLE)] * 2:
            opts = Options(act, 0.5)
            torch.testing.assert_close(fast(x, level, opts), by_level(x, level, opts), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (3, 3, 0), c
    assert "level is Level.LOW" in trident.explain(fast), trident.explain(fast)


def tagged(x, log):
    log.append("seen")
    log[0] = "changed"
    return x + 1


def test_a_list_of_strs_the_function_changes_is_written_back():
    fast = trident.compile(tagged)
    x = torch.randn(2)
    mine, theirs = ["start"], ["start"]
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x, mine), tagged(x, theirs), rtol=0, atol=0)
    assert mine == theirs == ["changed", "seen", "seen", "seen"], (mine, theirs)
    assert trident.counters(fast)["fallbacks"] == 0


def first_of(x, items):
    return x.to(items[0]) if isinstance(items[0], torch.dtype) else x * 2


@pytest.mark.parametrize("item, name", [(torch.float16, "torch.dtype"), (Act.PLUS, "Act")])
def test_a_dtype_or_enum_inside_a_list_runs_eagerly_and_says_where(item, name):
    """export takes neither as an input and an output: inside a container they stay unsupported,
    said with their path; passed alone or as an attribute they are guarded (above)."""
    fast = trident.compile(first_of)
    x = torch.randn(2)
    with pytest.warns(RuntimeWarning, match=rf"argument 1\[0\]: {name} is not supported natively"):
        got = fast(x, [item])
    torch.testing.assert_close(got, first_of(x, [item]), rtol=0, atol=0)
