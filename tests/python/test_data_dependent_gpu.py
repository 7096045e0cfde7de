"""Data-dependent values and branches on CUDA tensors (python/trident/lowering/data_values.py): `.item()` and
result sizes read on the host after the device has computed them, a branch on a CUDA tensor's value
checked first; in graph mode such a program's graph is split at each read (graphs in segments,
test_graph_segments_gpu.py), or it runs without graphs where it also branches on the value."""
import pytest
import torch

import trident
from test_data_dependent import CASES, SYNCING_OPS, branch_on_a_sum

pytestmark = pytest.mark.gpu


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("graphs", [False, True])
def test_data_dependent_sizes_on_cuda(fn, make, graphs):
    require_cuda()
    fast = trident.compile(fn, graphs=graphs)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        args = tuple(a.cuda() for a in make(g))
        torch.testing.assert_close(fast(*args), fn(*args), rtol=1e-5, atol=1e-5)
    c = trident.counters(fast)
    assert (c["specializations"], c["fallbacks"], c["hits"]) == (1, 0, 5), c
    if not graphs:
        assert c["graph_replays"] == c["graph_captures"] == 0, c
    else:
        text = trident.explain(fast)
        if fn.__name__ in SYNCING_OPS:
            assert "does not replay as a CUDA graph: aten::" in text, text
            assert "computes its result's size on the host at test_data_dependent.py:" in text, text
            assert c["graph_replays"] == c["graph_captures"] == 0, c
        else:
            # new arguments and new values each call: a replay only where both repeat (the
            # segments' key and the values read), the rest plain runs; each call checked above
            assert "split into segments at each host read" in text or "and branches on data" in text, text
            assert c["graph_replays"] + c["graph_captures"] <= c["hits"], c


def test_a_branch_on_a_cuda_tensor_runs_each_way():
    require_cuda()
    fast = trident.compile(branch_on_a_sum)
    x = torch.randn(4, device="cuda")
    for m in (torch.ones(3), -torch.ones(3), torch.ones(3), -torch.ones(3)):
        m = m.cuda()
        torch.testing.assert_close(fast(x, m), branch_on_a_sum(x, m), rtol=0, atol=0)
    assert trident.counters(fast)["specializations"] == 2
