"""Runs one mode in its own process (run.py starts one per mode): the per-call cases, then the
decode step at fixed and growing context for each batch size, then (suite "hf") greedy generation
with a Hugging Face Llama for each batch size. Each entry is isolated with
try/except, and the JSON result is rewritten after every entry, so a worker killed at its time
budget (or by a crash) still leaves what it finished.

    python3 benchmarks/worker.py --mode compile --out r.json [--quick] [--deadline-s 120]
"""
import argparse
import gc
import json
import os
import platform
import statistics
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
HF_BATCHES = (1, 8)


class Budget:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


def settings(quick, device, tiny=False):
    cuda = device == "cuda"
    if tiny:  # smoke tests: every code path once, no meaningful timing
        return dict(percall=dict(calls=3, repeats=1, warmup=1), decode=dict(calls=2, repeats=1, warmup=1),
                    grow_repeats=1, floor=dict(replays=2, repeats=1), hf_repeats=1, cuda=cuda)
    return dict(
        percall=dict(calls=1000 if quick else 2000, repeats=3 if quick else 5, warmup=50 if quick else 100),
        decode=dict(calls=50 if quick else 100, repeats=3 if quick else 5, warmup=5 if quick else 10),
        grow_repeats=3 if quick else 5,
        floor=dict(replays=50 if quick else 100, repeats=3 if quick else 5),
        hf_repeats=3 if quick else 5,
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

def prepare_case(mode, case, device, cfg):
    """Build one per-call case and make its first call (checked against the reference), then the
    warm-up calls, whose peak memory is the case's. Returns (entry, compiled, args); compiled is None
    when the build or first call failed (entry says how)."""
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
        return {**entry, "status": status, "message": msg}, None, None
    entry["first_call_s"] = time.perf_counter() - t0
    entry["check"] = modes.check(out, want, tol)
    for _ in range(cfg["percall"]["warmup"]):
        compiled(*args)
    timing.sync()
    entry["peak_mib"] = memory_peak(cfg)
    entry["status"] = OK if entry["check"]["ok"] else FAILED
    entry["counters"] = modes.trident_counters(mode, compiled)
    entry["dynamo"] = modes.dynamo_stats()
    return entry, compiled, args


def time_cases(prepared, cfg, floor_exe, budget, after_round=lambda: None):
    """Host µs per call of the prepared cases, in rounds: each round runs the native floor, then
    `calls` calls of every case in turn, round r starting at case r (mod the number of cases); a
    case's time is its median over rounds, and its "x floor" the median over rounds of its time
    over that round's floor (floor_us: the median floor). The host's speed drifts within a minute,
    and in two runs the case a worker timed first was slower than the same case timed elsewhere
    (benchmarks/NOTES.md, session 16), so no case is timed all at once, always in the same place,
    or far from its floor. The entries hold the rounds so far after each round (after_round then
    saves them: a worker stopped at its cap keeps what it timed)."""
    pc = cfg["percall"]
    floors = []
    for r in range(pc["repeats"]):
        if budget.left() < MIN_ENTRY_S:
            break
        floor = timing.run_native_floor(floor_exe, 5000, 5) if floor_exe else None
        floors.append(floor["us"] if floor and floor["status"] == OK else None)
        shift = r % len(prepared) if prepared else 0
        for entry, compiled, args in prepared[shift:] + prepared[:shift]:
            us, _ = timing.host_us_per_call(compiled, args, calls=pc["calls"], repeats=1,
                                            warmup=pc["warmup"] if r == 0 else 10)
            entry.setdefault("us_samples", []).append(us)
        for entry, _, _ in prepared:
            samples = entry["us_samples"]
            entry["us"] = statistics.median(samples)
            if all(f is not None for f in floors):
                entry["floor_us"] = statistics.median(floors)
                entry["floor_samples"] = list(floors)
                entry["x_floor"] = statistics.median(us / fl for us, fl in zip(samples, floors))
        after_round()
    for entry, _, _ in prepared:
        if not entry.get("us_samples") and entry["status"] == OK:
            entry.update(status=SKIPPED, message="no time left in this mode's budget")


def run_percall(mode, device, cfg, floor_exe, budget, record, to_count):
    """Every per-call case: prepared one by one, then timed together (time_cases). `record(name,
    entry)` takes each entry as it is final; the compiled cases go to `to_count`, whose device kernels
    are counted with the profiler after everything else the worker times (launches stayed slower in
    a process once the profiler had run in it: 1-4 µs per call in two runs of this suite)."""
    prepared = []

    def record_all():
        for name, entry, _, _ in prepared:
            record(name, entry)

    for case in cases.CASES:
        name = case[0]
        if budget.left() < MIN_ENTRY_S:
            record(name, {"status": SKIPPED, "message": "no time left in this mode's budget"})
            continue
        try:
            entry, compiled, args = prepare_case(mode, case, device, cfg)
        except Exception as e:  # noqa: BLE001
            entry, compiled = {"status": ERROR, "message": f"{type(e).__name__}: {e}"}, None
        if compiled is None:
            record(name, entry)
            continue
        prepared.append((name, entry, compiled, args))
    try:
        time_cases([p[1:] for p in prepared], cfg, floor_exe, budget, record_all)
    except Exception as e:  # noqa: BLE001
        for _, entry, _, _ in prepared:
            entry.update(status=ERROR, message=f"timing: {type(e).__name__}: {e}")
    record_all()
    to_count.extend((name, compiled, args) for name, _, compiled, args in prepared)


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
    model.set_ops(mode != "eager" and device == "cuda")
    want_fixed, want_grow = eager_references(model, x, init, fixed_pos, grow_positions)
    model.set_ops(device == "cuda")  # on CPU (smoke tests) the reference ops stand in for Triton
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


# ---- Hugging Face Llama, greedy generation ------------------------------------------------------

def hf_eager_check(model, gen, step_cls, batch, max_cache, tokens, logits):
    """Eager (Triton kernels) against the same HF model with its own RMSNorm and SiLU: both fed the
    same tokens (eager's greedy output, teacher forcing), per-step logits compared (relative L2)."""
    import hf_llama
    if not hf_llama.uses_triton(model):
        return {"ok": True, "rel_err": 0.0, "tol": DECODE_TOL, "what": "no Triton kernels swapped in (CPU): "
                "eager is HF's own ops"}
    hf_llama.use_kernels(model, triton=False)
    try:
        ref = step_cls(model, batch, max_cache, with_logits=True)
        want = gen.teacher_forced(ref, ref.reset, tokens)
        del ref
    finally:
        hf_llama.use_kernels(model, triton=True)
    c = modes.check(logits, want, DECODE_TOL)
    c["what"] = "logits of every step vs HF's own RMSNorm/SiLU, fed eager's tokens"
    c["argmax_agree"] = int((logits.argmax(-1) == want.argmax(-1)).sum())
    return c


def hf_token_check(got, want, margins, tie_tols):
    """Greedy tokens vs eager's: ok only if equal. Where a row first differs, eager's top-2 logit
    margin at that step and whether it was a near-tie (margin within 2 rounding units of the top
    logit in the model's dtype): a diagnosis for the reader (a rounding-level flip or a wrong
    result), not a pass."""
    import hf_llama
    c = hf_llama.compare_tokens(got, want)
    c["eager_margin_at_mismatch"] = [None if k is None else float(margins[r, k])
                                     for r, k in enumerate(c["first_mismatch"])]
    ties = [float(margins[r, k]) <= float(tie_tols[r, k]) for r, k in enumerate(c["first_mismatch"]) if k is not None]
    c["near_tie"] = bool(ties) and all(ties)
    return c


def hf_mismatch_message(c, new_tokens):
    rows = [(r, k, m) for r, (k, m) in enumerate(zip(c["first_mismatch"], c["eager_margin_at_mismatch"]))
            if k is not None]
    r, k, m = min(rows, key=lambda x: x[1])
    tie = "near-tie: " if c.get("near_tie") else ""   # every differing row first differs at a near-tie
    return (f"{tie}{c['match']}/{c['total']} tokens match eager's; {len(rows)}/{len(c['first_mismatch'])} rows "
            f"differ, first at step {k}/{new_tokens + 1} (row {r}), eager's top-2 logit margin there {m:.3g}")


def run_hf_batch(mode, model, hcfg, batch, cfg, device, budget):
    """One entry: eager reference in this process, then this mode's generation, check and timing."""
    import hf_llama
    gen = hf_llama.Generation(hcfg, batch, device)
    ref = hf_llama.DecodeStep(model, batch, hcfg.max_cache, with_logits=True)
    want, want_logits = gen.run(ref, ref.reset)
    margins = hf_llama.top2_margin(want_logits).cpu()
    tie_tols = hf_llama.tie_tolerance(want_logits).cpu()
    entry = {"batch": batch, "new_tokens": hcfg.new_tokens, "prompt_len": hcfg.prompt_len, "impl": ref.impl}
    if ref.fallback_reasons:
        entry["impl_note"] = "; ".join(ref.fallback_reasons)
    del ref
    if mode == "eager":
        entry["eager_check"] = hf_eager_check(model, gen, hf_llama.DecodeStep, batch, hcfg.max_cache, want,
                                              want_logits)
    del want_logits
    step = hf_llama.DecodeStep(model, batch, hcfg.max_cache)
    entry["base_mib"] = memory_reset(cfg)
    modes.reset(mode)
    try:
        t0 = time.perf_counter()
        compiled = modes.build(mode, step)
        step.reset()
        compiled(gen.prompt_steps[0], gen.positions[0])
        timing.sync()
        entry["first_call_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        got, _ = gen.run(compiled, step.reset)          # the whole first generation, any recompiles included
        timing.sync()
        entry["first_pass_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        status, msg = modes.classify(mode, e)
        return {**entry, "status": status, "message": msg}
    entry["check"] = hf_token_check(got, want, margins, tie_tols)
    entry["counters"] = modes.trident_counters(mode, compiled)
    entry["dynamo"] = modes.dynamo_stats()
    if entry["counters"] and entry["counters"].get("fallbacks"):
        return {**entry, "status": UNSUPPORTED, "message": f"trident ran {entry['counters']['fallbacks']} calls "
                "eagerly (fallbacks: arguments it cannot describe natively); not timed"}
    if budget.left() < MIN_ENTRY_S:
        return {**entry, "status": TIMEOUT, "message": "first generation done, no time left to time it"}
    with timing.pinned():      # on the one timing CPU, as every timed loop (timing.py)
        seconds, samples, timed_tokens = gen.time_decode(compiled, step.reset, cfg["hf_repeats"], timing.sync)
    if entry["check"]["ok"]:   # the timed runs must generate the same tokens too
        entry["check"] = hf_token_check(timed_tokens, want, margins, tie_tols)
    tokens = batch * hcfg.new_tokens
    entry.update(tok_s=tokens / seconds, ms_per_step=seconds / hcfg.new_tokens * 1e3, seconds=seconds,
                 seconds_samples=samples, peak_mib=memory_peak(cfg))
    entry["counters"] = modes.trident_counters(mode, compiled)
    entry["dynamo"] = modes.dynamo_stats()
    if entry["check"]["ok"]:
        entry["status"] = OK
    else:
        entry.update(status=FAILED, message=hf_mismatch_message(entry["check"], hcfg.new_tokens))
    if mode == "eager" and not entry["eager_check"]["ok"]:
        entry.update(status=FAILED, message="eager with Triton kernels differs from HF's own ops: rel err "
                     f"{entry['eager_check']['rel_err']:.3g} > {DECODE_TOL}")
    return entry


def run_hf_suite(mode, a, cfg, budget, result, record):
    import hf_llama
    hcfg = hf_llama.TINY if a.tiny else hf_llama.QUICK if a.quick else hf_llama.FULL
    info = {k: str(v) for k, v in vars(hcfg).items()}
    result["hf_config"] = info
    try:
        import transformers
        info["transformers"] = transformers.__version__
        model = hf_llama.build_model(hcfg, a.device)
        info["dtype"] = str(model.dtype)
        info["attn_implementation"] = hf_llama.ATTN_IMPLEMENTATION
        info["triton_modules"] = hf_llama.use_kernels(model, triton=True) if cfg["cuda"] else 0
    except Exception as e:  # noqa: BLE001
        for batch in HF_BATCHES:
            record(batch, {"status": ERROR, "message": f"model build failed: {type(e).__name__}: {e}"})
        return
    for batch in HF_BATCHES:
        if budget.left() < MIN_ENTRY_S:
            record(batch, {"status": SKIPPED, "message": "no time left in this mode's budget"})
            continue
        try:
            entry = run_hf_batch(mode, model, hcfg, batch, cfg, a.device, budget)
        except Exception as e:  # noqa: BLE001  (setup or the eager reference failed)
            entry = {"status": ERROR, "message": f"{type(e).__name__}: {e}"}
        record(batch, entry)
        # A dropped entry's graphs (FX graphs are reference cycles, as torch.compile's are) and the
        # step they refer to, with its static KV cache, are freed by the cycle collector, not at
        # `del`: collected here, they stay out of the next batch's baseline and peak.
        gc.collect()
        if cfg["cuda"]:
            torch.cuda.empty_cache()


# ---- main ------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", required=True, choices=[m for m, _, _ in modes.MODES])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--deadline-s", type=float, default=600.0)
    p.add_argument("--suites", default="percall,decode", help="comma-separated: percall, decode, hf")
    p.add_argument("--device", default="cuda", help="cpu only for smoke tests (with TRITON_INTERPRET=1)")
    p.add_argument("--tiny", action="store_true", help="tiny decoder, for smoke tests")
    p.add_argument("--floor-exe", help="the built native floor, run beside each per-call case")
    a = p.parse_args()
    budget, cfg = Budget(a.deadline_s), settings(a.quick, a.device, a.tiny)
    for knob in ("recompile_limit", "cache_size_limit"):  # recompiles must show up, not fall back to eager
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 128)
    result = {"mode": a.mode, "env": env_info(a.device), "percall": {}, "decode": {}, "hf": {}}
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
    to_count = []  # per-call cases whose kernels are counted last (run_percall)
    with torch.no_grad():
        if "percall" in suites:
            def record_case(name, entry):
                result["percall"][name] = entry
                log(f"percall {name}", entry)
                save()

            run_percall(a.mode, a.device, cfg, a.floor_exe, budget, record_case, to_count)
        if "decode" in suites:
            mcfg = models.TINY if a.tiny else models.QUICK if a.quick else models.FULL
            result["decode_config"] = {k: str(v) for k, v in vars(mcfg).items()}
            try:
                model = models.Decoder(mcfg, use_triton=a.device == "cuda", device=a.device)
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
        if "hf" in suites:
            def record_hf(batch, entry):
                result["hf"][str(batch)] = entry
                log(f"hf b={batch}", entry)
                save()

            run_hf_suite(a.mode, a, cfg, budget, result, record_hf)
        for name, compiled, args in to_count:
            if budget.left() < MIN_ENTRY_S:
                break
            result["percall"][name]["kernels"] = timing.device_kernels_per_call(compiled, args)
    save()


if __name__ == "__main__":
    sys.exit(main())
