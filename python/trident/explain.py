"""trident.explain: what a compiled function holds and, for given arguments, what it would do."""
from __future__ import annotations


def explain(compiled, *args, **kwargs) -> str:
    """A report: counters, the generated source, every specialization with its guards and program.
    With arguments, also which specialization those arguments select, or which guard each rejects."""
    from . import _C, controller
    if not isinstance(compiled, _C.SCM):
        # A torch.compile(..., backend="trident") result: explain every graph the backend compiled.
        from .backend import live_graphs
        graphs = live_graphs()
        if not graphs:
            raise TypeError(f"{type(compiled).__name__} is not a trident-compiled function and the "
                            "trident backend holds no compiled graph")
        return "\n".join(explain(g.scm) for g in graphs)
    c = controller(compiled)
    scm = c.scm
    n = scm.counters()
    src, so = scm.paths()
    lines = [f"trident: {c.name}",
             "  counters: " + ", ".join(f"{k}={v}" for k, v in n.items()),
             f"  generated source (the specialization added last): {src or '(none yet)'}",
             f"  its object: {so or '(none yet)'}",
             f"  the selector's source: {scm.selector_paths()[0] or '(none yet)'}",
             "  runs per specialization: " + (", ".join(f"spec {k}: {n}" for k, n in enumerate(scm.spec_runs()))
                                               or "(none yet)"),
             f"  state tensors: {len(c.state)}"]
    lines += [f"  said once: {why}" for why in c.said]
    for why, sites in _C.cublaslt_replay_refusals():  # process-wide: the sites of every compiled function
        lines.append(f"  cuBLASLt sites not replaying ({sites} in this process): {why}")
    for why, sites in _C.aten_replay_refusals():
        lines.append(f"  ATen call sites not replaying ({sites} in this process): {why}")
    for spec, why in scm.graph_refusals():  # graphs=True only
        lines.append(f"  spec {spec} does not replay as a CUDA graph: {why}")
    if args or kwargs:
        choice = scm.select(*args, **kwargs)
        lines.append(f"  these arguments select: {'spec %d' % choice if choice >= 0 else 'nothing (miss)'}")
        reasons = scm.explain_call(*args, **kwargs)
        if isinstance(reasons, str):
            lines.append(f"  not describable natively: {reasons}")
        else:
            for i, why in reasons:
                lines.append(f"    spec {i}: {'all guards hold' if not why else 'fails ' + why}")
    for name, cfg, grid, key in c.kernels:
        lines.append(f"  triton kernel {name}: grid {grid}, autotune choice {cfg}, specialization {key}")
    lines.append("  specializations (host IR):")
    lines += ["    " + line for line in scm.ir().splitlines()]
    return "\n".join(lines)
