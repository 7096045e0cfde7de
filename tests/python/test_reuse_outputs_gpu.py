"""reuse_outputs=True with a user Triton kernel on CUDA: the returned tensor's memory serves the next
call on the stream it was last used on, never on another one (csrc/runtime/buffer_reuse.h)."""
import pytest
import torch
import triton
import triton.language as tl

import trident

pytestmark = pytest.mark.gpu


@triton.jit
def _add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def add_one(x):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _add_one_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def test_a_dropped_result_serves_the_next_call_on_its_stream_only():
    require_cuda()
    fast = trident.compile(add_one, reuse_outputs=True)
    x = torch.randn(4096, device="cuda")
    ptr = fast(x).data_ptr()  # dropped at once
    for k in range(3):
        out = fast(x + k)
        torch.testing.assert_close(out, x + k + 1, rtol=0, atol=0)
        assert out.data_ptr() == ptr
        del out
    assert trident.counters(fast)["recycled_outputs"] == 3
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = fast(x)  # another stream: fresh memory, nothing recycled
        torch.testing.assert_close(out, x + 1, rtol=0, atol=0)
        assert out.data_ptr() != ptr
        del out
        out = fast(x)  # that stream's own result, dropped, serves it
        torch.testing.assert_close(out, x + 1, rtol=0, atol=0)
    torch.cuda.current_stream().wait_stream(side)
    assert trident.counters(fast)["recycled_outputs"] == 4


def test_results_held_while_later_calls_run_keep_their_values():
    require_cuda()
    fast = trident.compile(add_one, reuse_outputs=True)
    xs = [torch.full((4096,), float(k), device="cuda") for k in range(6)]
    outs = [fast(x) for x in xs]
    torch.cuda.synchronize()
    for k, out in enumerate(outs):
        torch.testing.assert_close(out, torch.full_like(out, k + 1.0), rtol=0, atol=0)
    prev = None
    for k, x in enumerate(xs):  # `out = fast(x)`: two buffers alternate
        prev, out = fast(x), prev
        del out
        torch.testing.assert_close(prev, torch.full_like(prev, k + 1.0), rtol=0, atol=0)
    assert trident.counters(fast)["recycled_outputs"] == 4
