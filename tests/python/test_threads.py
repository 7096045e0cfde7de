"""Threads: a compiled function's native run and its C compile release the GIL, and a run keeps the
state it started with alive whatever other threads do to the module meanwhile."""
import os
import subprocess
import sys
import threading
import time

import torch

import trident

_RACE = r"""
import threading, torch, trident

@torch.library.custom_op("trident_threads::slow_id", mutates_args=())
def slow_id(x: torch.Tensor) -> torch.Tensor:
    import time
    time.sleep(0.0005)  # releases the GIL inside the native run
    return x.clone()

@slow_id.register_fake
def _(x):
    return torch.empty_like(x)

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(256))
    def forward(self, x):
        return slow_id(x) * self.w + self.w

m = M().requires_grad_(False)
fast = trident.compile(m)
fast(torch.ones(256))
stop, errors = threading.Event(), []

def call():
    while not stop.is_set():
        try:
            # Values are not checked: `.data = ...` racing a running op is a data race in eager too.
            fast(torch.ones(256))
        except trident.TridentError:
            # A capture racing a reassignment can fail cleanly (export reads the module meanwhile);
            # what must never happen is a crash or any other error.
            pass
        except RuntimeError as e:
            # torch's own race: while one thread exports, torch.compiler.is_exporting() is true in
            # every thread, and each function wrapped by torch._dynamo.disable (the custom op's
            # machinery) enters fx.traceback.annotate, which adds and deletes a key of one
            # process-wide dict: two threads inside it at once raise KeyError('custom'). Inside a
            # native run trident reports it as that op's error. (trident's own miss callback does
            # not enter it: compiled._outside_dynamo.)
            if "trident_threads::slow_id" not in str(e):
                errors.append(repr(e))
        except Exception as e:
            errors.append(repr(e))

def mutate():
    import time
    k = 0
    while not stop.is_set():
        k += 1
        if k % 50:  # a new snapshot of the same parameter
            m.w.data = torch.full((256,), float(1 + k % 3))
        else:  # a new parameter: every specialization is dropped and captured again
            m.w = torch.nn.Parameter(torch.full((256,), float(1 + k % 3)), requires_grad=False)
        time.sleep(0.001)

threads = [threading.Thread(target=call) for _ in range(4)] + [threading.Thread(target=mutate)]
for t in threads: t.start()
import time; time.sleep(4.0)
stop.set()
for t in threads: t.join()
print("errors:", errors[:5])
assert not errors, errors[:5]
assert trident.counters(fast)["hits"] > 50, trident.counters(fast)
print("ok", trident.counters(fast)["hits"])
"""


def test_threads_calling_a_module_whose_state_another_thread_replaces_never_crash():
    """Four callers of a module whose forward lets other threads in (a Python op), while a fifth
    reassigns its parameter: each run holds its own reference to the state it started with."""
    run = subprocess.run([sys.executable, "-c", _RACE], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ))
    assert run.returncode == 0, (run.returncode, run.stdout[-3000:], run.stderr[-1500:])
    assert run.stdout.strip().splitlines()[-1].startswith("ok"), run.stdout[-3000:]


def test_other_threads_run_while_a_compiled_function_runs():
    """A native run of ~0.1 s, once three runs in a row have shown the spec is long: a thread
    counting meanwhile is never stopped for most of it, as it is when the run holds the GIL."""
    torch.set_num_threads(1)
    try:
        a = torch.randn(640, 640)
        fn = lambda x: ((x @ x) @ x) @ x  # noqa: E731
        fast = trident.compile(fn)
        for _ in range(3):  # the compile's run, then runs 1 and 2 (timed)
            fast(a)
        t0 = time.perf_counter()
        fast(a)  # run 3, the third timed one in a row: later runs release the GIL
        one_run = time.perf_counter() - t0
        stamps, stop = [], threading.Event()

        def count():
            while not stop.is_set():
                stamps.append(time.perf_counter())
                time.sleep(0.001)

        t = threading.Thread(target=count)
        t.start()
        while not stamps:
            time.sleep(0.001)
        start = time.perf_counter()
        fast(a)
        end = time.perf_counter()
        stop.set()
        t.join()
    finally:
        torch.set_num_threads(os.cpu_count() or 1)
    during = [s for s in stamps if start <= s <= end]
    gaps = [b - a for a, b in zip([start] + during, during + [end])]
    assert max(gaps) < max(0.5 * (end - start), 0.05), (max(gaps), end - start, one_run)


def test_other_threads_run_while_a_specialization_compiles(tmp_path, monkeypatch):
    """The C compiler waits for a file that only another Python thread writes: with the GIL held
    during the compile, that thread could not run and the compile would time out and fail."""
    started, flag = tmp_path / "started", tmp_path / "flag"
    cc = tmp_path / "cc.sh"
    cc.write_text(f"#!/bin/sh\ntouch '{started}'\n"
                  f"for i in $(seq 200); do [ -e '{flag}' ] && exec cc \"$@\"; sleep 0.05; done\n"
                  "echo 'the other thread never ran' >&2; exit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("TRIDENT_CC", str(cc))
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(tmp_path / "cache"))
    done = threading.Event()

    def writer():  # needs the GIL for every poll, so it runs only if the compile let go of it
        while not started.exists() and not done.is_set():
            time.sleep(0.01)
        flag.write_text("")

    t = threading.Thread(target=writer)
    t.start()
    try:
        fast = trident.compile(lambda x: x * 5 - 2)
        assert torch.equal(fast(torch.ones(2)), torch.full((2,), 3.0))
    finally:
        done.set()
        t.join()
