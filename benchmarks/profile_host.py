"""Where the host time of one decode step goes: per-op host cost of trident against eager for the
ops a decode step is made of, and torch.profiler's table of the ATen ops one trident step runs.

    python benchmarks/profile_host.py [--layers N] [--batch B] [--out DIR]
    python benchmarks/profile_host.py --hf [--batch B] [--out DIR]   # the HF Llama's step instead

A diagnostic, not a benchmark of record: run.py's numbers are the ones quoted. Each line of the
op table is one small function compiled alone, timed as run.py times per-call cases (wall time,
sync every 100 calls, median of repeats), eager and trident alternating in one process.
"""
import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels  # noqa: E402
import models  # noqa: E402
import timing  # noqa: E402


def op_cases(device, dtype):
    d, f = 2048, 5632
    x = torch.randn(1, d, device=device, dtype=dtype)
    w = torch.randn(3 * d, d, device=device, dtype=dtype)
    wt = w.t().contiguous()
    cache = torch.randn(1, 16, 512, 128, device=device, dtype=dtype)
    k = torch.randn(1, 16, 128, device=device, dtype=dtype)
    gu = torch.randn(1, 2 * f, device=device, dtype=dtype)
    nw = torch.ones(d, device=device, dtype=dtype)

    def cache_write(cache, k, pos: int):
        cache[:, :, pos:pos + 1] = k.unsqueeze(2)

    cases = [
        ("identity", lambda x: x, (x,)),
        ("empty_like", lambda x: torch.empty_like(x), (x,)),
        ("view", lambda x: x.view(1, 16, 128), (x,)),
        ("x + y", lambda x, y: x + y, (x, x)),
        ("F.linear 2048->6144", lambda x, w: F.linear(x, w), (x, w)),
        ("mm 2048->6144", lambda x, wt: torch.mm(x, wt), (x, wt)),
        ("cache[:, :, p:p+1] = k", cache_write, (cache, k, 100)),
    ]
    if device == "cuda":  # user Triton kernels need a GPU to run
        cases += [
            ("triton noop", kernels.noop, (x,)),
            ("triton rmsnorm", lambda x, w: kernels.rmsnorm(x, w), (x, nw)),
            ("triton silu_mul", kernels.silu_mul, (gu,)),
        ]
    return cases


