"""User Triton kernels through trident on the GPU (run on the GPU machine: pytest -m gpu).

Every test writes a small user function (or nn.Module) that launches its kernel(s) the way user
code does, runs it eagerly (Triton's own launcher) and through trident.compile on fresh random CUDA
inputs of the same shapes (two calls), and compares outputs and every input the kernels mutate. The
eager result is also checked against a plain PyTorch reference, so a failure says whether the
kernel or trident is wrong. After two calls each compiled function must have compiled once and hit
once. Kernel patterns: the Triton tutorials (vector add, fused softmax, layer norm, autotuned
matmul), grids (tuple, lambda META, 2D), argument kinds (positional/keyword, defaults, int, float,
bool, None, ints equal to 1 and 16), autotune (key, prune_configs_by, reset_to_zero,
restore_value), heuristics (alone and under autotune), launch options (num_warps, num_stages),
>48 KB shared memory, device-side tensor descriptors (global scratch), in-place writes (KV cache),
several outputs, ATen views of kernel outputs, fp16/bf16, misaligned pointers, and a launch error.
"""
import contextlib
import math
import re

import pytest
import torch
import torch.nn as nn
import triton
import triton.language as tl

import trident
from tutorial_kernels import _layer_norm_fwd_fused, matmul_kernel, scale_selected_rows, scaled_copy_then_add

pytestmark = pytest.mark.gpu

DEVICE = "cuda"


def require_cuda():
    """First line of every test: without a GPU the test fails (it is never skipped)."""
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


# ---------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------

# eager vs trident: the same kernel source and options, so results match tightly (kernels whose
# autotune choice may differ between the two runs pass looser tolerances).
_TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
    torch.bfloat16: dict(atol=1e-2, rtol=1.6e-2),
}
# eager vs the PyTorch reference (different summation orders, fp32 accumulation).
_REF_TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, device=DEVICE)


def _clone(tree):
    """Deep copy of an argument tree. Tensors keep their storage offset, strides and the rest of
    their storage, so a view (e.g. a misaligned x[1:]) stays such a view."""
    if isinstance(tree, torch.Tensor):
        t = torch.empty(0, dtype=tree.dtype, device=tree.device)
        t.set_(tree.untyped_storage().clone(), tree.storage_offset(), tree.size(), tree.stride())
        return t
    if isinstance(tree, (list, tuple)):
        return type(tree)(_clone(x) for x in tree)
    return tree


def _leaves(tree, path="out"):
    if isinstance(tree, (list, tuple)):
        for i, x in enumerate(tree):
            yield from _leaves(x, f"{path}[{i}]")
    else:
        yield path, tree


def _assert_tree_close(actual, expected, tols, what):
    a, e = list(_leaves(actual, what)), list(_leaves(expected, what))
    assert [p for p, _ in a] == [p for p, _ in e], f"{what}: structure differs"
    for (path, x), (_, y) in zip(a, e):
        if isinstance(y, torch.Tensor):
            assert isinstance(x, torch.Tensor), f"{path}: expected a tensor, got {type(x).__name__}"
            assert (x.shape, x.dtype, x.device) == (y.shape, y.dtype, y.device), path
            kw = tols(y.dtype) if y.dtype.is_floating_point else dict(atol=0, rtol=0)
            torch.testing.assert_close(x, y, **kw, msg=lambda m, path=path: f"{path}: {m}")
        else:
            assert x == y, f"{path}: {x!r} != {y!r}"


def _alias_signature(outputs, inputs):
    """Which outputs share storage with which inputs / earlier outputs (eager's aliasing)."""
    ins = [t for _, t in _leaves(inputs) if isinstance(t, torch.Tensor)]
    outs = [t for _, t in _leaves(outputs) if isinstance(t, torch.Tensor)]
    key = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    return [([i for i, x in enumerate(ins) if key(x) == key(o)],
             [j for j, x in enumerate(outs[:k]) if key(x) == key(o)]) for k, o in enumerate(outs)]


def _tolerances(table, override):
    def pick(dtype):
        return dict(override) if override is not None else table.get(dtype, dict(atol=1e-5, rtol=1e-5))
    return pick


def _run_both(fast, fn, inputs, *, ref=None, tol=None, ref_tol=None, eager=None, ctx=None, where=""):
    """One call: eager, trident and the reference on separate copies of `inputs`."""
    eager = eager or fn
    eager_in, fast_in, ref_in = _clone(inputs), _clone(inputs), _clone(inputs)
    with (ctx or contextlib.nullcontext)():
        expected = eager(*eager_in)
        actual = fast(*fast_in)
        reference = ref(*ref_in) if ref is not None else None
    torch.cuda.synchronize()
    tols = _tolerances(_TOL, tol)
    _assert_tree_close(actual, expected, tols, f"{where} trident output")
    _assert_tree_close(fast_in, eager_in, tols, f"{where} trident inputs after the call")
    assert _alias_signature(actual, fast_in) == _alias_signature(expected, eager_in), f"{where} aliasing"
    if ref is not None:
        rtols = _tolerances(_REF_TOL, ref_tol)
        _assert_tree_close(expected, reference, rtols, f"{where} eager vs reference output")
        _assert_tree_close(eager_in, ref_in, rtols, f"{where} eager vs reference inputs after the call")
    return actual


