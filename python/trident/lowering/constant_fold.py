"""Values a specialization computes from no input: computed once when it is lowered and held as
constants of the module, so a hit launches nothing for them. Hugging Face's decoders build such
values every step: `arange(max_cache)` for the causal mask, `arange(1)` per layer for the write
position (11 ATen launches per step of an 8-layer Llama).

A node folds when its op is in FOLDABLE (deterministic factories and arithmetic), every tensor it
reads is itself folded, its result is a tensor of static shape of at most MAX_ELEMENTS elements, and
nothing can reach it afterwards but ops that read it: not the output, not an in-place or mutating
op, not a view that leads to either. The value is the op's own result on the real device, so a hit
reads exactly what the op would have computed."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from . import lazy_views

aten = torch.ops.aten
MAX_ELEMENTS = 1 << 16

FOLDABLE = frozenset({
    aten.arange.default, aten.arange.start, aten.arange.start_step,
    aten.full.default, aten.zeros.default, aten.ones.default, aten.scalar_tensor.default,
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.neg.default,
    aten._to_copy.default,
})


def plan(lw) -> dict:
    """{node: its value} for the nodes of lw's graph that fold."""
    values: dict[fx.Node, torch.Tensor] = {}
    for node in lw.ep.graph.nodes:
        if node.op != "call_function" or node.target not in FOLDABLE or node in lw.inplace:
            continue
        val = node.meta.get("val")
        if not (isinstance(val, torch.Tensor) and _static(val) and val.numel() <= MAX_ELEMENTS):
            continue
        if not all(a in values for a in _nodes_in((node.args, node.kwargs))):
            continue
        if not _only_read(node, lw.inplace):
            continue
        args, kwargs = torch.utils._pytree.tree_map(
            lambda a: values[a] if isinstance(a, fx.Node) else a, (node.args, node.kwargs))
        if _symbolic((args, kwargs)):
            continue
        value = node.target(*args, **kwargs)
        if list(value.shape) != list(val.shape) or value.stride() != val.stride() or value.dtype != val.dtype:
            continue  # not what the trace says the op returns: leave it to run
        values[node] = value
    return values


def _static(fake) -> bool:
    return all(isinstance(v, int) for v in (*fake.shape, *fake.stride()))


def _nodes_in(tree) -> list:
    return [a for a in torch.utils._pytree.tree_leaves(tree) if isinstance(a, fx.Node)]


def _symbolic(tree) -> bool:
    return any(isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool))
               for a in torch.utils._pytree.tree_leaves(tree))


def _only_read(node: fx.Node, inplace) -> bool:
    """Every use of node's result reads it: no output, in-place write or mutating op reaches it, also
    through views of it."""
    for user in node.users:
        if user.op != "call_function" or user in inplace or user.target is operator.getitem:
            return False
        target = user.target
        if not isinstance(target, torch._ops.OpOverload):
            return False
        schema = target._schema
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            return False
        if lazy_views.qualified(target) in lazy_views.VIEW_OPS:
            if not _only_read(user, inplace):
                return False
        elif any(r.alias_info is not None for r in schema.returns):
            return False  # an aliasing op the lowering does not treat as a view: not followed
    return True
