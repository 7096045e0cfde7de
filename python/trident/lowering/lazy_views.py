"""Views that only kernels read get no tensor object at run time.

A view op of the graph (slice, view, unsqueeze, ...) is not emitted where it appears: its value is a
LazyView. A Triton or builtin launch that reads it is given `ptr(%root, off)`, the data pointer of
the tensor whose memory it views plus the byte offset the trace computed (a literal, or a symbolic
integer computed natively, such as a KV-cache position times its stride). Anything that needs the
tensor itself (an ATen call, an output, a clone) emits the view call at that point, once. In the
decode step this removes the KV-cache write views: five view calls per layer.

The offset is exact: the view's fake and the root's fake describe one storage, and the root's fake has
the layout recorded where its runtime value was defined (`value_fakes`), which is the runtime
tensor's up to the guards. (A node may stand for a value defined elsewhere: a Triton kernel's output
written in place is its input; the functional graph's output fake is a stride- and offset-preserving
clone, so it has that layout too, checked here.) A root without a recorded fake, or an offset the
symbols cannot express, falls back to the call.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from . import hir
from ..errors import UnsupportedError

# Ops that return a view of their first argument and take no other tensor.
VIEW_OPS = frozenset({
    "aten::slice.Tensor", "aten::select.int", "aten::view", "aten::unsqueeze", "aten::squeeze.dim",
    "aten::squeeze.dims", "aten::squeeze", "aten::permute", "aten::transpose.int", "aten::t",
    "aten::expand", "aten::alias", "aten::as_strided", "aten::unflatten.int", "aten::narrow",
    "aten::_reshape_alias", "aten::diagonal",
})


@dataclass
class LazyView:
    node: fx.Node
    name: str             # the view op, qualified
    parent: object        # what it views: a "%N" or another LazyView
    rest: list            # the op's other operands, rendered
    root: str             # the "%N" whose memory it is
    root_fake: torch.Tensor
    key: tuple            # what it is a view of (the lowering's view_key), for no-op copies
    value: str | None = None  # "%N" once the call is emitted


def qualified(op) -> str:
    schema = op._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def defer(lw, node: fx.Node, name: str, args: list) -> bool:
    """Make `node` (a call of `name` with schema-complete `args`) a LazyView; False when it must be
    emitted now."""
    fake = node.meta.get("val")
    if name not in VIEW_OPS or not args or not isinstance(args[0], fx.Node):
        return False
    if not (isinstance(fake, torch.Tensor) and fake.layout == torch.strided):
        return False
    if _new_data_dependent_size(lw, fake):
        return False  # emitted now, so its size is read from it (a slice ending at an `.item()`)
    found = _root(lw, args[0])
    if found is None:
        return False
    root, root_fake = found
    if any(isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor) for a in args[1:]):
        return False
    rest = [lw.operand(node, a) for a in args[1:]]
    parent = lw.env[args[0]]
    lw.env[node] = LazyView(node, name, parent, rest, root, root_fake, (key_of(lw, args[0]), name, tuple(rest)))
    return True


def _new_data_dependent_size(lw, fake: torch.Tensor) -> bool:
    """Whether the view's size holds a data-dependent symbol the program has no value for yet: the
    view must be emitted where it stands, the symbol read from its result, before anything sized by
    it (a later view `2*u1`, an assertion) needs the value."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    return any(s not in lw.syms.sym for d in fake.shape for s in free_unbacked_symbols(d))


def _expr(v):
    return v.node.expr if isinstance(v, torch.SymInt) else v


def _same_layout(a, b) -> bool:
    """Structurally equal sizes, strides and offset (no comparison of symbols: that would guard)."""
    return (a.dtype == b.dtype and a.dim() == b.dim() and _expr(a.storage_offset()) == _expr(b.storage_offset())
            and all(_expr(x) == _expr(y) for x, y in zip(a.shape, b.shape))
            and all(_expr(x) == _expr(y) for x, y in zip(a.stride(), b.stride())))


def _root(lw, a: fx.Node):
    """(%root, its fake) for the tensor node `a`, a fake in `a`'s own fake storage where one has the
    root's layout; None when no layout is recorded for a's value."""
    v = lw.env.get(a)
    if isinstance(v, LazyView):
        return v.root, v.root_fake
    if not (isinstance(v, str) and v in lw.value_fakes):
        return None
    recorded, own = lw.value_fakes[v], a.meta.get("val")
    if isinstance(own, torch.Tensor) and own is not recorded and _same_layout(own, recorded):
        return v, own
    return v, recorded


def materialize(lw, lazy: LazyView) -> str:
    """The view as a tensor value: its call, emitted here the first time."""
    if lazy.value is None:
        parent = lazy.parent if isinstance(lazy.parent, str) else materialize(lw, lazy.parent)
        v = lw.value()
        lw.lines.append(hir.call(v, lazy.name, [parent] + lazy.rest))
        lw.ops.append(lazy.name)
        lw.view_key[v] = lazy.key
        lw.value_fakes[v] = lazy.node.meta["val"]
        lazy.value = v
    return lazy.value


def key_of(lw, a):
    """What tensor operand `a` is a view of, without emitting anything."""
    v = lw.env.get(a) if isinstance(a, fx.Node) else None
    if isinstance(v, LazyView):
        return v.key
    return lw.view_key.get(v, v) if isinstance(v, str) else None


def memory_root(lw, operand: str) -> str:
    """The value whose memory a tensor operand ("%N" or "ptr(%N, off)") is: views are followed
    back to what they view. Fakes cannot say this after in-place lowering: a write into the result
    of an earlier in-place scatter has a fake of its own storage, the runtime memory is the same."""
    v = operand[4:operand.index(",")] if operand.startswith("ptr(") else operand
    key = lw.view_key.get(v, v)
    while isinstance(key, tuple):
        key = key[0]
    return key


def pointer_into(lw, a: fx.Node, fake) -> str | None:
    """A launch operand for memory described by `fake`, a view of the same storage as the value of
    node `a`: `%root` or `ptr(%root, bytes)`; None when the root or the offset is not known."""
    found = _root(lw, a)
    if found is None:
        return None
    root, root_fake = found
    if fake.untyped_storage()._cdata != root_fake.untyped_storage()._cdata:
        return None
    offset = fake.storage_offset() * fake.element_size() - root_fake.storage_offset() * root_fake.element_size()
    try:
        text = lw.sym_operand(offset)
    except UnsupportedError:
        return None
    return root if text == "0" else f"ptr({root}, {text})"


def launch_operand(lw, node: fx.Node, a) -> str:
    """Tensor argument `a` of a launch in `node`: a pointer when `a` is a view not yet emitted."""
    v = lw.env.get(a) if isinstance(a, fx.Node) else None
    if isinstance(v, LazyView) and v.value is None:
        p = pointer_into(lw, a, a.meta["val"])
        if p is not None:
            return p
    return lw.operand(node, a)
