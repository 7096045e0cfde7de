"""Runs one mode in its own process (run.py starts one per mode): the per-call cases, then the
decode step at fixed and growing context for each batch size. Each entry is isolated with
try/except, and the JSON result is rewritten after every entry, so a worker killed at its time
budget (or by a crash) still leaves what it finished.

    python3 benchmarks/worker.py --mode compile --out r.json [--quick] [--deadline-s 120]
"""
import argparse
import json
import os
import platform
import sys
import time

import torch

import cases
import modes
import models
import timing
from modes import ERROR, FAILED, OK, SKIPPED, TIMEOUT, UNSUPPORTED

BATCHES = (1, 8)
SCENARIOS = ("fixed", "growing")
GROW_START_CTX, GROW_STEPS = 128, 64
DECODE_TOL = 2e-2          # relative L2 error vs eager, bf16
MIN_ENTRY_S = 3.0          # do not start an entry with less time than this left


class Budget:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


def settings(quick, device, tiny=False):
    cuda = device == "cuda"
    if tiny:  # smoke tests: every code path once, no meaningful timing
        return dict(percall=dict(calls=3, repeats=1, warmup=1), decode=dict(calls=2, repeats=1, warmup=1),
                    grow_repeats=1, floor=dict(replays=2, repeats=1), cuda=cuda)
    return dict(
        percall=dict(calls=1000 if quick else 2000, repeats=3 if quick else 5, warmup=50 if quick else 100),
        decode=dict(calls=50 if quick else 100, repeats=3 if quick else 5, warmup=5 if quick else 10),
        grow_repeats=3 if quick else 5,
        floor=dict(replays=50 if quick else 100, repeats=3 if quick else 5),
        cuda=cuda,
    )


def env_info(device):
    import triton
    info = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "triton": triton.__version__, "device": device, "host": platform.node()}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["capability"] = "sm_%d%d" % torch.cuda.get_device_capability()
    return info


def memory_reset(cfg):
    if cfg["cuda"]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    return None


def memory_peak(cfg):
    return torch.cuda.max_memory_allocated() / 2**20 if cfg["cuda"] else None


def clone_out(out):
    return torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out)


# ---- per-call cases --------------------------------------------------------------------------

def run_case(mode, case, device, cfg):
    name, _, fn, make_args, reference, tol = case
    modes.reset(mode)
    args = make_args(device)
    want = reference(*args) if mode == "eager" else fn(*args)
    entry = {"base_mib": memory_reset(cfg)}
    t0 = time.perf_counter()
    try:
        compiled = modes.build(mode, fn)
        out = clone_out(compiled(*args))
        timing.sync()
    except Exception as e:  # noqa: BLE001  (every failure is reported, none stops the run)
        status, msg = modes.classify(mode, e)
        return {**entry, "status": status, "message": msg}
    entry["first_call_s"] = time.perf_counter() - t0
    entry["check"] = modes.check(out, want, tol)
    entry["us"], entry["us_samples"] = timing.host_us_per_call(compiled, args, **cfg["percall"])
    entry["peak_mib"] = memory_peak(cfg)
    entry["status"] = OK if entry["check"]["ok"] else FAILED
    entry["counters"] = modes.trident_counters(mode, compiled)
    entry["dynamo"] = modes.dynamo_stats()
    return entry


# ---- decode step -----------------------------------------------------------------------------

def eager_references(model, x, init, fixed_pos, grow_positions):
    caches = models.clone_caches(init)
    fixed = (model(x, caches, fixed_pos), caches)
    caches = models.clone_caches(init)
    for pos in grow_positions:
        out = model(x, caches, pos)
    return fixed, (out, caches)


def run_fixed(mode, model, x, init, pos, want, cfg):
    caches = models.clone_caches(init)
    entry = {"ctx": pos + 1, "base_mib": memory_reset(cfg)}
    t0 = time.perf_counter()
    compiled = modes.build(mode, model)
    out = clone_out(compiled(x, caches, pos))
    timing.sync()
    entry["first_call_s"] = time.perf_counter() - t0
    entry["check"] = modes.check((out, caches), want, DECODE_TOL)
    us, samples = timing.host_us_per_call(compiled, (x, caches, pos), **cfg["decode"])
    entry.update(ms=us / 1e3, ms_samples=[s / 1e3 for s in samples], peak_mib=memory_peak(cfg))
    entry["status"] = OK if entry["check"]["ok"] else FAILED
    return entry, compiled


def run_growing(mode, compiled, x, init, positions, want, cfg, budget):
    caches = models.clone_caches(init)
    entry = {"ctx": [positions[0] + 1, positions[-1] + 1], "base_mib": memory_reset(cfg)}
    t0 = time.perf_counter()
    for i, pos in enumerate(positions):    # first pass: includes any compiles for new positions
        out = compiled(x, caches, pos)
        if budget.left() < MIN_ENTRY_S and i + 1 < len(positions):
            timing.sync()
            entry.update(status=TIMEOUT, message=f"first pass stopped at the time budget after {i + 1}/"
                         f"{len(positions)} steps ({time.perf_counter() - t0:.1f} s)")
            return entry
    out = clone_out(out)
    timing.sync()
    entry["first_pass_s"] = time.perf_counter() - t0
    entry["check"] = modes.check((out, caches), want, DECODE_TOL)

    def run_sequence():
        for pos in positions:
            compiled(x, caches, pos)

    us, samples = timing.sequence_us_per_step(run_sequence, len(positions),
                                              lambda: models.copy_caches_(caches, init), cfg["grow_repeats"])
    entry.update(ms=us / 1e3, ms_samples=[s / 1e3 for s in samples], peak_mib=memory_peak(cfg))
    entry["status"] = OK if entry["check"]["ok"] else FAILED
    return entry


