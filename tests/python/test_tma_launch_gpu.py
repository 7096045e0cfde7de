"""The launch of a kernel taking host-side tensor descriptors (csrc/runtime/launch/triton_launch.cpp:
encode_tma), on the GPU: from host IR written here, a kernel that loads and stores tiles through two
descriptors, launched natively with each CUtensorMap encoded from its tensor, writes exactly what
Triton's own launch of it writes; and captured (library_launches.py, triton_lower.py) from user code
and from a library whose autotune configs set the descriptors' blocks in a pre_hook (FlagGems' Hopper
mm pattern: mini_gems.tile_scale), against eager."""
import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from trident import _C
from trident.lowering import hir
from trident.lowering import triton_specialize as ts

pytestmark = pytest.mark.gpu


@triton.jit
def tile_plus_n(in_desc, out_desc, n, BM: tl.constexpr, BN: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    out_desc.store([pid_m * BM, pid_n * BN], in_desc.load([pid_m * BM, pid_n * BN]) + n)


def _launch_text(ck, cubin, structure, shape, strides, grid, n):
    dims = ", ".join(str(s) for s in shape) + ", " + ", ".join(str(s) for s in strides)
    return (hir.spec_open(structure) + "\n"
            f"  {hir.kernel(0, ck, str(cubin))}\n"
            "  writes 1\n"
            "  %0 = arg 0\n"
            "  %1 = arg 1\n"
            f"  launch 0 grid({grid[0]}, {grid[1]}, 1) (%0, {dims}, %1, {dims}, {n})\n"
            "  return none\n}\n")


@pytest.mark.parametrize("columns", [slice(None), slice(32, None)])  # the whole matrix; a view 64 bytes in
def test_a_tensor_descriptor_launch_writes_what_tritons_launch_writes(tmp_path, columns):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.fail("GPU test run without a CUDA device of compute capability 9.0 or more (TMA)")
    base = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    x = base[:, columns]
    want, got = torch.zeros_like(base)[:, columns], torch.zeros_like(base)[:, columns]
    descs = [TensorDescriptor(t, list(t.shape), list(t.stride()), [64, 32]) for t in (x, want, got)]
    grid = (triton.cdiv(x.shape[0], 64), triton.cdiv(x.shape[1], 32))
    tile_plus_n[grid](descs[0], descs[1], 3, BM=64, BN=32)  # Triton's own launch
    specs = [ts.argspec_from_value(k, v) for k, v in
             {"in_desc": descs[0], "out_desc": descs[2], "n": 3, "BM": 64, "BN": 32}.items()]
    ck = ts.compile_kernel_uncached(tile_plus_n, specs)
    assert len(ck.tensordesc_meta) == 2 and all(m is not None for m in ck.tensordesc_meta), ck.tensordesc_meta
    cubin = tmp_path / "tile.cubin"
    cubin.write_bytes(ck.cubin)
    structure, _ = _C.describe_args(x, got)
    scm = _C.SCM(lambda *a, **k: None)
    scm.add_spec(_launch_text(ck, cubin, structure, list(x.shape), list(x.stride()), grid, 3))
    assert scm(x, got) is None
    torch.cuda.synchronize()
    assert torch.equal(got, want)
    assert torch.equal(want, x + 3)


def _require_tma():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.fail("GPU test run without a CUDA device of compute capability 9.0 or more (TMA)")


def _user_tiles(x):
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.shape[0], 64), triton.cdiv(x.shape[1], 32))
    tile_plus_n[grid](TensorDescriptor.from_tensor(x, [64, 32]), TensorDescriptor.from_tensor(out, [64, 32]), 3,
                      BM=64, BN=32)
    return out


@pytest.mark.parametrize("columns", [slice(None), slice(32, None)])
def test_user_code_with_tensor_descriptors_is_captured_and_launched_natively(columns):
    _require_tma()
    import trident
    x = torch.randn(256, 512, device="cuda", dtype=torch.float16)[:, columns]
    fast = trident.compile(_user_tiles)
    for _ in range(4):
        x.normal_()
        assert torch.equal(fast(x), _user_tiles(x))
    n = trident.counters(fast)
    assert (n["captures"], n["fallbacks"], n["hits"]) == (1, 0, 3), n


def test_a_library_whose_configs_set_descriptor_blocks_in_a_pre_hook_is_captured_and_autotuned():
    _require_tma()
    import mini_gems
    import trident

    def fn(x):
        return mini_gems.tile_scale(x, 0.5, two_configs=True)

    x = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    want = fn(x)
    fast = trident.compile(fn)
    for _ in range(4):
        assert torch.equal(fast(x), want)
    n = trident.counters(fast)
    assert (n["captures"], n["fallbacks"], n["hits"]) == (1, 0, 3), n
    text = trident.explain(fast)
    assert "_tile_scale_jit" in text and "LibTuner" in text, text