def _check(fn, make_inputs, *, ref=None, tol=None, ref_tol=None, eager=None, ctx=None, calls=2):
    """Compile `fn`, call it `calls` times on fresh random inputs of the same shapes, compare each
    call with eager (and the reference), then check it compiled once and hit on every later call."""
    fast = trident.compile(fn)
    for i in range(calls):
        _run_both(fast, fn, make_inputs(), ref=ref, tol=tol, ref_tol=ref_tol, eager=eager, ctx=ctx,
                  where=f"call {i}:")
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["misses"], c["specializations"], c["fallbacks"]) == \
        (1, calls - 1, 1, 1, 0), c
    return fast


def _grid1(n, block):
    return (triton.cdiv(n, block),)


# ---------------------------------------------------------------------------------------------
# 1. Tutorial vector add
# ---------------------------------------------------------------------------------------------

@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def vector_add(x, y):
    output = torch.empty_like(x)
    n_elements = output.numel()
    grid = (triton.cdiv(n_elements, 1024),)
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


def test_tutorial_vector_add():
    require_cuda()
    _check(vector_add, lambda: (randn(5000), randn(5000)), ref=torch.add)


def add_into_a_view(x, y):
    out = torch.empty(x.numel(), 1, device=x.device)
    add_kernel[_grid1(x.numel(), 256)](x, y, out.squeeze(1), x.numel(), BLOCK_SIZE=256)
    return out.squeeze(1) * 2


def add_into_a_strided_view(x, y):
    # the kernel ignores the view's stride (as many do): eager writes the first n elements of
    # `out`'s memory, so must trident, in place (a contiguous clone copied back would not)
    out = torch.zeros(x.numel(), 2, device=x.device)
    before = out.sum()
    add_kernel[_grid1(x.numel(), 256)](x, y, out[:, 0], x.numel(), BLOCK_SIZE=256)
    return out * 2, before


@pytest.mark.parametrize("fn", [add_into_a_view, add_into_a_strided_view])
def test_a_kernel_writing_a_view_of_a_fresh_allocation(fn):
    require_cuda()
    _check(fn, lambda: (randn(1000), randn(1000)), tol=dict(atol=0, rtol=0))


# ---------------------------------------------------------------------------------------------
# 2. Tutorial fused softmax (one row per program)
# ---------------------------------------------------------------------------------------------

@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                   BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    row_start_ptr = input_ptr + row_idx * input_row_stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    input_ptrs = row_start_ptr + col_offsets
    row = tl.load(input_ptrs, mask=col_offsets < n_cols, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    denominator = tl.sum(numerator, axis=0)
    softmax_output = numerator / denominator
    output_row_start_ptr = output_ptr + row_idx * output_row_stride
    tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=col_offsets < n_cols)


def softmax(x):
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 4
    if BLOCK_SIZE >= 2048:
        num_warps = 8
    if BLOCK_SIZE >= 4096:
        num_warps = 16
    y = torch.empty_like(x)
    softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, num_warps=num_warps,
                              BLOCK_SIZE=BLOCK_SIZE)
    return y


def test_tutorial_fused_softmax():
    require_cuda()
    # Rows of a wider buffer: input row stride (1024) != n_cols (781) != output row stride.
    _check(softmax, lambda: (randn(64, 1024)[:, :781],), ref=lambda x: torch.softmax(x, dim=1))


# ---------------------------------------------------------------------------------------------
# 3. Tutorial layer norm forward (y, mean, rstd)
# ---------------------------------------------------------------------------------------------

