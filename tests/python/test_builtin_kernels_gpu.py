"""trident's own copy and add kernels (builtin_lower.py: a + b and a + number) on the GPU machine (pytest -m gpu): every
result equal to eager's bit for bit, and the ATen ops they replace gone from the host program."""
import pytest
import torch

import trident

pytestmark = pytest.mark.gpu


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def residual(x, y):
    return x + y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 2048), (8, 2048), (3, 1000), (1, 1)])
def test_add_matches_eager_bit_for_bit(dtype, shape):
    require_cuda()
    fast = trident.compile(residual)
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = (torch.randn(shape, device="cuda", generator=g) * 100).to(dtype)
        y = torch.randn(shape, device="cuda", generator=g).to(dtype)
        assert torch.equal(fast(x, y), x + y)
    assert "add_contiguous" in trident.explain(fast, x, y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("c", [1, -0.3, 1e-3, 3 * 2 ** 20 + 1])
def test_adding_a_number_matches_eager_bit_for_bit(dtype, c):
    require_cuda()
    fast = trident.compile(lambda x: x + c)
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = (torch.randn(3, 1000, device="cuda", generator=g) * 100).to(dtype)
        assert torch.equal(fast(x), x + c)
    assert "add_scalar" in trident.explain(fast, x)


def kv_write(k_cache, v_cache, qkv, pos: int, nh: int, hd: int):
    b = qkv.shape[0]
    k_cache[:, :, pos:pos + 1] = qkv[:, nh * hd:2 * nh * hd].view(b, nh, 1, hd)
    v_cache[:, :, pos:pos + 1] = qkv[:, 2 * nh * hd:].view(b, nh, 1, hd)
    return k_cache[:, :, pos].sum() + v_cache[:, :, pos].sum()


@pytest.mark.parametrize("batch", [1, 8])
def test_kv_cache_writes_at_growing_positions_match_eager(batch):
    require_cuda()
    nh, hd, seq = 16, 128, 64
    fast = trident.compile(kv_write)
    caches = [torch.zeros(batch, nh, seq, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    want = [c.clone() for c in caches]
    for pos in range(10, 20):
        qkv = torch.randn(batch, 3 * nh * hd, device="cuda", dtype=torch.bfloat16)
        got_sum = fast(*caches, qkv, pos, nh, hd)
        want_sum = kv_write(*want, qkv, pos, nh, hd)
        assert torch.equal(got_sum, want_sum)
        assert all(torch.equal(a, b) for a, b in zip(caches, want))
    text = trident.explain(fast, *caches, qkv, 30, nh, hd)
    last = text[text.rindex("structure"):]
    assert "strided_copy" in text and "aten::copy_" not in last, text
    # both the cache slices and the qkv slices are pointers (lazy_views.py); the selects read by sum stay;
    # the two writes share one launch
    assert 'call "aten::slice.Tensor"' not in last and 'call "aten::view"' not in last and "ptr(" in last, last
    assert '"strided_copy_pair"' in last and '"strided_copy"' not in last, last
