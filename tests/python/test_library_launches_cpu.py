"""The traced-Python capture route (python/trident/library_launches.py): a library that Dynamo
cannot trace (mini_gems.py reproduces FlagGems' launcher stack: LibEntry, a library autotuner,
heuristics, kernels generated and imported at run time, StridedBuffer arguments) is captured by
non-strict export down to each JITFunction and the configuration it would launch. Kernels are
compiled for sm_90 without a GPU (fake_cuda.py) and checked in the host IR; a library of torch
ops with generated code runs natively on the CPU against eager."""
import hashlib
import re

import mini_gems
import pytest
import torch
from fake_cuda import capture_as_sm90
from triton.runtime.jit import KernelInterface

import trident


def gems_block(x, y, w):
    return mini_gems.rms_norm(mini_gems.mul(mini_gems.add(x, y), y) * 2, w)


@pytest.fixture
def sm90(monkeypatch):
    with capture_as_sm90(monkeypatch):
        yield


def _lowered(fn, *args):
    fast = trident.compile(fn)
    return trident.controller(fast).lower_call(*args)


def test_library_launchers_are_captured_down_to_the_jit_function(sm90):
    x, y, w = torch.randn(4, 128), torch.randn(4, 128), torch.randn(128)
    lowered = _lowered(gems_block, x, y, w)
    text = lowered.text
    decls = [line.strip() for line in text.splitlines() if line.strip().startswith("kernel ")]
    assert [re.search(r'"(\w+)"', d).group(1) for d in decls] == ["add_kernel", "mul_kernel", "_rms_norm_kernel"]
    # num_warps=2 given at the generated call; the library tuner's one config has num_warps=4
    assert " warps 2 " in decls[0] and " warps 2 " in decls[1] and " warps 4 " in decls[2]
    assert '"ptr,ptr,ptr,i32,fp32"' in decls[2]
    # The StridedBuffers over whole tensors launch those tensors: no view copied and scattered back.
    assert "aten::clone" not in text and "scatter" not in text
    assert re.search(r"launch 0 grid\(2, 1, 1\) \(%0, %1, %\d+, 512\)", text), text
    assert "guard L0.data_ptr divby 16" in text and "guard L2.data_ptr divby 16" in text
    (name, cfg, grid, key) = lowered.kernel_notes[2]
    # the tuner's config, with the heuristic's EVEN (n % 128 == 0) applied to it
    assert name == "_rms_norm_kernel" and grid == (4, 1, 1) and cfg == {"BLOCK_N": 128, "EVEN": True}
    assert "('constexpr', 128), ('constexpr', True)" in key
    assert lowered.route.startswith("Python traced by non-strict export, where Dynamo stopped (File ")
    assert "mini_gems.py" in lowered.route and lowered.route.endswith("Triton launches via LibEntry x3, LibTuner x1")


def test_heuristics_follow_the_call(sm90):
    x, y, w = torch.randn(2, 100), torch.randn(2, 100), torch.randn(100)
    (_, _, _, key) = _lowered(gems_block, x, y, w).kernel_notes[2]
    assert "('constexpr', 128), ('constexpr', False)" in key


@pytest.mark.parametrize("n,block,warps", [(1000, 1024, 4), (2000, 2048, 8)])
def test_heuristics_outside_an_autotuner_apply_as_triton_applies_them(sm90, n, block, warps):
    # torch's own capture refuses heuristics that no autotuner wraps; one of these sets num_warps
    lowered = _lowered(lambda x: mini_gems.row_sum(x), torch.randn(4, n))
    (decl,) = [line.strip() for line in lowered.text.splitlines() if line.strip().startswith("kernel ")]
    assert f" warps {warps} " in decl and '"ptr,ptr,i32"' in decl
    (name, cfg, grid, key) = lowered.kernel_notes[0]
    assert name == "_row_sum_kernel" and grid == (4, 1, 1) and f"('constexpr', {block})" in key


def test_a_direct_jit_run_is_the_same_launch(sm90):
    lowered = _lowered(lambda x: mini_gems.scale_direct(x, 0.5) + 1, torch.randn(1000))
    assert re.search(r"launch 0 grid\(8, 1, 1\) \(%0, %\d+, 1000, 0\.5\)", lowered.text), lowered.text
    assert lowered.route.startswith("Python traced by non-strict export")