def layer_norm(x, weight, bias, eps):
    y = torch.empty_like(x)
    x_arg = x.reshape(-1, x.shape[-1])
    M, N = x_arg.shape
    mean = torch.empty((M,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((M,), dtype=torch.float32, device=x.device)
    MAX_FUSED_SIZE = 65536 // x.element_size()
    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(N))
    num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    _layer_norm_fwd_fused[(M,)](x_arg, y, weight, bias, mean, rstd, x_arg.stride(0), N, eps,
                                BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return y, mean, rstd


def layer_norm_ref(x, weight, bias, eps):
    xf = x.float()
    mean = xf.mean(-1)
    var = xf.var(-1, unbiased=False)
    y = torch.nn.functional.layer_norm(xf, (x.shape[-1],), weight.float(), bias.float(), eps)
    return y.to(x.dtype), mean.reshape(-1), torch.rsqrt(var + eps).reshape(-1)


def test_tutorial_layer_norm_forward():
    require_cuda()
    N = 768

    def make():
        return (randn(4, 16, N, dtype=torch.float16), 1 + 0.1 * randn(N, dtype=torch.float16),
                0.1 * randn(N, dtype=torch.float16), 1e-5)

    _check(layer_norm, make, ref=layer_norm_ref)


# ---------------------------------------------------------------------------------------------
# 4. Tutorial matmul: autotuned (one config needs > 48 KB shared memory) and launched directly
#    with the large config (forces the dynamic shared memory opt-in)
# ---------------------------------------------------------------------------------------------

matmul_kernel_autotuned = triton.autotune(
    configs=[
        # 128x128x64 fp16, 4 stages: far above the 48 KB static shared memory limit.
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=8),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=3, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                      num_stages=4, num_warps=4),
    ],
    key=["M", "N", "K"],
)(matmul_kernel)


def matmul_autotuned(a, b):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    matmul_kernel_autotuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  c.stride(0), c.stride(1), ACTIVATION="leaky_relu")
    return c


def matmul_large_smem(a, b):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64,
                        GROUP_SIZE_M=8, ACTIVATION="", num_warps=8, num_stages=4)
    return c


def _matmul_ref(activation):
    def ref(a, b):
        c = torch.mm(a.float(), b.float())
        if activation:
            c = torch.where(c >= 0, c, 0.01 * c)
        return c.half()
    return ref


_MM_TOL = dict(atol=1e-2, rtol=1e-2)


def _mm_inputs(M, N, K):
    return lambda: (0.1 * randn(M, K, dtype=torch.float16), 0.1 * randn(K, N, dtype=torch.float16))


def test_tutorial_matmul_autotuned():
    require_cuda()
    # K = 288 is not a multiple of 64: the K mask is exercised. The autotune choice of eager and
    # trident may differ (separate benchmarks), hence matmul tolerances for both comparisons.
    _check(matmul_autotuned, _mm_inputs(256, 384, 288), ref=_matmul_ref("leaky_relu"), tol=_MM_TOL,
           ref_tol=_MM_TOL)


def _kernel_shared_bytes(fast):
    return [int(s) for s in re.findall(r"\bshared (\d+)\b", trident.explain(fast))]


def test_matmul_large_shared_memory_launched_directly():
    require_cuda()
    fast = _check(matmul_large_smem, _mm_inputs(512, 512, 512), ref=_matmul_ref(""), tol=_MM_TOL,
                  ref_tol=_MM_TOL)
    shared = _kernel_shared_bytes(fast)
    assert shared and max(shared) > 48 * 1024, f"expected a kernel above 48 KB shared memory: {shared}"


# ---------------------------------------------------------------------------------------------
# 5. grid = lambda META: ...
# ---------------------------------------------------------------------------------------------

@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, tl.where(x > 0, x, x * slope), mask=m)


def leaky_relu_lambda_grid(x):
    out = torch.empty_like(x)
    n = x.numel()
    grid = lambda META: (triton.cdiv(n, META["BLOCK"]),)  # noqa: E731
    leaky_relu_kernel[grid](x, out, n, 0.1, BLOCK=512)
    return out


def test_grid_lambda_meta():
    require_cuda()
    _check(leaky_relu_lambda_grid, lambda: (randn(3000),),
           ref=lambda x: torch.nn.functional.leaky_relu(x, 0.1))


# ---------------------------------------------------------------------------------------------
# 6. 2D grid computed from tensor sizes (rows x column blocks)
# ---------------------------------------------------------------------------------------------

@triton.jit
def bias_add_2d_kernel(x_ptr, b_ptr, out_ptr, N, stride_x, stride_out, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=m)
    b = tl.load(b_ptr + cols, mask=m)
    tl.store(out_ptr + row * stride_out + cols, x + b, mask=m)


def bias_add_2d(x, b):
    M, N = x.shape
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    bias_add_2d_kernel[(M, triton.cdiv(N, 128))](x, b, out, N, x.stride(0), out.stride(0), BLOCK_N=128)
    return out


def test_grid_2d_from_tensor_sizes():
    require_cuda()
    _check(bias_add_2d, lambda: (randn(48, 300), randn(300)), ref=lambda x, b: x + b)


# ---------------------------------------------------------------------------------------------
# 7. Positional and keyword arguments mixed (keywords out of order)
# ---------------------------------------------------------------------------------------------

@triton.jit
def axpby_kernel(x_ptr, y_ptr, out_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, alpha * x + beta * y, mask=m)


