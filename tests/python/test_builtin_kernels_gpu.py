"""trident's own copy, index-copy, add, mul and relu kernels (builtin_lower.py: a + b, a + number,
a * b, a * number, relu; integer adds too) on the GPU machine (pytest -m gpu): every result equal to
eager's bit for bit, and the ATen ops they replace gone from the host program."""
import subprocess
import sys
import textwrap
from pathlib import Path

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
@pytest.mark.parametrize("c", [1, -0.3, 1e-3, 3 * 2 ** 20 + 1, 2 ** 60 + 1])
def test_adding_a_number_matches_eager_bit_for_bit(dtype, c):
    require_cuda()
    fast = trident.compile(lambda x: x + c)
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = (torch.randn(3, 1000, device="cuda", generator=g) * 100).to(dtype)
        assert torch.equal(fast(x), x + c)
    assert "add_scalar" in trident.explain(fast, x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("c", [1, -7, 2 ** 31 - 1, 2 ** 40])
def test_integer_adds_match_eager_wrapping_included(dtype, c):
    require_cuda()
    top = torch.iinfo(dtype).max
    x = torch.tensor([top, -top - 1, 0, -5, 7, 3], dtype=dtype, device="cuda")
    y = torch.tensor([1, -1, 0, 9, -7, 2 ** 30], dtype=dtype, device="cuda")
    fast_sum, fast_num = trident.compile(residual), trident.compile(lambda x: x + c)
    assert torch.equal(fast_sum(x, y), x + y)
    assert torch.equal(fast_sum(x, y[1]), x + y[1]) and torch.equal(fast_sum(y[1], x), y[1] + x)  # 0-dim
    assert torch.equal(fast_num(x), x + c)
    assert '"add_int"' in trident.explain(fast_sum, x, y)
    held = dtype == torch.int64 or c < 2 ** 31  # else the number does not fit: ATen's add
    assert ('"add_int_scalar"' in trident.explain(fast_num, x)) == held


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_relu_matches_eager_bit_for_bit_specials_included(dtype):
    """NaNs of either sign and a payload, infinities and both zeros: compared as bits."""
    require_cuda()
    fast = trident.compile(torch.relu)
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[dtype]
    special = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, -1e-40, 1e-40])
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.cat([special.cuda(), torch.randn(2992, device="cuda", generator=g)]).to(dtype).view(3, 1000)
        x.view(bits)[0, 0] |= 0x5  # a NaN payload
        assert torch.equal(fast(x).view(bits), torch.relu(x).view(bits))
    text = trident.explain(fast, x)
    assert 'kernel 0 "relu"' in text and "aten::relu" not in text, text


def equal_bits_nan_as_nan(got, want, bits):
    """Bit for bit, except that a NaN result need only be a NaN (its payload is the device's)."""
    nan = torch.isnan(want)
    return bool(torch.isnan(got)[nan].all()) and torch.equal(got.view(bits)[~nan], want.view(bits)[~nan])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_products_match_eager_bit_for_bit_specials_and_subnormals_included(dtype):
    """HF's MLP (act(gate) * up) and rotary scaling (cos * number): infinities, zeros of both signs,
    NaNs and subnormal inputs and results among the random values."""
    require_cuda()
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[dtype]
    tiny = torch.finfo(dtype).tiny
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, tiny, -tiny / 4, tiny * 3,
                            1e4, -3e4, 0.5, 65504.0])
    gated, scaled = trident.compile(lambda g, u: g * u), trident.compile(lambda x: x * 0.3)
    by_int = trident.compile(lambda x: x * 3)
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.cat([special.cuda(), torch.randn(2988, device="cuda", generator=g)]).to(dtype).view(3, 1000)
        b = torch.cat([special.flip(0).cuda() * 1e-3, torch.randn(2988, device="cuda", generator=g)]).to(dtype)
        b = b.view(3, 1000)
        assert equal_bits_nan_as_nan(gated(a, b), a * b, bits)
        assert equal_bits_nan_as_nan(gated(a, a), a * a, bits)
        assert equal_bits_nan_as_nan(scaled(a), a * 0.3, bits)
        assert equal_bits_nan_as_nan(by_int(a), a * 3, bits)
    for fn, args, kernel in ((gated, (a, b), "mul_contiguous"), (scaled, (a,), "mul_scalar")):
        text = trident.explain(fn, *args)
        assert f'"{kernel}"' in text and "aten::mul" not in text, text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_where_of_a_mask_and_a_number_matches_eager_bit_for_bit(dtype):
    """HF's mask conversion (where(mask, 0.0, <0-dim min>)) and both argument orders with numbers the
    dtype must round; x's NaNs keep their payloads, as ATen's where copies them."""
    require_cuda()
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[dtype]
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e4, -3e4, 0.5])
    fill = trident.compile(lambda m, x: torch.where(m, 0.0, x))
    numbers = (-0.3, 1e-9, 3000.7, -float("inf"), 3)
    keep = [trident.compile(lambda m, x, c=c: torch.where(m, x, c)) for c in numbers]
    put = [trident.compile(lambda m, x, c=c: torch.where(m, c, x)) for c in numbers]
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.cat([special.cuda(), torch.randn(2992, device="cuda", generator=g)]).to(dtype).view(3, 1000)
        x.view(bits)[0, 0] |= 0x5  # a NaN payload
        m = torch.rand(3, 1000, device="cuda", generator=g) > 0.5
        lowest = torch.tensor(torch.finfo(dtype).min, device="cuda", dtype=dtype)
        mask = torch.rand(1, 1, 1, 96, device="cuda", generator=g) > 0.5
        assert torch.equal(fill(mask, lowest).view(bits), torch.where(mask, 0.0, lowest).view(bits))
        for c, k, p in zip(numbers, keep, put):
            assert torch.equal(k(m, x).view(bits), torch.where(m, x, c).view(bits)), c
            assert torch.equal(p(m, x).view(bits), torch.where(m, c, x).view(bits)), c
    for fn, args in ((fill, (mask, lowest)), (keep[0], (m, x)), (put[0], (m, x))):
        text = trident.explain(fn, *args)
        assert '"where_scalar"' in text and "aten::where" not in text, text
    if dtype == torch.float16:  # a number fp16 cannot hold: ATen's error, and the function stays usable
        big = trident.compile(lambda m, x: torch.where(m, x, 7e4))
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.where(m, x, 7e4)
        with pytest.raises(RuntimeError, match="without overflow"):
            big(m, x)
        assert torch.equal(keep[0](m, x).view(bits), torch.where(m, x, -0.3).view(bits))


