"""User Triton kernels through capture, lowering and module build on a machine without a GPU:
kernels compiled for an explicit sm_90 target (TRIDENT_TRITON_TARGET), with the launch parameters,
dropped constexprs/ints equal to 1, alignment guards and in-place writes checked in the host IR.
Running such a module needs CUDA tensors; on CPU tensors it must fail with a clear error."""
import re

import pytest
import torch
import triton
import triton.language as tl
from fake_cuda import capture_as_sm90, keep_ptx
from tutorial_kernels import add_kernel, scale_selected_rows, scaled_copy_kernel, scaled_copy_then_add

import trident


@triton.jit
def scale_inplace(x_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha, mask=m)


def vector_add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out * 2


def scale_then_add(x, y):
    n = x.numel()
    scale_inplace[(triton.cdiv(n, 128),)](x, n, 0.5, BLOCK=128)
    return x + y


@pytest.fixture(autouse=True)
def cpu_triton_capture(monkeypatch):
    """Let Dynamo capture Triton kernels without a GPU (fake_cuda.capture_as_sm90)."""
    with capture_as_sm90(monkeypatch):
        yield


def _spec_text(fn, *args):
    fast = trident.compile(fn)
    return trident.controller(fast).lower_call(*args), fast


def test_launch_params_and_alignment_guards():
    x, y = torch.randn(4096), torch.randn(4096)
    lowered, _ = _spec_text(vector_add, x, y)
    text = lowered.text
    (decl,) = [line for line in text.splitlines() if line.strip().startswith("kernel ")]
    assert '"add_kernel"' in decl and '"ptr,ptr,ptr,i32"' in decl
    assert re.search(r"warps 4 ctas 1 shared \d+ gscratch 0 1 pscratch 0 1 pdl 0 coop 0", decl)
    # out = empty_like(x) has no other reader: the kernel writes it in place, no clone.
    assert "aten::clone" not in text
    assert re.search(r"launch 0 grid\(16, 1, 1\) \(%0, %1, %\d+, 4096\)", text), text
    assert "guard L0.data_ptr divby 16" in text and "guard L1.data_ptr divby 16" in text
    (name, cfg, grid, key) = lowered.kernel_notes[0]
    assert name == "add_kernel" and grid == (16, 1, 1)
    assert key.startswith("[('*fp32', 'D'), ('*fp32', 'D'), ('*fp32', 'D'), ('i32', 'D'), ('constexpr', 256)]")


def test_int_equal_to_one_is_dropped_from_the_launch():
    lowered, _ = _spec_text(vector_add, torch.randn(1), torch.randn(1))
    assert '"ptr,ptr,ptr"' in lowered.text
    assert re.search(r"launch 0 grid\(1, 1, 1\) \(%0, %1, %\d+\)\n", lowered.text)


def test_misaligned_pointer_is_compiled_without_the_alignment_assumption():
    base = torch.randn(4097)
    x = base[1:]  # 4-byte offset: not 16-byte aligned
    lowered, _ = _spec_text(vector_add, x, torch.randn(4096))
    assert "guard L0.data_ptr divby 16" not in lowered.text
    assert "guard L1.data_ptr divby 16" in lowered.text
    assert lowered.kernel_notes[0][3].startswith("[('*fp32', ''), ('*fp32', 'D')")


def test_kernel_writing_an_input_in_place_writes_it_natively():
    x, y = torch.randn(1000), torch.randn(1000)
    lowered, _ = _spec_text(scale_then_add, x, y)
    text = lowered.text
    assert '"ptr,i32,fp32"' in text                    # n=1000 not /16 but kept; alpha is fp32
    assert re.search(r"launch 0 grid\(8, 1, 1\) \(%0, 1000, 0\.5\)", text), text
    assert "aten::clone" not in text and "aten::copy_" not in text


def sum_into_a_view(x, y):
    out = torch.empty(x.numel(), 1)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out.squeeze(1), x.numel(), BLOCK=256)
    return out.squeeze(1) * 2


def sum_into_a_view_then_read_the_old_base(x, y):
    out = torch.zeros(x.numel(), 2)
    before = out.sum()  # read before the launch: still in place
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out[:, 0], x.numel(), BLOCK=256)
    return out * 2, before


