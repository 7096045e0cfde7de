"""Compile latency of trident on the decode step: time to first result, time to add a
specialization that needs a new capture, and time to add one that re-lowers a captured program
(a Triton `% 16` variant of the position) with its kernels already compiled. Then the cost of one
added specialization as a module grows to 64 (a user Triton kernel scaled by an int compiled per
value), split into capture, lowering, C compile and load, at the 1st, 16th and 64th.

    python3 benchmarks/compile_latency.py [--layers N] [--cpu] [--json PATH]

On a GPU machine it runs the real decoder. With --cpu (or without a GPU) it compiles for sm_90 with
Triton's driver faked (no kernel runs; each call stops at the first launch on CPU tensors), which
times the same capture, lowering and compile work on the host.
"""
import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import models  # noqa: E402


def fake_gpu_compile():
    """Let Dynamo capture and Triton compile for sm_90 without a GPU (tests/python/fake_cuda.py)."""
    import torch.utils._triton as tu
    import triton
    sys.path.insert(0, str(HERE.parent / "tests" / "python"))
    from fake_cuda import FakeCudaDriver
    tu.has_triton = lambda: True
    os.environ.setdefault("TRIDENT_TRITON_TARGET", "cuda:90")
    triton.runtime.driver.set_active(FakeCudaDriver())


def timed_call(run, on_cpu):
    """Seconds `run()` takes, synchronized on the GPU."""
    t0 = time.perf_counter()
    try:
        run()
    except RuntimeError as e:  # CPU tensors: the compiled step stops at its first kernel launch
        if not (on_cpu and "not a CUDA tensor" in str(e)):
            raise
    if torch.cuda.is_available() and not on_cpu:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--cpu", action="store_true", help="compile for sm_90 with a fake driver, run nothing")
    ap.add_argument("--json", help="also write the rows here (run.py's latency suite reads them)")
    ap.add_argument("--held", type=int, default=64,
                    help="grow the module of the added-specialization rows until it holds this many")
    opts = ap.parse_args()
    on_cpu = opts.cpu or not torch.cuda.is_available()
    if on_cpu:
        fake_gpu_compile()
    import trident
    device = "cpu" if on_cpu else "cuda"
    cfg = replace(models.FULL, n_layers=opts.layers)
    model = models.Decoder(cfg, use_triton=True, device=device).eval()
    x, caches = model.new_input(1), model.new_caches(1, fill=False)
    # pos 127: first capture (static); 128: pos varies -> symbolic capture (pos % 16 != 0 kernels);
    # 143: ctx 144 is divisible by 16 -> a new kernel variant, re-lowered from the symbolic capture;
    # then a second compiled function repeats the sequence with every kernel already compiled.
    steps = [(127, "first result (capture, lower, Triton compile, C compile)"),
             (128, "new capture: pos becomes symbolic"),
             (143, "re-lowered: ctx % 16 == 0 kernel variant, kernel compiled now")]
    rows = []
    with torch.no_grad():
        for run in ("cold", "warm"):
            fast = trident.compile(model, max_specializations=64)
            for pos, what in steps:
                s = timed_call(lambda: fast(x, caches, pos), on_cpu)
                rows.append((run, pos, what if run == "cold" else what.replace("kernel compiled now",
                                                                          "kernels already compiled"), s))
            c = trident.counters(fast)
            rows.append((run, "-", f"specializations {c['specializations']}; in all: capture "
                                   f"{c['capture_seconds']:.2f} s, lowering {c['lowering_seconds']:.2f} s (Triton "
                                   f"compile {c['triton_compile_seconds']:.2f}), C compile {c['compile_seconds']:.2f} s",
                         None))
    growth = added_specializations(trident, device, on_cpu, count=opts.held + 1)
    where = "sm_90 compile on CPU" if on_cpu else device
    print(f"compile latency, {opts.layers}-layer decoder ({where}), s")
    for run, pos, what, s in rows:
        print(f"  {run:5s} pos {pos!s:4s} {'' if s is None else f'{s:7.3f}'}  {what}")
    print(f"adding a specialization to a module holding N (a user Triton kernel, its int compiled per value; {where}), ms")
    print(f"  {'N':>3s} {'total':>8s} {'capture':>8s} {'lowering':>8s} {'C compile':>9s} {'load':>6s} {'selector':>8s}  "
          "(C compile: on the call; selector: its compile after the call, guards interpreted meanwhile)")
    for r in growth:
        if r["held"] in (0, 1, 16, opts.held):
            print(f"  {r['held']:3d} {r['total'] * 1e3:8.1f} {r['capture'] * 1e3:8.1f} {r['lowering'] * 1e3:8.1f} "
                  f"{r['compile'] * 1e3:9.1f} {r['load'] * 1e3:6.1f} {r['selector'] * 1e3:8.1f}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({
            "layers": opts.layers, "where": where,
            "rows": [{"run": run, "pos": pos, "what": what, "seconds": s} for run, pos, what, s in rows],
            "added_specializations": growth}, indent=1))


def added_specializations(trident, device, on_cpu, count=65):
    """Per added specialization of a module that grows to `count`, each row keyed by the number the
    module held before (`held`): each call's int is a new specialization (dynamic=False); the kernel
    is compiled at the first (held 0) and reused after. counters() waits for a selector still
    compiling, so each row's figures include its own."""
    import kernels

    def scaled(x, n: int):
        return kernels.add_one(x) * n

    fast = trident.compile(scaled, dynamic=False, max_specializations=count)
    x = torch.randn(4096, device=device)
    out = []
    for n in range(1, count + 1):
        before = dict(trident.counters(fast))
        total = timed_call(lambda: fast(x, n), on_cpu)
        c = trident.counters(fast)
        delta = {k: c[k] - before.get(k, 0.0) for k in ("capture_seconds", "lowering_seconds", "compile_seconds",
                                                        "load_seconds", "background_compile_seconds")}
        assert c["specializations"] == n, c
        out.append({"held": n - 1, "total": total, "capture": delta["capture_seconds"],
                    "lowering": delta["lowering_seconds"],
                    "compile": max(0.0, delta["compile_seconds"] - delta["background_compile_seconds"]),
                    "load": delta["load_seconds"], "selector": delta["background_compile_seconds"]})
    return out


if __name__ == "__main__":
    main()
