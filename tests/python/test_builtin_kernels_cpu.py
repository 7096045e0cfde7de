"""ATen copies, adds and products lowered to trident's own Triton kernels (builtin_lower.py), checked in the
host IR on a machine without a GPU: kernels compiled for sm_90 with Triton's driver faked, and
TRIDENT_BUILTIN_KERNELS=all so CPU tensors take the path CUDA tensors take. Running such a module on
CPU tensors fails clearly, as any Triton launch does."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from fake_cuda import capture_as_sm90, keep_ptx

import trident
from trident.lowering.lower import dtype_code


@pytest.fixture(autouse=True)
def builtins_on_cpu(monkeypatch):
    monkeypatch.setenv("TRIDENT_BUILTIN_KERNELS", "all")
    with capture_as_sm90(monkeypatch):
        yield


def lowered_text(fn, *args):
    return trident.controller(trident.compile(fn)).lower_call(*args).text


def kv_write(cache, k, pos: int):
    cache[:, :, pos:pos + 1] = k.unsqueeze(2)
    return cache[:, :, : pos + 1].sum()


def test_kv_cache_slice_write_is_a_native_strided_copy():
    cache = torch.zeros(2, 4, 64, 32, dtype=torch.bfloat16)
    k = torch.randn(2, 4, 32, dtype=torch.bfloat16)
    text = lowered_text(kv_write, cache, k, 5)
    assert "aten::copy_" not in text, text
    (decl,) = [ln for ln in text.splitlines() if ln.strip().startswith("kernel ") and "strided_copy" in ln]
    kid = decl.split()[1]
    # [2, 4, 1, 32] from k.unsqueeze(2): n 256, sizes (4, 1, 32), dst strides (8192, 2048, 32, 1), src
    # strides (128, 32, 32, 1); ints equal to 1 are constexprs, dropped from the launch. Neither view
    # is a tensor at run time: the destination is the cache's pointer plus 5 * 32 * 2 bytes, the
    # source k's own pointer (lazy_views.py).
    launch = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(f"launch {kid} ")]
    assert len(launch) == 1 and re.search(
        r"grid\(1, 1, 1\) \(ptr\(%0, 320\), %1, 256, 4, 32, 8192, 2048, 32, 128, 32, 32\)$", launch[0]), launch
    assert "aten::unsqueeze" not in text and text.count("aten::slice.Tensor") == 1, text  # the sum's slice


def residual(x, y):
    return x + y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_same_shape_add_is_an_allocation_and_a_native_launch(dtype):
    x, y = torch.randn(3, 2048, dtype=dtype), torch.randn(3, 2048, dtype=dtype)
    text = lowered_text(residual, x, y)
    assert "aten::add" not in text and "add_contiguous" in text, text
    assert re.search(r'%\d+ = call "aten::empty.memory_format" \(\[3, 2048\]', text), text
    assert re.search(r"launch 0 grid\(6, 1, 1\) \(%0, %1, %\d+, 6144\)", text), text


@pytest.mark.parametrize("fn, args", [
    (lambda x, y: torch.add(x, y, alpha=2), (torch.randn(8, 16), torch.randn(8, 16))),       # alpha
    (residual, (torch.randn(8, 16), torch.randn(16))),                                       # broadcast
    (residual, (torch.randn(8, 16), torch.randn(8, 16, dtype=torch.float16))),               # promotion
    (residual, (torch.randn(8, 16, dtype=torch.float64), torch.randn(8, 16, dtype=torch.float64))),
    (residual, (torch.randn(16, 8).t(), torch.randn(8, 16))),                                # layout
])
def test_adds_that_are_not_exactly_the_kernel_stay_aten(fn, args):
    text = lowered_text(fn, *args)
    assert "aten::add.Tensor" in text and "add_contiguous" not in text, text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("c, literal", [(1, "1.0"), (-0.5, "-0.5")])  # both exact in every dtype
def test_adding_a_number_is_an_allocation_and_a_native_launch(dtype, c, literal):
    x = torch.randn(3, 700, dtype=dtype)
    text = lowered_text(lambda x: x + c, x)
    assert "aten::add" not in text and "add_scalar" in text, text
    assert re.search(rf"launch 0 grid\(3, 1, 1\) \(%0, {re.escape(literal)}, %\d+, 2100\)", text), text


@pytest.mark.parametrize("fn, args", [
    (lambda x: torch.add(x, 1, alpha=2), (torch.randn(8, 16),)),                  # alpha
    (lambda x: x + 0.5, (torch.randint(0, 9, (8, 16)),)),                          # int + float: a float
    (lambda x: x + 2 ** 40, (torch.randint(0, 9, (8, 16), dtype=torch.int32),)),    # more than int32 holds
    (lambda x: x + 1, (torch.randint(0, 9, (8, 16), dtype=torch.int16),)),          # int16
    (lambda x: x + 0.5, (torch.randn(16, 8).t(),)),                                # layout
    (lambda x: x + True, (torch.randn(8, 16),)),                                   # bool
])
def test_number_adds_that_are_not_exactly_the_kernel_stay_aten(fn, args):
    text = lowered_text(fn, *args)
    assert "aten::add" in text and "add_scalar" not in text and "add_int" not in text, text


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("c, literal", [(1, ""), (-7, "-7, "), (2 ** 31 - 1, "2147483647, ")])  # 1: a constexpr
def test_integer_adds_are_an_allocation_and_a_native_launch(dtype, c, literal):
    """A decoder's cache positions: an int64 position plus a layer's offset, and a counter plus 1."""
    x, y = torch.randint(0, 9, (3, 5), dtype=dtype), torch.randint(0, 9, (3, 5), dtype=dtype)
    text = lowered_text(lambda x: x + c, x)
    assert "aten::add" not in text and '"add_int_scalar"' in text, text
    assert re.search(rf"launch 0 grid\(1, 1, 1\) \(%0, {literal}%\d+, 15\)", text), text
    text = lowered_text(residual, x, y)
    assert "aten::add" not in text and '"add_int"' in text, text
    assert re.search(r"launch 0 grid\(1, 1, 1\) \(%0, %1, %\d+, 15\)", text), text  # b_step 1: a constexpr
    # HF's per-layer position: arange(1) plus the layer's 0-dim counter, in either order
    for args, launched in (((x, y[0, 0]), "%0, %1"), ((y[0, 0], x), "%1, %0")):
        text = lowered_text(residual, *args)
        assert "aten::add" not in text and '"add_int"' in text, text
        assert re.search(rf"launch 0 grid\(1, 1, 1\) \({launched}, %\d+, 15, 0\)", text), text


def test_integer_adds_of_two_dtypes_stay_aten():
    x, y = torch.randint(0, 9, (3, 5), dtype=torch.int32), torch.randint(0, 9, (3, 5))
    text = lowered_text(residual, x, y)
    assert "aten::add.Tensor" in text and "add_int" not in text, text


def test_the_number_is_taken_as_fp32_as_atens_cuda_add_does():
    """Not rounded to bf16 first: only a CPU TensorIterator converts the wrapped number to the
    tensor's dtype (the GPU test caught that)."""
    text = lowered_text(lambda x: x + 0.3, torch.randn(4, 8, dtype=torch.bfloat16))
    assert re.search(r"launch 0 grid\(1, 1, 1\) \(%0, 0\.30000001192092896, %\d+, 32\)", text), text


