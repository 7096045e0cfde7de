"""Timing helpers: host time per call, time per step of a sequence, the device floor (CUDA-graph
replay of one eager step), and the native floor (C++ `cuLaunchKernel` of an empty kernel).

Host time per call is wall time over a loop of calls with a device sync every `sync_every` calls,
so it is what a caller sees when the host cannot run ahead of the GPU by more than that many calls.
Every figure is the median of several repeats, taken after a warm-up.
"""
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

NATIVE_SRC = Path(__file__).resolve().with_name("native_floor.cu")


def timing_cpu():
    """The one CPU every timed loop runs on (the last this process may use), in every worker and in
    the native floor: host costs measured on different cores of a VM differed by up to 30% between
    processes (benchmarks/NOTES.md), so all modes are timed on the same one."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


@contextlib.contextmanager
def pinned():
    """Run the block on timing_cpu() alone, then restore the previous CPU set (compile workers and
    other untimed work keep every CPU)."""
    cpu = timing_cpu()
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_us_per_call(fn, args=(), calls=1000, repeats=5, warmup=50, sync_every=100):
    """Median over `repeats` of the wall time per call (µs) of `calls` calls to fn(*args)."""
    with pinned():
        for _ in range(warmup):
            fn(*args)
        sync()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for i in range(1, calls + 1):
                fn(*args)
                if i % sync_every == 0:
                    sync()
            sync()
            samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples), samples


def device_kernels_per_call(fn, args=(), calls=10):
    """Device kernels one call launches (CUDA kernel records of the profiler over `calls` warm calls,
    divided by them), what the per-call floor ratio is taken per; None where it cannot be counted (no
    CUDA, or a profiler that fails alongside the mode)."""
    if not torch.cuda.is_available():
        return None
    from torch.profiler import ProfilerActivity, profile
    try:
        fn(*args)
        sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*args)
            sync()
    except Exception:  # noqa: BLE001  (a count is an annotation; the timing stands without it)
        return None
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    return round(len(kernels) / calls, 2)


def sequence_us_per_step(run_sequence, n_steps, reset, repeats=5):
    """Median µs per step of run_sequence() (n_steps calls, synced at the end); reset() restores the
    initial state before each repeat and is not timed."""
    samples = []
    with pinned():
        for _ in range(repeats):
            reset()
            sync()
            t0 = time.perf_counter()
            run_sequence()
            sync()
            samples.append((time.perf_counter() - t0) / n_steps * 1e6)
    return statistics.median(samples), samples


def graph_replay_us(step, warmup=3, replays=100, repeats=5):
    """Device floor: capture step() in a CUDA graph, then time back-to-back replays with CUDA events
    (µs per replay, median of repeats). step() must already have run once (kernels compiled)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(warmup):
        graph.replay()
    samples = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(repeats):
        torch.cuda.synchronize()
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / replays)
    del graph
    return statistics.median(samples), samples


def find_nvcc():
    for cand in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "nvcc"),
                 "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _cuda_stub_dirs(nvcc):
    roots = {os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", os.path.dirname(os.path.dirname(nvcc))}
    dirs = [os.path.join(r, sub) for r in roots if r
            for sub in ("lib64/stubs", "targets/x86_64-linux/lib/stubs", "targets/sbsa-linux/lib/stubs")]
    return [d for d in dirs if os.path.isdir(d)]


def build_native_floor(out_dir, timeout=120):
    """Build native_floor.cu with nvcc into out_dir. Returns (path of the executable, None), or
    (None, the reason it could not be built)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None, "nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda)"
    exe = os.path.join(out_dir, "native_floor")
    base = [nvcc, "-O2", "-arch=sm_90", str(NATIVE_SRC), "-o", exe]
    # If the linker finds no libcuda.so, link against the toolkit's stub (the driver's libcuda.so.1
    # is what loads at run time).
    stubs = [f"-L{d}" for d in _cuda_stub_dirs(nvcc)]
    log = ""
    try:
        for cmd in [base + ["-lcuda"]] + ([base + stubs + ["-lcuda"]] if stubs else []):
            build = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            log += f"$ {' '.join(cmd)}\n{build.stdout}{build.stderr}"
            if build.returncode == 0:
                return exe, None
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{type(e).__name__}: {e}"
    return None, "nvcc failed: " + log[-2000:]


def run_native_floor(exe, launches=20000, repeats=7, timeout=120, abi="plain"):
    """Run the built native floor on timing_cpu(). Returns a dict with status "ok" and us (µs per
    cuLaunchKernel of an empty kernel; with abi="triton", per cuLaunchKernelEx of an empty kernel
    taking add_one's Triton parameters, native_floor.cu), or status "unavailable" and the reason."""
    cpu = timing_cpu()
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    try:
        run = subprocess.run([exe, str(launches), str(repeats), abi], capture_output=True, text=True,
                             timeout=timeout, preexec_fn=pin)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"status": "unavailable", "message": f"{type(e).__name__}: {e}"}
    if run.returncode != 0:
        return {"status": "unavailable", "message": f"native_floor exited {run.returncode}: "
                                                    f"{(run.stdout + run.stderr)[-2000:]}"}
    try:
        return {"status": "ok", "us": float(run.stdout.split()[-1])}
    except (ValueError, IndexError):
        return {"status": "unavailable", "message": f"unexpected output: {run.stdout[-500:]!r}"}