def test_a_pointer_at_an_offset_launches_a_view_at_that_offset(sm90):
    lowered = _lowered(lambda x: mini_gems.add_halves(x) + 1, torch.randn(1024))
    text = lowered.text
    # the first half starts where x does and lies inside it: x itself; the second is x's pointer
    # 512 floats on (a view the lowering passes as a pointer, lazy_views.py)
    assert re.search(r"launch 0 grid\(2, 1, 1\) \(%0, ptr\(%0, 2048\), %1, 512\)", text), text
    assert "scatter" not in text and "clone" not in text


def test_the_patches_live_only_while_capturing(sm90):
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction
    before = (KernelInterface.__dict__["__getitem__"], JITFunction.__dict__["run"], CompiledKernel.__dict__["__getitem__"])
    _lowered(gems_block, torch.randn(4, 128), torch.randn(4, 128), torch.randn(128))
    assert (KernelInterface.__dict__["__getitem__"], JITFunction.__dict__["run"],
            CompiledKernel.__dict__["__getitem__"]) == before
    assert "data_ptr" not in torch.Tensor.__dict__


def residual_block(x, y):
    return mini_gems.scaled_residual(x * 2, y) - 1


def test_generated_torch_library_runs_natively_against_eager():
    fast = trident.compile(residual_block)
    for _ in range(3):
        x, y = torch.randn(8, 16), torch.randn(8, 16)
        torch.testing.assert_close(fast(x, y), residual_block(x, y), rtol=0, atol=0)
    n = trident.counters(fast)
    assert n["captures"] == 1 and n["specializations"] == 1 and n["hits"] == 2 and n["fallbacks"] == 0
    report = trident.explain(fast)
    assert "spec 0 captured by: Python traced by non-strict export" in report
    assert "calls split" not in report


def hashes_then_scales(x):
    y = x * 2
    tag = hashlib.sha256(b"step").hexdigest()  # Dynamo stops here, in the compiled function's own file
    return y + len(tag)


def test_a_construct_in_the_functions_own_file_splits_instead():
    fast = trident.compile(hashes_then_scales)
    with pytest.warns(RuntimeWarning, match="run split there"):
        out = fast(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 66.0))
    assert "calls split at graph breaks" in trident.explain(fast)


def test_host_descriptors_with_a_block_setting_pre_hook_launch_as_tma_descriptors(sm90):
    """FlagGems' Hopper mm pattern (mini_gems.tile_scale): TensorDescriptors made with a dummy block,
    set per config by the config's pre_hook. Each becomes the tensor it describes, specialized as a
    tensordesc of the block the chosen config's hook sets (replayed once on stand-ins), declared with
    its TMA clause, launched with its sizes and strides after it."""
    x = torch.randn(128, 256, dtype=torch.float16)
    lowered = _lowered(lambda x: mini_gems.tile_scale(x, 0.5), x)
    text = lowered.text
    decl = next(line.strip() for line in text.splitlines() if line.strip().startswith("kernel "))
    assert '"_tile_scale_jit"' in decl and decl.count(" tma ") == 2, decl
    assert "tensordesc<fp16[64, 32]>" in lowered.kernel_notes[0][3], lowered.kernel_notes  # the hook's block
    assert re.search(r"launch 0 grid\(2, 8, 1\) \(%\d+, 128, 256, 256, 1, %\d+, 128, 256, 256, 1, ", text), text
    assert "guard L0.data_ptr divby 16" in text  # TMA's aligned base
    assert "aten::clone" not in text and "scatter" not in text  # each descriptor is its whole tensor
    assert lowered.route.endswith("Triton launches via LibEntry x1, LibTuner x1"), lowered.route