def gated(gate, up):
    return gate * up


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_same_shape_product_is_an_allocation_and_a_native_launch(dtype):
    """HF's MLP: act(gate) * up."""
    g, u = torch.randn(3, 5632, dtype=dtype), torch.randn(3, 5632, dtype=dtype)
    text = lowered_text(gated, g, u)
    assert "aten::mul" not in text and "mul_contiguous" in text, text
    assert re.search(r'%\d+ = call "aten::empty.memory_format" \(\[3, 5632\]', text), text
    assert re.search(r"launch 0 grid\(17, 1, 1\) \(%0, %1, %\d+, 16896\)", text), text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("c, literal", [(2, "2.0"), (0.3, "0.30000001192092896")])  # the number as fp32
def test_multiplying_by_a_number_is_an_allocation_and_a_native_launch(dtype, c, literal):
    """HF's rotary embedding: cos and sin times attention_scaling."""
    text = lowered_text(lambda x: x * c, torch.randn(3, 700, dtype=dtype))
    assert "aten::mul" not in text and "mul_scalar" in text, text
    assert re.search(rf"launch 0 grid\(3, 1, 1\) \(%0, {re.escape(literal)}, %\d+, 2100\)", text), text


@pytest.mark.parametrize("fn, args", [
    (gated, (torch.randn(8, 16), torch.randn(16))),                                    # broadcast
    (gated, (torch.randn(8, 16), torch.randn(8, 16, dtype=torch.float16))),            # promotion
    (gated, (torch.randn(8, 16, dtype=torch.float64), torch.randn(8, 16, dtype=torch.float64))),
    (gated, (torch.randn(16, 8).t(), torch.randn(8, 16))),                             # layout
    (gated, (torch.randint(0, 9, (8, 16)), torch.randint(0, 9, (8, 16)))),             # integers
    (lambda x: x * 0.5, (torch.randint(0, 9, (8, 16)),)),                              # int * float: a float
    (lambda x: x * True, (torch.randn(8, 16),)),                                       # bool
    (lambda x: x * 2, (torch.randn(16, 8).t(),)),                                      # layout
])
def test_products_that_are_not_exactly_the_kernel_stay_aten(fn, args):
    text = lowered_text(fn, *args)
    assert "aten::mul" in text and "mul_contiguous" not in text and "mul_scalar" not in text, text


