"""Objects as arguments (arg_objects.py, output_trees.py): instances of plain classes are flattened
natively by their attributes, guarded by their structure and constants, and left after a run as
eager's code leaves them; what does not qualify runs eagerly and says why, naming the attribute."""
import dataclasses
import warnings

import pytest
import torch

import trident
from trident import _compat


# Listing an instance dictionary inside the trace needs torch 2.13's Dynamo; by name works on both.
_READINGS = ["listed", "by_name"] if _compat.TORCH_VERSION >= (2, 13) else ["by_name"]


@pytest.fixture(params=_READINGS, autouse=True)
def post_state_reading(request, monkeypatch):
    """Each test twice where torch allows both: the state after a call read by listing instance
    dictionaries in the trace (torch 2.13) and by attribute names (what torch 2.11 allows)."""
    monkeypatch.setattr(_compat, "DYNAMO_LISTS_INSTANCE_DICTS", request.param == "listed")


class Layer:
    def __init__(self, n):
        self.keys = torch.zeros(2, n)
        self.ready = False
        self.n = n
        self.dtype = torch.float32
        self.kind = "full"


class Cache:
    def __init__(self, layers=2):
        self.layers = [Layer(4) for _ in range(layers)]


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif hasattr(a, "__dict__"):
        assert list(vars(a)) == list(vars(b))
        for k in vars(a):
            _same(vars(a)[k], vars(b)[k])
    else:
        assert a == b


def test_in_place_writes_flags_and_a_returned_argument_object():
    def step(x, cache):
        for layer in cache.layers:
            layer.keys.add_(x)
            layer.ready = True
        return x * 2, cache

    fast = trident.compile(step)
    mine, theirs = Cache(), Cache()
    keys = mine.layers[0].keys
    for _ in range(4):
        x = torch.randn(2, 4)
        (y, back), (want, _) = fast(x, mine), step(x, theirs)
        assert back is mine
        torch.testing.assert_close(y, want)
        _same(mine, theirs)
    assert mine.layers[0].keys is keys  # written in place, not replaced
    c = trident.counters(fast)
    assert c["specializations"] == 2 and c["hits"] == 2  # ready=False, then ready=True


def test_replaced_tensors_and_ints_grow_symbolically():
    def grow(x, cache):
        for layer in cache.layers:
            layer.keys = torch.cat([layer.keys, x], 1)
            layer.n += x.shape[1]
        return cache.layers[0].keys.sum(1)

    fast = trident.compile(grow)
    mine, theirs = Cache(), Cache()
    for _ in range(6):
        x = torch.randn(2, 1)
        torch.testing.assert_close(fast(x, mine), grow(x, theirs))
        _same(mine, theirs)
    assert mine.layers[0].keys.shape == (2, 10) and mine.layers[1].n == 10
    c = trident.counters(fast)
    assert c["specializations"] == 2 and c["hits"] == 4 and c["fallbacks"] == 0


def test_appended_objects_and_changed_constants_are_written_back():
    def add_layer(x, cache):
        layer = Layer(4)
        layer.keys = x.clone()
        layer.kind = "sliding"
        cache.layers.append(layer)
        cache.layers[0].dtype = torch.float16
        return x + 1

    fast = trident.compile(add_layer)
    for n in (1, 1, 3):
        mine, theirs = Cache(n), Cache(n)
        lists = mine.layers
        x = torch.randn(2, 4)
        torch.testing.assert_close(fast(x, mine), add_layer(x, theirs))
        _same(mine, theirs)
        assert mine.layers is lists  # the caller's list, given new contents
    assert trident.counters(fast)["hits"] == 1


@dataclasses.dataclass
class Batch:
    ids: torch.Tensor
    scale: float
    mask: torch.Tensor | None = None


def test_a_dataclass_argument_hits_and_misses_on_its_contents():
    def f(b: Batch):
        y = b.ids * b.scale
        return y if b.mask is None else y * b.mask

    fast = trident.compile(f)
    x = torch.randn(3)
    for b in (Batch(x, 2.0), Batch(x + 1, 2.0), Batch(x, 3.0), Batch(x, 2.0, torch.ones(3))):
        torch.testing.assert_close(fast(b), f(b))
    c = trident.counters(fast)
    assert c["hits"] >= 1 and c["fallbacks"] == 0
    assert c["specializations"] == 2  # scale is a run-time float; a mask is another structure


def test_a_constant_attribute_is_guarded_by_value():
    class Holder:
        def __init__(self, mode):
            self.x = torch.ones(2)
            self.mode = mode

    def f(h):
        return h.x * (2 if h.mode == "double" else 3)

    fast = trident.compile(f)
    for mode in ("double", "triple", "double", "tri" + "ple"):
        h = Holder(mode)
        torch.testing.assert_close(fast(h), f(h))
    assert trident.counters(fast)["specializations"] == 2


