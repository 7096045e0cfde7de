"""Golden tests of the native core, text in, text out (MLIR-style).

Each file in tests/golden/ is host IR with directives in comments:
    # RUN: <print|verify|liveness|select|emit_c>
    # CHECK: <text that must appear in the output, after the previous CHECK's match>
    # CHECK-NOT: <text that must not appear anywhere in the output>
    # ERROR: <text the raised ValueError must contain>   (instead of CHECK lines)
"""
import pathlib

import pytest

from trident import _C

GOLDEN = sorted((pathlib.Path(__file__).parent.parent / "golden").glob("*.ir"))


def _run(mode: str, text: str) -> str:
    if mode == "print":
        return _C.ir_print(text)
    if mode == "verify":
        return _C.ir_verify(text)
    return _C.ir_pass(mode, text)


def _directives(text: str, name: str) -> list[str]:
    return [line.split(f"# {name}:", 1)[1].strip() for line in text.splitlines() if f"# {name}:" in line]


def test_golden_files_exist():
    assert len(GOLDEN) >= 6


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden(path):
    text = path.read_text()
    (mode,) = _directives(text, "RUN")
    errors = _directives(text, "ERROR")
    if errors:
        with pytest.raises(ValueError) as info:
            _run(mode, text)
        for e in errors:
            assert e in str(info.value), f"{path.name}: error {str(info.value)!r} lacks {e!r}"
        return
    out = _run(mode, text)
    pos = 0
    for check in _directives(text, "CHECK"):
        found = out.find(check, pos)
        assert found >= 0, f"{path.name}: CHECK {check!r} not found after offset {pos} in:\n{out}"
        pos = found + len(check)
    for bad in _directives(text, "CHECK-NOT"):
        assert bad not in out, f"{path.name}: CHECK-NOT {bad!r} found in:\n{out}"
    if mode == "print":  # the canonical form is a fixed point
        assert _C.ir_print(out) == out


def test_print_parse_round_trip_of_every_operand_kind():
    text = ('spec 0 structure "T" {\n  %0 = arg 0\n  return (%0, [1, -2, 0.5, 1e-07, inf, -inf, nan, true, '
            'false, none, "s\\"q", dtype(6), layout(0), memfmt(1), device(1:0)], {"k": %0}, (3,))\n}\n')
    assert _C.ir_print(text) == text