def axpby_mixed_args(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    axpby_kernel[_grid1(n, 512)](x, y, out, beta=-0.5, BLOCK=512, n=n, alpha=2.0)
    return out


def test_positional_and_keyword_arguments():
    require_cuda()
    _check(axpby_mixed_args, lambda: (randn(2000), randn(2000)), ref=lambda x, y: 2.0 * x - 0.5 * y)


# ---------------------------------------------------------------------------------------------
# 8. tl.constexpr parameters with defaults that the launch does not pass
# ---------------------------------------------------------------------------------------------

@triton.jit
def clamp_kernel(x_ptr, out_ptr, n, lo, hi, BLOCK: tl.constexpr = 512, SQUARE: tl.constexpr = False):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.minimum(tl.maximum(x, lo), hi)
    if SQUARE:
        y = y * y
    tl.store(out_ptr + offs, y, mask=m)


def clamp_defaults(x):
    out = torch.empty_like(x)
    sq = torch.empty_like(x)
    n = x.numel()
    clamp_kernel[(triton.cdiv(n, 512),)](x, out, n, -0.5, 0.5)             # BLOCK, SQUARE defaulted
    clamp_kernel[(triton.cdiv(n, 512),)](x, sq, n, -0.5, 0.5, SQUARE=True)  # BLOCK defaulted
    return out, sq


def test_constexpr_default_not_passed():
    require_cuda()
    _check(clamp_defaults, lambda: (randn(3000),),
           ref=lambda x: (x.clamp(-0.5, 0.5), x.clamp(-0.5, 0.5) ** 2))


def clamp_default_read_by_the_grid(x):
    out = torch.empty_like(x)
    n = x.numel()
    clamp_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n, -0.5, 0.5)  # BLOCK defaulted
    return out


def test_constexpr_default_read_by_a_grid_lambda():
    """Dynamo alone fails here (a META key the call omitted): trident's capture passes the default."""
    require_cuda()
    _check(clamp_default_read_by_the_grid, lambda: (randn(3000),), ref=lambda x: x.clamp(-0.5, 0.5))


def clamp_on_two_cta_clusters(x):
    out = torch.empty_like(x)
    n = x.numel()
    clamp_kernel[(triton.cdiv(n, 512),)](x, out, n, -0.5, 0.5, num_ctas=2)
    return out


def test_num_ctas_passed_at_the_launch():
    """A cluster launch (num_ctas=2 on Hopper): Dynamo refuses it as a launch keyword; trident's
    capture moves it into a one-config autotuner as Dynamo does num_warps."""
    require_cuda()
    fast = _check(clamp_on_two_cta_clusters, lambda: (randn(3000),), ref=lambda x: x.clamp(-0.5, 0.5))
    assert " ctas 2 " in trident.explain(fast)


def test_a_kernel_over_the_rows_a_mask_selects():
    """The grid and an int argument are a `nonzero`'s size (as an MoE expert's kernels run over the
    tokens routed to it): one specialization for every count, none (an empty grid) and one
    included, each launched natively with eager's result."""
    require_cuda()
    fast = trident.compile(scale_selected_rows)
    x = randn(64, 32)
    for k in (5, 0, 17, 64, 1, 16):
        mask = torch.zeros(64, dtype=torch.bool, device=DEVICE)
        mask[torch.randperm(64, device=DEVICE)[:k]] = True
        got = fast(x, mask)
        torch.testing.assert_close(got, scale_selected_rows(x, mask), rtol=0, atol=0)
        assert got.shape == (k, 32)
    c = trident.counters(fast)
    assert (c["captures"], c["hits"], c["fallbacks"], c["split_calls"]) == (1, 5, 0, 0), c


# ---------------------------------------------------------------------------------------------
# 9. int, float, bool and None arguments (optional bias pointer with a HAS_BIAS constexpr)
# ---------------------------------------------------------------------------------------------

@triton.jit
def scale_bias_act_kernel(x_ptr, bias_ptr, out_ptr, n, ncols, scale, relu,
                          HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(x_ptr + offs, mask=m) * scale
    if HAS_BIAS:
        y += tl.load(bias_ptr + offs % ncols, mask=m, other=0.0)
    if relu:  # a runtime bool (u1), not a constexpr
        y = tl.maximum(y, 0.0)
    tl.store(out_ptr + offs, y, mask=m)


def scale_bias_act(x, bias, scale: float, relu: bool):
    out = torch.empty_like(x)
    n = x.numel()
    scale_bias_act_kernel[_grid1(n, 256)](x, bias, out, n, x.shape[-1], scale, relu,
                                          HAS_BIAS=bias is not None, BLOCK=256)
    return out


def scale_bias_act_ref(x, bias, scale, relu):
    y = x * scale
    if bias is not None:
        y = y + bias
    return torch.relu(y) if relu else y


@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "bias_None"])
def test_int_float_bool_none_arguments(has_bias):
    require_cuda()
    _check(scale_bias_act,
           lambda: (randn(24, 100), randn(100) if has_bias else None, 1.5, True),
           ref=scale_bias_act_ref)