def mask_fill(mask, x):
    """HF's attention mask conversion: 0 where attended, the dtype's minimum elsewhere (x 0-dim)."""
    return torch.where(mask, 0.0, x)


def mask_keep(mask, x):
    return torch.where(mask, x, -0.3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_where_of_a_mask_a_tensor_and_a_number_is_an_allocation_and_a_native_launch(dtype):
    mask = torch.rand(1, 1, 1, 96) > 0.5
    text = lowered_text(mask_fill, mask, torch.tensor(torch.finfo(dtype).min, dtype=dtype))
    assert "aten::where" not in text and "where_scalar" in text, text
    # the number is the kernel's s; x_step 0 (a 0-dim x) is the launch's last operand
    assert re.search(r"launch 0 grid\(1, 1, 1\) \(%0, %1, 0\.0, %\d+, 96, 0\)", text), text
    text = lowered_text(mask_keep, torch.rand(3, 700) > 0.5, torch.randn(3, 700, dtype=dtype))
    # x_step 1: a Triton constexpr, not an operand; -0.3 rounded to the dtype as ATen's fill rounds it
    literal = repr(float(torch.tensor(-0.3, dtype=dtype)))
    assert re.search(rf"launch 0 grid\(3, 1, 1\) \(%0, %1, {re.escape(literal)}, %\d+, 2100\)", text), text


@pytest.mark.parametrize("fn, args", [
    (mask_fill, (torch.rand(8, 16) > 0.5, torch.randn(16))),                           # broadcast x
    (mask_fill, (torch.rand(16) > 0.5, torch.randn(8, 16))),                           # broadcast mask
    (mask_fill, (torch.rand(16, 8).t() > 0.5, torch.randn(8, 16))),                    # mask layout
    (mask_fill, (torch.rand(8, 16) > 0.5, torch.randn(16, 8).t())),                    # x layout
    (mask_fill, (torch.rand(8, 16) > 0.5, torch.randint(0, 9, (8, 16)))),              # integer x: a float
    (mask_fill, (torch.rand(8, 16) > 0.5, torch.randn(8, 16, dtype=torch.float64))),   # dtype
    (lambda m, x: torch.where(m, float("nan"), x), (torch.rand(8, 16) > 0.5, torch.randn(8, 16))),  # NaN
    (lambda m, x: torch.where(m, 7e4, x), (torch.rand(8, 16) > 0.5, torch.randn(8, 16, dtype=torch.float16))),
])
def test_wheres_that_are_not_exactly_the_kernel_stay_aten(fn, args):
    text = lowered_text(fn, *args)
    assert "aten::where" in text and "where_scalar" not in text, text


CONVERSIONS = [(torch.float32, torch.bfloat16), (torch.float32, torch.float16), (torch.bfloat16, torch.float32),
               (torch.float16, torch.float32), (torch.int32, torch.float32), (torch.int64, torch.float32)]


@pytest.mark.parametrize("src, dst", CONVERSIONS)
def test_a_conversion_that_rounds_once_is_an_allocation_and_a_native_launch(src, dst):
    """HF's rotary: positions to fp32, cos and sin to the model's dtype."""
    text = lowered_text(lambda x: x.to(dst) * 2, torch.ones(3, 700, dtype=src))
    assert "aten::_to_copy" not in text and '"convert"' in text, text
    assert re.search(rf'%\d+ = call "aten::empty.memory_format" \(\[3, 700\], dtype\({dtype_code(dst)}\)', text), text
    assert re.search(r"launch 0 grid\(3, 1, 1\) \(%0, %\d+, 2100\)", text), text


@pytest.mark.parametrize("fn, args", [
    (lambda x: x.to(torch.bfloat16) * 2, (torch.randn(8, 16, dtype=torch.float16),)),  # rounds twice in ATen
    (lambda x: x.to(torch.bfloat16) * 2, (torch.ones(8, 16, dtype=torch.int64),)),     # likewise
    (lambda x: x.to(torch.float64) * 2, (torch.randn(8, 16),)),                         # not served
    (lambda x: x.to(torch.int32) * 2, (torch.randn(8, 16),)),                           # truncation: ATen's
    (lambda x: x.to(torch.bfloat16) * 2, (torch.randn(16, 8).t(),)),                    # layout
    (lambda x: x.to(torch.bfloat16, memory_format=torch.channels_last) * 2, (torch.randn(2, 3, 4, 5),)),
])
def test_conversions_that_are_not_exactly_the_kernel_stay_aten(fn, args):
    text = lowered_text(fn, *args)
    assert "aten::_to_copy" in text and '"convert"' not in text, text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_relu_is_an_allocation_and_a_native_launch(dtype):
    text = lowered_text(lambda a, b: torch.relu(torch.mm(a, b)), *(torch.randn(64, 64, dtype=dtype),) * 2)
    assert "aten::relu" not in text and "aten::mm" in text, text
    assert re.search(r"%(\d+) = call \"aten::mm\".*\n.*\n\s*launch 0 grid\(4, 1, 1\) \(%\1, %\d+, 4096\)", text), text


@pytest.mark.parametrize("fn, args", [
    (torch.relu, (torch.randn(16, 8).t(),)),                                      # layout
    (torch.relu, (torch.randint(-4, 4, (8, 16)),)),                               # integer tensor
    (torch.relu, (torch.randn(8, 16, dtype=torch.float64),)),                     # dtype
])
def test_relus_that_are_not_exactly_the_kernel_stay_aten(fn, args):
    text = lowered_text(fn, *args)
    assert "aten::relu" in text and '"relu"' not in text, text


class ReluPlusWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64))

    def forward(self, x):
        return torch.relu(x) + self.w


