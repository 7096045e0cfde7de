"""Arguments that share memory.

A program is captured for one call's arguments. Export treats arguments as distinct values (and
merges an object passed twice into one input), so a program captured from distinct tensors is wrong
for a call whose tensors overlap where the program writes one of them, and a program captured from
`f(x, x)` is wrong for `f(x, y)`. trident therefore:

  - captures from distinct memory: each tensor overlapping an earlier argument is replaced, for the
    capture only, by a copy with the same sizes, strides and storage offset (`distinct_copies`);
  - guards each written argument against overlapping any other tensor argument and the module
    state the program reads, and every argument against the state it writes (`guard_lines`, one
    sorted-interval guard per device; parameters and buffers sit at fixed addresses, checked by
    the bindings each call), so a spec never runs a call it was not captured for;
  - runs a call eagerly, with a one-time warning, when an argument it writes overlaps another
    (compiled.py): such a call has no compiled form that is exactly eager's.

Overlap is judged by memory extent: [data_ptr, data_ptr + bytes spanned), so two disjoint slices of
one buffer (a K and a V cache cut from one allocation) do not overlap.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree
from torch.export.graph_signature import InputKind, OutputKind

from . import _C
from .lowering import hir
from .guard_fields import field


def _span(t: torch.Tensor) -> int:
    """Elements from t's first to its last, inclusive (strides are never negative in PyTorch)."""
    return 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))


def _extent(t: torch.Tensor):
    if t.numel() == 0:
        return None
    start = t.data_ptr()
    return t.device, start, start + _span(t) * t.element_size()


def _intersect(a, b) -> bool:
    """Whether two extents (_extent) share a byte: same device, overlapping address ranges."""
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


# c10::DeviceType codes of the devices trident runs on, by torch.device.type (lower.py spells
# device literals with it; the leaves' device_type fields hold these codes).
DEVICE_TYPE_CODES = {"cpu": 0, "cuda": 1}


def overlapping_pairs(leaf_values: list) -> list[tuple[int, int]]:
    """(i, j), i < j, for tensor leaves whose memory extents intersect."""
    spans = [(k, _extent(v)) for k, v in enumerate(leaf_values) if isinstance(v, torch.Tensor)]
    spans = [(k, e) for k, e in spans if e is not None and e[0].type != "meta"]
    out = []
    for a in range(len(spans)):
        for b in range(a + 1, len(spans)):
            (i, ei), (j, ej) = spans[a], spans[b]
            if _intersect(ei, ej):
                out.append((i, j))
    return out


