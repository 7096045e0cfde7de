"""Runs the C++ unit tests (tests/cpp: the cold guard evaluator's Python arithmetic and no_overlap,
expression printing, the IR text of every guard field, the decision program's guard tables,
liveness, graph rebinding's word rules), built with the extension by CMakeLists.txt into the build
directory of `pip install --no-build-isolation -e .`."""
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cpp_unit_tests_pass():
    binaries = sorted(ROOT.glob("build/*/trident_cpp_tests"), key=lambda p: p.stat().st_mtime)
    assert binaries, ("no build/*/trident_cpp_tests: build the checkout with "
                      "`pip install --no-build-isolation -e .`, which builds them with the extension")
    r = subprocess.run([str(binaries[-1])], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1].endswith(" 0 failed checks") and int(lines[-1].split()[0]) >= 14, lines[-1]
    assert all(line.startswith("ok ") for line in lines[:-1]), r.stdout
