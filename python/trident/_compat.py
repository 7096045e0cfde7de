"""Every difference between the torch versions we support (2.11 on GPU machines, 2.13 on CPU CI)
is handled here and nowhere else."""
from __future__ import annotations

import contextlib
import dataclasses
import dis
import inspect
import itertools
import operator
import sys
import threading
import warnings

import torch
import torch.utils._pytree as pytree

TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


# Whether Dynamo can list an instance dictionary (`vars(obj)`) while tracing: 2.13 can, 2.11 fails
# ("Failed to trace builtin operator tuple"), so there an object's state after a call is read by
# attribute names known beforehand (arg_objects._flatten).
DYNAMO_LISTS_INSTANCE_DICTS = TORCH_VERSION >= (2, 13)


def treespec_children(spec: pytree.TreeSpec) -> list:
    """Child specs of a pytree TreeSpec (the attribute was renamed across releases)."""
    children = getattr(type(spec), "children", None)
    if callable(children):          # 2.13: a method; children_specs is deprecated there
        return list(spec.children())
    return list(spec.children_specs)


def treespec_is_leaf(spec: pytree.TreeSpec) -> bool:
    return spec.is_leaf()


def treespec_num_leaves(spec: pytree.TreeSpec) -> int:
    if treespec_is_leaf(spec):
        return 1
    return sum(treespec_num_leaves(c) for c in treespec_children(spec))


def export_program(module: torch.nn.Module, args: tuple, kwargs: dict,
                   dynamic_shapes=None, strict: bool = True) -> "torch.export.ExportedProgram":
    """Capture to a functional ATen graph: torch.export, strict (Dynamo) unless told otherwise
    (non-strict runs the Python itself: library_launches.py)."""
    installed, prev = [], getattr(_capture, "installed", None)
    _capture.installed = installed
    try:
        with capturing(), warnings.catch_warnings():  # run_decompositions functionalizes: Triton kernels too
            # torch's own deep copies of its LeafSpecs warn about LeafSpec's deprecation, hundreds of
            # times a capture; the caller can do nothing about it.
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                    category=FutureWarning)
            # transformers' output capturing sets and resets a module global inside forward, which
            # Dynamo reports as a side effect it drops; nothing is lost (reset before return).
            warnings.filterwarnings(
                "ignore", message=r".*side effects happened.*\[\"G\['__import_transformers_dot_utils_dot_output_"
                r"capturing'\]\._active_collector\"\]$", category=UserWarning)
            # Where strict export stops at a C function, Dynamo warns before it raises; trident's
            # error or its traced-Python route (library_launches.py) says what happened instead.
            warnings.filterwarnings("ignore", message=r"Dynamo does not know how to trace the builtin",
                                    category=UserWarning)
            # torch's own modules that export imports on first use warn of their own deprecations
            # (2.11's torch.utils.mkldnn: `torch.jit.script_method`): under a caller's
            # `simplefilter("error")` (pytest -W error) the first capture in a process failed.
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch(\.|$)")
            ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
            return ep.run_decompositions(_capture_decompositions())
    finally:
        _capture.installed = prev
        _drop_compiled_graphs(installed)


def _capture_decompositions() -> dict:
    """Ops export keeps whole that the capture decomposes as eager's dispatch would run them:
    scaled-dot-product attention, whose composite kernel picks the backend (cuDNN, flash,
    efficient, math) for the traced inputs and converts a boolean mask to the additive mask that
    backend takes. Decomposed at capture, the graph calls the chosen backend's op directly with
    torch's own conversion, which the lowering then computes once for all layers that share the
    mask (cse.py). The choice is the one eager makes for these inputs under the sdp flags in force
    at capture (torch.backends.cuda.enable_*_sdp), as torch.compile's is. The helper that runs an
    op's C++ composite kernel from a decomposition table is private to torch.export."""
    try:
        from torch._export.utils import _get_decomp_for_cia
    except ImportError:
        return {}
    op = torch.ops.aten.scaled_dot_product_attention.default
    return {op: _get_decomp_for_cia(op)}


def private_pool_api():
    """PyTorch's routing of a thread's CUDA allocations to a private pool of its caching allocator,
    as torch.cuda.graph uses it, for the ATen calls that replay (csrc/runtime/replay/op_replay.h): a
    RecordingPools over torch._C's bindings. None when this torch lacks them (2.8 introduced the
    thread-scoped one); then ATen calls never replay."""
    C = torch._C
    if not all(hasattr(C, n) for n in ("_cuda_beginAllocateCurrentThreadToPool", "_cuda_endAllocateToPool",
                                       "_cuda_releasePool")) \
            or not hasattr(torch.cuda, "graph_pool_handle") or not hasattr(torch.cuda, "memory_stats_as_nested_dict"):
        return None
    from .recording_pools import RecordingPools
    return RecordingPools(C._cuda_beginAllocateCurrentThreadToPool, C._cuda_endAllocateToPool, C._cuda_releasePool,
                          torch.cuda.graph_pool_handle,
                          lambda device: torch.cuda.memory_stats_as_nested_dict(device)["allocation"]["all"]["freed"],
                          _pool_segments)


def _pool_segments(device: int, pool) -> list[tuple[int, int]]:
    """The segments of PyTorch's private pool `pool` on `device`, as (address, bytes): the memory a
    CUDA graph captured into it owns (csrc/runtime/graphs/graph_rebind.h tells it from the arguments')."""
    pool = tuple(pool)
    return [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()
            if s["device"] == device and tuple(s["segment_pool_id"]) == pool]


# Dynamo installs each graph it compiles as a global `__compiled_fn_<n>_<uuid>` in the namespace
# of the frame it traced (OutputGraph.install_global_unsafe); a CleanupHook deletes it when that
# frame's cache entry dies. Strict export's capture leaves no cache entry behind, so nothing ever
# deletes it: the global keeps the captured GraphModule, whose _parameters and _buffers are the
# module's own dicts, for the life of the process, and a dropped model's weights and KV cache stay
# allocated (torch 2.13: in torch._dynamo.functional_export's namespace). trident never runs an
# export's transformed bytecode, so after each export the graphs it installed are swapped for a stub
# that says so; the names stay, for a CleanupHook that may still delete them.
_COMPILED_FN_PREFIX = "__compiled_fn"


