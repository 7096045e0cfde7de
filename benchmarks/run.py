"""torch-trident benchmark suite, one command (on a GPU machine):

    python3 benchmarks/run.py --out DIR [--quick]

Runs the native floor (C++), then one worker process per mode (eager, trident,
torch.compile(backend="trident"), torch.compile default, reduce-overhead, cpp_wrapper), each with
its share of a fixed time budget; a mode that crashes, hangs or overruns costs only its own
results. `--suites hf` runs the Hugging Face Llama generation suite instead (its own run: it does not
fit in the default run's time budget). Writes DIR/results.json (everything), DIR/decode.png (chart), DIR/table.txt and
DIR/logs/<mode>.log, and prints the table last. See benchmarks/README.md for what each number means.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases  # noqa: E402
import modes  # noqa: E402
import report  # noqa: E402
import rounds  # noqa: E402
import timing  # noqa: E402
import worker  # noqa: E402

BUDGET_S = {"full": 500.0, "quick": 260.0}   # the run must end under 9 and 5 minutes
RESERVE_PER_LATER_MODE_S = 15.0               # kept back for each mode still to run
MIN_CAP_S = 60.0                              # a mode's cap is at least this, when the budget allows
WORKER_MARGIN_S = 10.0                        # a worker stops starting entries this long before its kill
LATENCY_CAP_S = {"full": 120.0, "quick": 60.0}  # compile_latency.py, kept back from the modes' budget


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--quick", action="store_true", help="2-layer d=1024 decoder, fewer repeats (under 5 minutes)")
    p.add_argument("--budget-s", type=float, help="total time budget in seconds (default 500, quick 260)")
    p.add_argument("--modes", default=",".join(m for m, _, _ in modes.MODES),
                   help="comma-separated subset of: " + ", ".join(m for m, _, _ in modes.MODES))
    p.add_argument("--suites", default="percall,decode,latency",
                   help="comma-separated subset of: percall, decode, latency (trident's time to add "
                        "specializations to the decode step), hf (HF Llama greedy generation; not in the "
                        "default: run it on its own)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every mode this many times, alternating the order, and keep each entry's "
                        "fastest round (host speed drifts on shared machines; see rounds.py)")
    p.add_argument("--fresh-caches", action="store_true",
                   help="empty Inductor/Triton/trident caches under DIR/caches (cold compile latency)")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)   # cpu: smoke tests only
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # tiny decoder: smoke tests only
    return p.parse_args()


def worker_env(args, out):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.fresh_caches:
        for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"),
                         ("TRIDENT_CACHE_DIR", "trident")):
            env[var] = str(out / "caches" / sub)
    return env


def run_capped(cmd, log, cap, env):
    """Run cmd with its output in `log`, killed with its whole process group (compile
    subprocesses included) after `cap` seconds. Returns (returncode, killed)."""
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=str(HERE),
                                start_new_session=True)
        try:
            return proc.wait(timeout=cap), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(), True


def run_worker(mode, args, out, cap, name):
    """Run one mode's worker with a hard time cap; returns its (possibly partial) result. `name`
    names its log and raw result files (the mode, with the round after the first)."""
    raw = out / "raw" / f"{name}.json"
    raw.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / "worker.py"), "--mode", mode, "--out", str(raw),
           "--deadline-s", str(max(cap - WORKER_MARGIN_S, 1.0)), "--suites", args.suites, "--device", args.device]
    cmd += ["--quick"] * args.quick + ["--tiny"] * args.tiny
    if getattr(args, "floor_exe", None):
        cmd += ["--floor-exe", args.floor_exe]
    log = out / "logs" / f"{name}.log"
    rc, killed = run_capped(cmd, log, cap, worker_env(args, out))
    try:
        result = json.loads(raw.read_text())
    except (OSError, ValueError):
        result = {"mode": mode, "percall": {}, "decode": {}, "hf": {}}
    result.setdefault("hf", {})
    result["worker"] = {"rc": rc, "killed_at_cap": killed, "cap_s": round(cap, 1), "log": str(log)}
    if killed:
        missing = {"status": modes.TIMEOUT, "message": f"worker killed at its time cap ({cap:.0f} s)"}
    else:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        missing = {"status": modes.ERROR, "message": f"worker exited with rc={rc}: {' '.join(tail)}"}
    fill_missing(result, args, missing)
    return result


def fill_missing(result, args, missing):
    """Entries a worker never wrote get `missing` (timeout if it was killed, error if it crashed)."""
    suites = args.suites.split(",")
    if "percall" in suites:
        for name, *_ in cases.CASES:
            result["percall"].setdefault(name, dict(missing))
    if "decode" in suites:
        for batch in worker.BATCHES:
            slot = result["decode"].setdefault(str(batch), {})
            for scenario in worker.SCENARIOS:
                slot.setdefault(scenario, dict(missing))
    if "hf" in suites:
        for batch in worker.HF_BATCHES:
            result.setdefault("hf", {}).setdefault(str(batch), dict(missing))
    return result


def run_latency(args, out, cap):
    """compile_latency.py in its own process: trident's time to first result and to add a
    specialization to the decode step, with its kernels compiled then and already compiled."""
    raw, log = out / "raw" / "latency.json", out / "logs" / "latency.log"
    raw.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / "compile_latency.py"), "--json", str(raw)]
    cmd += ["--layers", "1" if args.tiny else "2" if args.quick else "8"] + ["--cpu"] * (args.device != "cuda")
    cmd += ["--held", "4"] * args.tiny  # smoke tests: every row's path, not 64 compiles
    rc, killed = run_capped(cmd, log, cap, worker_env(args, out))
    if killed:
        return {"status": modes.TIMEOUT, "message": f"killed at its time cap ({cap:.0f} s)", "log": str(log)}
    try:
        return dict(json.loads(raw.read_text()), status=modes.OK, log=str(log))
    except (OSError, ValueError):
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        return {"status": modes.ERROR, "message": f"rc={rc}: {' '.join(tail)}", "log": str(log)}


def summary(result):
    statuses = [e.get("status") for e in result["percall"].values()]
    for slot in result["decode"].values():
        if isinstance(slot, dict):
            statuses += [slot[s].get("status") for s in worker.SCENARIOS if isinstance(slot.get(s), dict)]
    statuses += [e.get("status") for e in result.get("hf", {}).values() if isinstance(e, dict)]
    return ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))


def git_commit():
    """The commit measured. BENCH_COMMIT overrides git: a copy of the tree sent to another machine
    may carry a stale .git (seen on the lent GPU machine: every run reported the session's first
    commit), so the sender names the commit it sent."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        rev = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(HERE), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else None
    except (OSError, subprocess.SubprocessError):
        return None


