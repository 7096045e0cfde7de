"""torch.compile(backend="trident"): the CPU corpus through Dynamo + AOTAutograd, programs with
graph breaks, the autograd fallback, options and explain."""
import subprocess
import sys

import pytest
import torch

import trident
from corpus import CORPUS, assert_tree_close, clone_tree, instantiate, tolerances
from trident.backend import GRAPHS, live_graphs


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CORPUS if not c.grad])
def test_corpus_through_backend_matches_eager(case):
    torch._dynamo.reset()
    fn = instantiate(case, None)
    opt = torch.compile(fn, backend="trident")
    atol, rtol = tolerances(case, None)
    first = len(GRAPHS)
    for seed in (0, 1):
        original = case.make_inputs(seed, None)
        eager_in, fast_in = clone_tree(original), clone_tree(original)
        with torch.no_grad():
            expected = fn(*eager_in)
            actual = opt(*fast_in)
        assert_tree_close(actual, expected, atol, rtol, path=f"{case.name}[seed={seed}] output",
                          check_requires_grad=False)
        assert_tree_close(fast_in, eager_in, atol, rtol, path=f"{case.name}[seed={seed}] inputs")
    graphs = live_graphs(GRAPHS[first:])
    assert graphs, "the trident backend compiled no graph"
    assert sum(g.scm.counters()["hits"] for g in graphs) >= 1


def test_graph_breaks_each_graph_is_its_own_module():
    torch._dynamo.reset()

    def f(x, y):
        a = torch.relu(x) @ y
        print("a graph break")
        if a.sum() > 0:  # data-dependent Python branch: another break
            return a * 2, a.t()
        return a - 1, a

    opt = torch.compile(f, backend="trident")
    first = len(GRAPHS)
    with torch.no_grad():
        for seed in range(6):
            g = torch.Generator().manual_seed(seed)
            x, y = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
            assert_tree_close(opt(x, y), f(x, y), 1e-5, 1e-5)
    assert len(GRAPHS) - first >= 2
    assert all(g.scm.counters()["fallbacks"] == 0 for g in live_graphs(GRAPHS[first:]))


def test_autograd_graphs_run_through_pytorch_with_correct_gradients():
    torch._dynamo.reset()
    lin = torch.nn.Linear(6, 3)
    opt = torch.compile(lin, backend="trident")
    x = torch.randn(5, 6)
    opt(x).sum().backward()
    want = lin.weight.grad.clone()
    lin.weight.grad = None
    lin(x).sum().backward()
    torch.testing.assert_close(want, lin.weight.grad)


def test_options_reach_the_graph_controller():
    torch._dynamo.reset()
    opt = torch.compile(lambda x: x.exp(), backend="trident", options={"max_specializations": 3, "dynamic": False})
    first = len(GRAPHS)
    with torch.no_grad():
        opt(torch.randn(3))
    assert GRAPHS[first]().options.max_specializations == 3


def test_explain_reports_backend_graphs():
    torch._dynamo.reset()
    opt = torch.compile(lambda x: x.abs() + 1, backend="trident")
    with torch.no_grad():
        opt(torch.randn(3))
    text = trident.explain(opt)
    assert "trident: graph" in text and "aten::abs" in text


def test_backend_resolves_without_importing_trident_first():
    code = ("import sys, torch\n"
            "f = torch.compile(lambda x: torch.cos(x) * 3, backend='trident')\n"
            "with torch.no_grad():\n"
            "    x = torch.randn(7)\n"
            "    assert torch.allclose(f(x), torch.cos(x) * 3)\n"
            "assert 'trident' in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_graph_dynamo_drops_is_freed():
    """GRAPHS refers to controllers weakly: once Dynamo lets a compiled graph go, its controller,
    module and kept buffers go too (before, every graph of the process stayed alive)."""
    import gc
    torch._dynamo.reset()
    opt = torch.compile(lambda x: torch.relu(x) * 3, backend="trident")
    first = len(GRAPHS)
    with torch.no_grad():
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), torch.relu(x) * 3, rtol=0, atol=0)
    assert len(live_graphs(GRAPHS[first:])) == 1
    del opt
    torch._dynamo.reset()
    gc.collect()  # Dynamo's own caches hold cycles
    assert live_graphs(GRAPHS[first:]) == []