def builtin_launches(fn, *args):
    text = lowered_text(fn, *args)
    return len([ln for ln in text.splitlines() if ln.strip().startswith("launch ")]), text


def test_a_spec_that_may_record_autograd_keeps_the_differentiable_aten_ops():
    """The builtin kernels record no autograd history, so they serve only specs that cannot record
    it: grad mode off, or nothing (argument or state) requiring grad."""
    x, xg = torch.randn(64), torch.randn(64, requires_grad=True)
    n, text = builtin_launches(torch.relu, xg)
    assert n == 0 and "aten::relu" in text, text
    model = ReluPlusWeight()
    n, text = builtin_launches(model, x)  # the parameter requires grad
    assert n == 0 and "aten::relu" in text and "aten::add.Tensor" in text, text
    with torch.no_grad():
        assert builtin_launches(torch.relu, xg)[0] == 1
        assert builtin_launches(model, x)[0] == 2
    model.w.requires_grad_(False)
    assert builtin_launches(model, x)[0] == 2
    cache = torch.zeros(2, 4, 64, 32, requires_grad=False)
    n, text = builtin_launches(kv_write, cache, torch.randn(2, 4, 32, requires_grad=True), 5)
    assert n == 0 and "aten::copy_" in text, text


def test_a_parameter_that_starts_requiring_grad_drops_the_specializations(monkeypatch):
    """A spec lowered while nothing required grad may run builtin kernels, so a parameter's
    requires_grad is part of the state the specs depend on (lower.state_key)."""
    monkeypatch.setenv("TRIDENT_BUILTIN_KERNELS", "auto")  # CPU tensors: ATen runs, the test can call it
    model = ReluPlusWeight()
    model.w.requires_grad_(False)
    fast = trident.compile(model)
    x = torch.randn(64)
    assert torch.equal(fast(x), model(x))
    model.w.requires_grad_(True)
    y = fast(x)
    assert y.requires_grad and torch.equal(y.detach(), model(x).detach())
    c = trident.counters(fast)
    assert (c["compiles"], c["specializations"]) == (2, 1), c


def cast_write(cache, k, pos: int):
    cache[:, pos:pos + 1] = k  # fp32 into bf16: a conversion, not a copy
    return cache.sum()


def test_converting_copy_stays_aten():
    text = lowered_text(cast_write, torch.zeros(4, 16, dtype=torch.bfloat16), torch.randn(4, 1), 3)
    assert "aten::copy_" in text and "strided_copy" not in text, text


def test_off_and_cpu_tensors_under_auto_keep_aten(monkeypatch):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for mode in ("off", "auto"):
        monkeypatch.setenv("TRIDENT_BUILTIN_KERNELS", mode)
        assert "aten::add.Tensor" in lowered_text(residual, x, y)


def test_running_on_cpu_tensors_fails_clearly_and_stays_usable():
    fast = trident.compile(residual)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Triton kernel add_contiguous: parameter 0 is not a CUDA tensor"):
            fast(x, y)


def test_kv_write_at_a_symbolic_position_is_still_native():
    """A second position makes pos symbolic (automatic dynamic) and the destination's offset with it:
    the pointer is the cache's plus pos * 64 bytes, computed natively; sizes and strides stay static,
    which is all the copy kernel needs. On CPU tensors each call stops at its first launch, after
    its spec is installed."""
    fast = trident.compile(kv_write)
    cache, k = torch.zeros(2, 4, 64, 32, dtype=torch.bfloat16), torch.randn(2, 4, 32, dtype=torch.bfloat16)
    for pos in (5, 6):
        with pytest.raises(RuntimeError, match="not a CUDA tensor"):
            fast(cache, k, pos)
    text = trident.explain(fast, cache, k, 7)
    assert "spec 1: all guards hold" in text, text
    spec1 = text[text.index('spec 1 structure'):]
    assert "aten::copy_" not in spec1 and re.search(r"\(ptr\(%0, \$\d+\), %1, 256,", spec1), spec1
    assert not re.search(r'call "aten::slice.Tensor" \(%\d+, 2, \$\d+, \$\d+, 1\)', spec1), spec1


