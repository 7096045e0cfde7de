"""Collectives over NCCL on the GPU, one process (world size 1: the one-GPU machine): the
functional and in-place all-reduce called natively from a compiled function on the caller's
stream, with eager's result, and a TP decoder shard (the whole model at world size 1) in bf16.
Several GPUs: benchmarks and tests wait for a machine that has them."""
import os
import tempfile

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


@pytest.fixture(scope="module")
def nccl():
    import torch.distributed as dist
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    store = tempfile.mktemp()
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    yield dist
    dist.destroy_process_group()


@pytest.mark.parametrize("graphs", [False, True])
def test_functional_and_inplace_all_reduce_run_natively(nccl, graphs):
    """With graphs=True too: a program with a collective is not captured as a CUDA graph (the
    communicator holds its buffers: csrc/runtime/module/loaded_spec.cpp) and says so."""
    import torch.distributed._functional_collectives as fc
    dist = nccl

    def functional(x):
        return fc.all_reduce(x * 2, "sum", dist.group.WORLD) + 1

    def inplace(x):
        y = x * 2
        dist.all_reduce(y)
        return y + 1

    x = torch.randn(8, 64, device="cuda")
    for fn in (functional, inplace):
        fast = trident.compile(fn, graphs=graphs)
        for _ in range(5):
            torch.testing.assert_close(fast(x), fn(x), rtol=0, atol=0)
        n = trident.counters(fast)
        assert (n["captures"], n["hits"], n["fallbacks"], n["split_calls"]) == (1, 4, 0, 0), n
        text = trident.explain(fast)
        assert "_c10d_functional::all_reduce" in text
        if graphs:
            assert n["graph_replays"] == 0 and "does not replay as a CUDA graph: a collective" in text, text


def test_tp_decoder_shard_in_bf16(nccl):
    from tp_decoder import Decoder, full_weights, shard
    full = [{k: v.to("cuda", torch.bfloat16) for k, v in w.items()} for w in full_weights(2, 256, 8, 512)]
    ref = Decoder(full, 8)
    tp = Decoder(shard(full, 8, 0, 1), 8, group=nccl.group.WORLD)
    x = torch.randn(1, 1, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        fast = trident.compile(tp)
        for _ in range(3):
            torch.testing.assert_close(fast(x), ref(x), rtol=2e-2, atol=2e-2)
    n = trident.counters(fast)
    assert (n["captures"], n["hits"], n["fallbacks"]) == (1, 2, 0), n
