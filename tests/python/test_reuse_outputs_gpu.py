"""reuse_outputs=True with a user Triton kernel on CUDA: the returned tensor's memory serves the next
call on the stream it was last used on, never on another one (csrc/runtime/memory/buffer_reuse.h);
the same for the results of graph replays (graphs=True: csrc/runtime/graphs/spec_graphs.h)."""
import pytest
import torch
import triton

import trident
from tutorial_kernels import add_kernel

pytestmark = pytest.mark.gpu


def add(x, y):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def test_a_dropped_result_serves_the_next_call_on_its_stream_only():
    require_cuda()
    fast = trident.compile(add, reuse_outputs=True, graphs=False)  # graphs: the test at the end
    x, one = torch.randn(4096, device="cuda"), torch.ones(4096, device="cuda")
    ptr = fast(x, one).data_ptr()  # dropped at once
    for k in range(3):
        out = fast(x + k, one)
        torch.testing.assert_close(out, x + k + 1, rtol=0, atol=0)
        assert out.data_ptr() == ptr
        del out
    assert trident.counters(fast)["recycled_outputs"] == 3
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = fast(x, one)  # another stream: fresh memory, nothing recycled
        torch.testing.assert_close(out, x + 1, rtol=0, atol=0)
        assert out.data_ptr() != ptr
        del out
        out = fast(x, one)  # that stream's own result, dropped, serves it
        torch.testing.assert_close(out, x + 1, rtol=0, atol=0)
    torch.cuda.current_stream().wait_stream(side)
    assert trident.counters(fast)["recycled_outputs"] == 4


def test_results_held_while_later_calls_run_keep_their_values():
    require_cuda()
    fast = trident.compile(add, reuse_outputs=True, graphs=False)  # graphs: the test at the end
    one = torch.ones(4096, device="cuda")
    xs = [torch.full((4096,), float(k), device="cuda") for k in range(6)]
    outs = [fast(x, one) for x in xs]
    torch.cuda.synchronize()
    for k, out in enumerate(outs):
        torch.testing.assert_close(out, torch.full_like(out, k + 1.0), rtol=0, atol=0)
    prev = None
    for k, x in enumerate(xs):  # `out = fast(x)`: two buffers alternate
        prev, out = fast(x, one), prev
        del out
        torch.testing.assert_close(prev, torch.full_like(prev, k + 1.0), rtol=0, atol=0)
    assert trident.counters(fast)["recycled_outputs"] == 4


def test_a_dropped_result_comes_back_as_the_same_object_without_what_the_caller_added():
    """PyObject preservation as the installed torch does it (buffer_reuse.h): the dropped result's
    own object goes out again; one the caller gave an attribute goes, its memory under a new one."""
    require_cuda()
    fast = trident.compile(add, reuse_outputs=True, graphs=False)  # graphs: the test at the end
    x, one = torch.randn(4096, device="cuda"), torch.ones(4096, device="cuda")
    out = fast(x, one)
    first, ptr = id(out), out.data_ptr()
    del out
    x1 = x + 1
    out = fast(x1, one)
    assert id(out) == first and out.data_ptr() == ptr
    torch.testing.assert_close(out, x1 + 1, rtol=0, atol=0)
    out.tag = 1
    del out
    x2 = x + 2
    out = fast(x2, one)
    assert not hasattr(out, "tag") and out.data_ptr() == ptr
    torch.testing.assert_close(out, x2 + 1, rtol=0, atol=0)
    assert trident.counters(fast)["recycled_outputs"] == 2


def test_a_graph_replay_returns_the_dropped_result_again_and_alternates_when_it_is_held():
    """graphs=True with reuse_outputs=True: a replay's results come from the module's pool as a run's
    do, so the object the caller dropped goes out again (same memory, same object), one still held
    keeps its values while the next replay takes another buffer, and another stream gets fresh
    memory (its own graph: the stream is part of the key)."""
    require_cuda()
    fast = trident.compile(add, reuse_outputs=True, graphs=True)
    x, one = torch.randn(4096, device="cuda"), torch.ones(4096, device="cuda")
    for _ in range(4):  # compiled, run, captured at the third call and replayed
        torch.testing.assert_close(fast(x, one), x + 1, rtol=0, atol=0)
    out = fast(x + 1, one)  # a replay: new token-like values at a new address
    first, ptr = id(out), out.data_ptr()
    del out
    for k in range(2, 5):
        out = fast(x + k, one)
        torch.testing.assert_close(out, x + k + 1, rtol=0, atol=0)
        assert id(out) == first and out.data_ptr() == ptr, k
        del out
    prev = None
    held = []
    for k in range(4):  # `out = fast(x)`: the previous result is alive while the next replay runs
        prev, out = fast(x + k, one), prev
        held.append(prev.data_ptr())
        del out
        torch.testing.assert_close(prev, x + k + 1, rtol=0, atol=0)
    assert len(set(held)) == 2, held
    del prev
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = fast(x, one)
        torch.testing.assert_close(out, x + 1, rtol=0, atol=0)
        assert out.data_ptr() != ptr
        del out
    torch.cuda.current_stream().wait_stream(side)
    n = trident.counters(fast)
    assert n["graph_replays"] >= 9 and n["recycled_outputs"] >= 6, n