def run_mode(mode, later, deadline, args, out, results, say, round_index):
    """One worker for `mode` with its share of the time left before `deadline`."""
    label = f" round {round_index + 1}/{args.rounds}" if args.rounds > 1 else ""
    name = mode if round_index == 0 else f"{mode}.round{round_index + 1}"
    remaining = deadline - time.monotonic()
    weight = modes.WEIGHTS[mode]
    share = remaining * weight / (weight + sum(modes.WEIGHTS[m] for m in later))
    allowed = remaining - RESERVE_PER_LATER_MODE_S * len(later)
    cap = min(allowed, max(1.5 * share, MIN_CAP_S))
    if cap < 2 * WORKER_MARGIN_S:
        say(f"{mode}{label}: skipped, no time left")
        return fill_missing({"mode": mode, "percall": {}, "decode": {}, "hf": {}}, args, {
            "status": modes.SKIPPED, "message": "no time left in the run's budget"})
    say(f"{mode}{label}: running (cap {cap:.0f} s, log {out / 'logs' / (name + '.log')})")
    t0 = time.monotonic()
    result = run_worker(mode, args, out, cap, name)
    if mode == "eager" or "env" not in results["meta"]:
        results["meta"]["env"] = result.get("env", results["meta"].get("env"))
    if result.get("decode_config"):
        results["decode_config"] = result["decode_config"]
    if result.get("hf_config") and (mode == "eager" or "hf_config" not in results):
        results["hf_config"] = result["hf_config"]
    say(f"{mode}{label}: {summary(result)} ({time.monotonic() - t0:.0f} s)")
    return result


def main():
    args = parse_args()
    if args.rounds < 1:
        sys.exit(f"--rounds must be at least 1, got {args.rounds}")
    out = Path(args.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "raw").mkdir(exist_ok=True)
    budget = args.budget_s or BUDGET_S["quick" if args.quick else "full"]
    start = time.monotonic()
    deadline = start + budget
    selected = [m for m, _, _ in modes.MODES if m in args.modes.split(",")]
    results = {"meta": {"argv": sys.argv, "quick": args.quick, "budget_s": budget, "started": time.ctime(),
                        "fresh_caches": args.fresh_caches, "suites": args.suites, "commit": git_commit()},
               "batches": list(worker.BATCHES), "hf_batches": list(worker.HF_BATCHES), "modes": {}}

    def say(msg):
        print(f"[{time.monotonic() - start:5.0f}s] {msg}", flush=True)

    if args.device == "cuda" and "percall" in args.suites:
        say("native floor: building benchmarks/native_floor.cu with nvcc")
        args.floor_exe, why = timing.build_native_floor(str(out), timeout=min(120, budget / 4))
        results["native_floor"] = (timing.run_native_floor(args.floor_exe) if args.floor_exe
                                   else {"status": "unavailable", "message": why})
        say(f"native floor: {results['native_floor'].get('us', results['native_floor'].get('status'))}")
    else:
        results["native_floor"] = {"status": "unavailable", "message": "not measured (no GPU run)"}

    suites = args.suites.split(",")
    if not {"percall", "decode", "hf"} & set(suites):
        selected = []  # --suites latency alone: no mode worker has anything to run
    latency_cap = LATENCY_CAP_S["quick" if args.quick else "full"] if "latency" in suites else 0.0
    per_round = {m: [] for m in selected}
    rounds_start = time.monotonic()
    deadline -= latency_cap
    for r in range(args.rounds):
        round_deadline = rounds_start + (deadline - rounds_start) * (r + 1) / args.rounds
        order = rounds.order(selected, r)
        for i, mode in enumerate(order):
            per_round[mode].append(run_mode(mode, order[i + 1:], round_deadline, args, out, results, say, r))
    results["meta"]["rounds"] = args.rounds
    for mode in selected:
        results["modes"][mode] = rounds.merge(per_round[mode])
    if "latency" in suites:
        say(f"latency: running compile_latency.py (cap {latency_cap:.0f} s)")
        results["latency"] = run_latency(args, out, max(latency_cap, deadline + latency_cap - time.monotonic()))
        say(f"latency: {results['latency']['status']}")

    results["meta"]["elapsed_s"] = time.monotonic() - start
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    text = report.table(results)
    (out / "table.txt").write_text(text + "\n")
    if "decode" in args.suites:
        try:
            report.chart(results, out / "decode.png")
            say(f"chart: {out / 'decode.png'}")
        except Exception as e:  # noqa: BLE001  (the table still comes out)
            say(f"chart not written: {type(e).__name__}: {e}")
    say(f"results: {out / 'results.json'}, table: {out / 'table.txt'}")
    print()
    print(text, flush=True)


if __name__ == "__main__":
    main()