def kv_write_both(k_cache, v_cache, qkv, pos: int):
    k_cache[:, :, pos:pos + 1] = qkv[:, 0:128].view(2, 4, 1, 32)
    v_cache[:, :, pos:pos + 1] = qkv[:, 128:256].view(2, 4, 1, 32)
    return k_cache.sum() + v_cache.sum()


def launches(text, name):
    """The launch lines of kernel `name` (each launch may declare a specialization of its own)."""
    ids = {ln.split()[1] for ln in text.splitlines() if ln.strip().startswith("kernel ") and f'"{name}"' in ln}
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("launch ") and ln.split()[1] in ids]


def test_the_k_and_v_cache_writes_share_one_launch():
    caches = [torch.zeros(2, 4, 64, 32, dtype=torch.bfloat16) for _ in range(2)]
    text = lowered_text(kv_write_both, *caches, torch.randn(2, 256, dtype=torch.bfloat16), 5)
    (launch,) = launches(text, "strided_copy_pair")
    # grid (1, 2): one program row per copy; k_cache then v_cache, both 320 bytes in, sources from qkv
    assert re.search(r"grid\(1, 2, 1\) \(ptr\(%0, 320\), %2, ptr\(%1, 320\), ptr\(%2, 256\), 256,", launch), launch
    assert "strided_copy\"" not in text and "aten::copy_" not in text, text


def bump_both(a, b, x):
    a.mul_(2)
    b.mul_(3)
    return x * 2


def test_two_mutated_inputs_are_written_back_in_one_launch():
    """HF's per-layer position counters are buffers the step rewrites: their write-backs pair up."""
    text = lowered_text(bump_both, torch.ones(4, 8), torch.ones(4, 8), torch.ones(3))
    (launch,) = launches(text, "strided_copy_pair")
    assert re.search(r"grid\(1, 2, 1\) \(%0, %\d+, %1, %\d+, 32,", launch), launch
    assert "aten::copy_" not in text, text


def test_a_write_back_of_symbolic_shape_stays_aten():
    fast = trident.compile(lambda a, b: a.add_(b), dynamic=True)
    text = trident.controller(fast).lower_call(torch.ones(4, 8), torch.ones(1, 8)).text
    assert 'call "aten::copy_"' in text and "strided_copy" not in text, text


def same_cache_twice(cache, a, b, pos: int):
    cache[:, pos:pos + 1] = a
    cache[:, pos + 1:pos + 2] = b
    return cache.sum()


def copy_then_read_back(cache, other, a, pos: int):
    cache[:, pos:pos + 1] = a
    other[:, 0:1] = cache[:, pos:pos + 1]  # reads what the first copy wrote
    return other.sum()


@pytest.mark.parametrize("fn, args", [
    (same_cache_twice, (torch.zeros(4, 16), torch.randn(4, 1), torch.randn(4, 1), 3)),
    (copy_then_read_back, (torch.zeros(4, 16), torch.zeros(4, 16), torch.randn(4, 1), 3)),
])
def test_copies_that_touch_the_same_memory_are_launched_one_after_the_other(fn, args):
    text = lowered_text(fn, *args)
    assert "strided_copy_pair" not in text and len(launches(text, "strided_copy")) == 2, text


