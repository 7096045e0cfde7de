"""The extension records the torch it was built against, and importing trident with another torch
raises a clear ImportError that says how to rebuild, instead of an undefined symbol or a crash."""
import subprocess
import sys

import torch


def test_the_extension_knows_the_torch_it_was_built_against():
    from trident import _build_info
    assert _build_info.TORCH_VERSION == torch.__version__


def test_importing_with_another_torch_says_to_rebuild():
    code = "import torch; torch.__version__ = '0.0.1'; import trident"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: trident's extension was built against torch " + torch.__version__), last
    assert "but torch 0.0.1 is installed" in last and "pip install --no-build-isolation ." in last
