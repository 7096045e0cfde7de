"""The native object table (python/bindings/arg_objects.cpp) as seen from Python: the numbers this
process gave the objects that host IR names by number (`pyref(N)`, `object(N)`, a structure's
`<N{...}>`, `c<N>` and `e<N>`), and the objects behind them. Every number goes through here, so a saved
specialization can name its objects in a form another process resolves (artifacts.py)."""
from __future__ import annotations

from . import _C

_by_number: dict[int, object] = {}


def intern(obj) -> int:
    """obj's number in the table (pyref(N), object(N)); the table keeps obj alive."""
    n = _C.intern(obj)
    _by_number[n] = obj
    return n


def register_class(cls: type) -> int:
    """cls's number, its instances flattened by their attributes (a structure's <N{...}>)."""
    n = _C.register_object_class(cls)
    _by_number[n] = cls
    return n


def object_of(n: int):
    """The object numbered n in this process, also one the native flattener numbered itself (a
    structure's class or enum member constant, c<N> and e<N>); KeyError when none."""
    if n in _by_number:
        return _by_number[n]
    return _C.interned(n)