def test_builtin_kernels_compute_what_aten_does_under_the_triton_interpreter():
    """The kernels themselves, run on the CPU by Triton's interpreter (a subprocess: the variable
    must be set before Triton is imported): bit for bit against torch. (The bf16 add is left to the
    GPU test: the interpreter's fp32-to-bf16 conversion is not the device's round-to-nearest-even.)"""
    script = textwrap.dedent("""
        import torch
        from trident.lowering import builtin_kernels as bk
        g = torch.Generator().manual_seed(0)
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            k_cache, v_cache = torch.zeros(2, 4, 16, 32, dtype=dtype), torch.zeros(2, 4, 16, 32, dtype=dtype)
            qkv = torch.randn(2, 384, generator=g).to(dtype)
            k, v = qkv[:, 128:256].view(2, 4, 1, 32), qkv[:, 256:].view(2, 4, 1, 32)
            dk, dv = k_cache[:, :, 5:6], v_cache[:, :, 5:6]
            bk.strided_copy_pair[(1, 2)](dk, k, dv, v, 256, 4, 1, 32, *dk.stride(), *k.stride(),
                                         *dv.stride(), *v.stride(), BLOCK=1024)
            want_k, want_v = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
            want_k[:, :, 5:6], want_v[:, :, 5:6] = k, v
            assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v), dtype
            dst = torch.zeros(3, 40, dtype=dtype)[:, 3:35]
            src = torch.randn(32, 3, generator=g).to(dtype).t()
            bk.strided_copy[(1,)](dst, src, 96, 1, 3, 32, 0, 0, *dst.stride(), 0, 0, *src.stride(), BLOCK=1024)
            assert torch.equal(dst, src), dtype
            if dtype == torch.bfloat16:
                continue  # the interpreter rounds fp32 to bf16 its own way: the GPU test checks that add
            a, b = torch.randn(3, 700, generator=g).to(dtype), torch.randn(3, 700, generator=g).to(dtype)
            out = torch.empty_like(a)
            bk.add_contiguous[(3,)](a, b, out, 2100, BLOCK=1024)
            assert torch.equal(out, a + b), dtype
            bk.mul_contiguous[(3,)](a, b, out, 2100, BLOCK=1024)
            assert torch.equal(out, a * b), dtype
            for c in (1, -0.3, 1e-3, 3 * 2 ** 20 + 1, 2 ** 60 + 1):
                # CUDA's add and mul: the number as fp32 (a CPU op would round it to the tensor's dtype)
                s = float(torch.tensor(c, dtype=torch.int64 if isinstance(c, int) else torch.float64).float())
                bk.add_scalar[(3,)](a, s, out, 2100, BLOCK=1024)
                assert torch.equal(out, (a.float() + s).to(dtype)), (dtype, c)
                bk.mul_scalar[(3,)](a, s, out, 2100, BLOCK=1024)
                assert torch.equal(out, (a.float() * s).to(dtype)), (dtype, c)
            # a one-position index_copy_ of k and of v, at two positions (in range: the interpreter
            # runs no device assert; test_the_index_copy_kernel_asserts_its_position checks it)
            kc, vc = torch.zeros(2, 4, 16, 8, dtype=dtype), torch.zeros(2, 4, 16, 8, dtype=dtype)
            kv = torch.randn(2, 1, 8, 8, generator=g).to(dtype)
            k, v = kv[:, :, :4].transpose(1, 2), kv[:, :, 4:].transpose(1, 2)
            pk, pv = torch.tensor([5]), torch.tensor([15])
            bk.index_copy_pair[(1, 2)](kc, k, pk, vc, v, pv, 64, 4, 1, 8, *kc.stride(), *k.stride(), *vc.stride(),
                                       *v.stride(), kc.stride(2), vc.stride(2), 16, BLOCK=1024)
            assert torch.equal(kc, torch.zeros_like(kc).index_copy_(2, pk, k)), dtype
            assert torch.equal(vc, torch.zeros_like(vc).index_copy_(2, pv, v)), dtype
            for idtype in (torch.int32, torch.int64):  # integer adds wrap as ATen's do
                top = torch.iinfo(idtype).max
                a = torch.tensor([top, -top - 1, 0, -5, 7], dtype=idtype)
                b = torch.tensor([1, -1, 0, 9, -7], dtype=idtype)
                iout = torch.empty_like(a)
                bk.add_int[(1,)](a, b, iout, 5, 1, BLOCK=1024)
                assert torch.equal(iout, a + b), idtype
                bk.add_int[(1,)](a, b[1], iout, 5, 0, BLOCK=1024)  # a 0-dim b, broadcast
                assert torch.equal(iout, a + b[1]), idtype
                for c in (1, -3, 2 ** 31 - 1):
                    bk.add_int_scalar[(1,)](a, c, iout, 5, BLOCK=1024)
                    assert torch.equal(iout, a + c), (idtype, c)
            # relu: NaNs come back with their bits (sign and payload), everything else max(a, 0)
            special = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1.5])
            a = torch.cat([special, torch.randn(2093, generator=g)]).to(dtype).view(3, 700)
            bits = {torch.float16: torch.int16, torch.float32: torch.int32}[dtype]
            a.view(bits)[0, 0] |= 0x5  # a NaN payload
            bk.relu[(3,)](a, out, 2100, BLOCK=1024)
            assert torch.equal(out.view(bits), torch.relu(a).view(bits)), dtype
            # where: the number rounded as ATen's fill rounds it, x's elements as they are (NaN bits)
            wx = torch.cat([special, torch.randn(2093, generator=g)]).to(dtype).view(3, 700)
            wx.view(bits)[0, 0] |= 0x5  # a NaN payload
            mask = torch.rand(3, 700, generator=g) > 0.5
            for c in (0.0, -0.3, 1e-9, 70000.0, -float("inf")):
                s = float(torch.scalar_tensor(c, dtype=dtype))
                bk.where_scalar[(3,)](mask, wx, s, out, 2100, 1, NUMBER_WHERE_TRUE=True, BLOCK=1024)
                assert torch.equal(out.view(bits), torch.where(mask, c, wx).view(bits)), (dtype, c)
                bk.where_scalar[(3,)](mask, wx, s, out, 2100, 1, NUMBER_WHERE_TRUE=False, BLOCK=1024)
                assert torch.equal(out.view(bits), torch.where(mask, wx, c).view(bits)), (dtype, c)
                bk.where_scalar[(3,)](mask, wx[0, 0], s, out, 2100, 0, NUMBER_WHERE_TRUE=True, BLOCK=1024)
                assert torch.equal(out.view(bits), torch.where(mask, c, wx[0, 0]).view(bits)), (dtype, c)
        # conversions: exact ones bit for bit; fp32 -> fp16 rounds to nearest even in the interpreter
        # too (numpy), integers fp32 cannot hold among the int -> fp32 ones (fp32 -> bf16: GPU test)
        h = torch.cat([special, torch.randn(2093, generator=g)]).view(3, 700)
        for src, dst in ((torch.float32, torch.float16), (torch.bfloat16, torch.float32), (torch.float16, torch.float32)):
            a = h.to(src)
            got = torch.empty(3, 700, dtype=dst)
            bk.convert[(3,)](a, got, 2100, BLOCK=1024)
            assert torch.equal(got.isnan(), a.to(dst).isnan()), (src, dst)
            assert torch.equal(got.nan_to_num(), a.to(dst).nan_to_num()), (src, dst)
        for idtype in (torch.int32, torch.int64):
            top = torch.iinfo(idtype).max
            a = torch.tensor([top, -top - 1, 2 ** 24 + 1, -(2 ** 24 + 3), 0, 7] + ([2 ** 60 + 1] if top > 2 ** 32 else []),
                             dtype=idtype)
            got = torch.empty(a.shape, dtype=torch.float32)
            bk.convert[(1,)](a, got, a.numel(), BLOCK=1024)
            assert torch.equal(got, a.to(torch.float32)), idtype
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-3000:] + run.stderr[-3000:]


def kv_index_writes(k_cache, v_cache, k, v, pos):
    """HF's StaticCache.update at decode: both caches written at the position tensor `pos`."""
    k_cache.index_copy_(2, pos, k)
    v_cache.index_copy_(2, pos, v)
    return k_cache.sum() + v_cache.sum()


def hf_kv_inputs(pos=5, positions=1):
    caches = [torch.zeros(2, 4, 64, 32, dtype=torch.bfloat16) for _ in range(2)]
    kv = torch.randn(2, positions, 8, 32, dtype=torch.bfloat16)  # [B, S, 2 * H, D], viewed per head
    k, v = kv[:, :, :4].transpose(1, 2), kv[:, :, 4:].transpose(1, 2)
    return (*caches, k, v, torch.arange(pos, pos + positions))


def test_the_k_and_v_index_copies_at_a_position_tensor_share_one_launch():
    text = lowered_text(kv_index_writes, *hf_kv_inputs())
    (launch,) = launches(text, "index_copy_pair")
    # grid (1, 2): k into k_cache at %4[0], then v into v_cache; n 256 over (4, 1, 32); dst strides
    # (8192, 2048, 32, 1), src (256, 32, 256, 1) (a head-transposed projection); then the steps
    # along dim 2 (32, 32) and its size 64. Ints equal to 1 are constexprs, dropped.
    assert re.search(r"grid\(1, 2, 1\) \(%0, %2, %4, %1, %3, %4, 256, 4, 32, 8192, 2048, 32, 256, 32, 256, "
                     r"8192, 2048, 32, 256, 32, 256, 32, 32, 64\)$", launch), launch
    assert "aten::index_copy_" not in text, text


def test_one_index_copy_alone_is_one_launch_of_grid_y_1():
    k_cache, _, k, _, pos = hf_kv_inputs()
    text = lowered_text(lambda c, k, p: c.index_copy_(2, p, k).sum(), k_cache, k, pos)
    (launch,) = launches(text, "index_copy_pair")
    assert "grid(1, 1, 1) (%0, %1, %2, %0, %1, %2," in launch and "aten::index_copy_" not in text, text


@pytest.mark.parametrize("args", [
    hf_kv_inputs(positions=3),                                           # several positions: prefill
    hf_kv_inputs()[:4] + (torch.tensor([5], dtype=torch.int32),),        # an int32 index
])
def test_index_copies_the_kernel_does_not_cover_stay_aten(args):
    text = lowered_text(kv_index_writes, *args)
    assert text.count('call "aten::index_copy_"') == 2 and "index_copy_pair" not in text, text


def test_a_copy_held_before_an_aten_index_copy_is_launched_first():
    def both(cache, a, k_cache, k, pos):
        cache[:, 3:4] = a
        k_cache.index_copy_(2, pos, k)
        return cache.sum() + k_cache.sum()
    k_cache, _, k, _, pos = hf_kv_inputs(positions=3)
    text = lowered_text(both, torch.zeros(4, 16), torch.randn(4, 1), k_cache, k, pos)
    body = text[text.index("%0 = arg"):]
    assert body.index("launch 0 ") < body.index('call "aten::index_copy_"'), body


def test_the_index_copy_kernel_asserts_its_position(monkeypatch):
    """ATen's index_copy_ kernel fails a device assert for a position outside the destination; so
    does the builtin, compiled with debug (without it Triton drops device_assert). Read from its
    PTX for sm_90: Triton's interpreter never runs device asserts."""
    ptx = keep_ptx(monkeypatch)
    lowered_text(kv_index_writes, *hf_kv_inputs())
    text = next(t for name, t in ptx.items() if name.startswith("index_copy_pair"))
    assert text.count("__assertfail") >= 2, text  # one per copy of the pair
    assert "index_copy_(): index out of bounds" in bytes.fromhex(
        "".join(f"{int(b):02x}" for ln in text.splitlines() if ".global .align 1 .b8 assertMessage" in ln
                for b in ln.split("{")[1].split("}")[0].split(","))).decode("latin-1"), text


def repeat_kv(k_cache, v_cache, q):
    """HF's repeat_kv (sdpa without enable_gqa): each cache's heads repeated by a contiguous clone
    of an expanded view, k's and v's in a row."""
    b, h, s, d = k_cache.shape
    k = k_cache[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
    v = v_cache[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
    return (q @ k.transpose(-1, -2)) @ v


def test_the_k_and_v_clones_of_repeat_kv_share_one_launch():
    args = (torch.randn(1, 2, 96, 16), torch.randn(1, 2, 96, 16), torch.randn(1, 4, 1, 16))
    text = lowered_text(repeat_kv, *args)
    (launch,) = launches(text, "strided_copy_pair")
    # [1, 2, 2, 96, 16] merged to [2, 2, 1536]: n 6144; dst strides (3072, 1536, 1), the caches'
    # (1536, 0, 1): the repeat is a stride 0 (ints equal to 1 are constexprs, dropped)
    assert re.search(r"grid\(6, 2, 1\) \(%3, %0, %5, %1, 6144, 2, 2, 1536, 0, 3072, 1536, 0, 1536, 0, 0, 3072, "
                     r"1536, 0, 1536, 0\)$", launch), launch
    assert "aten::clone" not in text and text.count('"aten::empty.memory_format" ([1, 2, 2, 96, 16]') == 2, text


def permuted5(x):
    return x.permute(4, 2, 0, 3, 1).clone() + 1


@pytest.mark.parametrize("fn, args", [
    (lambda x: x.clone(memory_format=torch.channels_last) + 1, (torch.randn(2, 3, 4, 5),)),  # not contiguous
    (lambda x: x.clone() + 1, (torch.randn(4, 5).t(),)),                # preserve_format: the input's strides
    (permuted5, (torch.randn(2, 3, 4, 5, 6),)),                         # 5 dimensions that do not merge
    (lambda x: x.clone() + 1, (torch.randn(0, 3),)),                     # nothing to copy
])
def test_clones_the_kernel_does_not_cover_stay_aten(fn, args):
    text = lowered_text(fn, *args)
    assert text.count('call "aten::clone"') == 1 and "strided_copy" not in text, text


def test_a_clone_of_what_a_held_copy_writes_is_launched_after_it():
    def write_then_clone(cache, a):
        cache[:, 3:4] = a
        return cache.clone() * 2
    text = lowered_text(write_then_clone, torch.zeros(4, 16), torch.randn(4, 1))
    body = text[text.index("%0 = arg"):]
    copies = launches(text, "strided_copy")
    assert len(copies) == 2 and "strided_copy_pair" not in text, text
    assert body.index(copies[0]) < body.index(copies[1]) and "(ptr(%0, 12), %1," in copies[0], body


def test_a_held_copy_is_launched_before_a_clone_aten_keeps():
    def write_then_clone(cache, a):
        cache[:, :, 3:4] = a
        return cache.clone(memory_format=torch.channels_last) * 2
    text = lowered_text(write_then_clone, torch.zeros(1, 4, 16, 2), torch.randn(1, 4, 1, 2))
    body = text[text.index("%0 = arg"):]
    assert body.index("launch 0 ") < body.index('call "aten::clone"'), body


@pytest.mark.parametrize("shape, make", [
    ((1, 2, 2, 96, 16), lambda: torch.randn(1, 2, 96, 16)[:, :, None].expand(1, 2, 2, 96, 16)),
    ((3, 4, 5), lambda: torch.randn(5, 4, 3).permute(2, 1, 0)),
    ((2, 3, 4, 6, 6), lambda: torch.randn(2, 3, 4, 12, 6)[:, :, :, ::2]),
    ((2, 1, 3, 1, 4, 1, 5), lambda: torch.randn(2, 3, 4, 5)[:, None, :, None, :, None]),
    ((), lambda: torch.tensor(3.0)),
])
def test_merged_dimensions_address_the_same_elements(shape, make):
    """builtin_lower._merged_dims on real tensors: copying through the merged views gives clone()."""
    from trident.lowering.builtin_lower import _merged_dims
    src = make()
    dst = torch.empty(shape)
    merged = _merged_dims(dst, src)
    assert merged is not None and merged[0].dim() <= 4
    merged[0].copy_(merged[1])
    assert torch.equal(dst, src.clone())
