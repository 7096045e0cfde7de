"""Direct results on the GPU (csrc/runtime/graphs/direct_results.h, TRIDENT_GRAPH_DIRECT_RESULTS=1): a
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
    xs = [torch.randn(N, device="cuda") for _ in range(40)]
    kept = [fast(x) for x in xs]  # every result held: each replay writes a tensor at a new address
    for x, out in zip(xs, kept):
        assert torch.equal(out, three_kernels(x))
    c = trident.counters(fast)
    assert c["graph_captures"] == 1 and c["graph_replays"] == 38, c
    assert c["graph_result_nodes"] == 38, c  # one node (the last kernel) pointed per replay


def test_a_result_dropped_each_call_needs_no_node_rewritten():
    fast = trident.compile(three_kernels, graphs=True)
    x = torch.randn(N, device="cuda")
    for _ in range(3):
        fast(x)
    before = trident.counters(fast)["graph_result_nodes"]
    for _ in range(200):
        assert torch.equal(fast(x), x + 3)  # dropped: the caching allocator gives the same block back
    assert trident.counters(fast)["graph_result_nodes"] - before <= 2


def test_a_result_a_later_kernel_reads_is_written_where_the_replay_returns_it():
    def both(x):
        y = add_one(x)
        return y, add_one(y)

    fast = trident.compile(both, graphs=True)
    xs = [torch.randn(N, device="cuda") for _ in range(10)]
    kept = [fast(x) for x in xs]
    for x, (y, z) in zip(xs, kept):
        assert torch.equal(y, x + 1) and torch.equal(z, x + 2)
    c = trident.counters(fast)
    # two nodes per replay: the first launch (writes y) and the second (reads y, writes z)
    assert c["graph_replays"] == 8 and c["graph_result_nodes"] == 8 * 2, c


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
    assert c["graph_rebinds"] >= 2 and c["graph_scalar_patches"] > 0 and c["graph_result_nodes"] > 0, c


def test_reuse_outputs_recycles_a_direct_result():
    fast = trident.compile(three_kernels, graphs=True, reuse_outputs=True)
    x = torch.randn(N, device="cuda")
    for k in range(20):
        assert torch.equal(fast(x), x + 3), k
    kept = [fast(x + k) for k in range(4)]  # held: each replay writes another tensor
    for k, out in enumerate(kept):
        assert torch.equal(out, x + k + 3), k
    c = trident.counters(fast)
    assert c["recycled_outputs"] > 0 and c["graph_result_nodes"] >= 4, c