def _dropped_export_graph(*args, **kwargs):
    raise RuntimeError("trident released this torch.export capture's Dynamo graph after lowering it")


def _install_global_recorder() -> bool:
    try:
        from torch._dynamo.output_graph import OutputGraph
        orig = OutputGraph.install_global_unsafe
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_record", False):
        return True

    def install_global_unsafe(self, name, value):
        orig(self, name, value)
        installed = getattr(_capture, "installed", None)
        if installed is not None and name.startswith(_COMPILED_FN_PREFIX):
            installed.append((self.global_scope, name, value))

    install_global_unsafe._trident_record = True
    OutputGraph.install_global_unsafe = install_global_unsafe
    return True


def _drop_compiled_graphs(installed: list) -> None:
    for scope, name, value in installed:
        if scope.get(name) is value:
            scope[name] = _dropped_export_graph


# Strict export makes Dynamo keep a *real* copy of every tensor it lifts (each parameter, buffer
# and tensor argument) in OutputGraph.real_value_cache: torch/_dynamo/variables/builder.py,
# cache_real_value_when_export and _wrap_fx_preexisting_tensor both call _clone_input ->
# torch/_dynamo/utils.py clone_input (empty + copy_(x.clone())). That is a transient extra copy of
# all module state during capture (one full copy plus two of the largest tensor at the peak),
# freed when Dynamo compiles the graph. The cache is read only by get_real_value (running real
# ops for a constant-sourced tensor branch or an assume_constant_result call); it never shapes
# the captured graph. During trident's capture those two call sites store the tensor itself
# instead, which is what torch.compile (non-export) Dynamo's get_real_value uses anyway.
_capture = threading.local()


def _install_real_value_alias() -> bool:
    try:
        from torch._dynamo.variables import builder
        codes = frozenset({builder.cache_real_value_when_export.__code__,
                           builder._wrap_fx_preexisting_tensor.__code__})
        orig = builder._clone_input
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_alias", False):
        return True

    def _clone_input(value, fake_mode):
        if getattr(_capture, "active", False) and sys._getframe(1).f_code in codes:
            return value
        return orig(value, fake_mode)

    _clone_input._trident_alias = True
    builder._clone_input = _clone_input
    return True


# torch 2.11's generate_ttir (torch/_higher_order_ops/triton_kernel_wrap.py), which finds the
# tensors a user Triton kernel writes, hands every non-tensor argument to Triton as a constant. A
# kernel that uses a scalar parameter as a Triton value (`scale.to(tl.float32)`) then fails to
# compile there, and identify_mutated_tensors falls back to "every tensor argument is mutated": the
# functional graph clones each tensor the kernel reads, a whole KV cache per call in a decode step.
# torch 2.13 passes only constexpr and None arguments as constants and names every TTIR parameter
# (scalars included) for the analysis. During trident's capture the older function does the same.
def _scalar_args_inlined(generate_ttir) -> bool:
    nested = {c.co_name for c in generate_ttir.__code__.co_consts if hasattr(c, "co_name")}
    return "get_tensor_names" in nested and "get_arg_names" not in nested


def _generate_ttir_keeping_scalars(orig, kernel, kwargs, tma_descriptor_metadata):
    """orig's TTIR with scalar parameters left as TTIR arguments, and the names of all of them."""
    import triton.compiler.compiler as triton_compiler
    from triton.runtime.autotuner import Autotuner

    fn, values = kernel, dict(kwargs)
    if isinstance(kernel, Autotuner):  # orig traces the first config, so the names follow it
        fn = kernel.fn
        if kernel.configs:
            values.update(kernel.configs[0].kwargs)
    params = getattr(fn, "params", None)
    if params is None or tma_descriptor_metadata:  # orig fails or handles these; nothing to fix
        return orig(kernel, kwargs, tma_descriptor_metadata)
    constexpr = {p.name for p in params if p.is_constexpr}
    real_source = triton_compiler.ASTSource

    class ASTSource(real_source):
        def __init__(self, src_fn, signature, constexprs=None, attrs=None):
            def name(key):
                return key if isinstance(key, str) else src_fn.arg_names[key[0]]
            kept = {k: v for k, v in (constexprs or {}).items() if v is None or name(k) in constexpr}
            super().__init__(src_fn, signature, kept, attrs)

    triton_compiler.ASTSource = ASTSource  # generate_ttir imports it from there on each call
    try:
        module, _tensor_names = orig(kernel, kwargs, tma_descriptor_metadata)
    finally:
        triton_compiler.ASTSource = real_source
    return module, [n for n in fn.arg_names if n not in constexpr and values.get(n) is not None]


def _install_ttir_scalar_fix() -> bool:
    try:
        from torch._higher_order_ops import triton_kernel_wrap
        orig = triton_kernel_wrap.generate_ttir
        orig_identify = triton_kernel_wrap.identify_mutated_tensors
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_fix", False) or not _scalar_args_inlined(orig):
        return True

    def generate_ttir(kernel, kwargs, tma_descriptor_metadata):
        if getattr(_capture, "active", False):
            return _generate_ttir_keeping_scalars(orig, kernel, kwargs, tma_descriptor_metadata)
        return orig(kernel, kwargs, tma_descriptor_metadata)

    def identify_mutated_tensors(kernel, kwargs, tma_descriptor_metadata):
        names = orig_identify(kernel, kwargs, tma_descriptor_metadata)
        if not getattr(_capture, "active", False):
            return names
        # A scalar that feeds a store's address reads as written once scalars are TTIR parameters;
        # only tensors can be (torch 2.13's get_mutated_tensors filters the same way).
        return [n for n in names if isinstance(kwargs.get(n), torch.Tensor)]

    generate_ttir._trident_fix = True
    triton_kernel_wrap.generate_ttir = generate_ttir
    triton_kernel_wrap.identify_mutated_tensors = identify_mutated_tensors
    return True