# ---------------------------------------------------------------------------------------------
# 10. The same kernel launched several times in one function with different arguments
# ---------------------------------------------------------------------------------------------

@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha + tl.load(y_ptr + offs, mask=m), mask=m)


def _scale_add(x, y, alpha, block):
    out = torch.empty_like(x)
    n = x.numel()
    scale_add_kernel[_grid1(n, block)](x, y, out, n, alpha, BLOCK=block)
    return out


def scale_add_chain(x, y):
    a = _scale_add(x, y, 2.0, 256)
    b = _scale_add(a, x, -1.0, 1024)
    c = _scale_add(b[:1024], y[1024:2048], 0.25, 128)
    return a, b, c


def scale_add_chain_ref(x, y):
    a = 2.0 * x + y
    b = -a + x
    return a, b, 0.25 * b[:1024] + y[1024:2048]


def test_same_kernel_several_times():
    require_cuda()
    _check(scale_add_chain, lambda: (randn(4096), randn(4096)), ref=scale_add_chain_ref)


def _scale_add_by(x, y, alpha):
    return _scale_add(x, y, alpha, 256)


def test_a_float_kernel_argument_that_varies_per_call_compiles_once():
    # A Python float is a run-time value (float_symbols.py): the launch takes each call's alpha.
    require_cuda()
    fast = trident.compile(_scale_add_by)
    x, y = randn(4096), randn(4096)
    for k in range(10):
        alpha = 0.37 * k - 1.0
        torch.testing.assert_close(fast(x, y, alpha), _scale_add_by(x, y, alpha), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (1, 9, 0), c


# ---------------------------------------------------------------------------------------------
# 11. A kernel writing into an input in place: KV-cache write at position `pos`
# ---------------------------------------------------------------------------------------------

@triton.jit
def kv_cache_write_kernel(k_cache_ptr, v_cache_ptr, k_ptr, v_ptr, pos,
                          stride_cb, stride_ch, stride_cs, stride_kb, stride_kh, HEAD_DIM: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, HEAD_DIM)
    src = b * stride_kb + h * stride_kh + d
    dst = b * stride_cb + h * stride_ch + pos * stride_cs + d
    tl.store(k_cache_ptr + dst, tl.load(k_ptr + src))
    tl.store(v_cache_ptr + dst, tl.load(v_ptr + src))


def decode_attention(q, k, v, k_cache, v_cache, pos: int):
    B, H, _, D = q.shape
    kv_cache_write_kernel[(B, H)](k_cache, v_cache, k, v, pos,
                                  k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
                                  k.stride(0), k.stride(1), HEAD_DIM=D)
    keys = k_cache[:, :, : pos + 1]
    values = v_cache[:, :, : pos + 1]
    scores = (q @ keys.transpose(-1, -2)) * (D ** -0.5)
    return torch.softmax(scores, dim=-1) @ values


def decode_attention_ref(q, k, v, k_cache, v_cache, pos):
    k_cache[:, :, pos] = k[:, :, 0]
    v_cache[:, :, pos] = v[:, :, 0]
    keys, values = k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1]
    return torch.softmax((q @ keys.transpose(-1, -2)) * q.shape[-1] ** -0.5, dim=-1) @ values


def _kv_inputs(pos, B=2, H=4, S=32, D=64):
    return lambda: (randn(B, H, 1, D), randn(B, H, 1, D), randn(B, H, 1, D),
                    randn(B, H, S, D), randn(B, H, S, D), pos)


def test_kv_cache_written_in_place_at_pos():
    require_cuda()
    fast = _check(decode_attention, _kv_inputs(5), ref=decode_attention_ref)
    # Another position is another specialization (ints are specialized), equally correct.
    _run_both(fast, decode_attention, _kv_inputs(9)(), ref=decode_attention_ref, where="pos=9:")
    c = trident.counters(fast)
    assert (c["compiles"], c["specializations"]) == (2, 2), c


def test_float_parameter_used_as_a_triton_value_clones_nothing():
    # torch 2.11's mutation analysis could not compile `alpha.to(...)` with alpha inlined, assumed
    # every input written and cloned src (read again after the kernel); see _compat.capturing.
    require_cuda()
    fast = _check(scaled_copy_then_add, lambda: (randn(1000), randn(1000)),
                  ref=lambda src, dst: src + dst.copy_(src * 0.5))
    text = trident.controller(fast).lower_call(randn(1000), randn(1000)).text
    assert "aten::clone" not in text, text


# ---------------------------------------------------------------------------------------------
# 12. A kernel with two output tensors
# ---------------------------------------------------------------------------------------------

