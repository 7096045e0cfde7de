"""The disk cache loads only what it built, from a directory only this user can write.

Each corruption is made by this process to entries another process built, so that no object under
test is mapped here when it is damaged (truncating a loaded library in place would crash any
process, trident or not). Every case must give the right result, with one warning saying the entry
was rebuilt, and leave an entry that the next process loads as a plain cache hit.
"""
import json
import os
import stat
import subprocess
import sys
import warnings

import pytest
import torch

import trident
from trident import _C

# Function k of the entries: k additions, so that each is a program of different code (an object
# holds code only: `x * 2 + k` for every k would be one object, its constant in the text the runtime
# is handed with it). Shared, as source, by this file and the process that builds the entries.
_FN_TEXT = """
def fn_text(k):
    return "lambda x: " + "(" * k + "x * 2" + " + 1)" * k
"""
exec(_FN_TEXT)

_BUILD = _FN_TEXT + r"""
import json, sys, torch, trident
paths, loads = [], 0
for k in range(int(sys.argv[1])):
    f = trident.compile(eval(fn_text(k)))
    assert torch.equal(f(torch.ones(3)), torch.full((3,), 2.0 + k))
    paths.append(trident.controller(f).scm.paths()[1])
    loads += trident.counters(f)["module_cache_loads"]
assert len(set(paths)) == len(paths), paths
print(json.dumps([paths, loads]))
"""


