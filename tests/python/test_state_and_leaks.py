"""Captured module state (parameters, buffers) follows the module as eager does, and hits leak
nothing: reference counts of inputs and outputs are unchanged after many calls."""
import sys
import types

import pytest
import torch

import trident


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


def test_in_place_parameter_update_is_seen_without_recompiling():
    m = _mlp()
    fast = trident.compile(m)
    x = torch.randn(3, 8)
    with torch.no_grad():
        fast(x)
        m.load_state_dict({k: v + 1 for k, v in m.state_dict().items()})  # copies in place
        torch.testing.assert_close(fast(x), m(x))
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"]) == (1, 1)


def test_reassigned_parameter_is_used():
    m = _mlp()
    fast = trident.compile(m)
    x = torch.randn(3, 8)
    with torch.no_grad():
        fast(x)
        m[0].weight = torch.nn.Parameter(torch.randn(16, 8))
        torch.testing.assert_close(fast(x), m(x))
        torch.testing.assert_close(fast(x), m(x))


def test_module_dtype_change_recompiles_and_matches():
    m = _mlp()
    fast = trident.compile(m)
    with torch.no_grad():
        fast(torch.randn(3, 8))
        m.double()
        x = torch.randn(3, 8, dtype=torch.float64)
        out = fast(x)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, m(x))


def test_hits_leak_no_references():
    def f(x, y):
        return x * y + 1, x

    fast = trident.compile(f)
    x, y = torch.randn(4), torch.randn(4)
    with torch.no_grad():
        fast(x, y)
        before = (sys.getrefcount(x), sys.getrefcount(y))
        for _ in range(2000):
            out, same = fast(x, y)
        del out, same
        after = (sys.getrefcount(x), sys.getrefcount(y))
    assert before == after
    assert trident.counters(fast)["hits"] == 2000


def test_runtime_error_leaves_no_reference_behind():
    def f(idx, table):
        return torch.nn.functional.embedding(idx, table)

    fast = trident.compile(f)
    table = torch.randn(10, 4)
    good, bad = torch.tensor([1, 2]), torch.tensor([1, 99])
    with torch.no_grad():
        fast(good, table)
        before = sys.getrefcount(table)
        for _ in range(50):
            try:
                fast(bad, table)
            except (RuntimeError, IndexError) as e:
                assert "embedding" in str(e)
        assert sys.getrefcount(table) == before
        torch.testing.assert_close(fast(good, table), table[good])