def _install_descriptor_writes() -> bool:
    """torch's analysis of which tensors a user kernel writes (get_mutated_tensors) names Triton's
    TTIR parameters after the launch's arguments in order; Triton 3.6 lowers a host-side tensor
    descriptor to several parameters (the descriptor, its sizes, its strides), so every argument
    after the first descriptor is misnamed and a store through a descriptor is lost: the launch was
    dropped as writing nothing. During trident's capture, a launch with descriptors writes each
    descriptor the kernel may write through (library_launches.descriptor_writes, from its source)
    and, conservatively, every other tensor argument."""
    try:
        from torch._higher_order_ops import triton_kernel_wrap
        orig = triton_kernel_wrap.get_mutated_tensors
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_fix", False):
        return True

    def get_mutated_tensors(kernel_idx, constant_args_idx, kwargs, tma_descriptor_metadata):
        names = orig(kernel_idx, constant_args_idx, kwargs, tma_descriptor_metadata)
        if not tma_descriptor_metadata or not getattr(_capture, "active", False):
            return names
        from .library_launches import descriptor_writes
        kernel = triton_kernel_wrap.kernel_side_table.get_kernel(kernel_idx)
        written = descriptor_writes(kernel, set(tma_descriptor_metadata))
        return [k for k, v in kwargs.items()
                if isinstance(v, torch.Tensor) and (k not in tma_descriptor_metadata or k in written)]

    get_mutated_tensors._trident_fix = True
    triton_kernel_wrap.get_mutated_tensors = get_mutated_tensors
    return True


class _Uncacheable(Exception):
    pass


def _ttir_arg_key(value):
    """What torch's TTIR generation reads of one argument of a launch (triton_kernel_wrap.generate_ttir):
    a fake tensor's dtype (it stands in an empty tensor of that dtype), nothing of a symbolic value
    (it stands in 2), anything else by value. _Uncacheable for what it might read more of (a real
    tensor's address decides Triton's alignment specialization)."""
    from torch._subclasses.fake_tensor import FakeTensor
    if isinstance(value, FakeTensor):
        return ("tensor", value.dtype)
    if isinstance(value, torch.Tensor):
        raise _Uncacheable
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", type(value).__name__)
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return (type(value).__name__, value)
    raise _Uncacheable


_MUTATIONS_LIMIT = 4096


def _install_mutation_cache() -> bool:
    """torch's analysis of which tensors a user kernel writes (get_mutated_tensors) compiles the
    kernel to TTIR and walks it at every launch it traces: about 0.1 s each, so a model whose layers
    launch the same kernels 27 times over spent most of its capture there (DeepSeek-V2 with
    Liger-Kernel: 10 of 30 s for 6 layers on a CPU). The answer depends only on the kernel, the
    arguments as _ttir_arg_key sees them, the descriptor metadata and whether trident is capturing
    (the fixes above); it is kept per process under that key. Launches with arguments it cannot
    key are analysed every time."""
    try:
        from torch._higher_order_ops import triton_kernel_wrap
        orig = triton_kernel_wrap.get_mutated_tensors
        table = triton_kernel_wrap.kernel_side_table
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_cache", False):
        return True
    answers: dict = {}

    def get_mutated_tensors(kernel_idx, constant_args_idx, kwargs, tma_descriptor_metadata):
        kernel = table.get_kernel(kernel_idx)
        try:
            merged = {**kwargs, **table.get_constant_args(constant_args_idx)}
            key = (id(kernel), tuple((k, _ttir_arg_key(v)) for k, v in merged.items()),
                   repr(sorted((tma_descriptor_metadata or {}).items())), getattr(_capture, "active", False))
            hash(key)
        except (_Uncacheable, TypeError):
            return orig(kernel_idx, constant_args_idx, kwargs, tma_descriptor_metadata)
        found = answers.get(key)
        if found is not None and found[0] is kernel:
            return list(found[1])
        names = orig(kernel_idx, constant_args_idx, kwargs, tma_descriptor_metadata)
        if len(answers) >= _MUTATIONS_LIMIT:
            answers.clear()
        answers[key] = (kernel, list(names))  # the kernel held: its id is not reused while the entry lives
        return names

    get_mutated_tensors._trident_cache = True
    # What it wraps is installed: _install_descriptor_writes, run before it on every capture, must
    # not wrap this again (each capture would add two layers, until Python's recursion limit).
    get_mutated_tensors._trident_fix = getattr(orig, "_trident_fix", False)
    triton_kernel_wrap.get_mutated_tensors = get_mutated_tensors
    return True


def _str_guard_text_is_lossy(code: str) -> bool:
    """Whether a guard's code is one torch.export cannot turn into a check: Dynamo writes a str
    guard's value between single quotes unescaped (a dict argument's item `{"sep": "\\n"}`), and
    export quotes the guard's text inside a double-quoted message and drops its newlines, so a
    backslash, a double quote or a control character makes the generated code a SyntaxError or a
    check of another string. Guard code of sizes and ints holds none of them. Such a guard is of a
    str argument item, which the structure string guards natively by its exact bytes."""
    return "\\" in code or '"' in code or any(ord(ch) < 32 for ch in code)


def _install_guard_paths_fix() -> bool:
    """torch.export's unlifted module (what run_decompositions retraces) checks the export's guards
    in generated code, made by replacing each input's path in the guard text with `args[i]`, in input
    order. Where one path is a prefix of another (transformers' sliding-window StaticCache layer
    holds a tensor `cumulative_length` and an int `cumulative_length_int`), the shorter replaces part
    of the longer ("args[6]_int") and the code is a SyntaxError: every Mistral, Gemma 2/3 or other
    sliding-window model with a StaticCache failed to capture. The paths are replaced here first,
    longest first, by tokens no path or token is a prefix of; torch's own replacement then maps each
    token to its `args[i]` (the guards' error text names the token instead of the path)."""
    try:
        from torch.export import _unlift
        orig = _unlift._convert_guards_code_to_fn
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_fix", False):
        return True

    def _convert_guards_code_to_fn(guards_code, paths_of_placeholders, *rest, **kwargs):
        guards_code = [c for c in guards_code if not _str_guard_text_is_lossy(c)]
        texts = ["L" + pytree.keystr(p) for p in paths_of_placeholders]
        if not any(a != b and b.startswith(a) for a in texts for b in texts):
            return orig(guards_code, paths_of_placeholders, *rest, **kwargs)
        tokens = [f"__trident_input_{i}__" for i in range(len(texts))]
        code = list(guards_code)
        for i in sorted(range(len(texts)), key=lambda i: -len(texts[i])):
            code = [c.replace(texts[i], f"L['{tokens[i]}']") for c in code]
        paths = [(pytree.MappingKey(t),) for t in tokens]
        return orig(code, paths, *rest, **kwargs)

    _convert_guards_code_to_fn._trident_fix = True
    _unlift._convert_guards_code_to_fn = _convert_guards_code_to_fn
    return True


