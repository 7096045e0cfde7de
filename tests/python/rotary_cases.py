"""The rotary embedding as Hugging Face's Llama writes it (`apply_rotary_pos_emb`, `rotate_half`),
shared by the CPU lowering tests and the GPU bit-for-bit tests of builtin_rotary.py."""
import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(q, k, cos, sin):
    """HF's apply_rotary_pos_emb with unsqueeze_dim=1: q [B, H, S, D], cos and sin [B, S, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def decode_inputs(batch, heads, kv_heads, dim, dtype, device="cpu", generator=None):
    """q and k as HF's attention makes them at decode: a projection's [B, 1, H * D] viewed as
    [B, 1, H, D] and transposed to [B, H, 1, D] (not contiguous); cos and sin [B, 1, D]."""
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(dtype)
    q = randn(batch, 1, heads * dim).view(batch, 1, heads, dim).transpose(1, 2)
    k = randn(batch, 1, kv_heads * dim).view(batch, 1, kv_heads, dim).transpose(1, 2)
    return q, k, randn(batch, 1, dim), randn(batch, 1, dim)