@triton.jit
def sum_and_product_kernel(x_ptr, y_ptr, sum_ptr, prod_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(sum_ptr + offs, x + y, mask=m)
    tl.store(prod_ptr + offs, x * y, mask=m)


def sum_and_product(x, y):
    s = torch.empty_like(x)
    p = torch.empty_like(x)
    n = x.numel()
    sum_and_product_kernel[_grid1(n, 256)](x, y, s, p, n, BLOCK=256)
    return s, p * 2


def test_two_output_tensors():
    require_cuda()
    _check(sum_and_product, lambda: (randn(33, 40), randn(33, 40)), ref=lambda x, y: (x + y, x * y * 2))


# ---------------------------------------------------------------------------------------------
# 13. autotune with key and prune_configs_by (early_config_prune)
# ---------------------------------------------------------------------------------------------

def _prune_blocks_larger_than_n(configs, named_args, **kwargs):
    n = named_args["n"]
    return [c for c in configs if c.kwargs["BLOCK"] <= n]


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 512}, num_warps=4),
             triton.Config({"BLOCK": 8192}, num_warps=8)],
    key=["n"],
    prune_configs_by={"early_config_prune": _prune_blocks_larger_than_n},
)
@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale + 1.0, mask=m)


def scale_shift_pruned(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_shift_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n, 3.0)
    return out


def test_autotune_key_and_prune_configs_by():
    require_cuda()
    _check(scale_shift_pruned, lambda: (randn(3000),), ref=lambda x: x * 3.0 + 1.0)


# ---------------------------------------------------------------------------------------------
# 14. autotune with reset_to_zero (atomic_add into an output that must start at zero)
# ---------------------------------------------------------------------------------------------

@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 512}, num_warps=4)],
    key=["N"],
    reset_to_zero=["out_ptr"],
)
@triton.jit
def row_sum_atomic_kernel(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))


def row_sum_atomic(x):
    M, N = x.shape
    out = torch.zeros(M, device=x.device, dtype=torch.float32)
    row_sum_atomic_kernel[lambda META: (M, triton.cdiv(N, META["BLOCK"]))](x, out, N, x.stride(0))
    return out


def test_autotune_reset_to_zero_atomic_reduction():
    require_cuda()
    tol = dict(atol=1e-4, rtol=1e-4)  # atomics: summation order varies between runs
    _check(row_sum_atomic, lambda: (randn(32, 1000),), ref=lambda x: x.sum(1), tol=tol, ref_tol=tol)


# ---------------------------------------------------------------------------------------------
# 15. autotune with restore_value (the kernel updates an input in place)
# ---------------------------------------------------------------------------------------------

@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=4)],
    key=["n"],
    restore_value=["x_ptr"],
)
@triton.jit
def inplace_axpy_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(x_ptr + offs, x + alpha * tl.load(y_ptr + offs, mask=m), mask=m)


def inplace_axpy(x, y):
    n = x.numel()
    inplace_axpy_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, y, n, 0.5)
    return x


def inplace_axpy_ref(x, y):
    x.add_(0.5 * y)
    return x


def test_autotune_restore_value_inplace_update():
    require_cuda()
    _check(inplace_axpy, lambda: (randn(4000), randn(4000)), ref=inplace_axpy_ref)


# ---------------------------------------------------------------------------------------------
# 16. @triton.heuristics computing a constexpr from the arguments
# ---------------------------------------------------------------------------------------------

@triton.heuristics({"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def quick_gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, x * tl.sigmoid(1.702 * x))
    else:
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(out_ptr + offs, x * tl.sigmoid(1.702 * x), mask=m)


def quick_gelu(x):
    out = torch.empty_like(x)
    n = x.numel()
    quick_gelu_kernel[_grid1(n, 256)](x, out, n, BLOCK=256)
    return out


@pytest.mark.parametrize("n", [4096, 4000], ids=["even", "ragged"])
def test_heuristics_constexpr_from_argument(n):
    require_cuda()
    _check(quick_gelu, lambda: (randn(n),), ref=lambda x: x * torch.sigmoid(1.702 * x))


# ---------------------------------------------------------------------------------------------
# 17. autotune stacked over heuristics
# ---------------------------------------------------------------------------------------------

@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 512}, num_warps=4)],
    key=["n"],
)
@triton.heuristics({"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def silu_kernel_tuned(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(x), mask=offs < n)


def silu_autotuned_heuristics(x):
    out = torch.empty_like(x)
    n = x.numel()
    silu_kernel_tuned[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n)
    return out


def test_autotune_over_heuristics():
    require_cuda()
    # n = 4224: a multiple of 128 (EVEN_N) but not of 512 (masked): the configs differ.
    _check(silu_autotuned_heuristics, lambda: (randn(4224),), ref=torch.nn.functional.silu)


# ---------------------------------------------------------------------------------------------
# 18. Triton kernels and ATen ops feeding each other in an nn.Module
#     (torch.mm -> Triton activation -> aten add -> Triton RMSNorm with an nn.Parameter weight)
# ---------------------------------------------------------------------------------------------

@triton.jit
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x * tl.sigmoid(x), mask=m)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride_x, stride_out, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=m)
    tl.store(out_ptr + row * stride_out + cols, x * rstd * w, mask=m)


