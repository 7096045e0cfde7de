"""Data-dependent values and branches on CUDA tensors (python/trident/lowering/data_values.py): `.item()` and
result sizes read on the host after the device has computed them, a branch on a CUDA tensor's value
checked first, and graph mode declining such programs (a host read cannot be captured)."""
import pytest
import torch

import trident
from test_data_dependent import CASES, branch_on_a_sum

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
    assert (c["specializations"], c["fallbacks"], c["hits"], c["graph_replays"]) == (1, 0, 5, 0), c


def test_a_branch_on_a_cuda_tensor_runs_each_way():
    require_cuda()
    fast = trident.compile(branch_on_a_sum)
    x = torch.randn(4, device="cuda")
    for m in (torch.ones(3), -torch.ones(3), torch.ones(3), -torch.ones(3)):
        m = m.cuda()
        torch.testing.assert_close(fast(x, m), branch_on_a_sum(x, m), rtol=0, atol=0)
    assert trident.counters(fast)["specializations"] == 2
