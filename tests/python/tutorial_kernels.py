"""Triton kernels shared by the CPU capture and specialization tests and the GPU tests (most from
Triton's tutorials)."""
import torch
import triton
import triton.language as tl


@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


# Matmul, from Triton's tutorial 03-matrix-multiplication.py (without its autotune list).
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


# Vector add (tutorial 01, shorter names).
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


# Layer norm forward, from Triton's tutorial 05-layer-norm.py.
@triton.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@triton.jit
def scaled_copy_kernel(src_ptr, dst_ptr, n, alpha, BLOCK: tl.constexpr):
    """Uses its float parameter as a Triton value (`.to`), as decode attention does with its scale:
    torch 2.11's mutation analysis failed on that (trident/_compat.py)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m) * alpha.to(tl.float32), mask=m)


def scaled_copy_then_add(src, dst):
    n = src.numel()
    scaled_copy_kernel[(triton.cdiv(n, 128),)](src, dst, n, 0.5, BLOCK=128)
    return src + dst  # src is read again: a clone of it could not be dropped


@triton.jit
def scale_rows_by_count_kernel(x_ptr, out_ptr, n_rows, N_COLS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, N_COLS)
    v = tl.load(x_ptr + row * N_COLS + cols)
    tl.store(out_ptr + row * N_COLS + cols, v * n_rows)


def scale_selected_rows(x, mask):
    """A kernel over the rows a mask selects (as an MoE expert's kernels run over the tokens routed
    to it): its grid and an int argument are the `nonzero`'s size, known only when it runs."""
    rows = x[mask.nonzero().squeeze(1)]
    out = torch.empty_like(rows)
    n = rows.shape[0]
    scale_rows_by_count_kernel[(n,)](rows, out, n, N_COLS=x.shape[1])
    return out


# A decode step's cache write at an int position and a read of the first n rows (graph mode's
# scalar patches and direct results, test_graph_scalars_gpu.py and test_graph_direct_results_gpu.py).
@triton.jit
def write_row_kernel(x_ptr, cache_ptr, pos, D: tl.constexpr):
    offs = tl.arange(0, D)
    tl.store(cache_ptr + pos * D + offs, tl.load(x_ptr + offs))


@triton.jit
def sum_rows_kernel(cache_ptr, out_ptr, n, D: tl.constexpr):
    offs = tl.arange(0, D)
    acc = tl.zeros([D], dtype=tl.float32)
    for i in range(0, n):
        acc += tl.load(cache_ptr + i * D + offs)
    tl.store(out_ptr + offs, acc)
