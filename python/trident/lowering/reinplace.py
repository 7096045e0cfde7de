"""Re-inplacing: functional scatters into inputs the program mutates become in-place writes.

Functionalization turns `cache[:, :, pos] = k` into `select_scatter(cache, k, ...)` (a full copy of the
cache) followed, at the end, by `cache.copy_(new_cache)` (a second full copy). When nothing reads the
old contents afterwards, writing the slice in place gives the same result with none of the copies:
that is what eager did. This module decides which scatter nodes may be done in place; lower.py emits
them as a view plus `copy_` (or `index_copy_`/`index_put_`), and the final write-back disappears.

A scatter S(base, ...) is done in place only when
  - base is a mutated input, or a view of one, or an intermediate, rooted (through view ops) at a
    tensor the program may overwrite: a mutated input or buffer, or a temporary; and
  - no node reads the root, or any view of it, after S except through S's own result.
"""
from __future__ import annotations

import torch
import torch.fx as fx
from torch.export.graph_signature import InputKind, OutputKind

aten = torch.ops.aten
SCATTERS = {
    aten.slice_scatter.default: "slice",
    aten.select_scatter.default: "select",
    aten.copy.default: "copy",
    aten.index_copy.default: "index_copy",
    aten.index_put.default: "index_put",
}


def _is_view(n: fx.Node) -> bool:
    schema = getattr(n.target, "_schema", None)
    return (n.op == "call_function" and schema is not None and len(schema.returns) == 1
            and schema.returns[0].alias_info is not None and not schema.returns[0].alias_info.is_write)


def root_of(n: fx.Node) -> fx.Node:
    """The tensor whose memory `n` is a view of (through view ops), or `n` itself."""
    while _is_view(n) and isinstance(n.args[0], fx.Node):
        n = n.args[0]
    return n


def readers(root: fx.Node) -> list[fx.Node]:
    """Every node that reads `root`'s memory: its users and, transitively, its views' users."""
    out, todo, seen = [], [root], {root}
    while todo:
        n = todo.pop()
        for u in n.users:
            if u in seen:
                continue
            seen.add(u)
            out.append(u)
            if _is_view(u):
                todo.append(u)
    return out


def read_later(root: fx.Node, node: fx.Node, result: fx.Node | None, order: dict) -> list[fx.Node]:
    """The nodes after `node` (positions in `order`) that read `root`'s memory, other than a scatter
    of `result` back into it: one that writes node's new value where node, done in place, already
    wrote it reads the root only as its destination."""
    return [r for r in readers(root) if order[r] > order[node] and not _writes_back(r, result)]


def plan(ep) -> set[fx.Node]:
    """The scatter nodes of `ep` that may be executed in place."""
    sig = ep.graph_signature
    nodes = list(ep.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes if n.op == "placeholder"}
    writable = set()
    for s in sig.output_specs:
        if s.kind == OutputKind.USER_INPUT_MUTATION:
            writable.add(by_name[s.target])
        elif s.kind == OutputKind.BUFFER_MUTATION:
            for i in sig.input_specs:
                if i.kind == InputKind.BUFFER and i.target == s.target:
                    writable.add(by_name[i.arg.name])

    chosen: set[fx.Node] = set()
    for s in nodes:
        if s.op != "call_function" or s.target not in SCATTERS or not isinstance(s.args[0], fx.Node):
            continue
        base = s.args[0]
        root = root_of(base)
        if root.op == "placeholder":
            if root not in writable:
                continue
        elif root.op != "call_function":
            continue
        # The scatter's own operand chain may read the root before it; nothing may after it, except
        # a scatter that writes S's result back into the root (the next level of the same update).
        late = read_later(root, s, s, order)
        if root.op == "placeholder":
            late = [r for r in late if r.op != "output"]
        if not late:
            chosen.add(s)
    return chosen


def _writes_back(reader: fx.Node, s: fx.Node | None) -> bool:
    """Whether `reader` is a scatter of `s` into the root (or a view of it): it reads the root only
    as the destination, which holds the new value once `s` ran in place."""
    return (s is not None and reader.op == "call_function" and reader.target in SCATTERS and len(reader.args) > 1
            and reader.args[1] is s and reader.target not in (aten.index_copy.default, aten.index_put.default))
