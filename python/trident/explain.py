"""trident.explain: what a compiled function holds and, for given arguments, what it would do."""
from __future__ import annotations

import re

import torch

from .guard_words import dtype_names, spec_in_words


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
             f"  state tensors: {len(c.state)}",
             f"  captures: {c.captures}; saved specializations: {c.artifact_loads} files installed, "
             f"{c.artifacts_rejected} rejected (artifacts.py)"]
    if c._split_route is not None:
        lines.append("  calls split at graph breaks: " + ", ".join(f"{k}={v}" for k, v in c._split_route.counters().items()))
    lines += [f"  said once: {why}" for why in c.said]
    for why, sites in _C.cublaslt_replay_refusals():  # process-wide: the sites of every compiled function
        lines.append(f"  cuBLASLt sites not replaying ({sites} in this process): {why}")
    for why, sites in _C.aten_replay_refusals():
        lines.append(f"  ATen call sites not replaying ({sites} in this process): {why}")
    for spec, what, count, last in scm.graph_recaptures():  # graphs=True only
        lines.append(f"  spec {spec} captured {count} graph(s) beside one it held, as {what} differed "
                     f"(last: {last})")
    for spec, kind, why in scm.graph_notes():  # graphs=True only
        lines.append(f"  spec {spec} does not replay as a CUDA graph: {why}" if kind == "stopped" else
                     f"  spec {spec}'s CUDA graphs are keyed by their arguments' addresses (a call with new "
                     f"addresses captures a graph of its own): {why}" if kind == "addresses" else
                     f"  spec {spec}'s CUDA graphs are split into segments at each host read, the value read "
                     f"between two (keyed by argument addresses and int and float values; "
                     f"TRIDENT_GRAPH_SEGMENTS=0 turns this off): {why}" if kind == "segments" else
                     f"  spec {spec}'s CUDA graphs are keyed by its ints' and floats' values (a call with new "
                     f"values captures a graph of its own, never patched): {why}")
    if args or kwargs:
        choice = scm.select(*args, **kwargs)
        lines.append(f"  these arguments select: {'spec %d' % choice if choice >= 0 else 'nothing (miss)'}")
        reasons = scm.explain_call(*args, **kwargs)
        if isinstance(reasons, str):
            lines.append(f"  not describable natively: {reasons}")
        else:
            for i, why in reasons:
                lines.append(f"    spec {i}: {'all guards hold' if not why else 'fails ' + why}")
    for k, spec in enumerate(c.installed):
        lines.append(f"  spec {k} captured by: {spec.get('route') or 'unknown'}")
        lines.append(f"  spec {k} serves calls where: " + "; ".join(spec_in_words(spec["text"], spec.get("leaf_names"))
                                                                      + spec.get("bound_words", [])))
        for name, rank, size in spec.get("groups") or []:
            lines.append(f"  spec {k} runs collectives on process group '{name}' as rank {rank} of {size} "
                         "(dropped if a process group is destroyed)")
    for name, cfg, grid, key in c.kernels:
        lines.append(f"  triton kernel {name}: grid {grid}, autotune choice {cfg}, specialization {key}")
    lines.append("  specializations (host IR; guards on codes say what the code means after #):")
    lines += ["    " + readable(line) for line in scm.ir().splitlines()]
    return "\n".join(lines)


_CODED_GUARD = re.compile(r"^\s*guard L\d+\.(kind|dtype|device_type|keyset|flags) == (-?\d+)$")
_KINDS = {0: "None", 1: "tensor", 2: "int", 3: "float", 4: "bool"}


def readable(line: str) -> str:
    """A guard line whose right side is a code (leaf kind, dtype, device type, dispatch keys,
    flags), with what the code means appended as a comment; any other line as it is."""
    m = _CODED_GUARD.match(line)
    if not m:
        return line
    field, v = m.group(1), int(m.group(2))
    if field == "kind":
        text = _KINDS.get(v)
    elif field == "dtype":
        text = dtype_names().get(v)
    elif field == "device_type":
        from .aliasing import DEVICE_TYPE_CODES
        text = {c: n for n, c in DEVICE_TYPE_CODES.items()}.get(v)
    elif field == "keyset":
        text = str(torch._C.DispatchKeySet.from_raw_repr(v)) if hasattr(torch._C, "DispatchKeySet") else None
    else:
        text = "requires_grad" if v & 1 else "does not require grad"
    return f"{line}  # {text}" if text else line

