"""Adding a specialization builds only its own object and a new selector
(python/bindings/scm_object.cpp: add_spec; csrc/runtime/module/loaded_spec.h): the specializations already
there keep their loaded objects and the state of their call sites, whatever their number."""
import torch

import trident


def scale(x, n: int):
    return x * n + 1


def test_64_specializations_each_built_once_and_kept_loaded():
    fast = trident.compile(scale, dynamic=False)
    scm = trident.controller(fast).scm
    x = torch.ones(3)
    compiled_c = []
    for n in range(64):
        before = trident.counters(fast)["compile_seconds"]
        for _ in range(2):  # a miss that compiles, then a hit
            assert torch.equal(fast(x, n), scale(x, n))
        c = trident.counters(fast)
        compiled_c.append(c["compile_seconds"] > before)
        assert (c["specializations"], c["spec_objects"]) == (n + 1, n + 1), c
        # every earlier spec still counts its two runs: its object and state were reused, not rebuilt
        assert scm.spec_runs() == [2] * (n + 1)
    c = trident.counters(fast)
    assert c["hits"] == 64 and c["compiles"] == 64
    # The specs differ only in n's value, which the selector looks up in a table (decision.h: pick
    # tables): from the third on, the selector's code and the spec's are ones the disk cache holds.
    assert not any(compiled_c[2:]), compiled_c
    for key in ("capture_seconds", "lowering_seconds", "compile_seconds", "load_seconds"):
        assert c[key] > 0.0, key


def stacked_sum(x, y, n: int):
    buf = torch.empty(4, x.shape[1])  # internal: a buffer the module keeps from call to call
    buf[:2] = x
    buf[2:] = y
    return buf.sum(0) + n


def test_kept_buffers_survive_an_added_specialization():
    """The module's pool of kept buffers is shared by the module that adds a specialization: the
    first spec's buffer is still kept, and the second spec's kind-equal site takes it."""
    fast = trident.compile(stacked_sum, dynamic=False)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    for _ in range(3):
        torch.testing.assert_close(fast(x, y, 0), stacked_sum(x, y, 0), rtol=0, atol=0)
    assert trident.counters(fast)["reused_buffers"] == 1
    for _ in range(3):
        torch.testing.assert_close(fast(x, y, 1), stacked_sum(x, y, 1), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["reused_buffers"], c["escaped_buffers"]) == (2, 1, 0), c


def _selector_compiler(tmp_path, monkeypatch, selector_does):
    """TRIDENT_CC that does `selector_does` (shell) before compiling a decision program, and compiles
    every other object at once; a fresh cache, so every object is compiled."""
    cc = tmp_path / "cc.sh"
    cc.write_text("#!/bin/sh\nfor a; do src=$a; done\n"
                  f"if grep -q 'The decision program' \"$src\"; then {selector_does}; fi\nexec cc \"$@\"\n")
    cc.chmod(0o755)
    monkeypatch.setenv("TRIDENT_CC", str(cc))
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(tmp_path / "cache"))


def test_calls_are_served_by_interpreted_guards_while_the_selector_compiles(tmp_path, monkeypatch):
    """A miss waits for its spec's object only (python/bindings/selector_builds.h): a selector whose
    compile takes long is installed after, and until then the same specs are selected by their
    guards interpreted, with the same results."""
    gate = tmp_path / "gate"
    _selector_compiler(tmp_path, monkeypatch, f"while [ ! -e '{gate}' ]; do sleep 0.02; done")
    fast = trident.compile(scale, dynamic=False)
    scm = trident.controller(fast).scm
    x = torch.ones(3)
    # three misses, then a hit on each: no selector has compiled; every call after the first selects
    # by interpreted guards (interpreted_selects counts calls, not the selection after a miss)
    for n in (1, 2, 3, 2, 1, 3):
        assert torch.equal(fast(x, n), scale(x, n))
    assert not gate.exists()
    gate.write_text("")
    c = trident.counters(fast)  # waits for the last selector and installs it
    assert (c["specializations"], c["hits"], c["interpreted_selects"]) == (3, 3, 5), c
    assert c["background_compile_seconds"] > 0.0
    for n in (3, 1, 2, 4):
        assert torch.equal(fast(x, n), scale(x, n))
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["interpreted_selects"]) == (4, 6, 5), c
    assert open(scm.selector_paths()[0]).read().startswith("/* The decision program")


def test_a_selector_that_does_not_compile_leaves_the_guards_interpreted(tmp_path, monkeypatch):
    import warnings
    _selector_compiler(tmp_path, monkeypatch, "echo 'no selector today' >&2; exit 1")
    fast = trident.compile(scale, dynamic=False)
    x = torch.ones(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (1, 2, 1, 2):
            assert torch.equal(fast(x, n), scale(x, n))
        c = trident.counters(fast)
    said = [str(w.message) for w in caught if "decision program did not compile" in str(w.message)]
    assert said and "no selector today" in said[0], [str(w.message) for w in caught]
    assert (c["specializations"], c["hits"], c["interpreted_selects"]) == (2, 2, 3), c


def test_a_forked_child_builds_again_the_selector_its_parent_was_compiling(tmp_path, monkeypatch):
    """A fork does not copy the parent's build thread: the child starts its own build of that
    selector (SelectorBuild::orphaned) and selects by guards until it is done."""
    import os
    import time
    gate = tmp_path / "gate"
    _selector_compiler(tmp_path, monkeypatch, f"while [ ! -e '{gate}' ]; do sleep 0.02; done")
    fast = trident.compile(scale, dynamic=False)
    x = torch.ones(3)
    for n in (1, 2):
        assert torch.equal(fast(x, n), scale(x, n))
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        code = 1
        try:
            same = all(torch.equal(fast(x, n), scale(x, n)) for n in (2, 1))
            c = trident.counters(fast)  # waits for the child's own build, released by the gate
            code = 0 if same and (c["hits"], c["specializations"]) == (2, 2) and c["background_compile_seconds"] > 0 else 2
        finally:
            os._exit(code)
    gate.write_text("")
    deadline = time.monotonic() + 120
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child did not finish")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert trident.counters(fast)["specializations"] == 2