def _guard_free_pow(a, b):
    """torch 2.13's body of torch._refs.pow, given to 2.11's function (_install_float_pow_fix): its
    shortcuts for exponents 1, 2 and 0.5 are taken only where the number is statically one of them.
    Names resolve in torch._refs' globals (the function keeps its own)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if not (isinstance(a, TensorLikeType) or isinstance(b, TensorLikeType)):  # noqa: F821
        raise AssertionError("at least one of a or b must be TensorLikeType")
    if isinstance(b, Number):  # noqa: F821
        if statically_known_true(b == 1.0):
            return a.clone()
        elif statically_known_true(b == 2.0):
            return a * a
        elif statically_known_true(b == 0.5):
            return torch.sqrt(a)
    elif isinstance(a, Number):  # noqa: F821
        if statically_known_true(a == 1.0):
            return torch.fill(b, True)
        if statically_known_true(a == 2.0) and (utils.is_float_dtype(b.dtype)  # noqa: F821
                                                or utils.is_complex_dtype(b.dtype)):  # noqa: F821
            return torch.exp2(b)
    return prims.pow(a, b)  # noqa: F821


def _install_float_pow_fix() -> bool:
    """torch 2.11's shape function for `tensor.pow(number)` (torch._refs.pow, which fake tensors
    run) asks `b == 1.0`, `b == 2.0`, `b == 0.5` of the exponent: for a run-time float (an unbacked
    SymFloat, float_symbols.py) that is a guard on a data-dependent value and the capture fails, so
    every new exponent compiled a specialization of its own. 2.13 asks statically_known_true; its
    body replaces 2.11's (the same function object, so every registration that holds it sees it).
    The graph records aten.pow either way: the shortcuts only shape the fake result."""
    try:
        import torch._refs as refs
        inner = inspect.unwrap(refs.pow)
    except (ImportError, AttributeError, ValueError):
        return False
    code = inner.__code__
    if "statically_known_true" in code.co_names or "statically_known_true" in code.co_varnames:
        return True  # 2.13 and later: nothing to do (this also marks the body as ours once given)
    if code.co_freevars or code.co_argcount != 2:
        return False
    inner.__code__ = _guard_free_pow.__code__
    return True


def _install_unbacked_constraints_fix() -> bool:
    """torch 2.11's export hands every runtime assert to its constraint solver, which can only name
    symbols that inputs define: one on an unbacked symbol (`zuf0 >= 0`, which `alpha ** 2` asserts
    of a run-time float) failed the capture with "Unknown symbol zuf0 created by constraints
    solver". The solver has nothing to suggest for such a symbol; it is left out of the solver
    here and stays a runtime assert of the program, as it does on 2.13 (which proves it statically
    before the solver sees it)."""
    if TORCH_VERSION >= (2, 13):
        return True
    try:
        from torch.fx.experimental.symbolic_shapes import DimConstraints
        orig = DimConstraints.add
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_fix", False):
        return True

    def add(self, expr):
        known = getattr(getattr(self, "_dcp", None), "symbol_to_source", None)
        if known is not None and any(not known.get(s) for s in getattr(expr, "free_symbols", ())):
            return False  # not trivial; nothing the solver could say about it
        return orig(self, expr)

    add._trident_fix = True
    DimConstraints.add = add
    return True


def _symint_positions(key):
    """For an indexing key (a Dynamo VariableTracker) of basic indexing (ints, slices, None; no
    Ellipsis) with symbolic ints among its items (`cache[:, :, pos]`, `pos` kept symbolic): the key
    with each symbolic int replaced by a full slice, and the dims of that key's result that the
    symbolic ints then select from. None for any other key."""
    from torch._dynamo.variables import ConstantVariable, SliceVariable, SymNodeVariable, TupleVariable
    items = list(key.items) if isinstance(key, TupleVariable) else [key]
    out, selects, dim = [], [], 0
    for item in items:
        if isinstance(item, SymNodeVariable) and item.python_type() is int:
            selects.append((dim, item))
            out.append(None)  # a full slice, made below
            dim += 1
        elif isinstance(item, SliceVariable):
            out.append(item)
            dim += 1
        elif isinstance(item, ConstantVariable) and (item.value is None or type(item.value) is int):
            out.append(item)
            dim += item.value is None
        else:
            return None
    return (out, selects) if selects else None


def _symint_view(self, tx, key):
    """`self[key]` for a key _symint_positions accepts, traced as indexing with full slices in place
    of the symbolic ints, then `select(dim, pos)` for each, last dim first: Tensor.__getitem__ and
    __setitem__ convert an index with `__index__()`, which specializes `pos` to its value (one
    specialization per decode position), while select takes a SymInt. None for other keys."""
    found = _symint_positions(key)
    if found is None:
        return None
    from torch._dynamo.variables import ConstantVariable, SliceVariable, TupleVariable
    items, selects = found
    # SliceVariable([None]): `:`. (torch 2.11's VariableTracker.build cannot make a slice.)
    items = [SliceVariable([ConstantVariable.create(None)]) if it is None else it for it in items]
    view = self.call_method(tx, "__getitem__", [TupleVariable(items)], {})
    for dim, pos in reversed(selects):
        view = view.call_method(tx, "select", [ConstantVariable.create(dim), pos], {})
    return view


def _install_symint_indexing() -> bool:
    """Symbolic ints as indices during trident's capture (_symint_view): `x[..., pos]` reads and
    `x[..., pos] = value` writes, the latter as an in-place `copy_` (a tensor value) or `fill_` (a
    number) into the view, as basic indexing assigns. A value of more dimensions than the view
    (setitem drops its leading 1s) keeps Dynamo's own path."""
    try:
        from torch._dynamo.variables import BuiltinVariable, ConstantVariable
        from torch._dynamo.variables.tensor import TensorVariable
    except ImportError:
        return False
    get, put = TensorVariable.method___getitem__, TensorVariable.method___setitem__
    builtin_call = BuiltinVariable.call_function
    if getattr(put, "_trident_fix", False):
        return True

    def call_function(self, tx, args, kwargs):  # `x[key]` reaches Dynamo as operator.getitem(x, key)
        if (getattr(_capture, "active", False) and self.fn is operator.getitem and len(args) == 2 and not kwargs
                and isinstance(args[0], TensorVariable)):
            view = _symint_view(args[0], tx, args[1])
            if view is not None:
                return view
        return builtin_call(self, tx, args, kwargs)

    def method___getitem__(self, tx, *args, **kwargs):
        if getattr(_capture, "active", False) and len(args) == 1 and not kwargs:
            view = _symint_view(self, tx, args[0])
            if view is not None:
                return view
        return get(self, tx, *args, **kwargs)

    def method___setitem__(self, tx, key, value):
        if not getattr(_capture, "active", False) or _symint_positions(key) is None:
            return put(self, tx, key, value)
        if isinstance(value, TensorVariable):
            fv = value.as_proxy().node.meta.get("example_value")
            view = _symint_view(self, tx, key)
            vv = view.as_proxy().node.meta.get("example_value")
            if fv is None or vv is None or fv.dim() > vv.dim():
                return put(self, tx, key, value)
            view.call_method(tx, "copy_", [value], {})
        else:
            _symint_view(self, tx, key).call_method(tx, "fill_", [value], {})
        return ConstantVariable.create(None)

    method___setitem__._trident_fix = True
    TensorVariable.method___getitem__ = method___getitem__
    TensorVariable.method___setitem__ = method___setitem__
    BuiltinVariable.call_function = call_function
    return True


