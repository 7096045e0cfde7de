"""Golden tests of the lowering, FX graph in, host IR out: each case of lowering_cases.py is
captured and lowered on the CPU, and its host IR must equal tests/golden/lowering/<case>.ir, where
dispatch key sets read `<keyset>`. After a deliberate change of the lowering, regenerate the files
with `TRIDENT_UPDATE_GOLDEN=1 pytest tests/python/test_lowering_golden.py` and review their diff.

The files hold what the lowering makes under one torch version (TORCH_VERSION beside them: CI's):
another version's export states the same guards in other words (torch 2.11 writes an int index's
bounds as one range), so under another torch the comparison is not made."""
import os
import re
from pathlib import Path

import pytest
import torch

import trident
from lowering_cases import cases

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "lowering"
CASES = cases()
UPDATE = os.environ.get("TRIDENT_UPDATE_GOLDEN") == "1"
TORCH = torch.__version__.split("+")[0]
if UPDATE:
    (GOLDEN / "TORCH_VERSION").write_text(TORCH + "\n")
if (GOLDEN / "TORCH_VERSION").read_text().strip() != TORCH:
    pytest.skip(f"the golden host IR was made under torch {(GOLDEN / 'TORCH_VERSION').read_text().strip()}, "
                f"this is {TORCH}", allow_module_level=True)


def _text(fn, args, options) -> str:
    low = trident.controller(trident.compile(fn, **options)).lower_call(*args)
    text = re.sub(r"keyset == -?\d+", "keyset == <keyset>", low.text)
    return re.sub(r'"(?:[^"]*/)?(lowering_cases\.py:\d+)', r'"\1', text)  # the file's name, not its path


@pytest.mark.parametrize("name, fn, args, options", CASES, ids=[c[0] for c in CASES])
def test_lowered_host_ir_matches_its_golden_file(name, fn, args, options):
    text = _text(fn, args, options)
    path = GOLDEN / f"{name}.ir"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"no {path}: generate it with TRIDENT_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name}: the lowering changed; see the diff against {path}"


def test_every_case_has_a_golden_file_and_no_file_is_stale():
    assert sorted(p.stem for p in GOLDEN.glob("*.ir")) == sorted(c[0] for c in CASES)