def test_a_kernel_writing_a_view_of_a_fresh_allocation_writes_it_in_place():
    """A library launching into a view of its own `empty` (FlagGems' argmax squeezes its output):
    the functional clone of the view is a copy nobody sees once nothing reads the old memory."""
    x, y = torch.randn(1024), torch.randn(1024)
    text = _spec_text(sum_into_a_view, x, y)[0].text
    assert "aten::clone" not in text and "aten::copy_" not in text, text
    # the base read again after the launch: functionalization scatters the result back into it,
    # a write of that memory onto itself, elided
    text = _spec_text(sum_into_a_view_then_read_the_old_base, x, y)[0].text
    assert "aten::clone" not in text and "aten::copy_" not in text and "scatter" not in text, text


def test_a_scalar_used_as_a_triton_value_does_not_make_every_input_mutated():
    # torch 2.11's mutation analysis inlined scalars as constants, failed on `alpha.to(...)` and
    # assumed every input written; trident's capture keeps scalars as TTIR arguments (_compat).
    from torch._higher_order_ops import triton_kernel_wrap as tkw

    from trident import _compat
    src, dst = torch.randn(1000), torch.randn(1000)
    kwargs = {"src_ptr": src, "dst_ptr": dst, "n": 1000, "alpha": 0.5, "BLOCK": 128}
    with _compat.capturing():
        assert tkw.generate_ttir(scaled_copy_kernel, kwargs, {})[1] == ["src_ptr", "dst_ptr", "n", "alpha"]
        # the shim itself (active only on a torch that inlines scalars) names the same parameters
        module, names = _compat._generate_ttir_keeping_scalars(tkw.generate_ttir, scaled_copy_kernel, kwargs, {})
        assert names == ["src_ptr", "dst_ptr", "n", "alpha"] and "%alpha: f32" in str(module)
    lowered, _ = _spec_text(scaled_copy_then_add, src, dst)
    text = lowered.text
    assert '"ptr,ptr,i32,fp32"' in text and "aten::clone" not in text, text


def test_compiled_module_on_cpu_tensors_fails_clearly_and_stays_usable():
    fast = trident.compile(vector_add)
    x, y = torch.randn(64), torch.randn(64)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Triton kernel add_kernel: parameter 0 is not a CUDA tensor"):
            fast(x, y)
    c = trident.counters(fast)
    assert (c["compiles"], c["specializations"]) == (1, 1)


def test_int_argument_that_stops_being_divisible_by_16_misses():
    fast = trident.compile(vector_add)
    x, y = torch.randn(4096), torch.randn(4096)
    with pytest.raises(RuntimeError):
        fast(x, y)  # compiles the n=4096 ('i32', 'D') variant, then cannot run on CPU tensors
    scm = trident.controller(fast).scm
    assert scm.select(x, y) == 0
    x2, y2 = torch.randn(4097), torch.randn(4097)
    assert scm.select(x2, y2) == -1
    assert any("size[0] == 4096" in why for _, why in scm.explain_call(x2, y2))


def test_symbolic_size_becomes_a_native_kernel_argument_and_grid():
    """dynamic=True: n and the grid are computed natively from the tensor size, and the spec guards
    what Triton's specialization assumed about n (here: divisible by 16)."""
    fast = trident.compile(vector_add, dynamic=True)
    lowered = trident.controller(fast).lower_call(torch.randn(4096), torch.randn(4096))
    text = lowered.text
    assert re.search(r"launch 0 grid\(\$\d+, 1, 1\) \(%0, %1, %\d+, \$\d+\)", text), text
    assert '% 16 == 0' in text and "L0.size[0]" in text
    assert "guard L0.size[0] == 4096" not in text


def test_symbolic_size_not_divisible_by_16_is_guarded_as_such():
    fast = trident.compile(vector_add, dynamic=True)
    text = trident.controller(fast).lower_call(torch.randn(1000), torch.randn(1000)).text
    assert "% 16 != 0" in text and "!= 1" in text


@triton.jit
def head_fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32), mask=offs < n)


def head_fill(x, n: int):
    head_fill_kernel[(1,)](x, n, BLOCK=64)
    return x


def test_backend_respecializes_a_symbolic_kernel_argument_on_this_calls_value():
    """A Dynamo graph is reused across calls: when a new call misses (n stops/starts being divisible
    by 16), the kernel must be specialized on that call's n, not on the value the graph was traced
    with. On CPU tensors the launch then fails cleanly; a wrong specialization would instead fail
    with 'no specialization accepts the call it was compiled for'."""
    torch._dynamo.reset()
    opt = torch.compile(head_fill, backend="trident")
    for n in (3, 5, 16, 17, 32):
        with pytest.raises(RuntimeError, match="head_fill_kernel: parameter 0 is not a CUDA tensor"):
            opt(torch.zeros(64), n)


