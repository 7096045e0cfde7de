"""Shared pytest configuration for the trident Python tests.

* Points ``TRIDENT_CACHE_DIR`` at a fresh per-session temporary directory.
  This happens at conftest import time, i.e. before any test module imports
  ``trident``, so the library never sees (or pollutes) a user cache.
* Makes ``corpus`` importable from the test modules.
* Seeds torch (and ``random``) before every test.
"""

import os
import random
import shutil
import sys
import tempfile
import warnings

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

if "trident" in sys.modules:  # e.g. imported by a plugin: the env var may come too late
    warnings.warn("trident was imported before TRIDENT_CACHE_DIR was set by conftest.py")
_SESSION_CACHE_DIR = tempfile.mkdtemp(prefix="trident-test-cache-")
os.environ["TRIDENT_CACHE_DIR"] = _SESSION_CACHE_DIR

import torch  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "dtype_variant: float64/bfloat16 re-runs of corpus cases (deselect with -m 'not dtype_variant')",
    )


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_SESSION_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def trident_cache_dir():
    """The per-session cache directory handed to trident."""
    return _SESSION_CACHE_DIR


@pytest.fixture(autouse=True)
def seed_torch():
    """Seed the global RNGs before every test (the corpus itself draws from
    explicit generators, this only guards incidental global RNG use)."""
    torch.manual_seed(0)
    random.seed(0)
    yield


@pytest.fixture(autouse=True)
def _restore_grad_mode():
    """A failing test must not leak a changed grad mode into the next one."""
    enabled = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(enabled)
