"""User Triton kernels of an LLM decode step, as a model author writes them, with pure-PyTorch
references for correctness checks.

Each wrapper allocates its output with torch.empty and launches `kernel[grid](...)`; sizes that vary
at run time (context length, position) are plain int arguments. Kernels compute in fp32 and store
in the output's dtype; the references do the same so that results agree to rounding.
"""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


# ---- per-call microbenchmarks ------------------------------------------------------------------

@triton.jit
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def add_one(x):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    add_one_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


def add_one_ref(x):
    return x + 1


@triton.jit
def noop_kernel(out_ptr):
    # Nearly empty: one store, so that no compiler may drop the launch as dead code.
    tl.store(out_ptr, 0.0)


def noop(x):
    out = torch.empty((1,), dtype=torch.float32, device=x.device)
    noop_kernel[(1,)](out)
    return out


def noop_ref(x):
    return torch.zeros((1,), dtype=torch.float32, device=x.device)


# ---- RMSNorm: one row per program --------------------------------------------------------------

@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride_x, stride_out, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x, weight, eps=1e-6):
    assert x.dim() == 2 and x.stride(1) == 1, "rmsnorm expects [rows, cols] with unit column stride"
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows, cols = x.shape
    rmsnorm_kernel[(rows,)](x, weight, out, x.stride(0), out.stride(0), cols, eps,
                            BLOCK=triton.next_power_of_2(cols))
    return out


