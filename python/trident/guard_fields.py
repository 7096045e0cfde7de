"""Guard fields as host IR spells them (`grad_mode`, `L3.dtype`, `L3.size[1]`), from their one
definition, csrc/ir/guard_fields.def, which the extension exports as `_C.GUARD_FIELDS`: the
lowering and the guard writers build field text here, so a field's name lives in one place."""
from __future__ import annotations

from . import _C

SHAPE: dict[str, str] = dict(_C.GUARD_FIELDS)  # spelling -> "call" | "leaf" | "dim"


def field(name: str, leaf: int | None = None, dim: int | None = None) -> str:
    """Field `name` of the call, of leaf `leaf`, or of that leaf's dimension `dim`."""
    shape = SHAPE.get(name)
    where = "call" if leaf is None else "leaf" if dim is None else "dim"
    assert shape == where, f"trident bug: guard field {name!r} is read of a {shape}, not of a {where}"
    if leaf is None:
        return name
    return f"L{leaf}.{name}" if dim is None else f"L{leaf}.{name}[{dim}]"
