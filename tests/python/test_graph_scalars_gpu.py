"""Graph mode with Python ints and floats that change every call (csrc/runtime/graphs/scalar_patch.h):
one graph serves every position of an int-position decode, its Triton nodes rewritten for each new
value (parameters, pointer offsets, grids), with eager's results bit for bit; an int that reaches an
ATen call, or a value a node cannot take, keys the graphs by value instead and explain says why."""
import pytest
import torch
import triton
import triton.language as tl

import trident
from tutorial_kernels import scaled_copy_kernel, sum_rows_kernel, write_row_kernel

pytestmark = pytest.mark.gpu

D = 64


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


@triton.jit
def scale_prefix_kernel(src_ptr, dst_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m) * alpha, mask=m)


def int_decode_step(x, cache, seen, pos: int):
    """Writes x at row `pos` of the cache, sums rows [0, pos], and scales the cache's first pos + 1
    rows into `seen`: an int parameter, a loop bound, and a grid that follow the position."""
    write_row_kernel[(1,)](x, cache, pos, D=D)
    out = torch.empty(D, device=x.device)
    sum_rows_kernel[(1,)](cache, out, pos + 1, D=D)
    n = (pos + 1) * D
    scale_prefix_kernel[(triton.cdiv(n, 256),)](cache, seen, n, 0.5, BLOCK=256)
    return out * 2


def decode(fn, x0, cache, seen, positions):
    outs, x = [], x0
    for pos in positions:
        out = fn(x, cache, seen, pos)
        outs.append(out.clone())
        x = out.tanh()
    return outs


def test_an_int_position_decode_replays_one_graph_patched_for_every_position():
    require_cuda()
    torch.manual_seed(0)
    x0 = torch.randn(D, device="cuda")
    mine, theirs = torch.zeros(256, D, device="cuda"), torch.zeros(256, D, device="cuda")
    seen_mine, seen_theirs = torch.zeros(256 * D, device="cuda"), torch.zeros(256 * D, device="cuda")
    fast = trident.compile(int_decode_step, graphs=True)
    got = decode(fast, x0, mine, seen_mine, range(200))
    want = decode(int_decode_step, x0, theirs, seen_theirs, range(200))
    for step, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=0, atol=0, msg=f"step {step}")
    assert torch.equal(mine, theirs) and torch.equal(seen_mine, seen_theirs)
    c, text = trident.counters(fast), trident.explain(fast)
    # Triton's own int specializations (pos or pos + 1 a multiple of 16, or 1) make a few
    # specializations; each captures one graph at its third call, and its later calls patch it
    assert c["graph_captures"] <= c["specializations"] <= 6, (c, text)
    assert c["graph_scalar_patches"] >= 200 - 3 * c["specializations"] - 12, (c, text)
    assert c["graph_replays"] >= c["graph_scalar_patches"], (c, text)
    assert c["graph_patched_nodes"] >= 3 * c["graph_scalar_patches"] - 30, (c, text)  # write, sum, scale
    assert "keyed by its ints" not in text, text


def test_a_new_cache_mid_decode_rebinds_and_patches_the_same_graph():
    """A rebind rewrites nodes from the capture's words (its position); the patch that follows puts
    the call's position back in them."""
    require_cuda()
    torch.manual_seed(1)
    x0 = torch.randn(D, device="cuda")
    fast = trident.compile(int_decode_step, graphs=True)
    for generation in range(3):
        mine, theirs = torch.zeros(128, D, device="cuda"), torch.zeros(128, D, device="cuda")
        seen_mine, seen_theirs = torch.zeros(128 * D, device="cuda"), torch.zeros(128 * D, device="cuda")
        got = decode(fast, x0, mine, seen_mine, range(40))
        want = decode(int_decode_step, x0, theirs, seen_theirs, range(40))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        assert torch.equal(mine, theirs) and torch.equal(seen_mine, seen_theirs)
    c = trident.counters(fast)
    assert c["graph_rebinds"] >= 2 and c["graph_scalar_patches"] >= 3 * 40 - 3 * c["specializations"] - 12, c


def test_a_float_argument_is_patched_into_the_graph_for_each_value():
    require_cuda()

    def scale(src, dst, alpha: float):
        scaled_copy_kernel[(triton.cdiv(src.numel(), 128),)](src, dst, src.numel(), alpha, BLOCK=128)
        return dst.sum()

    fast = trident.compile(scale, graphs=True)
    src = torch.randn(1 << 16, device="cuda")
    mine, theirs = torch.zeros_like(src), torch.zeros_like(src)
    for k in range(20):
        alpha = 0.5 + 0.01 * k
        torch.testing.assert_close(fast(src, mine, alpha), scale(src, theirs, alpha), rtol=0, atol=0)
        assert torch.equal(mine, theirs)
    c = trident.counters(fast)
    assert c["graph_captures"] == 1 and c["graph_scalar_patches"] == 20 - 3, (c, trident.explain(fast))


def test_an_int_that_reaches_an_aten_call_keys_the_graphs_by_value_from_the_ir():
    require_cuda()

    def int_position_step(x, cache, pos: int):
        cache[pos] = x[0]
        return cache[: pos + 1].sum(0)

    fast = trident.compile(int_position_step, graphs=True)
    mine, theirs = torch.zeros(64, 8, device="cuda"), torch.zeros(64, 8, device="cuda")
    for pos in range(32):
        x = torch.randn(1, 8, device="cuda")
        torch.testing.assert_close(fast(x, mine, pos), int_position_step(x, theirs, pos), rtol=0, atol=0)
    assert torch.equal(mine, theirs)
    c = trident.counters(fast)
    assert c["graph_captures"] == 0 and c["graph_scalar_patches"] == 0, c
    assert "keyed by its ints' and floats' values" in trident.explain(fast)
    assert "takes a number computed from scalar argument leaf 2" in trident.explain(fast)


def test_a_grid_that_becomes_empty_refuses_the_patch_and_keys_the_graphs_by_value():
    require_cuda()

    def shorter_by_a_block(src, dst, n: int):
        scale_prefix_kernel[(triton.cdiv(n, 256) - 1,)](src, dst, n, 0.5, BLOCK=256)
        return dst.sum()

    fast = trident.compile(shorter_by_a_block, graphs=True)
    src = torch.randn(4096, device="cuda")
    mine, theirs = torch.zeros_like(src), torch.zeros_like(src)
    for n in (300, 301, 302, 303, 305, 200, 201, 601):  # 303 captures, 305 patches; 200, 201: an empty grid
        mine.zero_(), theirs.zero_()
        torch.testing.assert_close(fast(src, mine, n), shorter_by_a_block(src, theirs, n), rtol=0, atol=0)
        assert torch.equal(mine, theirs), n
    c, text = trident.counters(fast), trident.explain(fast)
    assert c["graph_captures"] == 1 and c["graph_scalar_patches"] == 1, (c, text)
    assert "keyed by its ints' and floats' values" in text and "grid is empty for these values" in text, text


def test_memory_stays_flat_over_thousands_of_patched_replays():
    require_cuda()
    torch.manual_seed(2)
    fast = trident.compile(int_decode_step, graphs=True)
    cache, seen = torch.zeros(256, D, device="cuda"), torch.zeros(256 * D, device="cuda")
    x = torch.randn(D, device="cuda")
    for pos in range(3 * 256):  # every specialization captured (the one for pos 1 at its third call)
        fast(x, cache, seen, pos % 256)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for k in range(3000):
        fast(x, cache, seen, k % 256)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
    assert trident.counters(fast)["graph_scalar_patches"] >= 2900