def test_respecialization_for_a_new_divisibility_reuses_the_captured_program(monkeypatch):
    """n stops being divisible by 16: the same symbolic program is lowered again with a `% 16 != 0`
    kernel variant; torch.export does not run again."""
    from trident import _compat
    exports = []
    orig = _compat.export_program
    monkeypatch.setattr(_compat, "export_program", lambda *a, **k: (exports.append(1), orig(*a, **k))[1])
    fast = trident.compile(vector_add, dynamic=True)
    for n in (4096, 1000, 4112, 1008, 1001):
        with pytest.raises(RuntimeError, match="not a CUDA tensor"):
            fast(torch.randn(n), torch.randn(n))  # compiles when needed, then cannot run on CPU
    c = trident.counters(fast)
    assert (c["specializations"], c["compiles"], len(exports)) == (2, 2, 1)
    texts = trident.controller(fast).scm.ir()
    assert "% 16) == 0)" in texts and "% 16) != 0)" in texts


@triton.jit
def _doubled_with_defaults(x_ptr, n, BLOCK: tl.constexpr = 128):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


def _grid_reads_a_defaulted_constexpr(x):
    n = x.numel()
    _doubled_with_defaults[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, n)
    return x + 1


def _two_cta_clusters(x):
    n = x.numel()
    _doubled_with_defaults[(triton.cdiv(n, 128),)](x, n, num_ctas=2)
    return x + 1


@pytest.mark.parametrize("fn, ctas", [(_grid_reads_a_defaulted_constexpr, 1), (_two_cta_clusters, 2)],
                         ids=["defaulted_constexpr_in_grid", "num_ctas"])
def test_launches_dynamo_alone_refuses_are_captured(fn, ctas):
    lowered, _ = _spec_text(fn, torch.randn(1024))
    (decl,) = [line for line in lowered.text.splitlines() if line.strip().startswith("kernel ")]
    assert f" ctas {ctas} " in decl, decl
    assert re.search(r"launch 0 grid\(8, 1, 1\) \(%0, 1024\)", lowered.text), lowered.text


