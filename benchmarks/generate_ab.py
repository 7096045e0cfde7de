"""generate() per new token, modes interleaved in rounds: transformers' own automatic compile of a
static-cache decode (reduce-overhead CUDA graphs, what transformers' users get), trident's graph mode
with transformers' eager mask creation, and trident's graph mode as installed (mask creation
compiled too, transformers_generate.py: GenerateMasks). Eager generate() gives the reference tokens.

The lent machines' host speed drifts within minutes, and generate() waits for the device every token
(transformers' stop check), so its host work is on the critical path: the modes take turns, round
after round, each round timing a short and a long output of each mode; per-token cost = the
difference over the extra tokens, the median over rounds reported with all rounds.

    python3 benchmarks/generate_ab.py --model llama-1b [--rounds 5] [--steps 35]

Prints one table last: per-token cost, ms per token of the long output with its prefill, and the
tokens equal to eager's; then trident's speed over transformers' compile, per token and in tokens/s
of the long call (prefill included), each taken within a round and its median over the rounds."""
import argparse
import statistics

import torch

import hf_decode

MODES = ("hf-compile", "trident-eager-masks", "trident")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(hf_decode.MODELS), default="llama-1b")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=35, help="the short output; the long one is twice as long")
    a = ap.parse_args()
    import trident

    model = hf_decode.build(a.model, a.layers, False)
    g = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(10, model.config.vocab_size, (1, 16), generator=g).cuda()
    kw = dict(do_sample=False, cache_implementation="static", pad_token_id=0)
    short, long = a.steps, 2 * a.steps
    eager_forward = model.forward
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=long, min_new_tokens=long, disable_compile=True, **kw)
    compiled = trident.compile(eager_forward)  # graph mode, the default
    masks = model.__dict__.get("create_masks_for_generate")
    assert masks is not None, "trident.compile installed no mask function (transformers_generate.py)"

    def use(mode):
        model.__dict__.pop("create_masks_for_generate", None)
        model.forward = eager_forward if mode == "hf-compile" else compiled
        if mode == "trident":
            model.create_masks_for_generate = masks

    def timed(n):
        return hf_decode.timed_generate(model, prompt, n, kw)

    rows = {m: [] for m in MODES}
    outs = {}
    try:
        with torch.no_grad():
            for mode in MODES:  # compiles, captures, warm-up, both lengths (a new cache length
                use(mode)          # recompiles transformers' compile)
                timed(long)
                timed(short)
                timed(long)
            for _ in range(a.rounds):
                for mode in MODES:
                    use(mode)
                    _, t_short = timed(short)
                    outs[mode], t_long = timed(long)
                    rows[mode].append(((t_long - t_short) / (long - short) * 1e3, t_long / long * 1e3))
    finally:
        model.__dict__.pop("create_masks_for_generate", None)
        model.forward = eager_forward
        if masks is not None:
            model.create_masks_for_generate = masks
    c = trident.counters(masks.compiled)
    print(f"mask function: {c['hits']} hits, {c['misses']} misses, {c['fallbacks']} fallbacks")
    print(f"\n{a.model} ({model.config.num_hidden_layers} layers), generate() of {short} and {long} new tokens, "
          f"{a.rounds} interleaved rounds")
    print(f"{'mode':<22}{'ms/token':>10}{'w/ prefill':>11}  same tokens as eager  per-token ms, each round")
    for mode, r in rows.items():
        per_token = statistics.median(x[0] for x in r)
        per_call = statistics.median(x[1] for x in r)
        same = int((outs[mode] == want).all(0).long().cumprod(0).sum())
        print(f"{mode:<22}{per_token:>10.3f}{per_call:>11.3f}  {same}/{want.shape[1]:<19}"
              f"{[round(x[0], 3) for x in r]}")
    # The host drifts between rounds: the ratio is taken within each round (modes side by side),
    # then its median. Tokens/s of a generate() call = new tokens / the call's time, prefill included.
    for what, i in (("per token", 0), (f"tokens/s of a {long}-token call", 1)):
        ratios = [h[i] / t[i] for h, t in zip(rows["hf-compile"], rows["trident"])]
        print(f"trident over hf-compile, {what}: median {statistics.median(ratios):.2f}x, "
              f"each round {[round(x, 2) for x in ratios]}")


if __name__ == "__main__":
    main()
