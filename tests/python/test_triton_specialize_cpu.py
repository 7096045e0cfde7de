"""CPU-only tests for trident.lowering.triton_specialize.

Every specialization is checked twice: against literal expected values, and
against Triton's own JIT path (JITFunction.run with a fake driver, stopped just
before compiling), so a Triton upgrade that changes the rules fails here.
Runtime parameter lists are checked against the C source Triton's launcher
generator (make_launcher) emits for the same signature.
"""
import re

import pytest
from fake_cuda import FakeCudaDriver
from tutorial_kernels import _layer_norm_fwd_fused, add_kernel, matmul_kernel
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.driver import make_launcher

from trident.lowering import triton_specialize as ts

ArgSpec, KernelParam, SpecGuard = ts.ArgSpec, ts.KernelParam, ts.SpecGuard

D = [["tt.divisibility", 16]]
OPTS = "{'debug': False, 'instrumentation_mode': ''}"
SCRATCH = [KernelParam("global_scratch", "ptr", -1), KernelParam("profile_scratch", "ptr", -1)]
C_DECL = {"ptr": "CUdeviceptr", "i8": "int8_t", "u8": "uint8_t", "i16": "int16_t", "u16": "uint16_t",
          "i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "u64": "uint64_t",
          "fp16": "uint16_t", "bf16": "uint16_t", "fp32": "uint32_t", "fp64": "uint64_t"}


class FakeTensor:
    """What Triton's binder needs from a tensor: .dtype and .data_ptr()."""

    def __init__(self, dtype, ptr=0x10000):
        self.dtype, self.ptr = dtype, ptr

    def data_ptr(self):
        return self.ptr


@pytest.fixture(scope="module", autouse=True)
def fake_driver(tmp_path_factory):
    # driver.reset_active() would rebuild the default driver, which raises with no GPU,
    # so the previous active driver (usually None = lazily created) is restored instead.
    saved = triton.runtime.driver._active
    triton.runtime.driver.set_active(FakeCudaDriver())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield
    triton.runtime.driver.set_active(saved)


def specs(values):
    return [ts.argspec_from_value(name, value) for name, value in values.items()]


def triton_reference(fn, values, options=None):
    """Run Triton's real JITFunction.run, capturing what it would hand to _do_compile."""
    captured = {}

    def fake_do_compile(key, signature, device, constexprs, options, attrs, warmup):
        captured.update(key=key, signature=signature, constexprs=constexprs, attrs=attrs)
        return None  # run() returns early without compiling

    saved_caches = fn.device_caches[0]
    fn.device_caches[0] = ({}, {}, *saved_caches[2:])  # empty kernel cache: always reach _do_compile
    fn._do_compile = fake_do_compile
    try:
        fn.run(grid=(1, ), warmup=True, **values, **(options or {}))
    finally:
        del fn._do_compile
        fn.device_caches[0] = saved_caches
    return captured


def launcher_params(constexprs, signature, tensordesc_meta=None):
    """(params[] entry, C type) pairs from the C source of Triton's generated launcher."""
    src = make_launcher(constexprs, signature, tensordesc_meta)
    decls = re.search(r"static void _launch\((.*?)\) \{", src).group(1).split(", ")
    ctype = {d.rsplit(" ", 1)[1]: d.rsplit(" ", 1)[0] for d in decls}
    entries = re.search(r"void \*params\[\] = \{ (.*?) \};", src).group(1).split(", ")
    return [(e[1:], ctype[e[1:]]) for e in entries]


def as_launcher(params):
    return [(p.name if p.arg_index < 0 else f"arg{p.arg_index}", C_DECL[p.ctype]) for p in params]


def check_against_triton(fn, values, options=None):
    """Assert specialize() equals Triton's JIT path and the launcher layout; return its result."""
    result = ts.specialize(fn, specs(values), options)
    signature, constexprs, attrs, guards, key = result
    ref = triton_reference(fn, values, options)
    assert (signature, constexprs, attrs, key) == (ref["signature"], ref["constexprs"], ref["attrs"], ref["key"])
    params = ts.runtime_params(fn, signature)
    assert params[-2:] == SCRATCH
    assert as_launcher(params) == launcher_params(ref["constexprs"], ref["signature"])
    return result, params


