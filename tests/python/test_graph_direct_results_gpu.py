"""Direct results on the GPU (csrc/runtime/graphs/direct_results.h, on unless TRIDENT_GRAPH_DIRECT_RESULTS=0): a
graph whose result only Triton launches touch writes it straight into the tensor each replay
returns, its nodes pointed there when the tensor lies elsewhere, with eager's results bit for bit:
results the caller keeps stay as they were, a result a later kernel reads is pointed at in both, a
rebind and a scalar patch leave the nodes writing the replay's tensor, and reuse_outputs recycles."""
import os
import sys

import pytest
import torch

import trident
from tutorial_kernels import sum_rows_kernel, write_row_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
from cases import three_kernels  # noqa: E402  (the per-call benchmark's case: kernels.add_one three times)
from kernels import add_one  # noqa: E402

pytestmark = pytest.mark.gpu

N = 4096
D = 64


@pytest.fixture(autouse=True)
def direct_results_on(monkeypatch):
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")
    monkeypatch.setenv("TRIDENT_GRAPH_DIRECT_RESULTS", "1")  # read as each specialization loads


def test_kept_results_each_hold_their_own_call():
    fast = trident.compile(three_kernels, graphs=True)
    x = torch.randn(N, device="cuda")
    kept = []
    for i in range(40):  # every result held: each replay writes a tensor at a new address
        x.fill_(float(i))
        kept.append(fast(x))
    for i, out in enumerate(kept):
        assert torch.equal(out, torch.full_like(x, i + 3.0))
    c = trident.counters(fast)
    assert c["graph_captures"] == 1 and c["graph_replays"] == 38, c
    # One node (the last kernel) pointed per replay but the first: the capture run's result, freed
    # when the capture ends, gives the first replay's tensor its block back, where the node already
    # writes. The argument keeps its address here: with a new argument each call, the rebind's patch
    # run points the node instead (the rebind test below).
    assert c["graph_result_nodes"] == 37, c


def test_a_result_dropped_each_call_needs_no_node_rewritten():
    fast = trident.compile(three_kernels, graphs=True)
    x = torch.randn(N, device="cuda")
    want = three_kernels(x)  # eager's: (x + 1) + 1 + 1 rounds otherwise than x + 3
    for _ in range(3):
        fast(x)
    before = trident.counters(fast)["graph_result_nodes"]
    for _ in range(200):
        assert torch.equal(fast(x), want)  # dropped: the caching allocator gives the same block back
    assert trident.counters(fast)["graph_result_nodes"] - before <= 2


def test_a_result_a_later_kernel_reads_is_written_where_the_replay_returns_it():
    def both(x):
        y = add_one(x)
        return y, add_one(y)

    # One argument: two nodes pointed per replay but the first (see above), the first launch (writes
    # y) and the second (reads y, writes z).
    fast = trident.compile(both, graphs=True)
    x = torch.randn(N, device="cuda")
    want_y, want_z = both(x)
    kept = [fast(x) for _ in range(10)]
    for y, z in kept:
        assert torch.equal(y, want_y) and torch.equal(z, want_z)
    c = trident.counters(fast)
    assert c["graph_replays"] == 8 and c["graph_result_nodes"] == 7 * 2, c

    # A new argument each call: the rebind rewrites the first node from the capture's words (its
    # output too), and the patch run after it points both nodes at this call's tensors.
    fast = trident.compile(both, graphs=True)
    xs = [torch.randn(N, device="cuda") for _ in range(10)]
    kept = [fast(x) for x in xs]
    for x, (y, z) in zip(xs, kept):
        want_y, want_z = both(x)
        assert torch.equal(y, want_y) and torch.equal(z, want_z)
    c = trident.counters(fast)
    assert c["graph_replays"] == 8 and c["graph_patches"] >= 8 and c["graph_patched_nodes"] >= 8 * 2, c


def decode_step(x, cache, pos: int):
    write_row_kernel[(1,)](x, cache, pos, D=D)
    out = torch.empty(D, device=x.device)
    sum_rows_kernel[(1,)](cache, out, pos + 1, D=D)
    return out


def test_scalar_patches_and_rebinds_keep_the_nodes_writing_the_replays_tensor():
    """Each position patches the sum's node (its count), which the patch computes with the
    replay's result address; a new cache rebinds the nodes holding it from the capture's words, and
    the patch after it points the sum's node back at the replay's tensor."""
    torch.manual_seed(3)
    fast = trident.compile(decode_step, graphs=True)
    for generation in range(3):
        mine, theirs = torch.zeros(64, D, device="cuda"), torch.zeros(64, D, device="cuda")
        kept, want = [], []
        for pos in range(40):
            x = torch.randn(D, device="cuda")
            kept.append(fast(x, mine, pos))
            want.append(decode_step(x, theirs, pos))
        for pos, (g, w) in enumerate(zip(kept, want)):
            torch.testing.assert_close(g, w, rtol=0, atol=0, msg=f"generation {generation}, position {pos}")
        assert torch.equal(mine, theirs)
    c = trident.counters(fast)
    # Every call has a new position, so every replay is a patch run, which computes the sum's output
    # pointer at the replay's tensor: those nodes are rewritten by the patch (patched_nodes), not by a
    # pointing afterwards (result_nodes).
    assert c["graph_rebinds"] >= 2 and c["graph_scalar_patches"] > 0 and c["graph_patched_nodes"] > 0, c


def test_reuse_outputs_recycles_a_direct_result():
    fast = trident.compile(three_kernels, graphs=True, reuse_outputs=True)
    x = torch.randn(N, device="cuda")
    for k in range(20):
        assert torch.equal(fast(x), three_kernels(x)), k
    xs = [x + k for k in range(4)]
    kept = [fast(xk) for xk in xs]  # held: each replay writes another tensor
    for k, (xk, out) in enumerate(zip(xs, kept)):
        assert torch.equal(out, three_kernels(xk)), k
    c = trident.counters(fast)
    # the held ones pointed at by a pointing, or by the patch run after each new argument's rebind
    assert c["recycled_outputs"] > 0 and c["graph_result_nodes"] + c["graph_patched_nodes"] >= 4, c


def test_the_switch_at_zero_copies_every_result_out(monkeypatch):
    monkeypatch.setenv("TRIDENT_GRAPH_DIRECT_RESULTS", "0")
    fast = trident.compile(three_kernels, graphs=True)
    x = torch.randn(N, device="cuda")
    kept = [fast(x) for _ in range(10)]
    for out in kept:
        assert torch.equal(out, three_kernels(x))
    c = trident.counters(fast)
    assert c["graph_replays"] == 8 and c["graph_result_nodes"] == 0, c
