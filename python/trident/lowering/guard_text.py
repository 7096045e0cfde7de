"""Guards of a specialization, as host IR text: what every leaf of the call must be for the
captured program to be valid for it (static values, or symbolic relations from the ShapeEnv)."""
from __future__ import annotations

import math

import torch

from . import hir
from .. import _C
from ..guard_fields import field


def float_text(v: float) -> str:
    """A float in host IR syntax: always with a point or exponent, or inf/-inf/nan."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = repr(float(v))
    return s if any(c in s for c in ".e") else s + ".0"


def guard_lines(structure: str, leaves: list[dict], grad_mode: bool, fakes: dict | None = None,
                syms=None) -> list[str]:
    """Guards for a specialization: every property of every leaf the trace depended on.

    Tensors: kind, dtype, device, rank, requires_grad, dispatch keys, each size and stride.
    Python scalars: their value (the trace baked it in). None leaves: fixed by the structure.
    With `fakes` (leaf -> traced value) and `syms`, sizes, strides and ints the trace kept symbolic
    are guarded by their symbolic expression instead of their current value."""
    fakes = fakes or {}
    out = [hir.guard(field("grad_mode"), "==", int(grad_mode))]

    def dim_guard(k, what, d, concrete, traced):
        text = field(what, k, d)
        # A size the program holds as a number is guarded at the number it holds, not at this call's
        # value: a capture reused for another call (compiled.py) may have specialized it elsewhere.
        if isinstance(traced, torch.SymInt) and traced.node.expr.is_number:
            traced = int(traced.node.expr)
        if type(traced) is int:
            return [hir.guard(text, "==", traced)]
        if not isinstance(traced, torch.SymInt) or syms is None:
            return [hir.guard(text, "==", concrete)]
        expr = traced.node.expr
        if syms.field.get(expr) == text:
            return []  # this field defines the symbol: ranges come with the ShapeEnv guards
        return [hir.guard_expr(f"{text} == {syms.guard_text(expr)}")]

    for k, l in enumerate(leaves):
        out.append(hir.guard(field("kind", k), "==", l["kind"]))
        fake = fakes.get(k)
        if l["kind"] == _C.LEAF_TENSOR:
            out += [hir.guard(field(name, k), "==", value) for name, value in (
                ("dtype", l["dtype"]), ("device_type", l["device_type"]), ("device_index", l["device_index"]),
                ("dim", l["dim"]), ("flags", l["flags"]), ("keyset", _keyset(l["keyset"])))]
            tsizes = fake.shape if isinstance(fake, torch.Tensor) else l["sizes"]
            tstrides = fake.stride() if isinstance(fake, torch.Tensor) else l["strides"]
            for d, v in enumerate(l["sizes"]):
                out += dim_guard(k, "size", d, v, tsizes[d])
            for d, v in enumerate(l["strides"]):
                out += dim_guard(k, "stride", d, v, tstrides[d])
        elif l["kind"] in (_C.LEAF_INT, _C.LEAF_BOOL):
            if isinstance(fake, torch.SymInt) and syms is not None:
                # Kept symbolic: its ShapeEnv guards and range apply instead of the value. A SymInt
                # the trace specialized (its expression is now a number) is guarded like a constant.
                out += dim_guard(k, "ival", None, l["ival"], fake)
                continue
            # an int the program holds as a constant is guarded at the value it was traced with
            out.append(hir.guard(field("ival", k), "==", fake if type(fake) is int else l["ival"]))
        elif l["kind"] == _C.LEAF_FLOAT:
            if fake is not None and not isinstance(fake, (int, float)):
                continue  # a run-time float (float_symbols.RUNTIME): its value is not baked in
            # NaN equals nothing, itself included; "x != x" holds exactly for NaN.
            fval = field("fval", k)
            out.append(hir.guard(fval, "!=", fval) if math.isnan(l["fval"]) else hir.guard(fval, "==", float_text(l["fval"])))
    if syms is not None:
        out += syms.guards()
    return out


def _keyset(raw: int) -> int:
    """Dispatch key sets are 64-bit unsigned; the IR stores guard literals as int64."""
    return raw - (1 << 64) if raw >= (1 << 63) else raw
