"""ATen calls that replay their recorded launches (csrc/runtime/replay/op_replay.h): cuDNN attention at an
HF Llama's decode shapes, on the GPU machine (pytest -m gpu). Every result equals eager's bit for bit;
the counters say when a site replays."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import trident
from test_op_replay_cpu import printed_with_replay_switch

pytestmark = pytest.mark.gpu


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def attention(q, k, v, mask):
    """One decode step's attention as HF's sdpa path calls it (a boolean mask over the cache), then
    the output projection's input layout."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=q.shape[-1] ** -0.5)
    return out.transpose(1, 2).reshape(q.shape[0], 1, -1) * 2


def inputs(batch=1, heads=16, cache=256, dim=128, pos=100, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, heads, 1, dim, device="cuda", generator=g).to(torch.bfloat16)
    k, v = (torch.randn(batch, heads, cache, dim, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    mask = (torch.arange(cache, device="cuda") <= pos).view(1, 1, 1, cache)
    return q, k, v, mask


def refill(tensors, seed):
    """New values in the same memory (what a decode step's buffers see from step to step)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    for t in tensors:
        t.copy_(torch.randn(t.shape, device="cuda", generator=g).to(t.dtype))


@pytest.mark.parametrize("batch", [1, 8])
def test_cudnn_attention_replays_at_repeated_inputs_and_matches_eager(batch):
    require_cuda()
    refused_before = dict(trident._C.aten_replay_refusals())  # the tally is the process's
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        fast = trident.compile(attention)
        args = inputs(batch)
        text = trident.controller(fast).lower_call(*args).text
        assert "aten::_scaled_dot_product_cudnn_attention" in text, text
        for step in range(6):
            refill(args[:3], seed=step)
            got, want = fast(*args), attention(*args)
            assert torch.equal(got, want), step
        c = trident.counters(fast)
    assert c["aten_replay_sites"] == 1 and c["aten_replayed"] == 1, c
    refused = {why: n - refused_before.get(why, 0) for why, n in trident._C.aten_replay_refusals()
               if n != refused_before.get(why, 0)}
    assert refused == {}, refused


def test_new_input_memory_runs_aten_and_matches_eager():
    require_cuda()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        fast = trident.compile(attention)
        for seed in range(5):  # new tensors every call: the recorded pointers never repeat
            args = inputs(seed=seed)
            assert torch.equal(fast(*args), attention(*args)), seed


def returns_attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=q.shape[-1] ** -0.5)


def test_a_returned_result_is_never_overwritten_by_a_later_call():
    """The attention's output is the function's result: while the caller holds it, the site's kept
    output is not free, so later calls run ATen into new memory."""
    require_cuda()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        fast = trident.compile(returns_attention)
        args = inputs()
        held = []
        for step in range(5):
            refill(args[:3], seed=step)
            held.append((fast(*args), returns_attention(*args)))
        for step, (got, want) in enumerate(held):
            assert torch.equal(got, want), step
        assert len({got.data_ptr() for got, _ in held}) == len(held)


def test_the_environment_switch_turns_replay_off():
    require_cuda()
    code = ("import torch, trident\n"
            "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
            "from test_op_replay_gpu import attention, inputs\n"
            "with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):\n"
            "    f = trident.compile(attention)\n"
            "    args = inputs()\n"
            "    for _ in range(4):\n"
            "        assert torch.equal(f(*args), attention(*args))\n"
            "c = trident.counters(f)\n"
            "print(c['aten_replay_sites'], c['aten_replayed'])\n")
    for env, want in (("0", "0 0"), ("1", "1 1")):
        assert printed_with_replay_switch(code, env) == want, env


def eight_layers(qs, k, v, mask):
    """Eight attention sites, each with inputs that repeat from call to call (an 8-layer decode)."""
    out = None
    for q in qs:
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=q.shape[-1] ** -0.5)
        out = a if out is None else out + a
    return out


@pytest.mark.parametrize("batch", [1, 8])
def test_the_sites_of_a_model_share_one_private_pool(batch):
    """A pool per recording reserved 2 MiB or more per site (50-66 MiB for an HF Llama's 8 sites at
    batch 8); the recordings of one caller stream share one (python/trident/recording_pools.py)."""
    require_cuda()
    import gc
    gc.collect()
    pools_before = trident._recording_pools.pools()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        q, k, v, mask = inputs(batch)
        qs = [q.clone() for _ in range(8)]
        fast = trident.compile(eight_layers, graphs=False)  # a graph's private pool would count too
        for step in range(6):
            refill(qs + [k, v], seed=step)
            assert torch.equal(fast(qs, k, v, mask), eight_layers(qs, k, v, mask)), step
        c = trident.counters(fast)
    assert c["aten_replay_sites"] == 8 and c["aten_replayed"] == 8, c
    assert trident._recording_pools.pools() - pools_before == 1
    del fast
    gc.collect()
    assert trident._recording_pools.pools() == pools_before  # every record dropped, the pool released