def _install_triton_launch_options() -> bool:
    """Two launches Triton runs that Dynamo's capture of user kernels refuses, made capturable
    during trident's capture (the backend's graphs keep Dynamo's own behaviour):
      - `kernel[grid](..., num_ctas=2)`: Dynamo raises "Passing num_ctas directly ... is not
        supported", though it moves num_warps and num_stages into a one-config autotuner itself;
        num_ctas goes the same way (a kernel already under @triton.autotune keeps the refusal, as
        Triton itself refuses the combination);
      - a constexpr the call omits because its parameter has a default: a grid lambda reading
        META["BLOCK"] failed on a missing key; the default is passed as Triton binds it."""
    try:
        from torch._dynamo.variables import ConstantVariable
        from torch._dynamo.variables.functions import DynamoTritonHOPifier
        from triton import Config, JITFunction
        from triton.runtime.autotuner import Autotuner, autotune
    except ImportError:
        return False
    orig = DynamoTritonHOPifier.call_triton_kernel
    if getattr(orig, "_trident_fix", False):
        return True

    def call_triton_kernel(self, variable, args, kwargs, tx):
        if not getattr(_capture, "active", False):
            return orig(self, variable, args, kwargs, tx)
        jit = variable.kernel
        while not isinstance(jit, JITFunction) and hasattr(jit, "fn"):
            jit = jit.fn
        if isinstance(jit, JITFunction):
            given = set(jit.arg_names[:len(args)]) | set(kwargs)
            for p in jit.params:
                if p.is_constexpr and p.name not in given and p.default is not inspect.Parameter.empty:
                    kwargs = {**kwargs, p.name: ConstantVariable.create(p.default)}
        if "num_ctas" in kwargs and not isinstance(variable.kernel, Autotuner):
            kwargs = dict(kwargs)
            config = Config({}, num_ctas=self.get_value(kwargs.pop("num_ctas")))
            tuned = autotune(configs=[config], key=[])(variable.kernel)
            if hasattr(self, "recreate_variable"):  # torch 2.13
                variable = self.recreate_variable(variable, kernel=tuned, kernel_idx=None, grid=variable.grid)
            else:  # torch 2.11 makes its own one-config autotuners this way
                variable = type(variable)(kernel=tuned, kernel_idx=None, grid=variable.grid)
        return orig(self, variable, args, kwargs, tx)

    call_triton_kernel._trident_fix = True
    DynamoTritonHOPifier.call_triton_kernel = call_triton_kernel
    return True


# A branch on a tensor's value (`if x.sum() > 0:`, `if mask.all():`) is where strict export stops
# ("Data-dependent branching"). During trident's capture the branch is taken as this call takes it,
# and the trace records the condition it depended on as `torch._assert_async(cond, BRANCH_MARK
# ...)`, which the lowering makes the program's first check (data_values.py: `expect`): a later
# call whose condition goes the other way runs another specialization, captured for that way. The
# condition's value comes from running the ops it depends on, on the call's own tensors
# (Dynamo's get_real_value), which is this call's value only where nothing traced so far wrote a
# tensor in place (the write has not happened at capture, and running it would change the call's
# state) or calls a module: otherwise the branch stays unsupported.
BRANCH_MARK = "trident: the program took this branch at "


_OPERATOR_WRITES = {operator.setitem, operator.delitem} | {
    getattr(operator, "i" + op) for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or",
                                          "xor", "lshift", "rshift", "matmul")}


