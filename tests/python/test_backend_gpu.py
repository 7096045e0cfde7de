"""The Triton kernel patterns of test_triton_gpu through torch.compile(backend="trident") on the
GPU machine, compared with eager; every graph must run natively (a hit, no fallback)."""
import pytest
import torch

import test_triton_gpu as T
from trident.backend import GRAPHS, live_graphs

pytestmark = pytest.mark.gpu


def _cases():
    r = T.randn
    return [
        ("vector_add", T.vector_add, lambda: (r(4096), r(4096))),
        ("fused_softmax", T.softmax, lambda: (r(64, 200),)),
        ("layer_norm", lambda x, w, b: T.layer_norm(x, w, b, 1e-5),
         lambda: (r(32, 256, dtype=torch.float16), r(256, dtype=torch.float16), r(256, dtype=torch.float16))),
        ("autotuned_matmul", T.matmul_autotuned,
         lambda: (r(256, 288, dtype=torch.float16), r(288, 128, dtype=torch.float16))),
        ("grid_lambda", T.leaky_relu_lambda_grid, lambda: (r(5000),)),
        ("same_kernel_several_times", T.scale_add_chain, lambda: (r(3000), r(3000))),
        ("kv_cache_in_place", T.decode_attention, T._kv_inputs(5)),
        ("two_outputs", T.sum_and_product, lambda: (r(2048), r(2048))),
    ]


@pytest.mark.parametrize("name,fn,make_inputs", _cases(), ids=[c[0] for c in _cases()])
def test_triton_pattern_through_backend(name, fn, make_inputs):
    T.require_cuda()
    torch._dynamo.reset()
    opt = torch.compile(fn, backend="trident")
    first = len(GRAPHS)
    for i in range(2):
        T._run_both(opt, fn, make_inputs(), ctx=torch.no_grad, where=f"{name} call {i}:")
    graphs = live_graphs(GRAPHS[first:])
    assert graphs and all(g.scm.counters()["fallbacks"] == 0 for g in graphs)
    assert sum(g.scm.counters()["hits"] for g in graphs) >= len(graphs)


def test_mixed_module_through_backend():
    T.require_cuda()
    torch._dynamo.reset()
    block = T.MixedBlock().to(T.DEVICE)
    opt = torch.compile(block, backend="trident")
    for i in range(2):
        T._run_both(opt, block, (T.randn(16, 256), T.randn(16, 256)), ctx=torch.no_grad, where=f"call {i}:")
