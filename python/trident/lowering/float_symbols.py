"""Python floats as run-time values of a spec: `$fN` symbols computed natively (docs/host_ir.md).

A float argument, or one inside a tuple, list, dict, namedtuple or object argument (not inside a
ModelOutput; not under dynamic=False), reaches export as a 0-dim float64 tensor that the capture
wrapper turns back into a Python float with `.item()` (compiled.py: _leaf_paths, _items_at), so
the trace holds it as a SymFloat instead of a constant. Here that `.item()`
becomes `$fN = float K` (leaf K's value), the float arithmetic the trace recorded on it (Dynamo's
`operator.mul`, `torch._sym_sqrt`, `torch.sym_float` nodes) becomes `fadd`/`fmul`/... in the order
the graph has them (the same operations eager performs, so the same doubles), and an ATen Scalar
or Triton float parameter that reads one takes the call's value.

What is not expressible raises UnsupportedError and the caller captures the float as a constant
again, guarded by value, saying why once (compiled.py: "cannot be run-time values").
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

from . import hir
from ..errors import UnsupportedError
from .guard_text import float_text


class FloatInput:
    """A float leaf's placeholder (the 0-dim tensor the wrapper passes): only `.item()` reads it."""

    def __init__(self, leaf: int, value: float):
        self.leaf, self.value = leaf, value


class FloatSym:
    """A `$fN` of the body (or a float literal), with the value it has in this call (Triton configs and heuristics read
    it; the program itself never bakes it in)."""

    def __init__(self, text: str, value: float):
        self.text, self.value = text, value


# Traced marker for a float leaf in _Lowerer.fakes: its value is not guarded.
RUNTIME = object()

_ITEM_OPS = {torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default}

# FX target -> (IR operator, Python function computing this call's value)
_BINARY = {operator.add: ("fadd", operator.add), operator.sub: ("fsub", operator.sub),
           operator.mul: ("fmul", operator.mul), operator.truediv: ("fdiv", operator.truediv),
           operator.pow: ("fpow", operator.pow)}
_UNARY = {operator.neg: ("fneg", operator.neg), torch._sym_sqrt: ("fsqrt", math.sqrt),
          math.sqrt: ("fsqrt", math.sqrt), torch.sym_float: (None, float)}


def is_item_of_float(lw, node: fx.Node) -> bool:
    return (node.target in _ITEM_OPS and len(node.args) == 1 and isinstance(node.args[0], fx.Node)
            and isinstance(lw.env.get(node.args[0]), FloatInput))


def input_operand(lw, src: FloatInput) -> str:
    """A float leaf's placeholder used as a value itself: the wrapper returns the arguments as they
    are after the call (compiled._function_module), which hold the 0-dim tensor where the float
    was, so the post-call state of a tuple or namedtuple holding a float names it. It is the leaf's
    `$fN`, made here where no `.item()` of it made one, so the output tree finds the float
    unchanged."""
    v = lw.leaf_operand.get(src.leaf)
    if v is None:
        v = lw.new_sym(float_=True)
        lw.lines.append(hir.sym(v, "float", str(src.leaf)))
        lw.leaf_operand[src.leaf] = v
    return v


def lower(lw, node: fx.Node) -> bool:
    """Lowers `node` if it computes a run-time float: True when done, False when it is not a float
    node this module handles (the caller decides what that means)."""
    if is_item_of_float(lw, node):
        # one `$fN` per leaf, however many `.item()`s the trace has of it (a float the function set
        # back into a list it was given is read again for the state after the call): the output
        # tree then finds that float unchanged and writes nothing back
        src = lw.env[node.args[0]]
        lw.env[node] = FloatSym(input_operand(lw, src), src.value)
        return True
    if not isinstance(node.meta.get("val"), torch.SymFloat) or node.kwargs:
        return False
    if node.target in _BINARY and len(node.args) == 2:
        name, fn = _BINARY[node.target]
        a, b = (_float_operand(lw, node, x) for x in node.args)
    elif node.target in _UNARY and len(node.args) == 1:
        name, fn = _UNARY[node.target]
        if name is None:  # sym_float: its operand as a float (itof of a symbolic int)
            lw.env[node] = FloatSym(*_float_operand(lw, node, node.args[0]))
            return True
        a, b = _float_operand(lw, node, node.args[0]), None
    else:
        return False
    try:
        value = fn(a[1]) if b is None else fn(a[1], b[1])
    except (ArithmeticError, ValueError) as e:
        # This call's own values raise in eager too (0.0 as a divisor): the trace is wrong for it.
        raise UnsupportedError(f"float arithmetic {node.format_node()} raises for this call's values ({e})") from e
    if isinstance(value, complex):
        raise UnsupportedError(f"float arithmetic {node.format_node()} has a complex value for this call")
    v = lw.new_sym(float_=True)
    lw.lines.append(hir.sym(v, name, a[0], None if b is None else b[0]))
    lw.env[node] = FloatSym(v, float(value))
    return True


def _float_operand(lw, node: fx.Node, x) -> tuple[str, float]:
    """(operand text, this call's value) of a float operator's input: a `$fN`, a literal, or an int
    (symbolic ints convert with itof, as Python converts them)."""
    if isinstance(x, fx.Node):
        env = lw.env.get(x)
        if isinstance(env, FloatSym):
            return env.text, env.value
        val = x.meta.get("val")
        if isinstance(val, torch.SymInt) and not val.node.expr.is_number:
            v = lw.new_sym(float_=True)
            lw.lines.append(hir.sym(v, "itof", lw.sym_operand(val)))
            return v, float(lw.hint(val))
        x = val
    if isinstance(x, torch.SymInt):
        x = int(x.node.expr)
    if isinstance(x, (bool, int, float)):
        return float_text(float(x)), float(x)
    raise UnsupportedError(f"float arithmetic {node.format_node()} reads {type(x).__name__}, which is not a "
                           "Python number or a run-time float")