def rmsnorm_ref(x, weight, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


# ---- rotary embedding of q and k (rotate-half form), out of place from the fused qkv row -------

@triton.jit
def _rotate_half(src, dst, cos, sin, d, HALF: tl.constexpr):
    x1 = tl.load(src + d).to(tl.float32)
    x2 = tl.load(src + HALF + d).to(tl.float32)
    tl.store(dst + d, (x1 * cos - x2 * sin).to(dst.dtype.element_ty))
    tl.store(dst + HALF + d, (x2 * cos + x1 * sin).to(dst.dtype.element_ty))


@triton.jit
def rotary_kernel(qkv_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, pos, stride_qkv, n_heads,
                  HEAD_DIM: tl.constexpr):
    pid = tl.program_id(0)              # one program per (batch row, head)
    b = pid // n_heads
    h = pid % n_heads
    HALF: tl.constexpr = HEAD_DIM // 2
    d = tl.arange(0, HALF)
    cos = tl.load(cos_ptr + pos * HALF + d)  # tables are fp32 [max_seq, HEAD_DIM // 2]
    sin = tl.load(sin_ptr + pos * HALF + d)
    q_src = qkv_ptr + b * stride_qkv + h * HEAD_DIM
    k_src = q_src + n_heads * HEAD_DIM
    dst = (b * n_heads + h) * HEAD_DIM
    _rotate_half(q_src, q_out_ptr + dst, cos, sin, d, HALF)
    _rotate_half(k_src, k_out_ptr + dst, cos, sin, d, HALF)


def rotary(qkv, cos, sin, pos, n_heads, head_dim):
    """qkv: [B, 3*H*D] (q, k, v heads in that order). Returns rotated q and k, each [B, H, D]."""
    assert qkv.stride(1) == 1 and cos.is_contiguous() and sin.is_contiguous()
    batch = qkv.shape[0]
    q = torch.empty((batch, n_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((batch, n_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    rotary_kernel[(batch * n_heads,)](qkv, cos, sin, q, k, pos, qkv.stride(0), n_heads, HEAD_DIM=head_dim)
    return q, k


def rotary_tables(max_seq, head_dim, base=10000.0, device=None):
    """cos and sin tables, fp32 [max_seq, head_dim // 2]."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(max_seq, dtype=torch.float64), inv)
    return ang.cos().float().to(device), ang.sin().float().to(device)


def rotary_ref(qkv, cos, sin, pos, n_heads, head_dim):
    batch = qkv.shape[0]
    q, k = qkv[:, : 2 * n_heads * head_dim].float().view(batch, 2, n_heads, head_dim).unbind(1)
    c, s = cos[pos:pos + 1], sin[pos:pos + 1]  # a slice keeps pos symbolic under torch.compile

    def rot(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(qkv.dtype)

    return rot(q), rot(k)


# ---- SiLU, elementwise (the activation of the HF Llama MLP) --------------------------------------

@triton.jit
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x * tl.sigmoid(x)).to(out_ptr.dtype.element_ty), mask=mask)


def silu(x):
    """silu(x) = x * sigmoid(x) of a contiguous tensor of any shape."""
    assert x.is_contiguous(), "silu expects a contiguous tensor"
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    silu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


def silu_ref(x):
    return F.silu(x.float()).to(x.dtype)


# ---- SiLU(gate) * up, from the fused gate_up projection ---------------------------------------

@triton.jit
def silu_mul_kernel(gu_ptr, out_ptr, n_cols, stride_gu, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (g * tl.sigmoid(g) * u).to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate_up):
    """gate_up: [M, 2F] (gate then up). Returns silu(gate) * up, [M, F]."""
    assert gate_up.dim() == 2 and gate_up.stride(1) == 1
    rows, cols = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((rows, cols), dtype=gate_up.dtype, device=gate_up.device)
    silu_mul_kernel[(rows, triton.cdiv(cols, 1024))](gate_up, out, cols, gate_up.stride(0), out.stride(0),
                                                     BLOCK=1024)
    return out


def silu_mul_ref(gate_up):
    g, u = gate_up.float().chunk(2, -1)
    return (F.silu(g) * u).to(gate_up.dtype)


# ---- decode attention: one query token over the KV cache --------------------------------------

@triton.jit
def _attend(q, k_base, v_base, d, lo, hi, stride_ks, stride_vs, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Online softmax of q (fp32, scaled) over context positions [lo, hi) in blocks of BLOCK_N:
    the unnormalized fp32 accumulator, the running max (-inf when the range is empty) and the
    running sum of exponentials."""
    m_i = tl.full((), float("-inf"), tl.float32)
    l_i = tl.full((), 0.0, tl.float32)
    acc = tl.zeros((HEAD_DIM,), tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        mask = n < hi
        k = tl.load(k_base + n[:, None] * stride_ks + d[None, :], mask=mask[:, None], other=0.0)
        s = tl.where(mask, tl.sum(k.to(tl.float32) * q[None, :], axis=1), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0).to(tl.float32))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(v_base + n[:, None] * stride_vs + d[None, :], mask=mask[:, None], other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def decode_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, ctx_len, scale, n_heads,
                            stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs,
                            HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)              # one program per (batch row, head)
    b = pid // n_heads
    h = pid % n_heads
    d = tl.arange(0, HEAD_DIM)
    # scale is cast so the running max stays fp32 even when a caller passes it as fp64 (Inductor does)
    q = tl.load(q_ptr + pid * HEAD_DIM + d).to(tl.float32) * scale.to(tl.float32)
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    acc, m_i, l_i = _attend(q, k_base, v_base, d, 0, ctx_len, stride_ks, stride_vs, BLOCK_N, HEAD_DIM)
    tl.store(o_ptr + pid * HEAD_DIM + d, (acc / l_i).to(o_ptr.dtype.element_ty))


def decode_attention_per_head(q, k_cache, v_cache, ctx_len, scale, block_n=128, num_warps=8):
    """One program per (batch row, head) over the whole context."""
    assert q.is_contiguous() and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    batch, n_heads, head_dim = q.shape
    out = torch.empty((batch, n_heads, head_dim), dtype=q.dtype, device=q.device)
    decode_attention_kernel[(batch * n_heads,)](
        q, k_cache, v_cache, out, ctx_len, scale, n_heads,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        HEAD_DIM=head_dim, BLOCK_N=block_n, num_warps=num_warps)
    return out


def decode_attention(q, k_cache, v_cache, ctx_len, scale):
    """q: [B, H, D] contiguous; caches: [B, H, max_seq, D]; attends to positions [0, ctx_len).

    With fewer (batch row, head) pairs than half an H200's 132 SMs, the context is split 8 ways
    (flash-decoding); with more, one program per pair already fills the GPU. Choices and figures
    from benchmarks/attention_variants.py on the H200 (benchmarks/NOTES.md, session 5)."""
    if q.shape[0] * q.shape[1] < 64:
        return decode_attention_split(q, k_cache, v_cache, ctx_len, scale, n_splits=8, block_n=64)
    return decode_attention_per_head(q, k_cache, v_cache, ctx_len, scale, block_n=128, num_warps=8)


def decode_attention_ref(q, k_cache, v_cache, ctx_len, scale):
    k = k_cache[:, :, :ctx_len].float()
    v = v_cache[:, :, :ctx_len].float()
    s = torch.einsum("bhd,bhsd->bhs", q.float() * scale, k)
    return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v).to(q.dtype)



# ---- decode attention, split over the context (flash-decoding): two kernels --------------------
#
# One program per (batch row, head, split) computes an online softmax over its share of the context
# and writes an unnormalized partial (fp32 accumulator, running max, running sum); a second kernel,
# one program per (batch row, head), merges the splits. At batch 1 the one-program-per-head kernel
# above runs 16 programs on a 132-SM GPU; split 8 ways, 128.

@triton.jit
def decode_attention_split_kernel(q_ptr, k_ptr, v_ptr, acc_ptr, ml_ptr, ctx_len, scale, n_heads,
                                  stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs,
                                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, N_SPLITS: tl.constexpr):
    pid = tl.program_id(0)              # (batch row, head)
    split = tl.program_id(1)
    b = pid // n_heads
    h = pid % n_heads
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + pid * HEAD_DIM + d).to(tl.float32) * scale.to(tl.float32)
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    # Each split takes a whole number of blocks; trailing splits may be empty (m = -inf, l = 0).
    chunk = tl.cdiv(tl.cdiv(ctx_len, BLOCK_N), N_SPLITS) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, ctx_len)
    acc, m_i, l_i = _attend(q, k_base, v_base, d, lo, hi, stride_ks, stride_vs, BLOCK_N, HEAD_DIM)
    part = pid * N_SPLITS + split
    tl.store(acc_ptr + part * HEAD_DIM + d, acc)
    tl.store(ml_ptr + part * 2, m_i)
    tl.store(ml_ptr + part * 2 + 1, l_i)


@triton.jit
def decode_attention_merge_kernel(acc_ptr, ml_ptr, o_ptr, HEAD_DIM: tl.constexpr, N_SPLITS: tl.constexpr):
    pid = tl.program_id(0)              # (batch row, head)
    sp = tl.arange(0, N_SPLITS)
    d = tl.arange(0, HEAD_DIM)
    part = pid * N_SPLITS + sp
    m = tl.load(ml_ptr + part * 2)
    l = tl.load(ml_ptr + part * 2 + 1)
    w = tl.exp(m - tl.max(m, axis=0))   # split 0 is never empty, so the max is finite; empty splits weigh 0
    acc = tl.load(acc_ptr + part[:, None] * HEAD_DIM + d[None, :])
    o = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
    tl.store(o_ptr + pid * HEAD_DIM + d, o.to(o_ptr.dtype.element_ty))


def decode_attention_split(q, k_cache, v_cache, ctx_len, scale, n_splits=8, block_n=64):
    """Same contract as decode_attention, computed in n_splits parts of the context and merged."""
    assert q.is_contiguous() and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    batch, n_heads, head_dim = q.shape
    acc = torch.empty((batch * n_heads, n_splits, head_dim), dtype=torch.float32, device=q.device)
    ml = torch.empty((batch * n_heads, n_splits, 2), dtype=torch.float32, device=q.device)
    decode_attention_split_kernel[(batch * n_heads, n_splits)](
        q, k_cache, v_cache, acc, ml, ctx_len, scale, n_heads,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        HEAD_DIM=head_dim, BLOCK_N=block_n, N_SPLITS=n_splits)
    out = torch.empty((batch, n_heads, head_dim), dtype=q.dtype, device=q.device)
    decode_attention_merge_kernel[(batch * n_heads,)](acc, ml, out, HEAD_DIM=head_dim, N_SPLITS=n_splits)
    return out
