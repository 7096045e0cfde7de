"""A specialization's guards in the user's words (trident.explain): one line per argument leaf,
named as the call names it (`x`, `cache.layers[0].keys`, `pos`), instead of host IR's coded lines
(`guard L2.ival == 0`, `guard L0.dtype == 6`). The host IR text stays the source of truth; this
reads it back. Symbolic relations are printed with the leaves' names, simple bounds of one int or
size as a range (`pos in [0, 64)`)."""
from __future__ import annotations

import re

import torch

from . import _C, structure_text

_LEAF_GUARD = re.compile(r"^guard L(\d+)\.(\w+)(?:\[(\d+)\])? == (.+)$")
_FIELD = re.compile(r"L(\d+)\.(\w+)(?:\[(\d+)\])?")
_BOUND = re.compile(r"^(\S+) (<|<=|>=|>) (?:(-?\d+)|\((-\d+)\)|-\((\d+)\))$")
_NO_OVERLAP = re.compile(r"^no_overlap\(")


def spec_in_words(text: str, names: list[str] | None) -> list[str]:
    """The guards of one specialization's host IR `text`, as readable lines."""
    guards = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("guard ")]
    leaves: dict[int, dict] = {}
    exprs: list[str] = []
    grad = None
    for g in guards:
        if g.startswith("guard grad_mode == "):
            grad = g.endswith("1")
        elif g.startswith('guard expr "'):
            exprs.append(g[len('guard expr "'):-1])
        elif (m := _LEAF_GUARD.match(g)):
            k, field, d, v = int(m.group(1)), m.group(2), m.group(3), m.group(4)
            leaf = leaves.setdefault(k, {})
            if d is None:
                leaf[field] = v
            else:
                leaf.setdefault(field, {})[int(d)] = v

    def name(k: int) -> str:
        return names[k] if names is not None and k < len(names) else f"L{k}"

    def field_text(m: re.Match) -> str:
        k, field, d = int(m.group(1)), m.group(2), m.group(3)
        if field == "ival" or field == "fval":
            return name(k)
        if field in ("size", "stride"):
            return f"{name(k)}.{field}({d})"
        return f"{name(k)}.{field}"

    bounds: dict[str, list] = {}  # a name -> [low (inclusive), high (exclusive)]
    relations, overlaps = [], []
    for e in exprs:
        if _NO_OVERLAP.match(e):
            ids = sorted({int(k) for k in re.findall(r"L(\d+)\.data_ptr", e)})
            overlaps.append(" and ".join(name(k) for k in ids) + " do not overlap")
            continue
        e = _FIELD.sub(field_text, e)
        if e.startswith("(") and e.endswith(")") and _balanced(e[1:-1]):
            e = e[1:-1]
        if (m := _BOUND.match(e)):
            var, op = m.group(1), m.group(2)
            n = int(m.group(3) or m.group(4) or -int(m.group(5)))
            low, high = bounds.setdefault(var, [None, None])
            if op in (">=", ">"):
                n = n if op == ">=" else n + 1
                bounds[var][0] = n if low is None else max(low, n)
            else:
                n = n + 1 if op == "<=" else n
                bounds[var][1] = n if high is None else min(high, n)
            continue
        relations.append(e)

    out = [] if grad is None else [f"grad mode {'on' if grad else 'off'}"]
    out += settings_in_words(text)
    for k in sorted(leaves):
        out.append(_leaf_text(name(k), leaves[k]))
    for var, (low, high) in bounds.items():
        out.append(f"{var} in [{'-inf' if low is None else low}, {'inf' if high is None else high})")
    out += sorted(set(relations)) + overlaps
    return out


def settings_in_words(text: str) -> list[str]:
    """The global settings a specialization serves (its structure string's "@dtype.det[.cpu.cuda]"
    suffix, python/bindings/flatten.h), as readable lines; none at the defaults."""
    numbers = structure_text.settings(text)
    if not numbers:
        return []
    dtype, det, *autocast = numbers
    names = dtype_names()
    out = [] if names.get(dtype) == "float32" else [f"default dtype {names.get(dtype, dtype)}"]
    if det:
        out.append("deterministic algorithms on" + (", filling new memory" if det == 2 else ""))
    for device, code in zip(("cpu", "cuda"), autocast):
        if code:
            out.append(f"under torch.autocast({device}, {names.get(code - 1, code - 1)})")
    return out


_DTYPE_NAMES: dict[int, str] = {}


def dtype_names() -> dict[int, str]:
    """dtype codes (host IR, trd_leaf.dtype) to their torch names, `float32`."""
    if not _DTYPE_NAMES:
        from .lowering.lower import dtype_code
        for d in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128):
            _DTYPE_NAMES[dtype_code(d)] = str(d).replace("torch.", "")
    return _DTYPE_NAMES


def _balanced(e: str) -> bool:
    """Whether e's parentheses pair up on their own (so parentheses around it may go)."""
    depth = 0
    for ch in e:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def _leaf_text(n: str, leaf: dict) -> str:
    kind = int(leaf.get("kind", -1))
    if kind == _C.LEAF_TENSOR:
        from .aliasing import DEVICE_TYPE_CODES
        dtype = dtype_names().get(int(leaf.get("dtype", -1)), leaf.get("dtype"))
        device = {c: d for d, c in DEVICE_TYPE_CODES.items()}.get(int(leaf.get("device_type", -1)), "?")
        index = leaf.get("device_index")
        if index not in (None, "-1"):
            device += f":{index}"
        dim = int(leaf.get("dim", 0))
        sizes = leaf.get("size", {})
        strides = leaf.get("stride", {})
        shape = ", ".join(sizes.get(d, "*") for d in range(dim))
        stride = ", ".join(strides.get(d, "*") for d in range(dim))
        grad = " requires grad" if int(leaf.get("flags", 0)) & 1 else ""
        return f"{n}: {dtype} tensor on {device}, shape ({shape}{',' if dim == 1 else ''}), " \
               f"strides ({stride}{',' if dim == 1 else ''}){grad}"
    if kind == _C.LEAF_INT:
        return f"{n} == {leaf['ival']}" if "ival" in leaf else f"{n}: an int (symbolic)"
    if kind == _C.LEAF_FLOAT:
        return f"{n} == {leaf['fval']}" if "fval" in leaf else f"{n}: a float (a run-time value)"
    if kind == _C.LEAF_BOOL:
        return f"{n} is {'True' if leaf.get('ival') == '1' else 'False'}"
    if kind == _C.LEAF_NONE:
        return f"{n} is None"
    return f"{n}: kind {kind}"
