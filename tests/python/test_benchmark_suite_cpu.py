"""The benchmark suite's driver on CPU: run.py with the tiny decoder (reference ops instead of the
Triton kernels), two rounds, the best-of-rounds merge, and the compile-latency suite (Triton
compiles for sm_90 with a faked driver). Timings here mean nothing; what is
checked is that every entry runs, is compared with eager, and is merged without hiding a failure."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import rounds  # noqa: E402


def test_two_rounds_of_eager_and_trident_on_the_tiny_decoder(tmp_path):
    cmd = [sys.executable, str(BENCH / "run.py"), "--out", str(tmp_path), "--device", "cpu", "--tiny",
           "--modes", "eager,trident", "--suites", "decode,latency", "--rounds", "2", "--budget-s", "480"]
    # the budget is an upper bound (the run takes about 110 s on 2 cores alone, twice that beside another
    # test worker); a round that outran its share of a smaller one skipped its last entries
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["meta"]["rounds"] == 2
    assert "best of 2 rounds" in (tmp_path / "table.txt").read_text()
    for mode in ("eager", "trident"):
        assert [w["rc"] for w in results["modes"][mode]["rounds"]] == [0, 0]
        for batch, slot in results["modes"][mode]["decode"].items():
            for scenario in ("fixed", "growing"):
                e = slot[scenario]
                assert e["status"] == "ok" and e["check"]["ok"], (mode, batch, scenario, e)
                assert len(e["round_values"]) == 2 and e["ms"] == min(e["round_values"]), e
    assert (tmp_path / "logs" / "trident.round2.log").exists()
    # the latency suite ran all of its steps (its figures are only meaningful on the GPU machine)
    lat = results["latency"]
    assert lat["status"] == "ok", lat
    assert [(r["run"], r["pos"]) for r in lat["rows"]] == [
        (run, pos) for run in ("cold", "warm") for pos in (127, 128, 143, "-")], lat["rows"]
    assert all(r["seconds"] > 0 for r in lat["rows"] if r["pos"] != "-")
    assert "Adding specializations, trident" in (tmp_path / "table.txt").read_text()


def test_a_failed_round_is_kept_over_a_faster_passing_one_and_a_skipped_round_is_not():
    ok = {"status": "ok", "ms": 1.0, "first_call_s": 5.0}
    failed = {"status": "FAILED", "ms": 0.5, "first_call_s": 0.1}
    fast = {"status": "ok", "ms": 0.8, "first_call_s": 0.2}
    skipped = {"status": "skipped", "message": "no time left in this mode's budget"}
    per_round = [{"percall": {}, "hf": {}, "decode": {"1": {"fixed": ok, "growing": ok, "b": skipped}}},
                 {"percall": {}, "hf": {}, "decode": {"1": {"fixed": failed, "growing": fast, "b": ok}}}]
    merged = rounds.merge(per_round)["decode"]["1"]
    assert merged["fixed"]["status"] == "FAILED" and merged["fixed"]["round_values"] == [1.0, 0.5]
    assert merged["b"]["status"] == "ok" and merged["b"]["ms"] == 1.0 and merged["b"]["round_values"] == [None, 1.0]
    # the fastest passing round wins; the first-call time stays the first (cold) round's
    assert merged["growing"]["ms"] == 0.8 and merged["growing"]["first_call_s"] == 5.0
    assert rounds.order(["a", "b", "c"], 1) == ["c", "b", "a"]


def test_the_hf_step_ab_compiles_both_variants_equal_to_eager_and_times_them():
    """ab_hf_step.py --off mask on the tiny HF config: with the capture passes the mask conversion is
    one `where` for both layers, without them none (inside each whole sdpa call); both equal eager."""
    cmd = [sys.executable, str(BENCH / "ab_hf_step.py"), "--off", "mask", "--device", "cpu", "--rounds", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "as built        IR: 1 where calls, 2 attention calls" in out, out
    assert "mask off        IR: 0 where calls, 2 attention calls" in out, out
    for name in ("as built       ", "mask off       ", "eager          "):
        assert f"\n{name} submit " in out, out


def test_the_per_call_suite_runs_the_aten_cases_on_cpu_and_reports_the_triton_ones_as_errors(tmp_path):
    cmd = [sys.executable, str(BENCH / "run.py"), "--out", str(tmp_path), "--device", "cpu", "--tiny",
           "--modes", "eager,trident,trident_reuse", "--suites", "percall", "--budget-s", "150"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    for mode in ("eager", "trident", "trident_reuse"):
        percall = results["modes"][mode]["percall"]
        for name in ("x_plus_1", "mm_relu"):  # ATen alone: they run on the CPU
            e = percall[name]
            assert e["status"] == "ok" and e["check"]["ok"], (mode, name, e)
            assert e["us"] == statistics.median(e["us_samples"]) and e["us"] > 0, e
        for name in ("add_one", "three_kernels", "noop"):  # user Triton kernels need a GPU
            assert percall[name]["status"] == "error" and percall[name]["message"], (mode, name, percall[name])


def test_per_call_cases_are_timed_in_turn_round_after_round():
    """Each round times every prepared case once, round r starting at case r; a case's time is its
    median over rounds."""
    import worker
    order = []

    def case(name):
        return lambda: order.append(name)

    prepared = [({"status": "ok"}, case("a"), ()), ({"status": "ok"}, case("b"), ())]
    cfg = {"percall": {"calls": 2, "repeats": 3, "warmup": 1}}
    worker.time_cases(prepared, cfg, None, worker.Budget(60))
    # round 1: a's warm-up and calls, then b's; round 2 starts at b; rounds 2 and 3 warm up with 10 calls
    assert order == ["a"] * 3 + ["b"] * 3 + ["b"] * 12 + ["a"] * 12 + ["a"] * 12 + ["b"] * 12, order
    for entry, _, _ in prepared:
        assert len(entry["us_samples"]) == 3 and entry["us"] == statistics.median(entry["us_samples"])
        assert "floor_us" not in entry  # no native floor off the GPU


def test_a_cases_floor_ratio_is_the_median_of_its_rounds_ratios(monkeypatch):
    """With the native floor, a case's "x floor" divides each round's time by that round's floor, and
    the per-call table shows that ratio (over kernels per call, for x floor/k)."""
    import report
    import timing
    import worker
    floors, times = iter([2.0, 4.0, 8.0]), iter([8.0, 5.0, 9.0])
    monkeypatch.setattr(timing, "run_native_floor", lambda exe, launches, repeats: {"status": "ok", "us": next(floors)})
    monkeypatch.setattr(timing, "host_us_per_call", lambda f, args, **kw: (next(times), []))
    entry = {"status": "ok", "check": {"ok": True, "rel_err": 0.0}}
    worker.time_cases([(entry, None, ())], {"percall": {"calls": 1, "repeats": 3, "warmup": 1}}, "floor", worker.Budget(60))
    assert entry["us_samples"] == [8.0, 5.0, 9.0] and entry["us"] == 8.0
    assert entry["floor_samples"] == [2.0, 4.0, 8.0] and entry["floor_us"] == 4.0
    assert entry["x_floor"] == 1.25  # ratios 4, 1.25, 1.125 (the medians' ratio would be 2.0)
    entry["kernels"] = 2
    results = {"native_floor": {"status": "ok", "us": 3.0}, "modes": {"trident": {"percall": {"add_one": entry}}}}
    row = next(line for line in report.percall_table(results) if line.startswith("add_one"))
    assert row.split()[2:7] == ["8.00", "-", "1.2", "2", "0.62"], row  # us, x eager, x floor, kernels, x floor/k


def test_the_output_cost_diagnostic_times_its_three_loops_on_cpu():
    """benchmarks/output_cost.py builds its C++ loops and times each (no native floor off the GPU)."""
    cmd = [sys.executable, str(BENCH / "output_cost.py"), "--device", "cpu", "--rounds", "1", "--calls", "1000"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=BENCH)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {line[:18].strip(): line[18:].split() for line in proc.stdout.splitlines()[-3:]}
    assert list(rows) == ["allocate + free", "+ TensorImpl", "+ Python object"], proc.stdout
    assert all(float(cols[0]) > 0 for cols in rows.values()), proc.stdout
    assert "native floor" not in proc.stdout