class MixedBlock(nn.Module):
    def __init__(self, d=256, eps=1e-6):
        super().__init__()
        self.proj = nn.Parameter(torch.randn(d, d) / math.sqrt(d))
        self.norm_weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x, residual):
        h = torch.mm(x, self.proj)
        a = torch.empty_like(h)
        n = h.numel()
        silu_kernel[(triton.cdiv(n, 1024),)](h, a, n, BLOCK=1024)
        s = a + residual
        out = torch.empty_like(s)
        M, N = s.shape
        rmsnorm_kernel[(M,)](s, self.norm_weight, out, s.stride(0), out.stride(0), N, self.eps,
                             BLOCK_N=triton.next_power_of_2(N))
        return out


def mixed_block_ref(block):
    def ref(x, residual):
        s = torch.nn.functional.silu(torch.mm(x, block.proj)) + residual
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + block.eps) * block.norm_weight
    return ref


def test_mixed_module_triton_and_aten():
    require_cuda()
    block = MixedBlock().to(DEVICE)
    # Inference (the parameters require grad; a Triton kernel has no autograd formula).
    _check(block, lambda: (randn(16, 256), randn(16, 256)), ref=mixed_block_ref(block), ctx=torch.no_grad)


# ---------------------------------------------------------------------------------------------
# 19. num_warps=8 and num_stages as launch keyword arguments
# ---------------------------------------------------------------------------------------------

@triton.jit
def row_sum_loop_kernel(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in tl.range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum_launch_options(x):
    M, N = x.shape
    out = torch.empty(M, device=x.device, dtype=x.dtype)
    row_sum_loop_kernel[(M,)](x, out, N, x.stride(0), BLOCK=256, num_warps=8, num_stages=3)
    return out


def test_num_warps_and_num_stages_launch_kwargs():
    require_cuda()
    _check(row_sum_launch_options, lambda: (randn(64, 2000),), ref=lambda x: x.sum(1))


# ---------------------------------------------------------------------------------------------
# 20. Integer arguments equal to 1 (specialized away by Triton) and to 16
# ---------------------------------------------------------------------------------------------

@triton.jit
def strided_scale_kernel(x_ptr, out_ptr, n, stride_x, stride_out, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs * stride_x, mask=m)
    tl.store(out_ptr + offs * stride_out, x * 3.0, mask=m)


def first_column_times_three(x):
    n = x.shape[0]
    out = torch.empty(n, device=x.device, dtype=x.dtype)
    # stride_x == 16 (x is n x 16), stride_out == 1
    strided_scale_kernel[_grid1(n, 256)](x, out, n, x.stride(0), out.stride(0), BLOCK=256)
    return out


def test_int_arguments_equal_to_1_and_16():
    require_cuda()
    _check(first_column_times_three, lambda: (randn(1000, 16),), ref=lambda x: x[:, 0] * 3.0)


# ---------------------------------------------------------------------------------------------
# 21. Misaligned and aligned inputs in consecutive calls
# ---------------------------------------------------------------------------------------------

def _misaligned_pair():
    x = randn(4097)[1:]  # 4-byte offset: the pointer is not 16-byte aligned
    assert x.data_ptr() % 16 != 0
    return x, randn(4096)


def _aligned_pair():
    return randn(4096), randn(4096)


def _alternate_alignment(aligned_first: bool) -> dict:
    """Two rounds of one aligned and one misaligned vector_add call, each checked; the counters."""
    fast = trident.compile(vector_add)
    kinds = [("aligned", _aligned_pair), ("misaligned", _misaligned_pair)]
    for i in range(2):
        for name, make in kinds if aligned_first else kinds[::-1]:
            _run_both(fast, vector_add, make(), ref=torch.add, where=f"{name} {i}:")
    return trident.counters(fast)


def test_aligned_then_misaligned_input():
    require_cuda()
    # The first specialization assumes 16-byte aligned pointers (as Triton's JIT does), so the
    # misaligned call must not run it: it is a second specialization, compiled without that
    # assumption. Each is then hit by a later call of its kind.
    c = _alternate_alignment(aligned_first=True)
    assert (c["compiles"], c["specializations"], c["hits"], c["misses"], c["fallbacks"]) == (2, 2, 2, 2, 0), c


def test_misaligned_then_aligned_input():
    require_cuda()
    # The other order: the first variant makes no alignment assumption, so an aligned call may
    # reuse it or get its own; either way both are correct and nothing falls back to eager.
    c = _alternate_alignment(aligned_first=False)
    assert c["compiles"] == c["specializations"] == c["misses"] and 1 <= c["compiles"] <= 2, c
    assert (c["hits"] + c["misses"], c["fallbacks"]) == (4, 0), c


# ---------------------------------------------------------------------------------------------
# 22. Device-side tensor descriptors (tl.make_tensor_descriptor: TMA, global scratch; sm_90)
# ---------------------------------------------------------------------------------------------

@triton.jit
def descriptor_affine_kernel(x_ptr, out_ptr, M, N, alpha, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    tile = x_desc.load([off_m, off_n])
    o_desc.store([off_m, off_n], tile * alpha + 1.0)


def descriptor_affine(x):
    M, N = x.shape
    out = torch.empty_like(x)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 64))
    descriptor_affine_kernel[grid](x, out, M, N, 2.0, BLOCK_M=32, BLOCK_N=64)
    return out