# --------------------------------------------------------------------------- kernels


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)


@triton.jit
def relu_kernel(x_ptr, n, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if flag:
        x = tl.maximum(x, 0.0)
    tl.store(x_ptr + offs, x, mask=offs < n)


@triton.jit
def bias_kernel(x_ptr, bias_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if bias_ptr is not None:
        x += tl.load(bias_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x, mask=offs < n)


@triton.jit
def default_kernel(x_ptr, n, stride=1, BLOCK: tl.constexpr = 256, EVEN: tl.constexpr = False):
    offs = tl.arange(0, BLOCK)
    if EVEN:
        tl.store(x_ptr + offs * stride, 0.0)
    else:
        tl.store(x_ptr + offs * stride, 0.0, mask=offs < n)


@triton.jit(do_not_specialize=["n"])
def dns_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


@triton.jit(do_not_specialize_on_alignment=["x_ptr", "n"])
def dnsoa_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


@triton.jit
def annotated_kernel(x_ptr, n: "i32", f: "fp16", ACT: tl.constexpr):
    if ACT == "DOT":
        tl.store(x_ptr, n + f)


# Fused softmax, from Triton's tutorial 02-fused-softmax.py.
@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


@triton.jit
def tma_copy_kernel(a_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    in_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    out_desc.store([0, 0], in_desc.load([0, 0]))


def add_values(n, x_ptr=0x10000):
    f32 = torch.float32
    return {"x_ptr": FakeTensor(f32, x_ptr), "y_ptr": FakeTensor(f32), "out_ptr": FakeTensor(f32), "n": n,
            "BLOCK": 1024}


def pointer_guards(*names, dtype=torch.float32):
    return [g for n in names for g in (SpecGuard(n, "dtype", dtype), SpecGuard(n, "align16"))]


ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
ADD_PTRS = [KernelParam("x_ptr", "ptr", 0), KernelParam("y_ptr", "ptr", 1), KernelParam("out_ptr", "ptr", 2)]


# --------------------------------------------------------------------------- vector add


def test_add_n4096_i32_divisible():
    (sig, consts, attrs, guards, key), params = check_against_triton(add_kernel, add_values(4096))
    assert sig == ADD_SIG
    assert consts == {(4, ): 1024}
    assert attrs == {(0, ): D, (1, ): D, (2, ): D, (3, ): D}
    assert guards == pointer_guards("x_ptr", "y_ptr", "out_ptr") + [
        SpecGuard("n", "div16"), SpecGuard("n", "range_i32"), SpecGuard("BLOCK", "eq", 1024)]
    assert key == "[('*fp32', 'D'), ('*fp32', 'D'), ('*fp32', 'D'), ('i32', 'D'), ('constexpr', 1024)]" + OPTS
    assert params == ADD_PTRS + [KernelParam("n", "i32", 3)] + SCRATCH


def test_add_n17_i32_without_attr():
    (sig, consts, attrs, guards, key), params = check_against_triton(add_kernel, add_values(17))
    assert sig == ADD_SIG
    assert attrs == {(0, ): D, (1, ): D, (2, ): D, (3, ): []}  # "" keys still get an (empty) entry
    assert guards[6:8] == [SpecGuard("n", "not_div16_not1"), SpecGuard("n", "range_i32")]
    assert key == "[('*fp32', 'D'), ('*fp32', 'D'), ('*fp32', 'D'), ('i32', ''), ('constexpr', 1024)]" + OPTS
    assert params == ADD_PTRS + [KernelParam("n", "i32", 3)] + SCRATCH


def test_add_n1_becomes_constexpr_and_leaves_params():
    (sig, consts, attrs, guards, key), params = check_against_triton(add_kernel, add_values(1))
    assert sig == {**ADD_SIG, "n": "constexpr"}
    assert consts == {(3, ): 1, (4, ): 1024}
    assert attrs == {(0, ): D, (1, ): D, (2, ): D}
    assert guards[6] == SpecGuard("n", "eq1", 1)
    assert key == "[('*fp32', 'D'), ('*fp32', 'D'), ('*fp32', 'D'), ('constexpr', 1), ('constexpr', 1024)]" + OPTS
    assert params == ADD_PTRS + SCRATCH


def test_add_n_2pow40_is_i64():
    (sig, consts, attrs, guards, key), params = check_against_triton(add_kernel, add_values(2**40))
    assert sig == {**ADD_SIG, "n": "i64"}
    assert attrs[(3, )] == D
    assert guards[6:8] == [SpecGuard("n", "div16"), SpecGuard("n", "range_i64")]
    assert params == ADD_PTRS + [KernelParam("n", "i64", 3)] + SCRATCH


def test_add_misaligned_pointer_loses_attr():
    (sig, consts, attrs, guards, key), params = check_against_triton(add_kernel, add_values(4096, x_ptr=0x10004))
    assert attrs == {(0, ): [], (1, ): D, (2, ): D, (3, ): D}
    assert guards[:2] == [SpecGuard("x_ptr", "dtype", torch.float32), SpecGuard("x_ptr", "not_align16")]
    assert key.startswith("[('*fp32', ''), ('*fp32', 'D')")


def test_int_range_edges_and_overflow():
    for n, ty in [(2**31 - 1, "i32"), (2**31, "i64"), (-2**31, "i32"), (2**63, "u64")]:
        (sig, _, _, _, _), _ = check_against_triton(add_kernel, add_values(n))
        assert sig["n"] == ty
    with pytest.raises(OverflowError):
        ts.specialize(add_kernel, specs(add_values(2**64)))


# --------------------------------------------------------------------------- scalar kinds


def test_float_arg_is_fp32_and_never_dropped():
    f32 = torch.float32
    for alpha in (2.5, 1.0):  # unlike int 1, float 1.0 stays a runtime parameter
        values = {"x_ptr": FakeTensor(f32), "out_ptr": FakeTensor(f32), "n": 4096, "alpha": alpha, "BLOCK": 256}
        (sig, consts, attrs, guards, key), params = check_against_triton(scale_kernel, values)
        assert sig["alpha"] == "fp32" and (3, ) not in attrs
        assert SpecGuard("alpha", "dtype", "fp32") in guards
        assert params[3] == KernelParam("alpha", "fp32", 3)
        assert "('fp32', None)" in key


def test_bool_arg_is_u1_byte():
    values = {"x_ptr": FakeTensor(torch.float16), "n": 100, "flag": True, "BLOCK": 128}
    (sig, consts, attrs, guards, key), params = check_against_triton(relu_kernel, values)
    assert sig == {"x_ptr": "*fp16", "n": "i32", "flag": "u1", "BLOCK": "constexpr"}
    assert guards[-2:] == [SpecGuard("flag", "dtype", "u1"), SpecGuard("BLOCK", "eq", 128)]
    assert params == [KernelParam("x_ptr", "ptr", 0), KernelParam("n", "i32", 1),
                      KernelParam("flag", "u8", 2)] + SCRATCH


def test_none_arg_is_constexpr():
    values = {"x_ptr": FakeTensor(torch.float32), "bias_ptr": None, "n": 64, "BLOCK": 64}
    (sig, consts, attrs, guards, key), params = check_against_triton(bias_kernel, values)
    assert sig["bias_ptr"] == "constexpr" and consts == {(1, ): None, (3, ): 64}
    assert SpecGuard("bias_ptr", "eq", None) in guards
    assert params == [KernelParam("x_ptr", "ptr", 0), KernelParam("n", "i32", 2)] + SCRATCH
    values["bias_ptr"] = FakeTensor(torch.float32)
    (sig, _, _, _, _), params = check_against_triton(bias_kernel, values)
    assert sig["bias_ptr"] == "*fp32" and params[1] == KernelParam("bias_ptr", "ptr", 1)


def test_constexpr_and_plain_defaults():
    values = {"x_ptr": FakeTensor(torch.float32), "n": 4096}
    (sig, consts, attrs, guards, key), params = check_against_triton(default_kernel, values)
    assert consts == {(2, ): 1, (3, ): 256, (4, ): False}  # default stride=1 is an int 1 -> constexpr
    assert key == "[('*fp32', 'D'), ('i32', 'D'), ('constexpr', 1), ('constexpr', 256), ('constexpr', False)]" + OPTS
    (sig, consts, _, _, _), _ = check_against_triton(default_kernel, {**values, "BLOCK": 128, "EVEN": True})
    assert consts == {(2, ): 1, (3, ): 128, (4, ): True}


def test_do_not_specialize():
    for n, ty in [(1, "i32"), (4096, "i32"), (2**40, "i64")]:
        values = {"x_ptr": FakeTensor(torch.float32), "n": n, "BLOCK": 64}
        (sig, consts, attrs, guards, key), params = check_against_triton(dns_kernel, values)
        assert sig["n"] == ty and (1, ) not in attrs
        assert guards[2:] == [SpecGuard("n", f"range_{ty}"), SpecGuard("BLOCK", "eq", 64)]
        assert f"('{ty}', None)" in key and params[1] == KernelParam("n", ty, 1)


def test_do_not_specialize_on_alignment():
    values = {"x_ptr": FakeTensor(torch.float32), "n": 16, "BLOCK": 64}
    (sig, consts, attrs, guards, key), params = check_against_triton(dnsoa_kernel, values)
    assert attrs == {(0, ): [], (1, ): []}
    assert guards == [SpecGuard("x_ptr", "dtype", torch.float32), SpecGuard("n", "not1"),
                      SpecGuard("n", "range_i32"), SpecGuard("BLOCK", "eq", 64)]
    (sig, consts, _, guards, _), params = check_against_triton(dnsoa_kernel, {**values, "n": 1})
    assert consts == {(1, ): 1, (2, ): 64} and guards[1] == SpecGuard("n", "eq1", 1)


def test_annotations_fix_type_but_int1_keeps_value_key():
    values = {"x_ptr": FakeTensor(torch.float32), "n": 1, "f": 2.0, "ACT": "DOT"}
    (sig, consts, attrs, guards, key), params = check_against_triton(annotated_kernel, values)
    assert sig == {"x_ptr": "*fp32", "n": "i32", "f": "fp16", "ACT": "constexpr"}
    # Triton quirks: ('i32', 1) keeps n a runtime i32; a str constexpr gets a parsed attr.
    assert key.startswith("[('*fp32', 'D'), ('i32', 1), ('fp16', None), ('constexpr', 'DOT')]")
    assert attrs == {(0, ): D, (3, ): D}
    assert [g.check for g in guards if g.name in ("n", "f")] == ["eq1"]
    assert [p.ctype for p in params] == ["ptr", "i32", "fp16", "ptr", "ptr"]
    # A float annotation is never value-specialized, even when an int 16 is passed to it.
    (_, _, attrs, _, key), _ = check_against_triton(annotated_kernel, {**values, "n": 17, "f": 16})
    assert "('i32', ''), ('fp16', None)" in key and attrs == {(0, ): D, (1, ): [], (3, ): D}


def test_unknown_option_is_rejected_like_triton():
    with pytest.raises(KeyError):
        ts.specialize(add_kernel, specs(add_values(16)), {"num_warpz": 4})


# --------------------------------------------------------------------------- compile


def compile_and_compare(fn, values, options=None):
    """compile_kernel() must produce Triton's own JIT variant: same key, same cubin."""
    ck_ref = fn.warmup(grid=(1, ), **values, **(options or {}))
    ref_keys = [k for k, v in fn.device_caches[0][0].items() if v is ck_ref]
    kernel = ts.compile_kernel(fn, specs(values), options=options)
    assert [kernel.cache_key] == ref_keys
    assert kernel.cubin == ck_ref.asm["cubin"] and kernel.cubin[:4] == b"\x7fELF"
    assert (kernel.signature, kernel.constexprs, kernel.attrs) == (ck_ref.src.signature, ck_ref.src.constants,
                                                                   ck_ref.src.attrs)
    md = ck_ref.metadata
    assert (kernel.num_warps, kernel.num_ctas, kernel.shared) == (md.num_warps, md.num_ctas, md.shared)
    assert kernel.params == ts.runtime_params(fn, kernel.signature)
    assert as_launcher(kernel.params) == launcher_params(ck_ref.src.constants, ck_ref.src.signature,
                                                         md.tensordesc_meta)
    return kernel


def test_compile_add_kernel_without_any_driver():
    triton.runtime.driver.set_active(None)  # any driver access would now raise (no GPU here)
    try:
        kernel = ts.compile_kernel(add_kernel, specs(add_values(1)))
    finally:
        triton.runtime.driver.set_active(FakeCudaDriver())
    assert kernel.name == "add_kernel" and kernel.params == ADD_PTRS + SCRATCH
    assert (kernel.global_scratch_size, kernel.global_scratch_align) == (0, 1)
    assert (kernel.profile_scratch_size, kernel.launch_pdl, kernel.launch_cooperative_grid) == (0, False, False)
    assert compile_and_compare(add_kernel, add_values(1)).cubin == kernel.cubin


def test_compile_add_kernel_n4096():
    kernel = compile_and_compare(add_kernel, add_values(4096))
    assert (kernel.num_warps, kernel.num_ctas, kernel.global_scratch_size) == (4, 1, 0)
    assert kernel.options["num_warps"] == 4 and kernel.options["arch"] == "sm90"


def test_compile_fused_softmax():
    f32 = torch.float32
    values = {"output_ptr": FakeTensor(f32), "input_ptr": FakeTensor(f32), "input_row_stride": 781,
              "output_row_stride": 781, "n_rows": 4096, "n_cols": 781, "BLOCK_SIZE": 1024, "num_stages": 4}
    kernel = compile_and_compare(softmax_kernel, values, {"num_warps": 8})
    assert kernel.signature == {"output_ptr": "*fp32", "input_ptr": "*fp32", "input_row_stride": "i32",
                                "output_row_stride": "i32", "n_rows": "i32", "n_cols": "i32",
                                "BLOCK_SIZE": "constexpr", "num_stages": "constexpr"}
    assert kernel.attrs == {(0, ): D, (1, ): D, (2, ): [], (3, ): [], (4, ): D, (5, ): []}
    # The tutorial passes num_stages by keyword, so it is also the compile option.
    assert kernel.num_warps == 8 and kernel.options["num_stages"] == 4
    assert kernel.cache_key.endswith("{'num_warps': 8, 'debug': False, 'instrumentation_mode': ''}")
    assert [p.name for p in kernel.params] == ["output_ptr", "input_ptr", "input_row_stride", "output_row_stride",
                                               "n_rows", "n_cols", "global_scratch", "profile_scratch"]


def test_compile_layer_norm_forward():
    f16, f32 = torch.float16, torch.float32
    values = {"X": FakeTensor(f16), "Y": FakeTensor(f16), "W": FakeTensor(f16), "B": FakeTensor(f16),
              "Mean": FakeTensor(f32), "Rstd": FakeTensor(f32), "stride": 1536, "N": 1536, "eps": 1e-5,
              "BLOCK_SIZE": 2048}
    kernel = compile_and_compare(_layer_norm_fwd_fused, values, {"num_warps": 8, "num_ctas": 1})
    assert kernel.signature["eps"] == "fp32" and kernel.num_warps == 8
    assert [p.ctype for p in kernel.params] == ["ptr"] * 6 + ["i32", "i32", "fp32", "ptr", "ptr"]
    assert kernel.global_scratch_size == 0


def test_compile_matmul_num_warps8_num_stages3():
    f16 = torch.float16
    values = {"a_ptr": FakeTensor(f16), "b_ptr": FakeTensor(f16), "c_ptr": FakeTensor(f16),
              "M": 1024, "N": 1024, "K": 1024, "stride_am": 1024, "stride_ak": 1, "stride_bk": 1024,
              "stride_bn": 1, "stride_cm": 1024, "stride_cn": 1, "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128,
              "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "ACTIVATION": ""}
    kernel = compile_and_compare(matmul_kernel, values, {"num_warps": 8, "num_stages": 3})
    assert kernel.num_warps == 8 and kernel.options["num_stages"] == 3 and kernel.shared > 0
    assert kernel.global_scratch_size == 0
    # unit strides are dropped; ACTIVATION="" is a str key, so it gets an empty attrs entry
    assert [p.name for p in kernel.params] == ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk",
                                               "stride_cm", "global_scratch", "profile_scratch"]
    assert kernel.attrs[(16, )] == [] and kernel.constexprs[(16, )] == ""


def test_compile_device_tma_needs_global_scratch():
    f16 = torch.float16
    values = {"a_ptr": FakeTensor(f16), "out_ptr": FakeTensor(f16), "M": 128, "N": 64, "BM": 64, "BN": 64}
    kernel = compile_and_compare(tma_copy_kernel, values)
    assert (kernel.global_scratch_size, kernel.global_scratch_align) == (256, 128)  # two 128-byte descriptors
    assert kernel.params[-2:] == SCRATCH


# --------------------------------------------------------------------------- unwrap_kernel


def test_unwrap_kernel_stacks():
    heur = triton.heuristics({"BLOCK": lambda args: 1024})(add_kernel)
    tuned = triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["n"])(heur)
    outer = triton.heuristics({"EVEN": lambda args: True})(tuned)
    assert ts.unwrap_kernel(add_kernel) == (add_kernel, None, [])
    assert ts.unwrap_kernel(heur) == (add_kernel, None, [heur])
    assert ts.unwrap_kernel(tuned) == (add_kernel, tuned, [heur])
    assert ts.unwrap_kernel(outer) == (add_kernel, tuned, [outer, heur])
    with pytest.raises(TypeError, match="not a Triton kernel"):
        ts.unwrap_kernel(add_kernel.fn)
    with pytest.raises(TypeError, match="nested"):
        ts.unwrap_kernel(triton.autotune(configs=[], key=[])(tuned))
    with pytest.raises(TypeError, match="JITFunction"):
        ts.specialize(tuned, specs(add_values(16)))


# --------------------------------------------------------------------------- host-side tensor descriptors


@triton.jit
def tile_plus_one(in_desc, out_desc, n, BM: tl.constexpr, BN: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    out_desc.store([pid_m * BM, pid_n * BN], in_desc.load([pid_m * BM, pid_n * BN]) + n)


def _descriptors():
    from triton.tools.tensor_descriptor import TensorDescriptor
    x = torch.zeros(256, 512, dtype=torch.float16)
    return TensorDescriptor.from_tensor(x, [64, 32]), TensorDescriptor.from_tensor(torch.zeros_like(x), [64, 32])


@pytest.mark.parametrize("dtype, block", [(torch.float16, [64, 32]), (torch.bfloat16, [1, 128, 64]),
                                          (torch.float8_e4m3fn, [64, 64]), (torch.float32, [16, 16])])
def test_a_tensor_descriptor_specializes_as_tritons_binder(dtype, block):
    """tensordesc<elem[block]>, no key: specialize.cc's answer for a TensorDescriptor, whatever its
    padding, shape or strides."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.tools.tensor_descriptor import TensorDescriptor
    base = torch.zeros(*[2 * b for b in block]).to(dtype)
    for desc in (TensorDescriptor.from_tensor(base, block),
                 TensorDescriptor(base, list(base.shape), list(base.stride()), block, padding="nan")):
        spec = ts.argspec_from_value("d", desc)
        assert (spec.kind, spec.dtype, spec.block_shape) == ("tensordesc", dtype, tuple(block))
        kp = tile_plus_one.params[0]
        assert ts._native_specialization(kp, spec, True) == native_specialize_impl(BaseBackend, desc, False, True, True)[:2]


def test_a_kernel_taking_tensor_descriptors_compiles_for_sm90_with_tritons_signature_and_launch_layout():
    """What Triton's JIT would compile (its binder's signature and key, through JITFunction.run), the
    TMA metadata triton.compile reports, and the launch parameters Triton's launcher expands each
    descriptor to (make_launcher): a CUtensorMap, then shape (i32) and strides (i64)."""
    a, b = _descriptors()
    values = {"in_desc": a, "out_desc": b, "n": 3, "BM": 64, "BN": 32}
    signature, constexprs, attrs, guards, key = ts.specialize(tile_plus_one, specs(values))
    ref = triton_reference(tile_plus_one, values)
    assert (signature, constexprs, attrs, key) == (ref["signature"], ref["constexprs"], ref["attrs"], ref["key"])
    assert signature["in_desc"] == signature["out_desc"] == "tensordesc<fp16[64, 32]>"
    assert [(g.name, g.check) for g in guards if g.name.endswith("desc")] == [("in_desc", "dtype"), ("out_desc", "dtype")]
    ck = ts.compile_kernel_uncached(tile_plus_one, specs(values), GPUTarget("cuda", 90, 32))
    meta = {"swizzle": 2, "elem_size": 2, "elem_type": 6, "block_size": [64, 32], "fp4_padded": False}
    assert ck.tensordesc_meta == [meta, meta]
    assert [(p.name, p.ctype) for p in ck.params[:5]] == [
        ("in_desc.map", "tmadesc"), ("in_desc.shape0", "i32"), ("in_desc.shape1", "i32"),
        ("in_desc.stride0", "i64"), ("in_desc.stride1", "i64")]
    c_types = {"tmadesc": "CUtensorMap", **C_DECL}
    assert [c_types[p.ctype] for p in ck.params] == \
        [c for _, c in launcher_params(ref["constexprs"], ref["signature"], ck.tensordesc_meta)]


def test_a_descriptor_the_kernel_did_not_lower_to_tma_expands_as_tritons_launcher():
    """A None metadata entry: base pointer, shape and strides (i64), the padding flag, then shape
    (i32) and strides (i64) again, as make_launcher's _expand_signature."""
    signature = {"in_desc": "tensordesc<fp16[64, 32]>", "out_desc": "tensordesc<fp16[64, 32]>", "n": "i32",
                 "BM": "constexpr", "BN": "constexpr"}
    meta = {"swizzle": 2, "elem_size": 2, "elem_type": 6, "block_size": [64, 32], "fp4_padded": False}
    params = ts.runtime_params(tile_plus_one, signature, [None, meta])
    assert [p.name for p in params[:11]] == [
        "in_desc.base", "in_desc.shape0", "in_desc.shape1", "in_desc.stride0", "in_desc.stride1", "in_desc.nan",
        "in_desc.shape0", "in_desc.shape1", "in_desc.stride0", "in_desc.stride1", "out_desc.map"]
    c_types = {"tmadesc": "CUtensorMap", **C_DECL}
    assert [c_types[p.ctype] for p in params] == \
        [c for _, c in launcher_params({(3,): 64, (4,): 32}, signature, [None, meta])]
    with pytest.raises(ValueError, match="3 tensor descriptors' metadata for 2"):
        ts.runtime_params(tile_plus_one, signature, [None, meta, meta])


def test_a_tma_kernel_declaration_carries_each_descriptors_metadata_through_the_host_ir():
    """hir.kernel writes a `tma` clause per descriptor the kernel lowered to TMA (its metadata and the
    descriptor's padding), which the native parser reads back and the verifier accepts."""
    from trident import _C
    from trident.lowering import hir
    a, b = _descriptors()
    values = {"in_desc": a, "out_desc": b, "n": 3, "BM": 64, "BN": 32}
    ck = ts.compile_kernel_uncached(tile_plus_one, specs(values), GPUTarget("cuda", 90, 32))
    decl = hir.kernel(0, ck, "k.cubin", nan_padding=(False, True))
    assert decl.endswith(" tma 2 2 6 0 0 64 32 tma 2 2 6 0 1 64 32"), decl
    assert '"tmadesc,i32,i32,i64,i64,tmadesc,i32,i32,i64,i64,i32"' in decl
    text = f'spec 0 structure "T" {{\n  {decl}\n  return none\n}}\n'
    assert _C.ir_print(text) == text
    _C.ir_verify(text)