def time_pair(fn, args, trident_fn, calls, repeats):
    """Eager and trident per-call µs, measured alternately so drift hits both alike."""
    e, t = [], []
    for _ in range(repeats):
        e.append(timing.host_us_per_call(fn, args, calls=calls, repeats=1, warmup=20)[0])
        t.append(timing.host_us_per_call(trident_fn, args, calls=calls, repeats=1, warmup=20)[0])
    return sorted(e)[len(e) // 2], sorted(t)[len(t) // 2]


def submit_us_per_step(step, steps=4, repeats=50):
    """Host time to issue `steps` steps right after a sync, per step (median of repeats): the host
    cost alone, as long as the launch queue does not fill (a few hundred launches)."""
    samples = []
    with timing.pinned():
        for _ in range(repeats):
            timing.sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            samples.append((time.perf_counter() - t0) * 1e6 / steps)
        timing.sync()
    return sorted(samples)[len(samples) // 2]


def profile_tables(steps, device, pos_label):
    """torch.profiler's tables (by host time, and by device time on CUDA) of 20 calls of each step."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    tables = []
    for label, step in steps:
        with profile(activities=acts) as prof:
            for _ in range(20):
                step()
            timing.sync()
        avg = prof.key_averages()
        tables.append(f"torch.profiler, 20 {label} steps at {pos_label}, by host time:\n" +
                      avg.table(sort_by="self_cpu_time_total", row_limit=25))
        if device == "cuda":
            tables.append(f"torch.profiler, 20 {label} steps at {pos_label}, by device time:\n" +
                          avg.table(sort_by="self_device_time_total", row_limit=12))
    return tables


def hf_step_lines(opts, device):
    """The HF Llama's decode step (hf_llama.FULL, Triton RMSNorm and SiLU on CUDA): wall time per
    step, host submit time, device time (eager's step and trident's, each in a CUDA graph: where
    trident's wall time exceeds both its submit time and its graph's, the difference is what the
    device spends between kernels launched one by one), whether a trident step synchronizes with
    the device, and the profiler's tables."""
    import hf_llama
    import trident
    cfg = hf_llama.FULL if device == "cuda" else hf_llama.TINY
    model = hf_llama.build_model(cfg, device)
    if device == "cuda":
        hf_llama.use_kernels(model, triton=True)
    step = hf_llama.DecodeStep(model, opts.batch, cfg.max_cache)
    fast = trident.compile(step, max_specializations=4, graphs=False)
    ids = torch.zeros((opts.batch, 1), dtype=torch.long, device=device)
    at = min(100, cfg.max_cache - 1)
    pos = torch.tensor([at], device=device)
    eager_step, fast_step = (lambda: step(ids, pos)), (lambda: fast(ids, pos))
    torch.testing.assert_close(fast_step(), eager_step(), rtol=0, atol=0)
    name = f"HF step, {cfg.layers} layers, batch {opts.batch}"
    e, t = time_pair(eager_step, (), fast_step, 100, 5)
    lines = [f"{'step':28s} {'eager us':>9s} {'trident us':>10s}", f"{name:28s} {e:9.2f} {t:10.2f}"]
    if device == "cuda":
        se, st = submit_us_per_step(eager_step), submit_us_per_step(fast_step)
        lines.append(f"host submit per step: eager {se:.2f} trident {st:.2f} us")
        for who, f in (("eager", eager_step), ("trident", fast_step)):
            try:
                lines.append(f"device time ({who} step in a CUDA graph): {timing.graph_replay_us(f)[0]:.2f} us")
            except Exception as exc:  # noqa: BLE001  (a diagnostic says what failed and goes on)
                lines.append(f"device time: the {who} step does not capture: {type(exc).__name__}: {exc}"[:200])
        for _ in range(3):  # after the capture the step's buffers moved: its cuBLASLt sites record again
            fast_step()     # now (one bit-for-bit check each), not in the profiler's tables below
        torch.cuda.set_sync_debug_mode("error")
        try:
            fast_step()
            lines.append("a trident step does not synchronize (sync debug mode 'error')")
        except RuntimeError as exc:
            lines.append(f"a trident step synchronizes: {str(exc).splitlines()[0][:160]}")
        finally:
            torch.cuda.set_sync_debug_mode(0)
    ops = trident.controller(fast).last_ops[-1] if trident.controller(fast).last_ops else []
    lines.append(f"host ops in the trident step: {len(ops)}; counters: {trident.counters(fast)}")
    return lines + [""] + profile_tables((("trident", fast_step), ("eager", eager_step)), device, f"pos {at}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--pos", type=int, nargs="+", default=[100, 511], help="decode positions to time")
    ap.add_argument("--skip-ops", action="store_true")
    ap.add_argument("--hf", action="store_true", help="profile the HF Llama's step (hf_llama.py) instead")
    ap.add_argument("--batch", type=int, default=1, help="batch size of the decode step (or the HF step)")
    opts = ap.parse_args()
    import trident

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if opts.hf:
        with torch.no_grad():
            text = "\n".join(hf_step_lines(opts, device))
        if opts.out:
            os.makedirs(opts.out, exist_ok=True)
            Path(opts.out, "profile_hf.txt").write_text(text)
        print(text)
        return
    dtype = torch.bfloat16
    lines = []
    with torch.no_grad():
        lines.append(f"{'op':28s} {'eager us':>9s} {'trident us':>10s}")
        for name, fn, args in ([] if opts.skip_ops else op_cases(device, dtype)):
            try:
                fast = trident.compile(fn, max_specializations=4, graphs=False)
                fast(*args)
                e, t = time_pair(fn, args, fast, opts.calls, 5)
                lines.append(f"{name:28s} {e:9.2f} {t:10.2f}")
            except Exception as exc:  # a diagnostic keeps going and says what failed
                lines.append(f"{name:28s} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
            print(lines[-1], flush=True)

        cfg = replace(models.FULL, n_layers=opts.layers)
        if device == "cpu":
            cfg = replace(models.TINY, n_layers=opts.layers, dtype=torch.float32)
        model = models.Decoder(cfg, use_triton=device == "cuda", device=device).eval()
        caches = model.new_caches(opts.batch)
        x = model.new_input(opts.batch)
        fast = trident.compile(model.decode_step, max_specializations=8, graphs=False)
        for pos in opts.pos:
            fast(x, caches, pos)
            e, t = time_pair(lambda: model.decode_step(x, caches, pos), (), lambda: fast(x, caches, pos), 100, 5)
            name = f"decode step, {opts.layers} layers, batch {opts.batch}, pos {pos}"
            if device == "cuda":  # device time alone: each step captured in a CUDA graph and replayed
                ge = timing.graph_replay_us(lambda: model.decode_step(x, caches, pos))[0]
                gt = timing.graph_replay_us(lambda: fast(x, caches, pos))[0]
                se = submit_us_per_step(lambda: model.decode_step(x, caches, pos))
                st = submit_us_per_step(lambda: fast(x, caches, pos))
                lines.append(f"{name:28s} {e:9.2f} {t:10.2f}  graph replay: eager {ge:.2f} trident {gt:.2f}"
                             f"  host submit: eager {se:.2f} trident {st:.2f}")
            else:
                lines.append(f"{name:28s} {e:9.2f} {t:10.2f}")
            print(lines[-1], flush=True)
        pos = opts.pos[-1]
        ops = trident.controller(fast).last_ops[-1] if trident.controller(fast).last_ops else []
        lines.append(f"host ops in the trident step: {len(ops)}; counters: {trident.counters(fast)}")
        for why, sites in trident._C.cublaslt_replay_refusals():
            lines.append(f"cuBLASLt sites not replaying ({sites}): {why}")
        tables = profile_tables((("trident", lambda: fast(x, caches, pos)),
                                 ("eager", lambda: model.decode_step(x, caches, pos))), device, f"pos {pos}")
        table = "\n\n".join(tables)
    text = "\n".join(lines) + "\n\n" + table
    if opts.out:
        os.makedirs(opts.out, exist_ok=True)
        Path(opts.out, "profile_host.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
