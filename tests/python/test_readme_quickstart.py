"""The README's quickstart runs as written and prints what the README says it prints; the README's
block and examples/quickstart.py are the same code."""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quickstart_block() -> str:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]


def test_examples_quickstart_is_the_readme_block():
    example = (ROOT / "examples" / "quickstart.py").read_text()
    assert example.split('"""\n', 2)[-1] == quickstart_block()


def test_the_quickstart_prints_what_the_readme_says():
    code = quickstart_block()
    expected = re.search(r"# prints: (.+)$", code, re.M).group(1).strip()
    env = dict(os.environ, TRIDENT_CACHE_DIR=tempfile.mkdtemp())
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == expected
