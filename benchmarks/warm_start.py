"""Time to the first results of a fresh process (a restarted or scaled-out server): cold (capture
everything), warm (the specializations an earlier process saved in the cache directory: no
capture), and torch.compile default cold and warm (its mega-cache: torch.compiler.
save_cache_artifacts / load_cache_artifacts), for hf_decode.py's models.

    python3 benchmarks/warm_start.py --model qwen3-8b --liger [--layers N] [--out DIR]

Each measurement is its own process (this script again, with --child MODE), all sharing one
cache directory. The model's weights are built before the clock starts; the clock stops after the
prefill and one decode step over a StaticCache (two specializations), both checked against eager's
logits. Prints one row per mode: seconds, and trident's captures and saved-specialization loads."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODES = ("trident-cold", "trident-warm", "compile-cold", "compile-warm")


def child(args):
    import warnings
    import torch
    from transformers import StaticCache
    import hf_decode
    warnings.filterwarnings("ignore")
    dims = json.loads(args.dims) if args.dims else None
    model = hf_decode.build(args.model, args.layers, args.liger, device=args.device, dims=dims)
    g = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(10, model.config.vocab_size, (1, 16), generator=g).to(args.device)

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        ref_cache = StaticCache(config=model.config, max_cache_len=32)
        ref = [step(prompt, ref_cache)]
        ref.append(step(ref[0][:, -1:].argmax(-1), ref_cache))
        mega = Path(args.cache) / "torch_compile_mega_cache.bin"
        sync()
        prof = None
        if args.profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t0 = time.perf_counter()
        if args.child.startswith("trident"):
            import trident
            fn = trident.compile(step)
        else:
            if args.child == "compile-warm":
                torch.compiler.load_cache_artifacts(mega.read_bytes())
            fn = torch.compile(step)
        cache = StaticCache(config=model.config, max_cache_len=32)
        t_ready = time.perf_counter()
        out = [fn(prompt, cache)]
        sync()
        t_first = time.perf_counter()
        out.append(fn(ref[0][:, -1:].argmax(-1), cache))
        sync()
        seconds = time.perf_counter() - t0
        if prof is not None:
            import pstats
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        if args.child == "compile-cold":
            saved = torch.compiler.save_cache_artifacts()
            if saved is not None:
                mega.write_bytes(saved[0])
    err = max(float((a.float() - b.float()).abs().max()) for a, b in zip(out, ref))
    # split: import and wrapping, the prefill (the first call: a capture or a saved load), the decode step
    row = {"mode": args.child, "seconds": seconds, "setup": t_ready - t0, "prefill": t_first - t_ready,
           "decode": seconds - (t_first - t0), "max_abs_err": err}
    if args.child.startswith("trident"):
        c = trident.counters(fn)
        row.update(captures=c["captures"], artifact_loads=c["artifact_loads"],
                   artifacts_rejected=c["artifacts_rejected"], specializations=c["specializations"],
                   c_compile=c["compile_seconds"], c_load=c["load_seconds"], c_cache_loads=c["module_cache_loads"])
    print("ROW " + json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--liger", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dims", default=None, help="JSON config overrides (a small model for a CPU check)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default="/tmp/warm_start")
    ap.add_argument("--profile", action="store_true", help="cProfile each child's timed region into its log")
    ap.add_argument("--child", default=None)
    ap.add_argument("--cache", default=None)
    args = ap.parse_args()
    if args.child:
        return child(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="warm_start_")
    env = {**os.environ, "TRIDENT_CACHE_DIR": cache, "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor")}
    rows = []
    for mode in args.modes.split(","):
        cmd = [sys.executable, __file__, "--child", mode, "--cache", cache, "--model", args.model,
               "--device", args.device] + (["--layers", str(args.layers)] if args.layers else []) + \
              (["--liger"] if args.liger else []) + (["--dims", args.dims] if args.dims else []) + \
              (["--profile"] if args.profile else [])
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        (out / f"{mode}.log").write_text(run.stdout + run.stderr)
        found = [json.loads(line[4:]) for line in run.stdout.splitlines() if line.startswith("ROW ")]
        rows.append(found[0] if found else {"mode": mode, "error": (run.stderr.strip().splitlines() or ["?"])[-1]})
        print(json.dumps(rows[-1]), flush=True)
    (out / f"{args.model}.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{args.model} ({args.layers or 'all'} layers): time to prefill + one decode step in a new process")
    print(f"{'mode':<14}{'seconds':>9}{'setup':>7}{'prefill':>9}{'decode':>8}  captures  saved loads  max |err|")
    for r in rows:
        if "error" in r:
            print(f"{r['mode']:<14} FAILED {r['error'][:90]}")
            continue
        print(f"{r['mode']:<14}{r['seconds']:>9.2f}{r['setup']:>7.2f}{r['prefill']:>9.2f}{r['decode']:>8.2f}"
              f"  {r.get('captures', '-')!s:>8}  {r.get('artifact_loads', '-')!s:>11}"
              f"  {r['max_abs_err']:.2e}")


if __name__ == "__main__":
    main()