def _writes(n) -> bool:
    """Whether traced node `n` writes a tensor in place or calls a module (a Triton kernel launch, a
    higher-order op, is not counted: its writes are the launch's own)."""
    if n.op == "call_module":
        return True
    if n.op == "call_function" and getattr(n.target, "__module__", None) == "_operator":
        return n.target in _OPERATOR_WRITES  # operator.not_, operator.and_: no tensor written
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    if n.op in ("call_method", "call_function") and name.endswith("_") and not name.startswith("_"):
        return True
    schema = getattr(n.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _writes_or_calls_modules(graph) -> bool:
    """Whether the fx graph traced so far writes a tensor in place or calls a module."""
    return any(_writes(n) for n in graph.nodes)


def _take_tensor_branch(tx, value, inst):
    """The Python bool this call's tensor condition has, with the check recorded in the trace; None
    when it cannot be taken here (the caller keeps Dynamo's refusal)."""
    from torch._dynamo.utils import get_real_value
    from torch._dynamo.variables import ConstantVariable
    try:
        node = value.as_proxy().node
        fake = node.meta.get("example_value")
        if fake is None or fake.numel() != 1 or _writes_or_calls_modules(tx.output.graph):
            return None
        truth = bool(get_real_value(node, tx.output))
    except Exception:  # noqa: BLE001  (any failure: Dynamo's own refusal follows)
        return None
    pred = value if fake.dtype == torch.bool else value.call_method(tx, "ne", [ConstantVariable.create(0)], {})
    if not truth:
        pred = pred.call_method(tx, "logical_not", [], {})
    line = getattr(getattr(inst, "positions", None), "lineno", None) or getattr(tx, "lineno", "?")
    where = f"{tx.f_code.co_filename}:{line}"
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable
    TorchInGraphFunctionVariable(torch._assert_async).call_function(
        tx, [pred, ConstantVariable.create(BRANCH_MARK + where)], {})
    return truth


_COMPARISONS = (operator.gt, operator.lt, operator.ge, operator.le, operator.eq, operator.ne)


def _data_condition(tx, value):
    """The tensor a branch on `value` reads: `value` itself, or for a comparison of a number read from
    a tensor (`if n.item() > 0:`, `int(n.item())` of an integer tensor, an element of `.tolist()`
    against a constant) the same comparison made on that tensor; None for anything else (Dynamo's
    own handling follows)."""
    from torch._dynamo.variables import SymNodeVariable
    from torch._dynamo.variables.tensor import TensorVariable
    if isinstance(value, TensorVariable):
        return value
    if not isinstance(value, SymNodeVariable):
        return None
    try:
        node = value.as_proxy().node
        if node.op != "call_function" or node.target not in _COMPARISONS or len(node.args) != 2 or node.kwargs:
            return None

        def is_item(x):
            return isinstance(x, torch.fx.Node) and ((x.op == "call_method" and x.target == "item") or x.target in (
                torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default))

        def operand(x):
            if isinstance(x, torch.fx.Node):
                # int(t.item()) of an integer tensor is the item itself (torch.sym_int in the trace)
                if x.op == "call_function" and x.target in (torch.sym_int, int) and len(x.args) == 1 \
                        and is_item(x.args[0]):
                    fake = x.args[0].args[0].meta.get("example_value")
                    if fake is None or fake.dtype.is_floating_point or fake.dtype.is_complex:
                        return None, False
                    x = x.args[0]
                if is_item(x):
                    return torch.fx.Proxy(x.args[0], tx.output.current_tracer), True
                return None, False
            return (x, False) if isinstance(x, (bool, int, float)) else (None, False)

        (a, ta), (b, tb) = operand(node.args[0]), operand(node.args[1])
        if a is None or b is None or not (ta or tb):
            return None
        from torch._dynamo.variables.builder import wrap_fx_proxy
        return wrap_fx_proxy(tx, tx.output.create_proxy("call_function", node.target, (a, b), {}))
    except Exception:  # noqa: BLE001  (Dynamo's own handling follows)
        return None


# A branch on a data-dependent value that cannot be taken at capture (its condition depends on a
# tensor written in place earlier, as Liger-Kernel's fused MoE's `if num_m_tiles > 0:` after a
# decoder layer's cache write; or its ops cannot run at capture) is still one program when all its
# body does is launch Triton kernels: a launch region. Its condition is recorded as
# `torch._assert_async(pred, WHEN_MARK + "k at file:line")` where the `if` stands, the body is traced
# as if taken, and each kernel launch in it is recorded as under k (and any enclosing regions) by
# its launch's constant-arguments index, which every later graph of the capture keeps
# (launch_regions; node metadata is not kept: torch 2.11's export replaces a node's `custom` under a
# `torch.no_grad()` the function enters); the lowering reads the condition there (`$c = item %pred`) and
# multiplies the launch's first grid dimension by it: a grid of 0 launches nothing (data_values.py,
# triton_lower.py). Only an `if` without `else` qualifies whose body leaves the stack and every local
# the code after it reads as they were, makes no other side effect Dynamo tracks, and writes nothing
# but through kernel launches (its other ops, views and arithmetic, run either way; a local it
# assigns that the code after the `if` does not read is its own); anything else refuses the capture,
# and the call runs split at the `if` as before.
WHEN_MARK = "trident: launches under the condition "
_UNCONDITIONAL = ("JUMP_FORWARD", "JUMP_ABSOLUTE", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
                  "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE")
_region_ids = itertools.count()
_closed_regions: dict[int, int] = {}  # regions whose body _close_launch_region checked -> their launches
# a launch's constant_args_idx -> (its constant arguments, its regions). torch's kernel side table
# restarts its indices with each capture: an entry counts only while the table still holds the same
# constant arguments at that index (held here, so no other object takes their identity).
_regions_of_launch: dict[int, tuple[dict, tuple[int, ...]]] = {}


def region_launch_count(ident: int) -> int | None:
    """How many Triton launches launch region `ident` holds, or None when its end was not where the
    capture checked its body (WHEN_MARK). The lowering finds each of them (launch_regions) or refuses."""
    return _closed_regions.get(ident)


def launch_regions(constant_args_idx: int) -> tuple[int, ...]:
    """The launch regions, outermost first, a Triton launch stands in (by the constant-arguments
    index torch's kernel side table gave that launch in this capture)."""
    held, regions = _regions_of_launch.get(constant_args_idx, (None, ()))
    return regions if held is not None and held is _launch_constants(constant_args_idx) else ()


def _launch_constants(constant_args_idx: int):
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    try:
        return kernel_side_table.get_constant_args(constant_args_idx)
    except (AssertionError, KeyError):
        return None


@dataclasses.dataclass
class _LaunchRegion:
    ident: int
    where: str
    target: object            # the instruction the `if` jumps to: the body ends there
    start: object             # the last graph node before the body: the condition's marker
    stack_depth: int
    locals_: dict
    shapes: dict              # per local, the identities of a container's items
    side_effects: tuple


def _container_shape(v):
    from torch._dynamo.variables import ConstDictVariable
    from torch._dynamo.variables.lists import BaseListVariable
    if not isinstance(v, (BaseListVariable, ConstDictVariable)):
        return None
    items = v.items
    if isinstance(items, dict):
        return tuple((k, id(x)) for k, x in items.items())
    if isinstance(items, (list, tuple)):
        return tuple(id(x) for x in items)
    return None


def _side_effects_state(tx) -> tuple:
    """What Dynamo has recorded as changed in objects that existed before the trace: the sources it
    mutated, and per object with attribute changes, its attributes' values (objects the trace made
    itself, a launch's grid function, are not the caller's: left out)."""
    try:
        from torch._dynamo.variables.base import AttributeMutationNew
    except ImportError:  # elsewhere in another torch: every object then counts as the caller's
        AttributeMutationNew = ()
    se = tx.output.side_effects
    attrs = getattr(se, "store_attr_mutations", {})
    return (frozenset(getattr(se, "mutated_sources", ())),
            {id(k): tuple((a, id(x)) for a, x in d.items()) for k, d in attrs.items()
             if not isinstance(getattr(k, "mutation_type", None), AttributeMutationNew)})


def _refuse_region(region, why: str):
    from torch._dynamo.exc import UserError, UserErrorType
    raise UserError(UserErrorType.DYNAMIC_CONTROL_FLOW,
                    f"{region.where}: a branch on data-dependent values whose body cannot run as launches under "
                    f"its condition ({why})")


def _unbacked_condition(value) -> bool:
    """Whether `value` is a Python bool or int of the trace that only data decides (every symbol in
    it is defined by an `.item()` or a data-dependent size)."""
    from torch._dynamo.variables import SymNodeVariable
    if not isinstance(value, SymNodeVariable):
        return False
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    sym = value.as_proxy().node.meta.get("example_value")
    if not isinstance(sym, (torch.SymBool, torch.SymInt)):
        return False
    expr = sym.node.expr
    return bool(expr.free_symbols) and set(free_unbacked_symbols(expr)) == set(expr.free_symbols)


def _open_launch_region(tx, cond, value, inst, opname: str):
    """Starts a launch region for this `if` (see WHEN_MARK): the truth that enters its body, or None
    when the jump is not such an `if` (a loop, an `else`). `cond`: the tensor the condition reads
    (_data_condition), or None for a condition on data-dependent sizes alone (`value`, made a tensor
    of one element here: `if tiles.shape[0] > 0:` after `tiles = torch.empty(n.item())`)."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable
    try:
        if "BACKWARD" in opname:
            return None
        target = inst.target
        at = tx.indexof[target]
        if at <= tx.indexof[inst] or tx.instructions[at - 1].opname in _UNCONDITIONAL:
            return None
        if cond is None:
            if not _unbacked_condition(value):
                return None
            cond = TorchInGraphFunctionVariable(torch.scalar_tensor).call_function(
                tx, [value], {"dtype": ConstantVariable.create(torch.bool)})
        fake = cond.as_proxy().node.meta.get("example_value")
        if fake is None or fake.numel() != 1:
            return None
        body_truth = "IF_TRUE" not in opname  # the body is the fall-through
        pred = cond if fake.dtype == torch.bool else cond.call_method(tx, "ne", [ConstantVariable.create(0)], {})
        if not body_truth:
            pred = pred.call_method(tx, "logical_not", [], {})
        line = getattr(getattr(inst, "positions", None), "lineno", None) or getattr(tx, "lineno", "?")
        ident = next(_region_ids)
        where = f"{tx.f_code.co_filename}:{line}"
        TorchInGraphFunctionVariable(torch._assert_async).call_function(
            tx, [pred, ConstantVariable.create(f"{WHEN_MARK}{ident} at {where}")], {})
    except Exception:  # noqa: BLE001  (any failure: Dynamo's own refusal follows)
        return None
    graph = tx.output.current_tracer.graph
    locals_ = dict(tx.symbolic_locals)
    tx.__dict__.setdefault("_trident_regions", []).append(_LaunchRegion(
        ident, where, target, graph._root.prev, len(tx.stack) - 1, locals_,
        {k: _container_shape(v) for k, v in locals_.items()}, _side_effects_state(tx)))
    return body_truth


def _close_launch_region(tx, region):
    """Checks what the body did (see WHEN_MARK) and marks its kernel launches with the region."""
    if len(tx.stack) != region.stack_depth:
        _refuse_region(region, "it leaves a value on the stack")
    names = set(tx.symbolic_locals) | set(region.locals_)
    try:  # the locals the code after the `if` reads; a temporary of the body is its own
        from torch._dynamo.bytecode_analysis import livevars_analysis
        names &= set(livevars_analysis(tx.instructions, region.target))
    except Exception:  # noqa: BLE001  (without the analysis: every local)
        pass
    changed = sorted(k for k in names if tx.symbolic_locals.get(k) is not region.locals_.get(k)
                     or _container_shape(tx.symbolic_locals.get(k)) != region.shapes.get(k))
    if changed:
        _refuse_region(region, f"it assigns {', '.join(changed)}, which the code after it reads")
    if _side_effects_state(tx) != region.side_effects:
        _refuse_region(region, "it changes an object's attribute or a container")
    node = region.start.next
    launches = []
    while node.op != "root":
        if node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation:
            launches.append(node)
        elif _writes(node):
            _refuse_region(region, f"it writes a tensor in place ({node.format_node()[:80]})")
        node = node.next
    for n in launches:  # inner regions close first: the outer one goes in front
        idx = n.kwargs["constant_args_idx"]
        held = _launch_constants(idx)
        if held is None:
            _refuse_region(region, "trident cannot find its kernel launch in torch's kernel side table")
        _regions_of_launch[idx] = (held, (region.ident,) + launch_regions(idx))
    # the lowering takes a marker only once its region was checked and its launches marked
    _closed_regions[region.ident] = len(launches)


def _install_tensor_branches() -> bool:
    try:
        from torch._dynamo import symbolic_convert as sc
        from torch._dynamo.variables import ConstantVariable
    except ImportError:
        return False
    base = sc.InstructionTranslatorBase
    if getattr(base, "_trident_branches", False):
        return True
    classes, todo = [], [base]
    while todo:
        c = todo.pop()
        classes.append(c)
        todo.extend(c.__subclasses__())
    for cls in classes:
        for name in ("POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE",
                     "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE"):
            orig = cls.__dict__.get(name)
            if orig is None:
                continue

            def jump(self, inst, _orig=orig, _name=name):
                if getattr(_capture, "active", False) and self.stack:
                    cond = _data_condition(self, self.stack[-1])
                    truth = _take_tensor_branch(self, cond, inst) if cond is not None else None
                    if truth is None:
                        truth = _open_launch_region(self, cond, self.stack[-1], inst, _name)
                    if truth is not None:
                        self.stack[-1] = ConstantVariable.create(truth)
                return _orig(self, inst)

            setattr(cls, name, jump)
    step = base.__dict__["step"]

    def step_closing_regions(self, _step=step):
        regions = self.__dict__.get("_trident_regions")
        if regions:
            ip = self.instruction_pointer
            while regions and ip is not None and self.instructions[ip] is regions[-1].target:
                _close_launch_region(self, regions.pop())
            if regions and ip is None:
                _refuse_region(regions[-1], "the function returned inside it")
        going = _step(self)
        regions = self.__dict__.get("_trident_regions")
        if regions and (not going or self.instruction_pointer is None):
            _refuse_region(regions[-1], "the function returned inside it")
        return going

    base.step = step_closing_regions
    # Dynamo dispatches through a per-class table of the handlers, made when the class was defined.
    for cls in classes:
        table = cls.__dict__.get("dispatch_table")
        for name, op in dis.opmap.items():
            if table is not None and "JUMP" in name and "IF" in name and hasattr(cls, name):
                table[op] = getattr(cls, name)
    base._trident_branches = True
    return True


# Strict export's pre-dispatch trace runs Dynamo's graph, in which an autocast region of the function
# (`with torch.autocast(...)`, a model's `autocast(enabled=False)` around its rotary embedding) is a
# call of torch.amp._enter_autocast and one of _exit_autocast. PreDispatchTorchFunctionMode records
# both as nodes but enters nothing (torch/fx/experimental/proxy_tensor.py: "the python APIs run so we
# don't have to run them again", true of non-strict export only), so the ops in the region get the
# dtypes of the autocast state around the call: under a caller's autocast, a float32 region's result
# is bfloat16 there, export checks that dtype where `.to()` reads it, and run_decompositions, whose
# wrap_with_autocast does enter the region, fails that check; without one, a bfloat16 region's
# `.float()` looks like a no-op and its result is taken for its input. During trident's capture the
# region is entered for real beside its enter node, and left beside its exit node. A call from
# non-strict export, where the user's own torch.autocast.__enter__ has already set the state, and a
# region that changes nothing go to the mode as before. torch 2.11 to 2.13.
@dataclasses.dataclass
class _EnteredRegion:
    node: object                    # the enter node the mode recorded
    region: torch.amp.autocast      # entered for real; exited with the exit node


def _install_autocast_regions() -> bool:
    try:
        from torch.fx.experimental.proxy_tensor import PreDispatchTorchFunctionMode
        from torch.amp import autocast_mode
        orig = PreDispatchTorchFunctionMode.__torch_function__
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_regions", False):
        return True

    def already(device, dtype, enabled) -> bool:
        return torch.is_autocast_enabled(device) == bool(enabled) and (
            not enabled or dtype is None or torch.get_autocast_dtype(device) == dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(_capture, "active", False):
            if func is autocast_mode._enter_autocast and len(args) >= 3 and not already(*args[:3]):
                node = orig(self, func, types, args, kwargs)  # the region's enter node, as before
                region = torch.amp.autocast(*args)
                region.__enter__()  # the mode is off inside its own handler: this records nothing
                return _EnteredRegion(node, region)
            if func is autocast_mode._exit_autocast and args and isinstance(args[0], _EnteredRegion):
                args[0].region.__exit__(None, None, None)
                return orig(self, func, types, (args[0].node,), kwargs)
        return orig(self, func, types, args, kwargs)

    __torch_function__._trident_regions = True
    PreDispatchTorchFunctionMode.__torch_function__ = __torch_function__
    return True


_install_lock = threading.Lock()


@contextlib.contextmanager
def capturing():
    """What trident changes in torch while it captures (export, or the backend's AOT trace), and
    only then: no real-value copies of lifted tensors, scalar-correct Triton mutation analysis,
    symbolic int indices, Triton launches with num_ctas or defaulted constexprs, its mutation
    analysis kept per kernel and arguments, export's guard code where input paths share a prefix
    (installed for good: it changes only code that did not compile), (during
    export_program) a record of the graphs Dynamo installs as globals, libraries' eager
    branches where they ask whether they are traced (library_traces.py), and autocast regions
    entered while export's pre-dispatch trace runs them (_install_autocast_regions)."""
    from .library_traces import eager_decisions
    with _install_lock:
        _install_real_value_alias()
        _install_ttir_scalar_fix()
        _install_symint_indexing()
        _install_triton_launch_options()
        _install_descriptor_writes()
        _install_mutation_cache()
        _install_tensor_branches()
        _install_guard_paths_fix()
        _install_float_pow_fix()
        _install_unbacked_constraints_fix()
        _install_global_recorder()
        _install_autocast_regions()
    prev = getattr(_capture, "active", False)
    _capture.active = True
    try:
        with eager_decisions():
            yield
    finally:
        _capture.active = prev


def forget_example_inputs(ep) -> None:
    """An ExportedProgram keeps the real tensors it was exported with (torch 2.11+: _example_inputs).
    trident keeps programs for later re-lowering and must not keep a call's tensors (KV caches)
    alive with them; lowering reads only the graph, signature, state_dict and constants."""
    if hasattr(ep, "_example_inputs"):
        ep._example_inputs = None


def dim_auto():
    """The export marker for "symbolic unless the trace specializes it"."""
    return torch.export.Dim.AUTO