@pytest.mark.parametrize("src, dst", [(torch.float32, torch.bfloat16), (torch.float32, torch.float16),
                                      (torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                      (torch.int32, torch.float32), (torch.int64, torch.float32)])
def test_conversions_match_eager_bit_for_bit(src, dst):
    """HF's rotary conversions and their kin: values that round (ties included), overflow to infinity,
    subnormals, signed zeros; integers fp32 cannot hold. A NaN only has to stay a NaN (its payload
    is the device's conversion's)."""
    require_cuda()
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[dst]
    to = trident.compile(lambda x: x.to(dst))
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        if src.is_floating_point:
            special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 65520.0, -7e4, 3e38,
                                    1 + 2 ** -8, 1 + 3 * 2 ** -9, 2 ** -130, 6e-8, 1e-45])
            x = torch.cat([special.cuda(), torch.randn(2987, device="cuda", generator=g) * 100]).to(src)
        else:
            top = torch.iinfo(src).max
            special = [top, -top - 1, 2 ** 24 + 1, -(2 ** 24 + 3), 0] + ([2 ** 60 + 1, 2 ** 53 + 3] if top > 2 ** 32 else [])
            x = torch.cat([torch.tensor(special, dtype=src, device="cuda"),
                           torch.randint(-2 ** 30, 2 ** 30, (3000 - len(special),), device="cuda", generator=g,
                                         dtype=src)])
        x = x.view(3, 1000)
        got, want = to(x), x.to(dst)
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.view(bits)[~want.isnan()], want.view(bits)[~want.isnan()]), (src, dst)
    text = trident.explain(to, x)
    assert '"convert"' in text and "aten::_to_copy" not in text, text


def mm_relu(a, b):
    return torch.relu(torch.mm(a, b))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mm_relu_matches_eager_and_runs_no_aten_kernel_op(dtype):
    """The suite's mm + relu: a row-major b goes to the cuBLASLt site (lt_gemm.h), relu to the builtin."""
    require_cuda()
    fast = trident.compile(mm_relu)
    for seed in range(4):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a, b = (torch.randn(64, 64, device="cuda", generator=g).to(dtype) for _ in range(2))
        for _ in range(3):  # the same pointers three times: recorded on the second call, replayed on the third
            assert torch.equal(fast(a, b), mm_relu(a, b))
    c = trident.counters(fast)
    assert (c["cublaslt_gemms"], c["cublaslt_declined"], c["cublaslt_replayed"]) == (1, 0, 1), c
    assert "aten::relu" not in trident.explain(fast, a, b)


def test_gradients_flow_where_autograd_may_record():
    """With an argument requiring grad, relu and the adds stay ATen ops, so backward gives eager's
    gradients; under no_grad the same function runs the builtin kernels."""
    require_cuda()

    def f(x, y):
        return torch.relu(x) + y + 1

    fast = trident.compile(f)
    x = torch.randn(3, 1000, device="cuda", requires_grad=True)
    y = torch.randn(3, 1000, device="cuda")
    out = fast(x, y)
    assert out.grad_fn is not None and torch.equal(out, f(x, y))
    out.sum().backward()
    xe = x.detach().clone().requires_grad_(True)
    f(xe, y).sum().backward()
    assert torch.equal(x.grad, xe.grad)
    with torch.no_grad():
        assert torch.equal(fast(x, y), f(x, y))
        text = trident.explain(fast, x, y)
    assert 'kernel 0 "relu"' in text and "add_scalar" in text and "add_contiguous" in text, text


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


