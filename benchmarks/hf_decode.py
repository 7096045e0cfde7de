"""The paper's two models (and Llama-3.2-1B) as their users run them: Hugging Face's own modeling code, built from a
config with random weights (nothing downloaded), bf16, optionally with Liger-Kernel's Triton kernels
swapped in by Liger's own `apply_liger_kernel_to_*`, decoding greedily over transformers' own
StaticCache, called the ordinary way:

    step = lambda ids, cache: model(input_ids=ids, past_key_values=cache, use_cache=True).logits

and through `model.generate(..., cache_implementation="static")` with `model.forward` compiled.
Each mode decodes the same prompt from a fresh cache; tokens/s is timed over the decode steps after
two warm-up steps. The device floor is the eager step captured as one CUDA graph and replayed (the
StaticCache's write position is a tensor, so replays advance it as eager calls do); a step that
synchronizes with the host cannot be a graph, and its floor is then its kernels' device time as the
profiler measures it. Every mode's
tokens are compared with eager's in the same run.

    python3 benchmarks/hf_decode.py --model qwen3-8b --modes eager,trident,backend,reduce-overhead \\
        --liger --batch 1 --steps 32 --out /tmp/hf_decode

Install line for the Liger variant (pinned): `pip install liger-kernel==0.7.0` (0.8.5 routes rotary
embeddings and its functional API through a dispatcher under `torch.compiler.disable`, where a step
runs split). Liger 0.7.0 has no DeepSeek-V2 entry point; `--liger` on that model says so and runs
HF's own modules. 0.8.5 has one (`apply_liger_kernel_to_deepseek_v2`: RMSNorm, SwiGLU and its fused
MoE, rotary left alone), which `--liger` uses where 0.8.5 is installed.
Modes: eager, trident (no graphs), trident-graphs, trident-unsplit (graphs not split at host reads,
TRIDENT_GRAPH_SEGMENTS=0: Liger 0.8.5's fused MoE reads its tile count per layer), backend, compile,
reduce-overhead, and generate-eager / generate-hf-compile / generate-trident / generate-trident-graphs.
Writes DIR/<model>-b<batch>.json and prints one table row per mode."""
import argparse
import json
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

warnings.filterwarnings("ignore", category=FutureWarning)

MODELS = {
    # Qwen3-8B's config (hidden 4096, 36 layers, 32 heads / 8 kv heads, head_dim 128)
    "qwen3-8b": dict(cls="Qwen3", liger="qwen3", cfg=dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=False)),
    # Llama-3.2-1B's config (16 layers, hidden 2048, 32 heads / 8 kv heads of 64, llama3 rope scaling)
    "llama-1b": dict(cls="Llama", liger="llama", cfg=dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling=dict(rope_type="llama3", factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                          original_max_position_embeddings=8192))),
    # DeepSeek-V2-Lite's config (27 layers, MLA with kv_lora_rank 512, 64 routed experts, top-6)
    "deepseek-v2-lite": dict(cls="DeepseekV2", liger="deepseek_v2", cfg=dict(
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, n_shared_experts=2,
        n_routed_experts=64, num_experts_per_tok=6, first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=None,
        qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, n_group=1, topk_group=1,
        routed_scaling_factor=1.0, max_position_embeddings=163840, rms_norm_eps=1e-6, tie_word_embeddings=False)),
}


def build(name: str, layers: int | None, liger: bool, device: str = "cuda", dims: dict | None = None):
    import transformers
    spec = MODELS[name]
    cfg_kw = dict(spec["cfg"])
    if layers:
        cfg_kw["num_hidden_layers"] = layers
    cfg_kw.update(dims or {})  # a smaller model of the same kind (warm_start.py's CPU check)
    config = getattr(transformers, spec["cls"] + "Config")(**cfg_kw)
    config._attn_implementation = "sdpa"
    if liger:
        from liger_kernel.transformers import monkey_patch
        apply = getattr(monkey_patch, "apply_liger_kernel_to_" + spec["liger"], None)
        if apply is None:
            print(f"liger-kernel has no apply_liger_kernel_to_{spec['liger']}: HF's own modules", flush=True)
            liger = False
        else:
            apply()
    cls = getattr(transformers, spec["cls"] + "ForCausalLM")
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(config).to(torch.bfloat16)
    if liger:
        # Liger patches the module classes before construction; the instance check says it took.
        assert any("Liger" in type(m).__name__ for m in model.modules()), "Liger kernels not applied"
    return model.eval().requires_grad_(False)