def _build_entries(cache: str, n: int, loads: int | None = None) -> list[str]:
    """Paths of the modules of n functions built (or loaded) by another process; `loads`: how many of
    them it must have loaded from the cache."""
    env = dict(os.environ, TRIDENT_CACHE_DIR=cache)
    run = subprocess.run([sys.executable, "-c", _BUILD, str(n)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    paths, loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert loads is None or loaded == loads, (loaded, loads, run.stderr[-3000:])
    return paths


def _flip(path):
    data = bytearray(open(path, "rb").read())
    for off in range(64, len(data), 97):
        data[off] ^= 0x5A
    open(path, "wb").write(bytes(data))


def _truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


def _replace(path, make):
    os.remove(path)
    make(path)


_CORRUPTIONS = {
    "truncated": _truncate,
    "flipped bytes": _flip,
    "empty": lambda p: open(p, "wb").close(),
    "garbage": lambda p: open(p, "wb").write(b"\x7fELF not really" * 100),
    "a FIFO": lambda p: _replace(p, os.mkfifo),
    "a directory": lambda p: _replace(p, os.mkdir),
    "a symlink to a system library": lambda p: _replace(p, lambda q: os.symlink("/lib/x86_64-linux-gnu/libm.so.6", q)),
    "group-writable": lambda p: os.chmod(p, 0o666),
    "no record": lambda p: os.remove(p[:-3] + ".record"),
}


def test_every_damaged_cache_entry_is_rebuilt_with_one_warning_and_the_right_result(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    paths = _build_entries(cache, len(_CORRUPTIONS) + 2)
    # The object of function 1 under function 0's name: the other function's code, checksum and all.
    other_so, other_record = paths[len(_CORRUPTIONS) + 1], paths[len(_CORRUPTIONS) + 1][:-3] + ".record"
    swapped = paths[len(_CORRUPTIONS)]
    os.replace(other_so, swapped)
    os.replace(other_record, swapped[:-3] + ".record")
    cases = list(_CORRUPTIONS.items()) + [("another function's object and record", None)]
    for k, (name, damage) in enumerate(cases[:-1]):
        damage(paths[k])
    monkeypatch.setenv("TRIDENT_CACHE_DIR", cache)
    for k, (name, _) in enumerate(cases):
        fn = eval(fn_text(k))  # noqa: F821  (defined by exec(_FN_TEXT))
        fast = trident.compile(fn)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = fast(torch.ones(3))
        assert torch.equal(got, fn(torch.ones(3))), name
        said = [str(w.message) for w in caught if "was not loaded" in str(w.message)]
        assert len(said) == 1 and "rebuilt it" in said[0], (name, [str(w.message) for w in caught])
        assert trident.counters(fast)["module_cache_loads"] == 0, name
        assert stat.S_ISREG(os.lstat(paths[k]).st_mode), name
    # The rebuilt entries are plain hits for the next process.
    again = _build_entries(cache, len(cases), loads=len(cases))
    assert again == paths[:len(cases)]


def test_a_cache_entry_of_another_user_is_not_loaded(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("making a file of another user needs root (CI and the dev machines run as root)")
    cache = str(tmp_path / "cache")
    (path,) = _build_entries(cache, 1)
    os.chown(path, 65534, 65534)
    monkeypatch.setenv("TRIDENT_CACHE_DIR", cache)
    fast = trident.compile(eval(fn_text(0)))  # noqa: F821
    with pytest.warns(RuntimeWarning, match="owned by uid 65534"):
        assert torch.equal(fast(torch.ones(3)), torch.full((3,), 2.0))


@pytest.mark.parametrize("make, says", [
    (lambda d: (os.makedirs(d), os.chmod(d, 0o777)), "writable by group or others"),
    (lambda d: open(d, "w").close(), "not a directory"),
    (lambda d: (os.makedirs(d), os.chown(d, 65534, 65534)) if os.geteuid() == 0 else pytest.skip("needs root"),
     "owned by uid 65534"),
])
def test_an_untrusted_cache_directory_is_refused_and_the_function_still_runs(tmp_path, monkeypatch, make, says):
    shared = str(tmp_path / "shared")
    make(shared)
    monkeypatch.setenv("TRIDENT_CACHE_DIR", shared)
    fast = trident.compile(lambda x: x * 3 + 7)
    with pytest.warns(RuntimeWarning, match=says):
        assert torch.equal(fast(torch.ones(2)), torch.full((2,), 10.0))
    so = trident.controller(fast).scm.paths()[1]
    assert not so.startswith(shared), so
    private = os.path.dirname(os.path.dirname(so))
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700 and os.stat(private).st_uid == os.geteuid()
    if os.path.isdir(shared):
        assert not os.path.exists(os.path.join(shared, "modules")) or not os.listdir(os.path.join(shared, "modules"))


def test_cache_files_are_private_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(tmp_path / "c"))
    old = os.umask(0)
    try:
        fast = trident.compile(lambda x: x - 5)
        assert torch.equal(fast(torch.ones(2)), torch.full((2,), -4.0))
    finally:
        os.umask(old)
    modules = tmp_path / "c" / "modules"
    for d in (tmp_path / "c", modules):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    names = os.listdir(modules)
    assert any(n.endswith(".so") for n in names) and any(n.endswith(".record") for n in names), names
    for n in names:
        assert stat.S_IMODE(os.stat(modules / n).st_mode) & 0o077 == 0, (n, oct(os.stat(modules / n).st_mode))


def test_without_home_the_default_is_the_users_own_home_never_a_shared_tmp(monkeypatch):
    import pwd
    for name in ("TRIDENT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    assert _C.cache_dir() == pwd.getpwuid(os.geteuid()).pw_dir + "/.cache/trident"


def test_a_quote_in_the_cache_path_runs_no_shell_command(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    cache = tmp_path / f"c'; touch {marker}; echo '$(touch {marker})`touch {marker}`"
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(cache))
    fast = trident.compile(lambda x: x + 11)
    assert torch.equal(fast(torch.ones(1)), torch.full((1,), 12.0))
    assert not marker.exists()
    assert any(n.endswith(".so") for n in os.listdir(cache / "modules"))


def test_a_compiler_given_as_program_and_arguments_is_started_without_a_shell(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TRIDENT_CC", "cc -DTRIDENT_TEST_FLAG=1")
    fast = trident.compile(lambda x: x + 12)
    assert torch.equal(fast(torch.ones(1)), torch.full((1,), 13.0))