def test_a_pre_hook_that_does_more_than_set_blocks_is_refused_naming_what_it_touched(sm90):
    import triton
    from trident.errors import UnsupportedError
    from trident.library_launches import hooked_block_shapes
    blocks = {"in_desc": (1, 1)}
    assert hooked_block_shapes(mini_gems._set_tile_blocks, {"in_desc": None, "out_desc": None, "BM": 16, "BN": 8},
                               {"in_desc": (1, 1), "out_desc": (1, 1)}, "k") == {"in_desc": (16, 8), "out_desc": (16, 8)}
    with pytest.raises(UnsupportedError, match=r"k: its autotune config's pre_hook uses out\.zero_"):
        hooked_block_shapes(lambda n: n["out"].zero_(), {"out": torch.empty(2)}, blocks, "k")
    with pytest.raises(UnsupportedError, match=r"pre_hook uses in_desc\.base"):
        hooked_block_shapes(lambda n: n["in_desc"].base, {}, blocks, "k")
    assert triton  # the kernels above are Triton's


def test_a_descriptor_over_another_layout_of_its_tensor_launches_that_view(sm90):
    """FlagGems' mm makes a column-major operand's descriptor with the transposed shape and strides:
    the launch gets the argument viewed that way (an as_strided of it, no copy)."""
    w = torch.randn(128, 256, dtype=torch.float16)
    lowered = _lowered(lambda x: mini_gems.tile_scale_transposed(x, 2.0), w.t())
    text = lowered.text
    assert re.search(r'%(\d+) = call "aten::as_strided" \(%0, \[128, 256\], \[256, 1\], 0\)', text), text
    view = re.search(r'%(\d+) = call "aten::as_strided" \(%0,', text).group(1)
    assert re.search(rf"launch 0 grid\(2, 8, 1\) \(%{view}, 128, 256, 256, 1, %\d+, 128, 256, 256, 1, 2\.0", text), text
    assert "aten::clone" not in text and "scatter" not in text


def test_the_descriptors_a_kernel_writes_are_read_from_its_source():
    """What torch's own write analysis misnames under Triton 3.6 (_compat._install_descriptor_writes):
    a descriptor the kernel only loads from or reads the shape of is not written; one it stores
    through, or hands to another function, is."""
    import triton
    import triton.language as tl
    from trident.library_launches import descriptor_writes

    @triton.jit
    def helper(d):
        pass

    @triton.jit
    def k(a_desc, b_desc, c_desc, d_desc, BM: tl.constexpr):
        x = a_desc.load([0, 0]) + b_desc.shape[0]
        c_desc.store([0, 0], x)
        helper(d_desc)

    assert descriptor_writes(mini_gems._tile_one, {"in_desc", "out_desc"}) == {"out_desc"}
    assert descriptor_writes(k, {"a_desc", "b_desc", "c_desc", "d_desc"}) == {"c_desc", "d_desc"}


def test_a_library_tuners_choice_is_found_among_the_configs_torch_was_given():
    """The lowering lets a library's own autotuner choose (its cache, its policy: eager's config) and
    finds that choice among the configs torch was given, by what they launch with: FlagGems' tuner
    may hand back a copy from its on-disk cache. The stack keeps the tuner through the hooks' removal."""
    import copy

    import triton
    from trident.errors import UnsupportedError
    from trident.library_launches import _hooks_apart, _kernel_of, tuner_choice
    plain, passed = _kernel_of(mini_gems._tile_two)
    assert passed == ["LibEntry", "LibTuner"] and plain._trident_tuner is mini_gems._tile_two.fn
    apart = _hooks_apart(plain)
    assert apart._trident_tuner is mini_gems._tile_two.fn and apart._trident_hooked is plain
    tuner = mini_gems._tile_two.fn
    before = tuner.__dict__.get("best_config")
    tuner.best_config = copy.copy(tuner.configs[1])  # a copy, as from a cache
    assert tuner_choice(tuner, apart.configs) == 1
    tuner.best_config = triton.Config({"BM": 16, "BN": 16})
    with pytest.raises(UnsupportedError, match="chose a config that is none of its configs"):
        tuner_choice(tuner, apart.configs)
    tuner.best_config = before


def test_parameters_left_to_their_defaults_are_launched_with_them(sm90):
    x = torch.randn(1000)
    text = _lowered(lambda x: mini_gems.scale_by_default(x), x).text
    (decl,) = [line.strip() for line in text.splitlines() if line.strip().startswith("kernel ")]
    assert '"ptr,ptr,i32,i32"' in decl, decl
    assert re.search(r"launch 0 grid\(8, 1, 1\) \(%0, %\d+, 1000, 3\)", text), text