def _triton_scratch_allocator(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device=DEVICE)


def _with_triton_allocator(fn):
    """Eager Triton needs an allocator for a kernel's global scratch; trident must not."""
    def run(*args):
        from triton.runtime import _allocation
        previous = _allocation._allocator.get()
        triton.set_allocator(_triton_scratch_allocator)
        try:
            return fn(*args)
        finally:
            triton.set_allocator(previous)
    return run


def test_device_side_tensor_descriptors():
    require_cuda()
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        pytest.fail(f"device-side tensor descriptors need sm_90 or newer; this GPU is sm_{major}{minor}")
    # 100 x 200: ragged tiles at both edges (TMA pads loads and clips stores); row stride 800 bytes.
    _check(descriptor_affine, lambda: (randn(100, 200),), ref=lambda x: x * 2.0 + 1.0,
           eager=_with_triton_allocator(descriptor_affine))


# ---------------------------------------------------------------------------------------------
# 23. bf16 and fp16 inputs
# ---------------------------------------------------------------------------------------------

@triton.jit
def swiglu_kernel(g_ptr, u_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    g = tl.load(g_ptr + offs, mask=m).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=m).to(tl.float32)
    y = g * tl.sigmoid(g) * u
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=m)


def swiglu(g, u):
    out = torch.empty_like(g)
    n = g.numel()
    swiglu_kernel[_grid1(n, 1024)](g, u, out, n, BLOCK=1024)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_precision_inputs(dtype):
    require_cuda()

    def ref(g, u):
        return (torch.nn.functional.silu(g.float()) * u.float()).to(dtype)
    _check(swiglu, lambda: (randn(8, 512, dtype=dtype), randn(8, 512, dtype=dtype)), ref=ref)


# ---------------------------------------------------------------------------------------------
# 24. A kernel's output returned together with ATen views of it
# ---------------------------------------------------------------------------------------------

@triton.jit
def negate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=m), mask=m)


def negate_with_views(x):
    out = torch.empty_like(x)
    n = x.numel()
    negate_kernel[_grid1(n, 512)](x, out, n, BLOCK=512)
    return out, out.view(-1), out.t()


def test_output_returned_with_aten_views():
    require_cuda()

    def ref(x):
        out = -x
        return out, out.view(-1), out.t()

    fast = _check(negate_with_views, lambda: (randn(64, 48),), ref=ref)
    out, flat, t = fast(randn(64, 48))
    assert flat.data_ptr() == out.data_ptr() and t.data_ptr() == out.data_ptr()
    assert t.shape == (48, 64) and t.stride() == (1, 48)
    out.fill_(7.0)  # the views see writes to the output, as in eager
    assert bool((flat == 7.0).all()) and bool((t == 7.0).all())


# ---------------------------------------------------------------------------------------------
# Errors: a kernel given a CPU tensor is caught before the launch, naming the kernel
# ---------------------------------------------------------------------------------------------

def test_cpu_tensor_given_to_kernel_is_reported_and_function_stays_usable():
    require_cuda()
    fast = trident.compile(vector_add)
    _run_both(fast, vector_add, (randn(4096), randn(4096)), ref=torch.add, where="before:")
    cpu = (torch.randn(4096), torch.randn(4096))
    mixed = (randn(4096), torch.randn(4096))  # forgot .cuda() on one argument
    for bad in (cpu, mixed, cpu):
        with pytest.raises(Exception):
            vector_add(*bad)  # eager Triton refuses too
        with pytest.raises(RuntimeError, match="add_kernel"):
            fast(*bad)
        torch.cuda.synchronize()  # nothing was launched with a host pointer
    before = trident.counters(fast)
    _run_both(fast, vector_add, (randn(4096), randn(4096)), ref=torch.add, where="after:")
    after = trident.counters(fast)
    # The valid call after the errors is served by the first specialization, natively.
    assert (after["hits"] - before["hits"], after["compiles"] - before["compiles"]) == (1, 0), (before, after)
    assert after["fallbacks"] == 0, after