def test_an_attribute_that_cannot_be_described_runs_eagerly_and_says_where():
    class Odd:
        def __init__(self):
            self.x = torch.ones(2)
            self.fn = lambda v: v

    class Slotted:
        __slots__ = ("x",)

        def __init__(self):
            self.x = torch.ones(2)

    def f(o):
        return o.x + 1

    fast = trident.compile(f)
    with pytest.warns(RuntimeWarning, match=r"argument 0\.fn: function is not supported natively"):
        torch.testing.assert_close(fast(Odd()), torch.full((2,), 2.0))
    with pytest.warns(RuntimeWarning, match=r"Slotted is not supported natively \(Slotted has __slots__\)"):
        torch.testing.assert_close(fast(Slotted()), torch.full((2,), 2.0))
    assert trident.counters(fast)["fallbacks"] == 2


def test_items_written_into_a_dict_it_was_given_are_written_back():
    class Holder:
        def __init__(self):
            self.d = {"a": torch.ones(2)}

    def f(h, x):
        h.d["a"] = h.d["a"] + x
        h.d["b"] = x * 2
        return x

    fast = trident.compile(f)
    mine, theirs = Holder(), Holder()
    d = mine.d
    for _ in range(3):
        x = torch.randn(2)
        fast(mine, x)
        f(theirs, x)
        _same(mine, theirs)
        del mine.d["b"], theirs.d["b"]
    assert mine.d is d and trident.counters(fast)["hits"] == 2


def test_keywords_in_another_order_than_the_signature_write_back_the_right_objects():
    """The native flattener numbers containers in call order; binding to the signature reorders the
    keywords: the write-back must still name the caller's object, not the tuple before it."""
    class Holder:
        def __init__(self):
            self.x = torch.zeros(2)
            self.done = False

    def f(a, h=None, t=None):
        h.x = h.x + a + t[0]
        h.done = True
        return a

    fast = trident.compile(f)
    for _ in range(3):
        mine, theirs = Holder(), Holder()
        fast(torch.ones(2), t=(torch.ones(2),), h=mine)
        f(torch.ones(2), t=(torch.ones(2),), h=theirs)
        _same(mine, theirs)
    assert trident.counters(fast)["hits"] == 2


def test_an_attribute_the_function_adds_under_a_new_name_is_written_back():
    if not _compat.DYNAMO_LISTS_INSTANCE_DICTS:
        pytest.skip("torch 2.11's Dynamo cannot list an instance dictionary: only known names are read")

    def tag(x, layer):
        layer.scaled = x * 3
        return x

    fast = trident.compile(tag)
    for _ in range(2):
        mine, theirs = Layer(4), Layer(4)
        x = torch.randn(2)
        fast(x, mine)
        tag(x, theirs)
        _same(mine, theirs)


def test_a_model_output_argument_is_flattened_by_its_items():
    """A transformers ModelOutput (a dict subclass its library registers as a pytree node by its
    items) as an argument: guarded by its class and keys, so one with another field set is another
    specialization, never a false hit; a class-level lookalike that is not registered runs eagerly."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_outputs import BaseModelOutput

    def head(x, enc):
        h = enc.last_hidden_state if enc.hidden_states is None else enc.hidden_states[-1] * 2
        return x @ h.T

    fast = trident.compile(head)
    x = torch.randn(3, 4)
    plain = BaseModelOutput(last_hidden_state=torch.randn(5, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(3):
            torch.testing.assert_close(fast(x, plain), head(x, plain))
        more = BaseModelOutput(last_hidden_state=torch.randn(5, 4), hidden_states=(torch.randn(5, 4),))
        torch.testing.assert_close(fast(x, more), head(x, more))
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (2, 2, 0), c
    assert trident._C.describe_args(plain)[0].endswith("{last_hidden_state=T}>")

    class Lookalike(dict):  # a dict subclass nobody registered with pytree
        pass

    odd = Lookalike(last_hidden_state=torch.randn(5, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast2 = trident.compile(lambda x, d: x @ d["last_hidden_state"].T)
        torch.testing.assert_close(fast2(x, odd), x @ odd["last_hidden_state"].T)
    assert trident.counters(fast2)["fallbacks"] == 1
    assert any("Lookalike" in str(w.message) for w in caught), [str(w.message) for w in caught]


class Made:
    def __init__(self, x):
        self.out = x * 2
        self.count = 1


def test_an_object_the_function_makes_is_found_without_touching_lazy_modules(monkeypatch):
    """A result holding an instance of a class never passed in is found among the loaded modules by
    its name, in each module's own namespace: a library's lazy module that imports on attribute
    access (transformers' does, and one of its imports failed under 5.17) is never asked."""
    import sys
    import types

    class Lazy(types.ModuleType):
        asked: list = []

        def __getattr__(self, name):  # as transformers' _LazyModule: a listed name imports its submodule
            if name.startswith("__"):
                raise AttributeError(name)
            Lazy.asked.append(name)
            raise ModuleNotFoundError("No module named 'not_installed'")

    monkeypatch.setitem(sys.modules, "trident_test_lazy_library", Lazy("trident_test_lazy_library"))

    def make(x):
        return Made(x + 1)

    fast = trident.compile(make)
    x = torch.randn(3)
    for _ in range(3):
        got, want = fast(x), make(x)
        _same(got, want)
    assert Lazy.asked == []
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["hits"] == 2, c
