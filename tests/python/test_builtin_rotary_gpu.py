"""HF's rotary embedding as trident's one-launch kernel (builtin_rotary.py) on the GPU machine
(pytest -m gpu): equal to eager's five ATen kernels bit for bit, special values included, and an
HF Llama's decode step through it gives eager's logits bit for bit."""
import sys
from pathlib import Path

import pytest
import torch
from rotary_cases import decode_inputs, rope

import trident

pytestmark = pytest.mark.gpu
BITS = torch.int16  # fp16 and bf16 alike


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def assert_same_bits(got, want):
    assert got.shape == want.shape and got.stride() == want.stride(), (got.stride(), want.stride())
    same = got.view(BITS) == want.view(BITS)
    assert bool(same.all()), (got[~same][:8], want[~same][:8])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch, heads, kv_heads, dim", [(1, 16, 8, 128), (8, 16, 8, 128), (3, 4, 4, 64)])
def test_rotary_matches_eager_bit_for_bit(dtype, batch, heads, kv_heads, dim):
    require_cuda()
    fast = trident.compile(rope)
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        q, k, cos, sin = decode_inputs(batch, heads, kv_heads, dim, dtype, "cuda", g)
        q.mul_(30)  # products that round
        for got, want in zip(fast(q, k, cos, sin), rope(q, k, cos, sin)):
            assert_same_bits(got, want)
    assert trident.explain(fast, q, k, cos, sin).count('"rotate_half_rotary"') >= 1
    assert "aten::cat" not in trident.explain(fast, q, k, cos, sin).split("structure")[-1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotary_specials_match_eager_bit_for_bit(dtype):
    """Both zeros (neg(0.0) is -0.0), infinities, NaNs and values at the dtype's limits."""
    require_cuda()
    fast = trident.compile(rope)
    big = torch.finfo(dtype).max
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), big, -big, 1e-7])
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, cos, sin = decode_inputs(2, 4, 2, 16, dtype, "cuda", g)
    special = special.repeat(2).to(dtype).cuda()  # in both halves: the negated one too
    q.view(-1)[:16], k.view(-1)[:16] = special, special.flip(0)
    cos.view(-1)[:16], sin.view(-1)[:16] = special.flip(0), special
    # -0.0 * 1 + neg(0.0) * 1 is -0.0 only if neg(0.0) is -0.0 (0 - 0.0 would give +0.0)
    q[0, 0, 0, 0], q[0, 0, 0, 8], cos[0, 0, 0], sin[0, 0, 0] = -0.0, 0.0, 1.0, 1.0
    for got, want in zip(fast(q, k, cos, sin), rope(q, k, cos, sin)):
        assert_same_bits(got, want)


def test_hf_llama_step_gives_eagers_logits_bit_for_bit():
    require_cuda()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hf_llama
    cfg = hf_llama.TINY
    model = hf_llama.build_model(cfg, "cuda", dtype=torch.bfloat16)
    hf_llama.use_kernels(model, triton=True)
    step = hf_llama.DecodeStep(model, 2, cfg.max_cache, with_logits=True)
    ref = hf_llama.DecodeStep(model, 2, cfg.max_cache, with_logits=True)
    fast = trident.compile(step)
    ids = torch.tensor([[5], [7]], device="cuda")
    with torch.no_grad():
        for pos in range(12):
            p = torch.tensor([pos], device="cuda")
            (got_ids, got), (want_ids, want) = fast(ids, p), ref(ids, p)
            assert torch.equal(got_ids, want_ids) and torch.equal(got.view(BITS), want.view(BITS)), pos
            ids = want_ids[:, None]
    ops = trident.controller(fast).last_ops[-1]
    assert ops.count("builtin:rotate_half_rotary") == 2 * cfg.layers, ops