class SlicedLayers(torch.nn.Module):
    """HF Llama's pattern: forward slices a ModuleList, which registers modules during the trace."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        for layer in self.layers[:2]:
            x = layer(x)
        return x


def test_module_built_inside_forward_does_not_break_capture():
    m = SlicedLayers().eval()
    fast = trident.compile(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x), m(x))
    c = trident.counters(fast)
    assert (c["compiles"], c["fallbacks"], c["hits"]) == (1, 0, 2)


# ---- plain functions reaching module state through their closure or globals ----------------------

_GLOBAL_MLP = _mlp()
_GLOBAL_WEIGHT = torch.nn.Parameter(torch.randn(4, 4), requires_grad=False)


def _global_helper(x):
    return _GLOBAL_MLP(x)


def test_function_closing_over_a_module_follows_its_parameters():
    m = _mlp()
    fast = trident.compile(lambda x: m(x).relu())
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), m(x).relu())
        m.load_state_dict({k: v + 1 for k, v in m.state_dict().items()})  # copies in place
        torch.testing.assert_close(fast(x), m(x).relu())
        m[0].weight = torch.nn.Parameter(torch.randn(16, 8))
        torch.testing.assert_close(fast(x), m(x).relu())
    assert trident.counters(fast)["fallbacks"] == 0


def test_function_naming_a_global_module_and_a_global_parameter():
    fast = trident.compile(lambda x: _GLOBAL_MLP(x) @ _GLOBAL_WEIGHT)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), _GLOBAL_MLP(x) @ _GLOBAL_WEIGHT)
        _GLOBAL_WEIGHT.mul_(2)
        torch.testing.assert_close(fast(x), _GLOBAL_MLP(x) @ _GLOBAL_WEIGHT)


def test_state_reached_through_a_helper_of_the_same_file_is_followed():
    fast = trident.compile(lambda x: _global_helper(x) * 2)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), _GLOBAL_MLP(x) * 2)
        _GLOBAL_MLP[0].weight = torch.nn.Parameter(torch.randn(16, 8))
        torch.testing.assert_close(fast(x), _GLOBAL_MLP(x) * 2)


def test_state_reached_only_in_another_python_module_is_a_clear_error(monkeypatch):
    library = types.ModuleType("some_library")  # a function of another module, reading its own global
    monkeypatch.setitem(sys.modules, "some_library", library)
    library.model = _mlp()
    exec("def library_step(x):\n    return model(x)\n", library.__dict__)
    library_step = library.library_step
    fast = trident.compile(lambda x: library_step(x) * 2, fullgraph=True)
    with torch.no_grad(), pytest.raises(trident.UnsupportedError, match="reached outside any module"):
        fast(torch.randn(3, 8))
    split = trident.compile(lambda x: library_step(x) * 2)  # without fullgraph: as torch.compile runs it
    x = torch.randn(3, 8)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="reached outside any module"):
        torch.testing.assert_close(split(x), library.model(x) * 2)
    assert trident.counters(split)["split_calls"] == 1


def test_bound_method_follows_a_reassigned_parameter():
    m = _mlp()
    fast = trident.compile(m.forward)  # as the benchmarks compile model.decode_step
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), m(x))
        m[2].weight = torch.nn.Parameter(torch.randn(4, 16))
        torch.testing.assert_close(fast(x), m(x))


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 64))

    def forward(self, x):
        return torch.relu(x @ self.w)


def test_dropping_the_compiled_function_frees_it_and_its_module_at_once():
    """No reference cycle between the callable and its controller: with the cycle collector off,
    `del` frees the compiled function, its controller and the module, as eager's `del` would."""
    import gc
    import weakref

    model = Holder()
    fast = trident.compile(model)
    x = torch.randn(2, 64)
    with torch.no_grad():
        for _ in range(2):  # a compile, then a hit
            torch.testing.assert_close(fast(x), model(x), rtol=0, atol=0)
    refs = [weakref.ref(model), weakref.ref(trident.controller(fast)), weakref.ref(fast)]
    enabled = gc.isenabled()
    gc.disable()
    try:
        del model, fast
        assert [r() is None for r in refs] == [True, True, True]
    finally:
        if enabled:
            gc.enable()


class Cached(torch.nn.Module):
    """A module with a buffer updated in place, as a KV cache is."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))
        self.register_buffer("cache", torch.zeros(4, 16))

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos, x @ self.w)
        return self.cache.sum(0)


def test_dropping_the_compiled_function_frees_the_module_state_it_captured():
    """Nothing global keeps a captured module's parameters and buffers: once the module and the
    compiled function are dropped, their memory is freed (strict export used to leave each
    capture's graph, which refers to the module's tensors, in a module namespace of Dynamo's)."""
    import gc
    import weakref

    import copy

    model = Cached()
    eager = copy.deepcopy(model)
    fast = trident.compile(model)
    with torch.no_grad():
        # a compile, hits, then a second specialization
        for x, pos in [(torch.randn(1, 16), torch.tensor([p])) for p in range(3)] + \
                      [(torch.randn(2, 16), torch.tensor([0, 1]))]:
            torch.testing.assert_close(fast(x, pos), eager(x, pos), rtol=0, atol=0)
    torch.testing.assert_close(model.cache, eager.cache, rtol=0, atol=0)
    refs = [weakref.ref(model.w), weakref.ref(model.cache)]
    del model, fast
    gc.collect()
    assert [r() is None for r in refs] == [True, True]
