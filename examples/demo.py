"""torch-trident demo: a small Llama-style decoder step (RMSNorm, rotary attention over a KV cache
updated in place, SwiGLU MLP) compiled with trident.compile, checked against eager, then timed.
Runs on the GPU when one is present, on the CPU otherwise. Timings here are illustrative; the
figures the project reports come from benchmarks/."""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import trident


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class Block(nn.Module):
    def __init__(self, d=256, heads=4, max_seq=128):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate_up = nn.Linear(d, 2 * 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.outer(torch.arange(max_seq).float(), inv)
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1))
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1))

    def rope(self, x, pos):
        x1, x2 = x.chunk(2, -1)
        return x * self.cos[pos] + torch.cat([-x2, x1], -1) * self.sin[pos]

    def forward(self, x, k_cache, v_cache, pos: int):
        b = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(b, 1, 3, self.h, self.hd).unbind(2)
        q, k = self.rope(q.transpose(1, 2), pos), self.rope(k.transpose(1, 2), pos)
        k_cache[:, :, pos] = k[:, :, 0]
        v_cache[:, :, pos] = v.transpose(1, 2)[:, :, 0]
        att = F.scaled_dot_product_attention(q, k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1])
        x = x + self.o(att.transpose(1, 2).reshape(b, 1, -1))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = Block().to(device, dtype).eval()
    fast = trident.compile(model)
    x = torch.randn(1, 1, 256, device=device, dtype=dtype)
    kc = torch.zeros(1, 4, 128, 64, device=device, dtype=dtype)
    vc = torch.zeros_like(kc)
    kc2, vc2 = kc.clone(), vc.clone()
    pos = 5
    with torch.inference_mode():
        want = model(x, kc, vc, pos)
        got = fast(x, kc2, vc2, pos)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(kc2, kc)

        def per_call(f, caches, n=200):
            for _ in range(10):
                f(x, *caches, pos)
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                f(x, *caches, pos)
            if device == "cuda":
                torch.cuda.synchronize()
            return (time.perf_counter() - t) / n * 1e6

        eager_us = per_call(model, (kc, vc))
        fast_us = per_call(fast, (kc2, vc2))

        # A decode: the position is a Python int used as an index; it becomes symbolic once it has
        # varied, so the whole decode runs on one or two specializations.
        ke, ve, kt, vt = (torch.zeros_like(kc) for _ in range(4))
        h = x
        for step in range(32):
            want, got = model(h, ke, ve, step), fast(h, kt, vt, step)
            torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
            h = want
        torch.testing.assert_close(kt, ke, atol=2e-2, rtol=2e-2)
    c = trident.counters(fast)
    print(f"device={device} dtype={dtype}: outputs and KV cache match eager, also over a 32-step decode")
    print(f"per call: eager {eager_us:.1f} us, trident {fast_us:.1f} us")
    print("counters:", {k: c[k] for k in ("hits", "misses", "compiles", "specializations", "fallbacks")})
    print(trident.explain(fast).splitlines()[2])


if __name__ == "__main__":
    main()
