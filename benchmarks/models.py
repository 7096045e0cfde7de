"""A Llama-style decoder for one decode step: RMSNorm, rotary, SiLU-mul and decode attention are user
Triton kernels (or their PyTorch references with use_triton=False); projections are ATen
(F.linear); the KV cache is preallocated per layer and written in place at position `pos`.

Weights are random (seeded) and scaled so that activations stay O(1) through the layers.
"""
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels


@dataclass(frozen=True)
class DecoderConfig:
    n_layers: int = 8
    d_model: int = 2048
    n_heads: int = 16
    head_dim: int = 128
    ffn_dim: int = 5632
    max_seq: int = 512
    dtype: torch.dtype = torch.bfloat16
    eps: float = 1e-6


FULL = DecoderConfig()
QUICK = replace(FULL, n_layers=2, d_model=1024, head_dim=64, ffn_dim=2816)
TINY = replace(FULL, n_layers=2, d_model=256, n_heads=4, head_dim=64, ffn_dim=512, max_seq=192)  # smoke tests


class Decoder(nn.Module):
    def __init__(self, cfg: DecoderConfig, use_triton: bool = True, device="cpu", seed: int = 0):
        super().__init__()
        self.cfg = cfg
        g = torch.Generator(device=device).manual_seed(seed)
        d, hd, nh, f = cfg.d_model, cfg.head_dim, cfg.n_heads, cfg.ffn_dim

        def weight(*shape):  # [out, in], std 1/sqrt(in)
            w = torch.randn(shape, generator=g, device=device) * shape[-1] ** -0.5
            return nn.Parameter(w.to(cfg.dtype), requires_grad=False)

        def norm_weight(n):
            w = 1.0 + 0.1 * torch.randn((n,), generator=g, device=device)
            return nn.Parameter(w.to(cfg.dtype), requires_grad=False)

        self.layers = nn.ModuleList()
        for _ in range(cfg.n_layers):
            layer = nn.Module()
            layer.attn_norm, layer.mlp_norm = norm_weight(d), norm_weight(d)
            layer.wqkv = weight(3 * nh * hd, d)
            layer.wo = weight(d, nh * hd)
            layer.w_gate_up = weight(2 * f, d)
            layer.w_down = weight(d, f)
            self.layers.append(layer)
        self.final_norm = norm_weight(d)
        cos, sin = kernels.rotary_tables(cfg.max_seq, hd, device=device)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.set_ops(use_triton)

    def set_ops(self, use_triton: bool):
        """Run RMSNorm, rotary, SiLU-mul and attention with the Triton kernels or the references."""
        k = kernels
        self.use_triton = use_triton
        self.rmsnorm = k.rmsnorm if use_triton else k.rmsnorm_ref
        self.rotary = k.rotary if use_triton else k.rotary_ref
        self.silu_mul = k.silu_mul if use_triton else k.silu_mul_ref
        self.attention = k.decode_attention if use_triton else k.decode_attention_ref
        return self

    def forward(self, x, caches, pos: int):
        """x: [B, d_model]; caches: one (k_cache, v_cache) per layer, each [B, H, max_seq, D], written at
        `pos`; attends to positions [0, pos]. Returns the final-normed hidden state [B, d_model]."""
        cfg = self.cfg
        b, nh, hd = x.shape[0], cfg.n_heads, cfg.head_dim
        for layer, (k_cache, v_cache) in zip(self.layers, caches):
            qkv = F.linear(self.rmsnorm(x, layer.attn_norm, cfg.eps), layer.wqkv)
            q, k = self.rotary(qkv, self.cos, self.sin, pos, nh, hd)
            # A slice (pos:pos+1), not an index: torch.compile keeps a slice start symbolic, while
            # `cache[:, :, pos] = k` makes it specialize (recompile) on every position.
            k_cache[:, :, pos:pos + 1] = k.unsqueeze(2)
            v_cache[:, :, pos:pos + 1] = qkv[:, 2 * nh * hd:].view(b, nh, 1, hd)
            att = self.attention(q, k_cache, v_cache, pos + 1, hd ** -0.5)
            x = x + F.linear(att.reshape(b, nh * hd), layer.wo)
            gate_up = F.linear(self.rmsnorm(x, layer.mlp_norm, cfg.eps), layer.w_gate_up)
            x = x + F.linear(self.silu_mul(gate_up), layer.w_down)
        return self.rmsnorm(x, self.final_norm, cfg.eps)

    decode_step = forward

    def new_caches(self, batch: int, device=None, seed: int = 1, fill: bool = True):
        """Per-layer (k_cache, v_cache); with fill, seeded random content stands for earlier tokens."""
        cfg, device = self.cfg, device or self.cos.device
        g = torch.Generator(device=device).manual_seed(seed)
        shape = (batch, cfg.n_heads, cfg.max_seq, cfg.head_dim)

        def one():
            if not fill:
                return torch.zeros(shape, device=device, dtype=cfg.dtype)
            return torch.randn(shape, generator=g, device=device).to(cfg.dtype)

        return [(one(), one()) for _ in range(cfg.n_layers)]

    def new_input(self, batch: int, device=None, seed: int = 2):
        device = device or self.cos.device
        g = torch.Generator(device=device).manual_seed(seed)
        return torch.randn((batch, self.cfg.d_model), generator=g, device=device).to(self.cfg.dtype)


def clone_caches(caches):
    return [(k.clone(), v.clone()) for k, v in caches]


def copy_caches_(dst, src):
    for (dk, dv), (sk, sv) in zip(dst, src):
        dk.copy_(sk)
        dv.copy_(sv)
