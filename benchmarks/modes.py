"""The execution modes compared, how each is built from a function, and how a result is judged.

A mode that cannot be built or run (trident's UnsupportedError, a torch.compile backend that does
not exist or fails) is "unsupported" with its message; any other exception is "error"; a result
that differs from eager is "FAILED". Statuses are strings so they go straight into the JSON.
"""
import torch
import torch.utils._pytree as pytree

# (name, label, weight), in run order (most needed first): weight is the mode's share of the time
# budget (compiles cost most; eager pays for Triton's first compile of every kernel).
MODES = [
    ("eager", "eager", 3),
    ("trident", "trident", 3),
    ("trident_reuse", "trident reuse_outputs", 3),
    ("trident_graphs", "trident graphs", 3),
    # graph mode with every result copied out of the graph's pool by a copy node
    # (TRIDENT_GRAPH_DIRECT_RESULTS=0, set in this mode's own worker process)
    ("trident_graphs_copies", "trident graphs, result copies", 3),
    ("trident_backend", "compile(backend=trident)", 2),
    ("compile", "torch.compile", 4),
    ("reduce_overhead", "reduce-overhead", 4),
    ("cpp_wrapper", "cpp_wrapper", 5),
]
LABELS = {name: label for name, label, _ in MODES}
WEIGHTS = {name: weight for name, _, weight in MODES}

# Modes built with trident.compile (the other trident mode is the torch.compile backend).
TRIDENT_COMPILE_MODES = ("trident", "trident_reuse", "trident_graphs", "trident_graphs_copies")

OK, FAILED, UNSUPPORTED, ERROR, TIMEOUT, SKIPPED = "ok", "FAILED", "unsupported", "error", "timeout", "skipped"

TRIDENT_MAX_SPECIALIZATIONS = 256  # above the 65 distinct `pos` values of one decode run


def build(mode, fn):
    """The callable for `mode` (fn itself for eager). May raise; the caller classifies the error."""
    if mode == "eager":
        return fn
    if mode in TRIDENT_COMPILE_MODES:
        import os
        import trident
        # Read as each specialization loads: set for this mode, unset for the others (one process
        # may build several modes, percall_interleaved.py does).
        if mode == "trident_graphs_copies":
            os.environ["TRIDENT_GRAPH_DIRECT_RESULTS"] = "0"
        else:
            os.environ.pop("TRIDENT_GRAPH_DIRECT_RESULTS", None)
        return trident.compile(fn, max_specializations=TRIDENT_MAX_SPECIALIZATIONS,
                               reuse_outputs=mode == "trident_reuse",
                               graphs=mode in ("trident_graphs", "trident_graphs_copies"))
    if mode == "trident_backend":
        import trident  # noqa: F401  (registers the backend, where it exists)
        return torch.compile(fn, backend="trident")
    if mode == "compile":
        return torch.compile(fn)
    if mode == "reduce_overhead":
        return torch.compile(fn, mode="reduce-overhead")
    if mode == "cpp_wrapper":
        return torch.compile(fn, options={"cpp_wrapper": True})
    raise ValueError(f"unknown mode {mode!r}")


def reset(mode):
    """Forget compiled frames between cases, so each case compiles afresh (and no recompile limit or
    automatic-dynamic decision carries over)."""
    global _first_graph
    if mode != "eager":
        torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    if mode == "trident_backend":
        from trident.backend import GRAPHS
        _first_graph = len(GRAPHS)


_first_graph = 0  # trident_backend: index in trident.backend.GRAPHS of the first graph since reset()


def classify(mode, exc):
    """(status, message) for an exception raised while building or running `mode`."""
    msg = f"{type(exc).__name__}: {exc}".strip()
    if mode == "trident_backend":
        return UNSUPPORTED, msg          # a missing or failing backend is reported as unsupported
    if mode in TRIDENT_COMPILE_MODES:
        try:
            import trident
            if isinstance(exc, trident.UnsupportedError):
                return UNSUPPORTED, msg
        except ImportError:
            return UNSUPPORTED, msg
    return ERROR, msg


def first_line(text, limit=300):
    line = next((ln for ln in str(text).splitlines() if ln.strip()), "")
    return line[:limit]


def rel_err(got, want):
    """Largest relative L2 error over the tensors of two matching structures (inf on NaN/mismatch)."""
    g_leaves, g_spec = pytree.tree_flatten(got)
    w_leaves, w_spec = pytree.tree_flatten(want)
    if g_spec != w_spec:
        return float("inf")
    worst = 0.0
    for g, w in zip(g_leaves, w_leaves):
        if not isinstance(w, torch.Tensor):
            worst = max(worst, 0.0 if g == w else float("inf"))
            continue
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or not torch.isfinite(g).all():
            return float("inf")
        g, w = g.detach().double(), w.detach().double()
        worst = max(worst, ((g - w).norm() / w.norm().clamp_min(1e-30)).item())
    return worst


def check(got, want, tol):
    err = rel_err(got, want)
    return {"ok": err <= tol, "rel_err": err, "tol": tol}


def dynamo_stats():
    """Graph counts, graph breaks and cudagraph skips recorded by torch.compile since the last reset."""
    c = torch._dynamo.utils.counters
    stats = {"unique_graphs": c["stats"].get("unique_graphs", 0),
             "graph_breaks": sum(c["graph_break"].values()),
             "cudagraph_skips": c["inductor"].get("cudagraph_skips", 0)}
    return {k: v for k, v in stats.items() if v}


def trident_counters(mode, compiled):
    """trident.counters(compiled); for trident_backend, the integer counters summed over the graphs
    the backend compiled since reset(), with their number as "graphs"."""
    try:
        if mode in TRIDENT_COMPILE_MODES:
            import trident
            return dict(trident.counters(compiled))
        if mode == "trident_backend":
            from trident.backend import GRAPHS, live_graphs
            graphs = live_graphs(GRAPHS[_first_graph:])
            total = {"graphs": len(graphs)}
            for g in graphs:
                for k, v in g.scm.counters().items():
                    if isinstance(v, int):
                        total[k] = total.get(k, 0) + v
            return total
    except Exception:  # noqa: BLE001  (counters are diagnostics only)
        pass
    return None