@triton.jit
def _tma_doubled(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    out_desc.store([m, n], in_desc.load([m, n]) * 2)


def _doubled_through_host_descriptors(x):
    from triton.tools.tensor_descriptor import TensorDescriptor
    out = torch.empty_like(x)
    a, b = TensorDescriptor.from_tensor(x, [64, 32]), TensorDescriptor.from_tensor(out, [64, 32])
    _tma_doubled[(triton.cdiv(x.shape[0], 64), triton.cdiv(x.shape[1], 32))](a, b, BM=64, BN=32)
    return out


def test_host_descriptors_in_user_code_are_launched_as_tma_descriptors_not_dropped(monkeypatch):
    """Torch's launch capture keeps a non-tensor argument as a constant: a launch whose tensors are
    all inside such objects looked like it wrote nothing and vanished from the program. Host-side
    TMA descriptors (TensorDescriptor.from_tensor in the user's file; Dynamo stops inside Triton's
    TensorDescriptor, the traced route takes it) are launched as the tensors they describe, declared
    as TMA descriptors; other objects holding tensors are refused by name."""
    from fake_cuda import capture_as_sm90
    x = torch.randn(256, 128, dtype=torch.float16)
    with capture_as_sm90(monkeypatch):
        lowered, _ = _spec_text(_doubled_through_host_descriptors, x)
    (decl,) = [line for line in lowered.text.splitlines() if line.strip().startswith("kernel ")]
    assert '"tmadesc,i32,i32,i64,i64,tmadesc,i32,i32,i64,i64"' in decl and decl.endswith(
        "tma 2 2 6 0 0 64 32 tma 2 2 6 0 0 64 32"), decl
    assert "launch 0 grid(4, 4, 1) (%0, 256, 128, 128, 1, %1, 256, 128, 128, 1)" in lowered.text, lowered.text
    assert "return %1" in lowered.text  # the launch writes the result: it stays in the program

    class Holder:
        def __init__(self, t):
            self.t = t
    from trident.library_launches import refuse_opaque_argument
    with pytest.raises(trident.UnsupportedError, match="k: argument p is a .*Holder holding tensors"):
        refuse_opaque_argument(Holder(x), "k: argument p")
    for tuple_parameter in ((x, x), [x, 1], (Holder(x),), ((1, x),)):  # a pointer wrapper too
        with pytest.raises(trident.UnsupportedError, match="holding tensors \\(a Triton tuple parameter\\)"):
            refuse_opaque_argument(tuple_parameter, "k: argument p")
    for fine in (x, 3, 2.5, True, None, "s", torch.float16, tl.constexpr(4), (1, 2), [64, 32]):
        refuse_opaque_argument(fine, "k")


def test_a_data_dependent_size_is_a_native_grid_and_an_unspecialized_kernel_argument():
    x, mask = torch.randn(8, 32), torch.tensor([1, 0, 1, 1, 0, 0, 0, 1], dtype=torch.bool)
    lowered, _ = _spec_text(scale_selected_rows, x, mask)
    text = lowered.text
    (decl,) = [line for line in text.splitlines() if line.strip().startswith("kernel ")]
    # n is compiled as Triton compiles an int that is neither 1 nor a multiple of 16
    assert '"ptr,ptr,i32"' in decl, decl
    assert lowered.kernel_notes[0][3].startswith("[('*fp32', 'D'), ('*fp32', 'D'), ('i32', '')"), lowered.kernel_notes
    (launch,) = re.findall(r"launch 0 grid\((\$\d+), 1, 1\) \(%\d+, %\d+, (\$\d+)\)", text)
    assert launch[0] == launch[1], text
    # the size is read from the gathered rows in the body; its range is checked there, not guarded
    assert re.search(rf"{re.escape(launch[0])} = size %\d+, 0", text), text
    assert "outside the 32-bit range" in text
    assert not [line for line in text.splitlines() if line.strip().startswith("guard") and "u0" in line]
    assert isinstance(lowered.kernel_notes[0][2][0], str)  # explain shows the grid's expression



def test_the_lowering_reports_its_triton_compiles_apart(monkeypatch):
    """counters()' triton_compile_seconds: the part of lowering_seconds spent in triton.compile,
    nothing when the kernel was compiled before (issue 29's split of the time to a first result)."""
    keep_ptx(monkeypatch)  # trident's record of compiled kernels starts empty: triton.compile runs
    x, y = torch.randn(4096), torch.randn(4096)
    first = trident.controller(trident.compile(vector_add))
    first.lower_call(x, y)
    assert 0.0 < first.triton_compile_seconds <= first.lowering_seconds
    again = trident.controller(trident.compile(vector_add))
    again.lower_call(x, y)
    assert again.triton_compile_seconds == 0.0 < again.lowering_seconds


def scale_if_any_rows(x, counts):
    """Liger-Kernel 0.8's fused MoE, reduced: a tile count read by `.item()` sizes a buffer, and the
    kernel launches only `if tiles.shape[0] > 0:` (a launch region, _compat.py: WHEN_MARK)."""
    n = int(counts.sum().item())
    tiles = torch.zeros(n, dtype=torch.int32, device=x.device)
    if tiles.shape[0] > 0:
        scale_inplace[(tiles.shape[0],)](x, x.numel(), 0.5, BLOCK=128)
    return x + 1.0, tiles


def _region_launch_grid(text: str) -> str:
    """The region's launch grid in a lowered scale_if_any_rows: `$n = item`, `$c = gt $n, 0`, and
    the grid `$g = mul $n, $c`."""
    n = re.search(r"(\$\d+) = item %\d+", text).group(1)
    cond = re.search(rf"(\$\d+) = gt {re.escape(n)}, 0", text).group(1)
    return re.search(rf"(\$\d+) = mul {re.escape(n)}, {re.escape(cond)}", text).group(1)


def test_a_launch_under_a_data_dependent_condition_runs_with_its_grid_times_the_condition():
    lowered, _ = _spec_text(scale_if_any_rows, torch.randn(256), torch.tensor([2, 1], dtype=torch.int32))
    text = lowered.text
    grid = _region_launch_grid(text)
    assert re.search(rf"launch 0 grid\({re.escape(grid)}, 1, 1\) \(%0, 256,", text), text
    assert "expect" not in text  # one program for both ways, not a branch per specialization


def scale_if_any_rows_without_grad(x, counts):
    with torch.no_grad():  # as Liger's fused MoE is called in a function of its own
        return scale_if_any_rows(x, counts)


def test_a_launch_region_does_not_depend_on_node_metadata(monkeypatch):
    """torch 2.11's export replaces every node's `custom` metadata under a `torch.no_grad()` the
    function enters (a dynamo-disabled wrapper's annotation): the region's condition and its launches
    are found without it (_compat.launch_regions, region_launch_count)."""
    import trident.compiled as compiled
    real = compiled.lower

    def lower_without_custom(program, *args, **kwargs):
        for node in program.graph_module.graph.nodes:
            node.meta["custom"] = {"_torchdynamo_disable": True}
        return real(program, *args, **kwargs)

    monkeypatch.setattr(compiled, "lower", lower_without_custom)
    lowered, _ = _spec_text(scale_if_any_rows_without_grad, torch.randn(256), torch.tensor([2, 1], dtype=torch.int32))
    grid = _region_launch_grid(lowered.text)
    assert re.search(rf"launch 0 grid\({re.escape(grid)}, 1, 1\)", lowered.text), lowered.text


def test_a_region_launch_lowered_without_its_condition_is_refused_not_run_unconditionally(monkeypatch):
    import trident.lowering.triton_lower as triton_lower
    monkeypatch.setattr(triton_lower, "launch_regions", lambda idx: ())  # its record lost
    with pytest.raises(trident.UnsupportedError, match="1 kernel launches under its condition at capture, 0 found"):
        _spec_text(scale_if_any_rows, torch.randn(256), torch.tensor([2, 1], dtype=torch.int32))


def scale_if_any_rows_with_a_temporary(x, counts):
    n = int(counts.sum().item())
    tiles = torch.zeros(n, dtype=torch.int32, device=x.device)
    if tiles.shape[0] > 0:
        count = tiles.shape[0]  # assigned in the body, read only there
        scale_inplace[(count,)](x, x.numel(), 0.5, BLOCK=128)
    return x + 1.0


def test_a_launch_region_may_assign_what_only_its_body_reads():
    lowered, _ = _spec_text(scale_if_any_rows_with_a_temporary, torch.randn(256), torch.tensor([2, 1]))
    assert re.search(r"launch 0 grid\(\$\d+, 1, 1\)", lowered.text), lowered.text
    assert re.search(r"\$\d+ = gt \$\d+, 0", lowered.text)


# scale_inplace as a kernel object of its own, whose analysis no other test has kept
scale_in_place_again = triton.jit(scale_inplace.fn)


def four_layers_of_one_kernel(xs, y):
    """A model's layers launch one kernel over and over with the same kinds of arguments."""
    for x in xs:
        scale_in_place_again[(triton.cdiv(x.numel(), 128),)](x, x.numel(), 0.5, BLOCK=128)
    return sum(xs) + y


def test_the_mutation_analysis_runs_once_per_kernel_and_arguments(monkeypatch):
    """torch's analysis of what a launch writes compiles the kernel to TTIR at every launch it
    traces; trident keeps its answer per kernel and arguments (_compat._install_mutation_cache), so a
    model's repeated layers pay for it once. Each launch still writes its own tensor in place."""
    from torch._higher_order_ops import triton_kernel_wrap
    from trident import _compat
    with _compat.capturing():
        pass  # installs the fixes, so the count below wraps what the capture calls
    installed = triton_kernel_wrap.get_mutated_tensors
    with _compat.capturing():
        pass
    assert triton_kernel_wrap.get_mutated_tensors is installed  # installed once, not once more per capture
    compiles = []
    inner = triton_kernel_wrap.generate_ttir

    def counting(kernel, kwargs, tma):
        if getattr(kernel, "fn", kernel) is scale_in_place_again or kernel is scale_in_place_again:
            compiles.append(kernel)
        return inner(kernel, kwargs, tma)

    monkeypatch.setattr(triton_kernel_wrap, "generate_ttir", counting)
    xs = [torch.randn(1000) for _ in range(4)]
    text, _ = _spec_text(four_layers_of_one_kernel, xs, torch.randn(1000))
    assert len(re.findall(r"launch \d grid\(8, 1, 1\) \(%\d+, 1000, 0\.5\)", text.text)) == 4, text.text
    assert "aten::clone" not in text.text and "aten::copy_" not in text.text
    assert len(compiles) == 1, compiles