def _copy_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor of t's values in memory of its own, with t's sizes, strides and storage offset (so
    that its alignment, which kernels specialize on, is t's too)."""
    with torch.no_grad():
        buf = torch.empty(t.storage_offset() + _span(t), dtype=t.dtype, device=t.device)
        c = buf.as_strided(t.shape, t.stride(), t.storage_offset())
        c.copy_(t)
    return c.requires_grad_(t.requires_grad) if t.is_leaf and t.requires_grad else c


def distinct_copies(marked, values, pairs: list[tuple[int, int]]):
    """`values` (the call's (args, kwargs)) with the later tensor of each overlapping pair replaced by
    a copy; `marked` is the same structure with each leaf's marker (an object with `.index`)."""
    later = {j for _, j in pairs}

    def swap(m, v):
        return _copy_like(v) if getattr(m, "index", None) in later and isinstance(v, torch.Tensor) else v

    return pytree.tree_map(swap, marked, values, is_leaf=lambda x: x is None)


def written_leaves(ep, leaf_of_input: list) -> set[int]:
    """The user tensor leaves the captured program writes (its input mutations)."""
    sig = ep.graph_signature
    mutated = {s.target for s in sig.output_specs if s.kind == OutputKind.USER_INPUT_MUTATION}
    user = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
    return {leaf for s, leaf in zip(user, leaf_of_input)
            if isinstance(leaf, int) and getattr(s.arg, "name", None) in mutated}


def _span_text(k: int, leaf: dict, itemsize: int) -> str:
    """Bytes spanned by tensor leaf k, as a guard expression over its fields."""
    terms = " + ".join(f"({field('size', k, d)} - 1) * {field('stride', k, d)}" for d in range(leaf["dim"]))
    return f"{itemsize} * (1 + {terms})" if terms else str(itemsize)


def guard_lines(written: set[int], leaves: list[dict], itemsize: dict[int, int], state: list,
                state_written: set[str], unguarded: frozenset[int] = frozenset()) -> list[str]:
    """One `guard expr "no_overlap(...)"` per device (ir/expr.h): no written tensor leaf overlaps
    another tensor leaf, nor a state tensor the program reads, and no tensor leaf overlaps a state
    tensor the program writes. Leaves in `unguarded` (the backend's parameters) are checked against
    written state only. A state tensor's extent is a constant of the spec: the bindings see any
    change of its address before selection, and the controller then recompiles specs that hold
    one (compiled.py). `itemsize`: bytes per element of each tensor leaf (from its traced value)."""
    devices: dict[tuple, list] = {}
    for k, l in enumerate(leaves):
        if l["kind"] != _C.LEAF_TENSOR or 0 in l["sizes"] or k not in itemsize:
            continue
        cls = 0 if k in written else 2 if k in unguarded else 1
        devices.setdefault((l["device_type"], l["device_index"]), []).append(
            (cls, field("data_ptr", k), _span_text(k, l, itemsize[k])))
    lines = []
    for (dtype, dindex), triples in devices.items():
        for ref in state:
            t = ref.tensor
            e = _extent(t) if isinstance(t, torch.Tensor) else None
            if e is None or DEVICE_TYPE_CODES.get(e[0].type) != dtype or \
                    (e[0].index if e[0].index is not None else -1) != dindex:
                continue
            triples.append((3 if ref.target in state_written else 4, str(e[1]), str(e[2] - e[1])))
        classes = [c for c, _, _ in triples]
        if 0 not in classes and not (3 in classes and any(c in (1, 2) for c in classes)):
            continue  # nothing written that another range could overlap
        items = ", ".join(f"{c}, {p}, {n}" for c, p, n in triples)
        lines.append(hir.guard_expr(f"no_overlap({items})"))
    return lines


def written_state(ep) -> set[str]:
    """Names of the buffers the captured program writes (its buffer mutations)."""
    return {s.target for s in ep.graph_signature.output_specs if s.kind == OutputKind.BUFFER_MUTATION}


def leaves_overlapping(leaf_values: list, tensors: list) -> list[int]:
    """Tensor leaves whose memory intersects one of `tensors` (a module's parameters and buffers)."""
    spans = [e for e in (_extent(t) for t in tensors if isinstance(t, torch.Tensor)) if e is not None]
    out = []
    for k, v in enumerate(leaf_values):
        a = _extent(v) if isinstance(v, torch.Tensor) else None
        if a is not None and a[0].type != "meta" and any(_intersect(a, b) for b in spans):
            out.append(k)
    return out


def state_overlaps(written: set[int], leaf_values: list, state: list, state_written: set[str]) -> list[tuple[int, str]]:
    """(leaf, state name) for each tensor leaf whose memory intersects a state tensor the program
    reads, where the program writes either of them (`m(m.w)` where forward does `x.add_(self.w)`, or
    a buffer the program updates passed as an argument too): such calls run eagerly."""
    out = []
    for k, v in enumerate(leaf_values):
        a = _extent(v) if isinstance(v, torch.Tensor) else None
        if a is None or a[0].type == "meta":
            continue
        for ref in state:
            if k not in written and ref.target not in state_written:
                continue
            b = _extent(ref.tensor) if isinstance(ref.tensor, torch.Tensor) else None
            if b is not None and _intersect(a, b):
                out.append((k, ref.target))
    return out

