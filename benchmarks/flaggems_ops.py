"""The paper's kernel table: each FlagGems operator (benchmarks/flaggems_cases.py) at LLM decode
and prefill shapes, called as its users call it, under eager (FlagGems' own launchers),
torch.compile default, cpp_wrapper, torch.compile(backend="trident") and trident.compile.

Per case and mode: cold, the first call of a fresh compile (capture and compiles included; eager's
first call after the library's kernels are compiled), and warm, host µs per call over a loop
(timing.host_us_per_call, synced every 100 calls), with the device floor (a CUDA graph of eager's
call replayed) beside them. Every mode's result is checked against eager's in the same run.

    python benchmarks/flaggems_ops.py [--shapes decode|all] [--modes eager,compile,...] [--ops add,mm]
        [--torch-compile-shapes decode|all] [--enabled] [--out DIR]  (--shapes also takes "1x4096,8x4096")

--enabled calls the operators through torch (`x + y`, `torch.mm`) under `flag_gems.use_gems()`,
FlagGems' enable() way of use, for every mode.

Prints two tables last: cold ms per mode, then warm µs per mode with trident's speedup over eager
and over the best torch.compile mode."""
import argparse
import contextlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaggems_cases  # noqa: E402
import modes  # noqa: E402
import timing  # noqa: E402

TORCH_MODES = ("compile", "cpp_wrapper", "trident_backend")


def _tol(kind):
    return 0.0 if kind in ("pointwise", "data") else 2e-2


def run_case(name, kind, make, tokens, hidden, mode_list, enabled=contextlib.nullcontext):
    """enabled: the context the operators run in (flag_gems.use_gems for --enabled); the checks
    run outside it, where ATen's own kernels compute the error."""
    fn, args = make(tokens, hidden, "cuda")
    with enabled():
        ref = fn(*args)  # FlagGems compiles its kernels here
        timing.sync()
    row = {"op": name, "kind": kind, "shape": [tokens, hidden], "modes": {}}
    try:
        with enabled():
            row["floor_us"] = round(timing.graph_replay_us(lambda: fn(*args))[0], 2)
    except Exception as e:  # noqa: BLE001  (a library launch that refuses stream capture)
        row["floor_us"], row["floor_error"] = None, modes.first_line(f"{type(e).__name__}: {e}")
    for mode in mode_list:
        modes.reset(mode)
        entry = row["modes"][mode] = {}
        try:
            with enabled():
                f = modes.build(mode, fn)
                t0 = time.perf_counter()
                out = f(*args)
                timing.sync()
                entry["cold_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
                second = f(*args)
                entry["warm_us"] = round(timing.host_us_per_call(f, args, calls=200, repeats=3, warmup=20)[0], 2)
                entry["flag_gems_python_calls"] = flaggems_cases.python_calls_into("flag_gems", f, args)
            entry["check"] = modes.check(second, ref, _tol(kind))
            entry["status"] = modes.OK if entry["check"]["ok"] else modes.FAILED
            if mode.startswith("trident"):
                entry["counters"] = {k: v for k, v in modes.trident_counters(mode, f).items()
                                     if k in ("captures", "hits", "fallbacks", "specializations", "split_calls")}
            if mode == "trident":
                import trident
                entry["said"] = [line[:600] for line in trident.controller(f).said]
                entry["routes"] = [line.strip()[:400] for line in trident.explain(f).splitlines()
                                   if "captured by:" in line]
            del out
        except Exception as e:  # noqa: BLE001
            entry["status"], entry["error"] = modes.classify(mode, e)
            entry["error"] = modes.first_line(entry["error"])
    return row


def _mode_cells(r, mode_list, key, fmt):
    """The row's op and shape, then each mode's `key` (status where it did not run correctly)."""
    cells = [r["op"], "x".join(map(str, r["shape"]))]
    for m in mode_list:
        e = r["modes"].get(m, {})
        cells.append(fmt.format(e[key]) if e.get("status") == modes.OK else e.get("status", "-"))
    return cells


def _markdown(heads, body):
    return "\n".join([" | ".join(heads), " | ".join("---" for _ in heads)] + [" | ".join(c) for c in body])


def table(rows, mode_list):
    """Warm µs per mode. The ratio columns are trident.compile's as users get it (graph mode, its
    default) where the run has that mode, else the first trident.compile mode it has."""
    tri_mode = next((m for m in ("trident_graphs",) + modes.TRIDENT_COMPILE_MODES if m in mode_list), "trident")
    heads = ["op", "shape"] + [modes.LABELS[m] for m in mode_list] + ["floor", f"{modes.LABELS.get(tri_mode, tri_mode)}: x eager",
                                                                       "x best compile"]
    body = []
    for r in rows:
        cells = _mode_cells(r, mode_list, "warm_us", "{:.1f}")
        cells.append(f"{r['floor_us']:.1f}" if r.get("floor_us") else "-")
        tri = r["modes"].get(tri_mode, {})
        eager = r["modes"].get("eager", {})
        best = [r["modes"][m]["warm_us"] for m in ("compile", "cpp_wrapper") if r["modes"].get(m, {}).get("status") == modes.OK]
        ok = tri.get("status") == modes.OK
        cells.append(f"{eager['warm_us'] / tri['warm_us']:.1f}x" if ok and eager.get("status") == modes.OK else "-")
        cells.append(f"{min(best) / tri['warm_us']:.1f}x" if ok and best else "-")
        body.append(cells)
    return _markdown(heads, body)


def cold_table(rows, mode_list):
    """First call per mode in ms (capture and compiles included; eager's after FlagGems compiled its
    kernels in the reference call), one row per case."""
    heads = ["op", "shape"] + [f"{modes.LABELS[m]} cold ms" for m in mode_list]
    return _markdown(heads, [_mode_cells(r, mode_list, "cold_ms", "{:.1f}") for r in rows])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="all", help='"all", "decode", or a list like "1x4096,8x4096"')
    ap.add_argument("--torch-compile-shapes", default="all", choices=("decode", "all"),
                    help="shapes torch.compile's modes run at (they compile for seconds per case)")
    ap.add_argument("--modes", default="eager,compile,cpp_wrapper,trident_backend,trident")
    ap.add_argument("--ops", default="")
    ap.add_argument("--enabled", action="store_true",
                    help="call the operators through torch under flag_gems.use_gems() (FlagGems' enable() way)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/flaggems_ops"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    mode_list = a.modes.split(",")
    cases = [c for c in flaggems_cases.make_cases(through_torch=a.enabled) if not a.ops or c[0] in a.ops.split(",")]
    enabled = contextlib.nullcontext
    if a.enabled:
        import flag_gems
        enabled = flag_gems.use_gems
    if a.shapes in ("all", "decode"):
        shapes = [s for s in flaggems_cases.SHAPES if a.shapes == "all" or s[0] in flaggems_cases.DECODE_TOKENS]
    else:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    rows = []
    for tokens, hidden in shapes:
        decode = tokens in flaggems_cases.DECODE_TOKENS
        these = [m for m in mode_list if decode or a.torch_compile_shapes == "all" or m not in TORCH_MODES]
        for name, kind, make in cases:
            rows.append(run_case(name, kind, make, tokens, hidden, these, enabled))
            with open(os.path.join(a.out, "flaggems_ops.json"), "w") as f:
                json.dump({"meta": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}, "rows": rows}, f, indent=1)
            print(json.dumps(rows[-1]), flush=True)
    print(cold_table(rows, mode_list))
    print(table(rows, mode_list))


if __name__ == "__main__":
    main()