def test_input_mutations_are_written_in_place_as_trident_compile_writes_them():
    """AOTAutograd ends the graph with `cache.copy_(slice_scatter(cache, ...))`; the backend hands the
    lowering that as an input mutation, so the slice is written in place: no scatter (a full copy of
    the cache) and no write-back copy, the results and the written input equal to eager's, also when
    another argument is a view of the written input."""
    torch._dynamo.reset()

    def step(x, cache, pos: int):
        cache[:, pos:pos + 1] = (x * 2).unsqueeze(1)
        return cache[:, :pos + 1].sum(1) + x

    opt = torch.compile(step, backend="trident")
    first = len(GRAPHS)
    g = torch.Generator().manual_seed(0)
    cache = torch.randn(2, 8, 4, generator=g)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4, generator=g)
            want_cache, got_cache = cache.clone(), cache.clone()
            want = step(x, want_cache, 5)
            got = opt(x, got_cache, 5)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            torch.testing.assert_close(got_cache, want_cache, rtol=0, atol=0)
        graphs = live_graphs(GRAPHS[first:])
        ir = "\n".join(gr.scm.ir() for gr in graphs)
        assert "slice_scatter" not in ir
        assert ir.count('"aten::copy_"') == 1, ir
        assert sum(gr.scm.counters()["hits"] for gr in graphs) >= 2

        # x overlapping the written cache: eager reads x before the write; so must the compiled step.
        want_cache, got_cache = cache.clone(), cache.clone()
        want = step(want_cache[:, 1], want_cache, 1)
        got = opt(got_cache[:, 1], got_cache, 1)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(got_cache, want_cache, rtol=0, atol=0)


def test_a_graph_that_runs_eagerly_still_writes_its_inputs():
    """The lowering reads the graph with its trailing input copies turned into outputs; a call the
    graph runs eagerly (on_miss="eager" here, a cap or overlapping arguments elsewhere) runs the graph
    AOTAutograd made, copies and outputs unchanged."""
    torch._dynamo.reset()

    def step(x, cache, pos: int):
        cache[:, pos:pos + 1] = (x * 2).unsqueeze(1)
        return cache[:, :pos + 1].sum(1) + x

    opt = torch.compile(step, backend="trident", options={"on_miss": "eager"})
    first = len(GRAPHS)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(2):
            cache, x = torch.randn(2, 8, 4, generator=g), torch.randn(2, 4, generator=g)
            want_cache, got_cache = cache.clone(), cache.clone()
            torch.testing.assert_close(opt(x, got_cache, 5), step(x, want_cache, 5), rtol=0, atol=0)
            torch.testing.assert_close(got_cache, want_cache, rtol=0, atol=0)
    (graph,) = live_graphs(GRAPHS[first:])
    c = graph.scm.counters()
    assert (c["fallbacks"], c["compiles"]) == (2, 0), c


class _ProjectedWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4, bias=False)

    def forward(self, x, cache, pos: int):
        cache[:, pos:pos + 1] = self.proj(x).unsqueeze(1)
        return cache[:, :pos + 1].sum(1)


@pytest.mark.parametrize("skip_params", [True, False])
def test_written_arguments_are_guarded_against_every_argument_but_parameters(skip_params):
    """The written cache is guarded against overlapping x; against the projection's weight (an
    argument of Dynamo's graph) only when Dynamo guards parameters for aliasing too. A decoder's
    weights made thousands of such guards, and seconds of C compile (now one sorted-interval guard)."""
    torch._dynamo.reset()
    model = _ProjectedWrite()
    first = len(GRAPHS)
    with torch._dynamo.config.patch(skip_no_tensor_aliasing_guards_on_parameters=skip_params), torch.no_grad():
        opt = torch.compile(model, backend="trident")
        cache, x = torch.randn(2, 8, 4), torch.randn(2, 4)
        want_cache, got_cache = cache.clone(), cache.clone()
        torch.testing.assert_close(opt(x, got_cache, 3), model(x, want_cache, 3), rtol=0, atol=0)
        torch.testing.assert_close(got_cache, want_cache, rtol=0, atol=0)
    ir = "\n".join(g.scm.ir() for g in live_graphs(GRAPHS[first:]))
    # one overlap guard; the weight (L0) checked only against written state when parameters are skipped
    assert ir.count("no_overlap(") == 1 and "disjoint(" not in ir, ir
    assert ("no_overlap(2, L0.data_ptr" in ir) == skip_params and ("no_overlap(1, L0.data_ptr" in ir) != skip_params, ir


def test_a_backend_graph_keeps_its_buffers_after_its_first_call():
    """AOTAutograd runs a graph's first call under a dispatch mode that analyses custom ops; that
    call must not cost the graph's allocation sites their kept buffers (before: every site escaped)."""
    torch._dynamo.reset()

    def g(x, w):
        return torch.mm(x + w, w).relu() * 3

    opt = torch.compile(g, backend="trident")
    first = len(GRAPHS)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(3):
            x, w = torch.randn(8, 8, generator=gen), torch.randn(8, 8, generator=gen)
            torch.testing.assert_close(opt(x, w), g(x, w), rtol=0, atol=0)
    (graph,) = live_graphs(GRAPHS[first:])
    c = graph.scm.counters()
    assert (c["reused_buffers"], c["escaped_buffers"]) == (2, 0), c