def bump_both(a, b, step):
    a.add_(step)
    b.add_(1)
    return a + b


@pytest.mark.parametrize("dtype", [torch.int64, torch.bfloat16])
def test_two_inputs_written_back_by_one_launch_match_eager(dtype):
    """HF's per-layer position counters (0-dim int64 buffers the step rewrites): the write-backs
    share one builtin launch, and the inputs hold eager's values after every call."""
    require_cuda()
    fast = trident.compile(bump_both)
    shapes = [(), (3, 5)]
    for shape in shapes:
        a, b = torch.zeros(shape, dtype=dtype, device="cuda"), torch.ones(shape, dtype=dtype, device="cuda")
        ea, eb = a.clone(), b.clone()
        step = torch.full(shape, 2, dtype=dtype, device="cuda")
        for _ in range(3):
            got, want = fast(a, b, step), bump_both(ea, eb, step)
            assert torch.equal(got, want) and torch.equal(a, ea) and torch.equal(b, eb)
        text = trident.explain(fast, a, b, step)
        assert "strided_copy_pair" in text and 'call "aten::copy_"' not in text.split("structure")[-1], text


def kv_index_writes(k_cache, v_cache, kv, pos):
    """HF's StaticCache.update at decode: k and v (head-transposed views of one projection) written
    into their caches at the position tensor `pos`."""
    k, v = kv[:, :, :4].transpose(1, 2), kv[:, :, 4:].transpose(1, 2)
    k_cache.index_copy_(2, pos, k)
    v_cache.index_copy_(2, pos, v)
    return k_cache[:, :, : 40].sum(2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_index_copies_at_a_position_tensor_match_eager(dtype):
    require_cuda()
    fast = trident.compile(kv_index_writes)
    caches = [torch.zeros(2, 4, 64, 32, dtype=dtype, device="cuda") for _ in range(2)]
    want_caches = [c.clone() for c in caches]
    g = torch.Generator(device="cuda").manual_seed(0)
    for p in (0, 7, 39, 63):
        kv = torch.randn(2, 1, 8, 32, device="cuda", generator=g).to(dtype)
        pos = torch.tensor([p], device="cuda")
        got, want = fast(*caches, kv, pos), kv_index_writes(*want_caches, kv, pos)
        assert torch.equal(got, want) and all(torch.equal(a, b) for a, b in zip(caches, want_caches))
    assert trident.counters(fast)["compiles"] == 1  # the position is a tensor: one specialization
    text = trident.explain(fast, *caches, kv, pos)
    assert "index_copy_pair" in text and "aten::index_copy_" not in text.split("structure")[-1], text


def test_an_index_copy_position_outside_the_cache_fails_a_device_assert_as_eager():
    """Run apart: a device assert leaves the CUDA context unusable."""
    require_cuda()
    script = textwrap.dedent(f"""
        import sys, torch, trident
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_builtin_kernels_gpu import kv_index_writes
        fast = trident.compile(kv_index_writes)
        caches = [torch.zeros(2, 4, 64, 32, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
        kv = torch.randn(2, 1, 8, 32, device="cuda").to(torch.bfloat16)
        fast(*caches, kv, torch.tensor([3], device="cuda"))
        torch.cuda.synchronize()
        print("in range ok", flush=True)
        fast(*caches, kv, torch.tensor([64], device="cuda"))
        torch.cuda.synchronize()
        print("no assert", flush=True)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert "in range ok" in run.stdout and "no assert" not in run.stdout, out[-3000:]
    assert "index out of bounds" in out or "device-side assert" in out, out[-3000:]


def repeat_kv_attention(k_cache, v_cache, q):
    """HF's repeat_kv (each cache's 2 heads repeated twice by a contiguous clone of an expanded
    view), then attention scores and values in ATen."""
    b, h, s, d = k_cache.shape
    k = k_cache[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
    v = v_cache[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
    return (q @ k.transpose(-1, -2)).softmax(-1) @ v, k, v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("batch", [1, 8])
def test_repeat_kv_clones_match_eager(dtype, batch):
    require_cuda()
    fast = trident.compile(repeat_kv_attention)
    g = torch.Generator(device="cuda").manual_seed(batch)
    for _ in range(2):
        k_cache, v_cache = (torch.randn(batch, 2, 96, 64, device="cuda", generator=g).to(dtype) for _ in range(2))
        q = torch.randn(batch, 4, 1, 64, device="cuda", generator=g).to(dtype)
        got, want = fast(k_cache, v_cache, q), repeat_kv_attention(k_cache, v_cache, q)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    text = trident.explain(fast, k_cache, v_cache, q)
    assert "strided_copy_pair" in text and "aten::clone" not in text.split("structure")[-1], text