def device_floors(model, x, init, fixed_pos, floor_pos, cfg):
    """Eager worker only: the eager step captured in a CUDA graph, replayed (device time alone)."""
    extras = {}
    if not cfg["cuda"]:
        return extras
    for key, pos in (("floor_fixed", fixed_pos), ("floor_growing", floor_pos)):
        try:
            caches = models.clone_caches(init)
            model(x, caches, pos)
            us, samples = timing.graph_replay_us(lambda: model(x, caches, pos), **cfg["floor"])
            extras[key] = {"status": OK, "ctx": pos + 1, "ms": us / 1e3, "ms_samples": [s / 1e3 for s in samples]}
        except Exception as e:  # noqa: BLE001
            extras[key] = {"status": ERROR, "message": f"{type(e).__name__}: {e}"}
        torch.cuda.synchronize()
    return extras


def run_decode_batch(mode, model, batch, cfg, budget, device, record):
    mcfg = model.cfg
    fixed_pos = mcfg.max_seq - 1
    grow_positions = [GROW_START_CTX - 1 + i for i in range(GROW_STEPS)]
    floor_pos = grow_positions[len(grow_positions) // 2]
    x, init = model.new_input(batch), model.new_caches(batch)
    # Every mode is checked against eager; eager itself against the PyTorch reference ops.
    model.set_ops(mode != "eager")
    want_fixed, want_grow = eager_references(model, x, init, fixed_pos, grow_positions)
    model.set_ops(True)
    if mode == "eager":
        record("extras", device_floors(model, x, init, fixed_pos, floor_pos, cfg))
    modes.reset(mode)
    compiled, fixed = None, {}
    for scenario in SCENARIOS:
        if budget.left() < MIN_ENTRY_S:
            record(scenario, {"status": SKIPPED, "message": "no time left in this mode's budget"})
            continue
        try:
            if scenario == "fixed":
                entry, compiled = run_fixed(mode, model, x, init, fixed_pos, want_fixed, cfg)
            elif compiled is None:
                status = fixed.get("status") if fixed.get("status") in (UNSUPPORTED, ERROR) else SKIPPED
                entry = {"status": status, "message": "as at fixed context: " + fixed.get("message", "")}
            else:
                entry = run_growing(mode, compiled, x, init, grow_positions, want_grow, cfg, budget)
        except Exception as e:  # noqa: BLE001
            status, msg = modes.classify(mode, e)
            entry = {"status": status, "message": msg}
        if compiled is not None:
            entry["counters"] = modes.trident_counters(mode, compiled)
            entry["dynamo"] = modes.dynamo_stats()
        record(scenario, entry)
        if scenario == "fixed":
            fixed = entry
        if entry["status"] not in (OK, FAILED):
            compiled = None
    del x, init, want_fixed, want_grow


# ---- main ------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", required=True, choices=[m for m, _, _ in modes.MODES])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--deadline-s", type=float, default=600.0)
    p.add_argument("--suites", default="percall,decode")
    p.add_argument("--device", default="cuda", help="cpu only for smoke tests (with TRITON_INTERPRET=1)")
    p.add_argument("--tiny", action="store_true", help="tiny decoder, for smoke tests")
    a = p.parse_args()
    budget, cfg = Budget(a.deadline_s), settings(a.quick, a.device, a.tiny)
    for knob in ("recompile_limit", "cache_size_limit"):  # recompiles must show up, not fall back to eager
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 128)
    result = {"mode": a.mode, "env": env_info(a.device), "percall": {}, "decode": {}}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)

    def save():
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1, default=str)
        os.replace(tmp, a.out)

    def log(what, entry):
        extra = entry.get("message", "")
        print(f"[{a.mode}] {what}: {entry.get('status')} {modes.first_line(extra, 160)}", flush=True)

    save()
    suites = a.suites.split(",")
    with torch.no_grad():
        if "percall" in suites:
            for case in cases.CASES:
                if budget.left() < MIN_ENTRY_S:
                    entry = {"status": SKIPPED, "message": "no time left in this mode's budget"}
                else:
                    try:
                        entry = run_case(a.mode, case, a.device, cfg)
                    except Exception as e:  # noqa: BLE001
                        entry = {"status": ERROR, "message": f"{type(e).__name__}: {e}"}
                result["percall"][case[0]] = entry
                log(f"percall {case[0]}", entry)
                save()
        if "decode" in suites:
            mcfg = models.TINY if a.tiny else models.QUICK if a.quick else models.FULL
            result["decode_config"] = {k: str(v) for k, v in vars(mcfg).items()}
            try:
                model = models.Decoder(mcfg, use_triton=True, device=a.device)
            except Exception as e:  # noqa: BLE001
                failed = {"status": ERROR, "message": f"model build failed: {type(e).__name__}: {e}"}
                result["decode"] = {str(b): {s: dict(failed) for s in SCENARIOS} for b in BATCHES}
                save()
                return
            for batch in BATCHES:
                slot = result["decode"].setdefault(str(batch), {})

                def record(key, entry, slot=slot, batch=batch):
                    slot[key] = entry
                    if key != "extras":
                        log(f"decode b={batch} {key}", entry)
                    save()

                try:
                    run_decode_batch(a.mode, model, batch, cfg, budget, a.device, record)
                except Exception as e:  # noqa: BLE001  (setup or the eager reference failed)
                    for scenario in SCENARIOS:
                        if scenario not in slot:
                            record(scenario, {"status": ERROR, "message": f"{type(e).__name__}: {e}"})
                if cfg["cuda"]:
                    torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    sys.exit(main())
