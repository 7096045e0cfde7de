"""Symbolic shapes: from the ShapeEnv of a dynamic capture to guard expressions over call fields and
to native integer computations in the spec body.

Each free symbol of the trace is bound to the first call field that defines it (a size of a tensor
argument, or a Python int argument). Guards are the ShapeEnv's guards and value ranges rewritten
over those fields; body integers (view sizes, kernel arguments, grids) are emitted as `$N`
instructions computed from the same fields. Anything that cannot be expressed raises
UnsupportedError, and the caller falls back to a static specialization.
"""
from __future__ import annotations

import sympy

from . import hir
from ..errors import UnsupportedError


def _fn_name(e) -> str:
    return type(e).__name__


class Symbols:
    def __init__(self):
        self.field: dict[sympy.Symbol, str] = {}   # symbol -> "L1.size[0]" / "L2.ival"
        self.sym: dict[sympy.Symbol, str] = {}     # symbol -> "$k" once computed in the body
        self.shape_env = None

    def bind(self, symbol, field: str, define_line: str | None, value: str | None):
        if symbol in self.field:
            return False
        self.field[symbol] = field
        if value is not None:
            self.sym[symbol] = value
        return True

    # -- guards -------------------------------------------------------------------------------
    def guard_text(self, e) -> str:
        """A sympy boolean/integer expression over bound symbols, in host IR guard syntax."""
        if isinstance(e, sympy.Symbol):
            if e not in self.field:
                raise UnsupportedError(f"symbol {e} is not bound to any argument")
            return self.field[e]
        if e is sympy.true:
            return "1"
        if e is sympy.false:
            return "0"
        if isinstance(e, sympy.Integer):
            v = int(e)
            return str(v) if v >= 0 else f"(-{-v})"
        return self._compound(e, self.guard_text)

    def _compound(self, e, rec) -> str:
        name = _fn_name(e)
        args = e.args
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(rec(a) for a in args) + ")"
        if isinstance(e, sympy.Mul):
            if any(isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer) for a in args):
                raise UnsupportedError(f"rational coefficient in {e}")
            return "(" + " * ".join(rec(a) for a in args) + ")"
        if isinstance(e, sympy.Pow) and isinstance(args[1], sympy.Integer) and int(args[1]) >= 0:
            return "(" + " * ".join([rec(args[0])] * int(args[1])) + ")" if int(args[1]) else "1"
        binary = {"FloorDiv": "//", "PythonMod": "%", "Mod": "%", "Equality": "==", "Unequality": "!=",
                  "StrictLessThan": "<", "LessThan": "<=", "StrictGreaterThan": ">", "GreaterThan": ">="}
        if name in binary and len(args) == 2:
            return f"({rec(args[0])} {binary[name]} {rec(args[1])})"
        if name in ("And", "Or"):
            return "(" + f" {name.lower()} ".join(rec(a) for a in args) + ")"
        if name == "Not":
            return f"(not {rec(args[0])})"
        if name in ("Max", "Min"):
            out = rec(args[0])
            for a in args[1:]:
                out = f"{name.lower()}({out}, {rec(a)})"
            return out
        raise UnsupportedError(f"symbolic expression {e} ({name}) is not supported in guards")

    # -- body ---------------------------------------------------------------------------------
    def emit(self, e, lines: list[str], new_sym) -> str:
        """A `$k` (or an int literal) computing sympy integer expression `e` natively."""
        if isinstance(e, sympy.Integer):
            return str(int(e))
        if isinstance(e, sympy.Symbol):
            if e not in self.sym:
                raise UnsupportedError(
                    f"symbol {e} has no value in the program: a value the trace derived that neither an "
                    "argument nor a result of the program defines; torch.compile(fn, backend=\"trident\") "
                    "breaks the graph there")
            return self.sym[e]
        key = e
        if key in self.sym:
            return self.sym[key]
        if e is sympy.true or e is sympy.false:
            return "1" if e is sympy.true else "0"
        name = _fn_name(e)
        relations = {"Equality": "eq", "Unequality": "ne", "StrictLessThan": "lt", "LessThan": "le",
                     "StrictGreaterThan": "gt", "GreaterThan": "ge"}
        if name in relations or name in ("And", "Or", "Not"):
            # 1 or 0 (a data-dependent value's runtime assertion, data_values.py)
            if name == "Not":
                acc = self._emit_relation("eq", self.emit(e.args[0], lines, new_sym), "0", lines, new_sym)
            elif name in relations:
                acc = self._emit_relation(relations[name], self.emit(e.args[0], lines, new_sym),
                                          self.emit(e.args[1], lines, new_sym), lines, new_sym)
            else:
                parts = [self._emit_relation("ne", self.emit(a, lines, new_sym), "0", lines, new_sym) for a in e.args]
                acc = parts[0]
                for p in parts[1:]:
                    acc = self._emit_relation("min" if name == "And" else "max", acc, p, lines, new_sym)
            self.sym[key] = acc
            return acc
        ops = {"FloorDiv": "floordiv", "PythonMod": "mod", "Mod": "mod", "Max": "max", "Min": "min",
               "CeilDiv": "ceildiv"}
        if isinstance(e, (sympy.Add, sympy.Mul)) or name in ops:
            if isinstance(e, sympy.Mul) and any(isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer)
                                                for a in e.args):
                raise UnsupportedError(f"rational coefficient in {e}")
            op = "add" if isinstance(e, sympy.Add) else "mul" if isinstance(e, sympy.Mul) else ops[name]
            acc = self.emit(e.args[0], lines, new_sym)
            for a in e.args[1:]:
                rhs = self.emit(a, lines, new_sym)
                s = new_sym()
                lines.append(hir.sym(s, op, acc, rhs))
                acc = s
            self.sym[key] = acc
            return acc
        if isinstance(e, sympy.Pow) and isinstance(e.args[1], sympy.Integer) and int(e.args[1]) >= 1:
            base = self.emit(e.args[0], lines, new_sym)
            acc = base
            for _ in range(int(e.args[1]) - 1):
                s = new_sym()
                lines.append(hir.sym(s, "mul", acc, base))
                acc = s
            self.sym[key] = acc
            return acc
        raise UnsupportedError(f"symbolic expression {e} ({name}) cannot be computed natively")

    @staticmethod
    def _emit_relation(op: str, a: str, b: str, lines: list[str], new_sym) -> str:
        s = new_sym()
        lines.append(hir.sym(s, op, a, b))
        return s

    def guards(self) -> list[str]:
        """The ShapeEnv's guards and ranges over bound symbols. Symbols the trace specialized to a
        constant are already fixed by the static guards of the field they came from."""
        env = self.shape_env
        if env is None:
            return []
        out = []
        for g in env.guards:
            expr = env.replace(g.expr) if hasattr(env, "replace") else g.expr
            if expr is sympy.true:
                continue
            free = expr.free_symbols
            if not free <= set(self.field):
                unbound = free - set(self.field)
                if all(s in env.replacements and env.replacements[s].is_number for s in unbound):
                    expr = expr.xreplace({s: env.replacements[s] for s in unbound})
                    if expr is sympy.true:
                        continue
                else:
                    raise UnsupportedError(f"guard {g.expr} depends on symbols {unbound} that no argument defines")
            out.append(hir.guard_expr(self.guard_text(expr)))
        for s, field in self.field.items():
            vr = env.var_to_range.get(s)
            if vr is None:
                continue
            lo, hi = vr.lower, vr.upper
            # int_oo / -int_oo (unbounded) are not sympy Integers
            if isinstance(lo, sympy.Integer):
                out.append(hir.guard_expr(f"{field} >= {int(lo)}"))
            if isinstance(hi, sympy.Integer):
                out.append(hir.guard_expr(f"{field} <= {int(hi)}"))
        return list(dict.fromkeys(out))