WARMUP_STEPS = 4  # graph mode captures at a key's third call: the timed steps are all warm
GENERATE_REPEATS = 3  # generate() modes: timed pairs of calls (a short and a long output)


def decode(step, model, prompt, steps, max_len):
    """Prefill, WARMUP_STEPS warm-up steps, then `steps` timed steps; returns (tokens, seconds per step)."""
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        logits = step(prompt, cache)
        tok = logits[:, -1:].argmax(-1)
        toks = [tok]
        for _ in range(WARMUP_STEPS):
            tok = step(tok, cache)[:, -1:].argmax(-1)
            toks.append(tok)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            tok = step(tok, cache)[:, -1:].argmax(-1)
            toks.append(tok)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / steps
    return torch.cat(toks, 1).cpu(), dt


def floor(model, prompt, steps, max_len):
    """The device floor, seconds per step, and how it was measured: the eager step replayed as one
    CUDA graph, or, where the step synchronizes with the host (an `.item()`, as Liger's fused MoE
    reads its tile count) and so cannot be a graph, the device time of its kernels and copies as the
    profiler measures them over `steps` eager steps (no gaps between them counted)."""
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        model(input_ids=prompt, past_key_values=cache, use_cache=True)
        tok = prompt[:, -1:].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                model(input_ids=tok, past_key_values=cache, use_cache=True)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        try:  # a step that synchronizes raises here, before any capture could be invalidated
            torch.cuda.set_sync_debug_mode("error")
            model(input_ids=tok, past_key_values=cache, use_cache=True)
            syncs = None
        except RuntimeError as e:
            syncs = str(e).splitlines()[0][:120]
        finally:
            torch.cuda.set_sync_debug_mode("default")
        if syncs is not None:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(steps):
                    model(input_ids=tok, past_key_values=cache, use_cache=True)
                torch.cuda.synchronize()
            busy_us = sum(e.self_device_time_total for e in prof.key_averages())
            return busy_us * 1e-6 / steps, f"device time of the eager step's kernels (it syncs: {syncs})"
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(input_ids=tok, past_key_values=cache, use_cache=True)
        g.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            g.replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / steps, "eager step as one CUDA graph"


