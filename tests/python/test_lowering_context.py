"""The lowering's rule modules use only what lowering.context.LoweringContext declares of the
lowering in progress (read from their source: every attribute they read or write on the lowerer
they are given, `lw` or `self.lw`), and lower._Lowerer provides all of it."""
import ast
import inspect
from pathlib import Path

import pytest

import trident
from trident.lowering import lower
from trident.lowering.context import LoweringContext

RULE_MODULES = ["builtin_lower", "builtin_rotary", "constant_fold", "data_values", "float_symbols",
                "lazy_views", "triton_lower"]
SOURCE = Path(trident.__file__).parent / "lowering"


def _declared() -> set[str]:
    names = set(getattr(LoweringContext, "__annotations__", {}))
    names |= {n for n, v in vars(LoweringContext).items() if callable(v) and not n.startswith("_")}
    return names


def _used(module: str) -> set[str]:
    tree = ast.parse((SOURCE / f"{module}.py").read_text())
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "lw":
            used.add(node.attr)
        elif isinstance(owner, ast.Attribute) and owner.attr == "lw" and \
                isinstance(owner.value, ast.Name) and owner.value.id == "self":
            used.add(node.attr)
    return used


@pytest.mark.parametrize("module", RULE_MODULES)
def test_a_rule_module_uses_only_the_declared_context(module):
    extra = _used(module) - _declared()
    assert not extra, f"{module}.py uses {sorted(extra)} of the lowerer; declare it in LoweringContext or do without"


def test_the_lowerer_provides_the_whole_context():
    init = inspect.getsource(lower._Lowerer.__init__)
    fields = {n for n in _declared() if f"self.{n} =" in init or f"self.{n}:" in init}
    methods = {n for n in _declared() if callable(getattr(lower._Lowerer, n, None))}
    assert _declared() == fields | methods, sorted(_declared() - fields - methods)


def test_every_call_node_has_a_rule_and_the_dispatcher_is_the_last():
    assert lower.RULES[-1].lower == lower._Lowerer.aten_call
    assert len({r.name for r in lower.RULES}) == len(lower.RULES)
