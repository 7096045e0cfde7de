"""Device time of the decode step's attention kernel designs at the suite's shapes (GPU machine).

    python3 benchmarks/attention_variants.py

For batch 1 and 8 and context 160 and 512 (the growing suite's mean and the fixed suite's length),
with the full decoder's heads (16 x 128, bf16, max_seq 512): device µs per call of each variant,
from a CUDA graph of 50 calls replayed (median of 7), and its largest difference from the fp32
reference. A diagnostic for the suite's design, not part of it: it says how much of the step's
device floor the attention kernel's own design accounts for.
"""
import statistics

import torch
import kernels
import models


def per_head(block_n, num_warps):
    return lambda q, kc, vc, ctx, scale: kernels.decode_attention_per_head(
        q, kc, vc, ctx, scale, block_n=block_n, num_warps=num_warps)


def split(n_splits, block_n=64):
    return lambda q, kc, vc, ctx, scale: kernels.decode_attention_split(
        q, kc, vc, ctx, scale, n_splits=n_splits, block_n=block_n)


VARIANTS = {
    "per head, BLOCK_N 64, 4 warps (suite before)": per_head(64, 4),
    "per head, BLOCK_N 128, 8 warps": per_head(128, 8),
    "per head, BLOCK_N 32, 4 warps": per_head(32, 4),
    "split 4 + merge": split(4),
    "split 8 + merge": split(8),
    "split 16 + merge": split(16),
    "split 8 + merge, BLOCK_N 32": split(8, 32),
    "the suite's choice (kernels.decode_attention)": kernels.decode_attention,
}


def device_us(fn, calls=50, repeats=7):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    samples = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1000.0 / calls)
    return statistics.median(samples)


def main():
    cfg = models.FULL
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for batch in (1, 8):
        shape = (batch, cfg.n_heads, cfg.max_seq, cfg.head_dim)
        kc = torch.randn(shape, generator=gen, device="cuda").to(cfg.dtype)
        vc = torch.randn(shape, generator=gen, device="cuda").to(cfg.dtype)
        q = torch.randn((batch, cfg.n_heads, cfg.head_dim), generator=gen, device="cuda").to(cfg.dtype)
        scale = cfg.head_dim ** -0.5
        for ctx in (160, 512):
            ref = kernels.decode_attention_ref(q, kc, vc, ctx, scale).float()
            for name, variant in VARIANTS.items():
                err = (variant(q, kc, vc, ctx, scale).float() - ref).abs().max().item()
                us = device_us(lambda: variant(q, kc, vc, ctx, scale))
                rows.append((batch, ctx, name, us, err))
                print(f"b{batch} ctx {ctx:3d}  {name:46s} {us:8.2f} us  max|diff| {err:.3g}", flush=True)
    print("\nbatch  ctx  variant                                          device us  max|diff| vs fp32 ref")
    for batch, ctx, name, us, err in rows:
        print(f"{batch:5d} {ctx:4d}  {name:46s} {us:9.2f}  {err:.3g}")


if __name__ == "__main__":
    main()