def profile_step(step, model, prompt, max_len, path, log, mode):
    """Where a mode's decode step spends its time: the host's time to submit a step (the call's
    return, not waiting for the device) against the step's wall time, and torch.profiler's table of
    what the host ran during two steps (ATen ops, CUDA runtime calls: a cudaStreamSynchronize or a
    device-to-host copy there is a step waiting for the device)."""
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        tok = step(prompt, cache)[:, -1:].argmax(-1)
        for _ in range(2):
            tok = step(tok, cache)[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        n, submit = 8, 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            s0 = time.perf_counter()
            out = step(tok, cache)
            submit += time.perf_counter() - s0
            tok = out[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / n
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                tok = step(tok, cache)[:, -1:].argmax(-1)
            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=60)
    path.write_text(f"{mode}: host submit {submit / n * 1e3:.3f} ms/step, wall {wall * 1e3:.3f} ms/step\n{table}\n")
    log(f"{mode} profile: host submit {submit / n * 1e3:.3f} ms/step, wall {wall * 1e3:.3f} ms/step -> {path}")


def profile_generate(model, generate, tokens, path, log, mode):
    """Where one generate() call spends its time per token: the host's time in
    prepare_inputs_for_generation and _update_model_kwargs_for_generation (timed without waiting
    for the device; model.forward is left alone, since transformers decides on its automatic
    compile by it), the device's kernel time, torch.profiler's table of what the host ran, and
    cProfile's view of the Python (inflated by cProfile itself; proportions only)."""
    import cProfile
    import io
    import pstats
    spent = {}
    names = ("prepare_inputs_for_generation", "_update_model_kwargs_for_generation")
    for name in names:
        fn = getattr(model, name)

        def timed_call(*a, _fn=fn, _name=name, **k):
            s0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[_name] = spent.get(_name, 0.0) + time.perf_counter() - s0
        setattr(model, name, timed_call)
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        generate()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    finally:
        for name in names:
            delattr(model, name)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        generate()
        torch.cuda.synchronize()
    events = prof.key_averages()
    device_us = sum(e.self_device_time_total for e in events) / tokens
    pr = cProfile.Profile()
    pr.enable()
    generate()
    torch.cuda.synchronize()
    pr.disable()
    py = io.StringIO()
    stats = pstats.Stats(pr, stream=py)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
    parts = ", ".join(f"{k} {v / tokens * 1e3:.3f}" for k, v in spent.items())
    line = (f"{mode} profile: wall {wall / tokens * 1e3:.3f} ms/token; host ms/token in {parts}; "
            f"device kernels {device_us / 1e3:.3f} ms/token")
    path.write_text(line + "\n" + events.table(sort_by="self_cpu_time_total", row_limit=50) + "\n"
                    + py.getvalue())
    log(line + f" -> {path}")


def run_mode(mode, model, prompt, steps, max_len, log, profile_dir=None, mask=None):
    # imported by the modes that use it: a run of the other modes never loads trident
    if mode in ("trident", "trident-graphs", "trident-unsplit", "backend"):
        import trident

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    t0 = time.perf_counter()
    counters = None
    if mode == "eager":
        fn = step
    elif mode == "trident":
        fn = trident.compile(step, graphs=False)
    elif mode in ("trident-graphs", "trident-unsplit"):
        # trident-unsplit: graphs not split at host reads (TRIDENT_GRAPH_SEGMENTS=0, read as each
        # specialization loads, so set for this mode's run only): a spec that reads a device value on
        # the host (Liger's fused MoE, its tile count) then runs without graphs, the A/B for segments
        fn = trident.compile(step, graphs=True)
    elif mode == "backend":
        torch._dynamo.reset()
        fn = torch.compile(step, backend="trident")
    elif mode in ("compile", "reduce-overhead"):
        torch._dynamo.reset()
        fn = torch.compile(step, mode=None if mode == "compile" else "reduce-overhead")
    elif mode in ("generate-eager", "generate-hf-compile", "generate-trident", "generate-trident-graphs"):
        return run_generate(mode, model, prompt, steps, max_len, log, mask, profile_dir)
    else:
        raise SystemExit(f"unknown mode {mode}")
    before = os.environ.get("TRIDENT_GRAPH_SEGMENTS")
    if mode == "trident-unsplit":
        os.environ["TRIDENT_GRAPH_SEGMENTS"] = "0"
    try:
        toks, dt = decode(fn, model, prompt, steps, max_len)
    finally:
        if before is None:
            os.environ.pop("TRIDENT_GRAPH_SEGMENTS", None)
        else:
            os.environ["TRIDENT_GRAPH_SEGMENTS"] = before
    if mode.startswith("trident"):
        counters = trident.counters(fn)
        for line in trident.explain(fn).splitlines():  # why a spec runs without its graph, if one does
            if "does not replay as a CUDA graph" in line or "split into segments" in line:
                log(f"{mode}: {line.strip()}")
    if profile_dir is not None:
        profile_step(fn, model, prompt, max_len, profile_dir / f"profile-{mode}.txt", log, mode)
    log(f"{mode}: {dt * 1e3:.3f} ms/step, first call to end {time.perf_counter() - t0:.1f} s, counters {counters}")
    return toks, dt, counters, None


def timed_generate(model, prompt, n, kw):
    """One generate() call of exactly n new tokens: (its output, seconds from a synchronized start
    to a synchronized end)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kw)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def run_generate(mode, model, prompt, steps, max_len, log, mask=None, profile_dir=None):
    """generate() with the static cache: eager (transformers' automatic torch.compile off), transformers'
    own automatic compile (generate-hf-compile), or model.forward compiled by trident (which turns
    the automatic compile off for that model). Each call of generate() makes a new StaticCache: graph
    mode rebinds its decode graph to the new cache's addresses; the warm-up generates the longest output
    first (later calls keep that cache length: no new specialization). Reported: ms per new token
    of the longer call, prefill included, and the split of generate()'s time into a per-call cost
    and a per-token cost, from two lengths (the pair with the median per-token cost of
    GENERATE_REPEATS)."""
    trident_mode = mode.startswith("generate-trident")
    if trident_mode:
        import trident
    short, long = steps + 3, 2 * (steps + 3)
    kw = dict(do_sample=False, cache_implementation="static", pad_token_id=0,
              disable_compile=mode == "generate-eager")
    if mask is not None:
        kw["attention_mask"] = mask
    eager_forward = model.forward
    counters = None

    def timed(n):
        return timed_generate(model, prompt, n, kw)

    try:
        if trident_mode:
            model.forward = trident.compile(eager_forward, graphs=mode == "generate-trident-graphs")
        with torch.no_grad():
            timed(long)  # warm-up (compiles)
            pairs = []
            for _ in range(GENERATE_REPEATS):  # the host's noise: the median of the repeats
                _, t_short = timed(short)
                out, t_long = timed(long)
                pairs.append((t_long - t_short, t_long))
            pairs.sort()
            diff, t_long = pairs[len(pairs) // 2]
            t_short = t_long - diff
            if profile_dir is not None:
                profile_generate(model, lambda: model.generate(prompt, max_new_tokens=long, min_new_tokens=long, **kw),
                                 long, profile_dir / f"profile-{mode}.txt", log, mode)
        if trident_mode:
            counters = trident.counters(model.forward)
    finally:
        model.forward = eager_forward
    per_token = (t_long - t_short) / (long - short)
    per_call = t_long - long * per_token
    log(f"{mode}: {t_long / long * 1e3:.3f} ms/token over {long} tokens (prefill included); per token "
        f"{per_token * 1e3:.3f} ms, per call {per_call * 1e3:.1f} ms; counters {counters}")
    return out[:, prompt.shape[1]:].cpu(), t_long / long, counters, per_token


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--modes", default="eager,trident")
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the model has (a quick look)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--liger", action="store_true")
    ap.add_argument("--pad", action="store_true",
                    help="generate() modes: row r of the batch left-padded by r %% 4 tokens, with its attention mask")
    ap.add_argument("--out", default="/tmp/hf_decode")
    ap.add_argument("--profile", action="store_true", help="also profile each decode mode's step (profile_step) and each generate mode's call (profile_generate)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / f"{args.model}-b{args.batch}.log", "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    model = build(args.model, args.layers, args.liger)
    g = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(10, model.config.vocab_size, (args.batch, args.prompt), generator=g).cuda()
    mask = None
    if args.pad:
        mask = torch.ones_like(prompt)
        for r in range(args.batch):
            mask[r, :r % 4] = 0
        prompt = prompt.masked_fill(mask == 0, 0)  # pad_token_id 0
    max_len = args.prompt + args.steps + 8
    results = {}
    fl, how = floor(model, prompt, args.steps, max_len)
    log(f"device floor ({how}): {fl * 1e3:.3f} ms/step")
    # tokens are compared with eager's: the decode loop's with the eager loop's, generate()'s with
    # generate-eager's where it ran (with --pad only those match: the loop passes no padding mask)
    refs = {}
    results = {"floor": {"ms": fl * 1e3}}
    for mode in args.modes.split(","):
        try:
            toks, dt, counters, per_token = run_mode(mode, model, prompt, args.steps, max_len, log,
                                                     out if args.profile else None, mask)
        except Exception as e:  # noqa: BLE001  (a mode that fails is reported, the others still run)
            log(f"{mode}: FAILED {type(e).__name__}: {str(e)[:400]}")
            results[mode] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
            continue
        if mode in ("eager", "generate-eager"):
            refs[mode] = toks
        ref = refs.get("eager")
        if mode.startswith("generate"):
            ref = refs.get("generate-eager", ref if mask is None else None)
        n = min(toks.shape[1], ref.shape[1]) if ref is not None else 0
        same = int((toks[:, :n] == ref[:, :n]).all(0).long().cumprod(0).sum()) if ref is not None else 0
        results[mode] = {"ms": dt * 1e3, "tok_s": args.batch / dt, "same_tokens": f"{same}/{n}",
                         "counters": counters}
        if per_token is not None:
            results[mode]["per_token_ms"] = per_token * 1e3
        # written after each mode: a mode that kills the process (reduce-overhead has) loses only itself
        (out / f"{args.model}-b{args.batch}.json").write_text(json.dumps(results, indent=1))
    results["floor"] = results.pop("floor")
    eager = results.get("eager", {}).get("ms")
    log(f"\n{args.model} ({model.config.num_hidden_layers} layers) batch {args.batch}, liger={args.liger}")
    log(f"{'mode':<24}{'ms/step':>9}{'tok/s':>9}{'x eager':>9}{'x floor':>9}  same tokens  (generate: ms per "
        "token over the longer output, prefill included; per-token cost)")
    for mode, r in results.items():
        if "ms" not in r:
            log(f"{mode:<24} {r['error'][:80]}")
            continue
        extra = f"  per token {r['per_token_ms']:.3f} ms" if "per_token_ms" in r else ""
        log(f"{mode:<24}{r['ms']:>9.3f}{args.batch / r['ms'] * 1e3:>9.1f}"
            f"{(eager / r['ms'] if eager else 0):>9.2f}{r['ms'] / (fl * 1e3):>9.2f}  {r.get('same_tokens', '')}{extra}")


if __name__ == "__main__":
    main()
