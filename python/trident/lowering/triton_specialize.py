"""Reproduce Triton 3.6 JIT specialization and compile kernel variants without a GPU.

Triton's ``JITFunction.run`` turns every call into a specialization key (one
``(type, key)`` tuple per parameter, built by ``native_specialize_impl`` and the
binder that ``create_function_from_signature`` generates), then into the
``signature``/``constexprs``/``attrs`` triple given to ``ASTSource``
(``JITFunction._pack_args``).  This module rebuilds that key from a
description of the call site (:class:`ArgSpec`), so a native dispatcher can
decide which compiled variant a call needs, which runtime facts it must guard
(:class:`SpecGuard`) and which ``void* params[]`` layout the cubin expects
(:class:`KernelParam`), all without a GPU or a Triton driver.

Only the NVIDIA launch ABI is modelled; tuple and tensor-descriptor arguments
are rejected rather than guessed at.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import time
import types

import triton
import triton.language as tl
from triton import knobs
from triton._utils import canonicalize_dtype, find_paths_if, get_iterable_path
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource, make_backend
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITCallable, JITFunction
from triton.tools.tensor_descriptor import TensorDescriptor

DEFAULT_TARGET = GPUTarget("cuda", 90, 32)

ARG_KINDS = ("tensor", "tensordesc", "int", "float", "bool", "none", "constexpr")

# specialize.cc classifies a Python int by the first range that holds it.
_INT_RANGES = (("i32", -2**31, 2**31), ("i64", -2**63, 2**63), ("u64", 0, 2**64))

# Signature type -> KernelParam.ctype; bools travel as one unsigned byte.
_SCALAR_CTYPES = {
    "i1": "i8", "u1": "u8", "i8": "i8", "u8": "u8", "i16": "i16", "u16": "u16",
    "i32": "i32", "u32": "u32", "i64": "i64", "u64": "u64",
    "fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64",
}

SCRATCH_PARAMS = ("global_scratch", "profile_scratch")


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One kernel parameter as seen at a call site.

    ``kind`` is what the caller passes: a tensor (``dtype`` and ``aligned16``
    matter), a host-side tensor descriptor (``tensordesc``, triton.tools.tensor_descriptor:
    its base's ``dtype`` and its ``block_shape`` matter), a Python ``int``/``float``/``bool``
    (``value`` matters), ``None``, or a compile-time value (``constexpr``: a ``tl.constexpr``
    instance, a JITFunction, or any value bound to a ``tl.constexpr`` parameter).
    """
    name: str
    kind: str
    dtype: "torch.dtype | None" = None  # noqa: F821 (string annotation, torch only needed by callers)
    aligned16: bool = True
    value: object = None  # for an int, None: known only at run time (data-dependent), see below
    block_shape: tuple = ()  # tensordesc: the block each load or store moves

    def __post_init__(self):
        if self.kind not in ARG_KINDS:
            raise ValueError(f"ArgSpec {self.name!r}: kind {self.kind!r} is not one of {ARG_KINDS}")
        if self.kind in ("tensor", "tensordesc") and self.dtype is None:
            raise ValueError(f"ArgSpec {self.name!r}: a {self.kind} needs a dtype")
        if self.kind == "tensordesc" and not self.block_shape:
            raise ValueError(f"ArgSpec {self.name!r}: a tensordesc needs its block shape")


@dataclasses.dataclass
class KernelParam:
    """One entry of the cubin's runtime parameter list, in launch order."""
    name: str
    ctype: str
    arg_index: int


@dataclasses.dataclass
class SpecGuard:
    """A fact a call must satisfy to reuse a compiled variant (same cache key).

    checks: ``align16``/``not_align16`` (tensor data_ptr % 16), ``eq1`` (int == 1),
    ``div16`` (int % 16 == 0), ``not_div16_not1`` (int % 16 != 0 and != 1),
    ``not1`` (int != 1; only under do_not_specialize_on_alignment, where 16-divisibility
    is not part of the key), ``range_i32``/``range_i64``/``range_u64`` (Triton classifies
    the int as exactly that type: i64 means outside int32, u64 means outside int64),
    ``dtype`` (tensors: ``value`` is the torch dtype; Python float/bool scalars: ``value``
    is "fp32"/"u1", i.e. the argument must be a float/bool), ``eq`` (same Python type and
    ``==``; the key holds ``str(value)``, so ``True`` and ``1`` differ).
    """
    name: str
    check: str
    value: object = None


@dataclasses.dataclass(frozen=True)
class CompiledTritonKernel:
    """A compiled variant plus everything a native launcher needs to run it."""
    name: str
    cubin: bytes
    num_warps: int
    num_ctas: int
    shared: int
    global_scratch_size: int
    global_scratch_align: int
    profile_scratch_size: int
    profile_scratch_align: int
    launch_pdl: bool
    launch_cooperative_grid: bool
    params: list[KernelParam]
    signature: dict[str, str]
    constexprs: dict
    attrs: dict
    guards: list[SpecGuard]
    cache_key: str
    options: dict
    # Per tensor-descriptor parameter, in order, how the kernel lowered it to TMA (swizzle,
    # elem_size, elem_type, block_size, fp4_padded: what the launch encodes its CUtensorMap from),
    # or None where it did not; empty for a kernel without descriptors.
    tensordesc_meta: list = dataclasses.field(default_factory=list)


def argspec_from_value(name: str, value) -> ArgSpec:
    """Describe a concrete Python value the way Triton's binder would see it.

    Anything with ``.data_ptr()`` and ``.dtype`` is a tensor; bool is tested
    before int because ``bool`` subclasses ``int``; other objects are constexprs.
    """
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return ArgSpec(name, "tensor", dtype=value.dtype, aligned16=value.data_ptr() % 16 == 0)
    if isinstance(value, TensorDescriptor):
        return ArgSpec(name, "tensordesc", dtype=value.base.dtype, block_shape=tuple(value.block_shape))
    if value is None:
        return ArgSpec(name, "none")
    for kind, typ in (("bool", bool), ("int", int), ("float", float)):
        if isinstance(value, typ):
            return ArgSpec(name, kind, value=value)
    return ArgSpec(name, "constexpr", value=value)


def _int_type(value: int) -> str:
    for ty, lo, hi in _INT_RANGES:
        if lo <= value < hi:
            return ty
    raise OverflowError(f"integer {value} is too large to specialize (Triton accepts up to 2**64-1)")


def _native_specialization(kp, spec: ArgSpec, specialize: bool):
    """Mirror ``native_specialize_impl`` (specialize.cc) for one non-constexpr parameter."""
    align = not kp.do_not_specialize_on_alignment
    if spec.kind == "tensordesc":
        # specialize.cc: the base's element type and the block shape, no key (nothing else of the
        # descriptor is specialized on; its shape, strides and padding are run-time values)
        try:
            elem = canonicalize_dtype(spec.dtype)
        except KeyError:
            raise TypeError(f"{spec.name}: Triton has no type for tensor dtype {spec.dtype}") from None
        return f"tensordesc<{elem}[{', '.join(str(int(b)) for b in spec.block_shape)}]>", None
    if spec.kind == "tensor":
        try:
            elem = canonicalize_dtype(spec.dtype)
        except KeyError:
            raise TypeError(f"{spec.name}: Triton has no type for tensor dtype {spec.dtype}") from None
        ty = ("*k" if kp.is_const else "*") + elem
        return ty, (("D" if spec.aligned16 and align else "") if specialize else None)
    if spec.kind == "int":
        if spec.value is None:
            # A data-dependent int (a `nonzero`'s size, an `.item()`): no value to specialize on
            # when compiling. Compiled as Triton compiles a value that is neither 1 nor a multiple
            # of 16 (i32, no divisibility), which is correct for every value in i32's range; the
            # caller checks that range at run time.
            return "i32", ("" if specialize else None)
        if spec.value == 1 and specialize:
            return "constexpr", 1
        ty = _int_type(spec.value)
        return ty, (("D" if spec.value % 16 == 0 and align else "") if specialize else None)
    if spec.kind == "bool":
        return "u1", None
    if spec.kind == "float":
        return "fp32", None
    if spec.kind == "none":
        return "constexpr", None
    value = spec.value
    if isinstance(value, JITCallable):
        return "constexpr", value.cache_key
    # A plain value only reaches a non-constexpr parameter as a tl.constexpr instance.
    return "constexpr", value if isinstance(value, tl.constexpr) else tl.constexpr(value)


def _param_specialization(kp, spec: ArgSpec):
    """Return the ``(type, key)`` tuple Triton's generated binder builds for ``kp``.

    Also returns the value Triton binds (what lands in ``constexprs``).
    """
    if kp.is_constexpr:
        if spec.kind in ("tensor", "tensordesc"):
            raise TypeError(f"{kp.name}: a {spec.kind} cannot be bound to a tl.constexpr parameter")
        if spec.kind == "int" and spec.value is None:
            raise TypeError(f"{kp.name}: a value known only at run time (data-dependent) cannot be bound "
                            "to a tl.constexpr parameter, whose value the kernel is compiled for")
        return ("constexpr", spec.value), spec.value
    bound = None if spec.kind in ("tensor", "tensordesc", "none") else spec.value
    if spec.kind == "constexpr" and not isinstance(bound, (tl.constexpr, JITCallable)):
        bound = tl.constexpr(bound)
    specialize = not kp.do_not_specialize
    ann = kp.annotation_type
    if not ann:
        return _native_specialization(kp, spec, specialize), bound
    # jit.py never value-specializes float or u1 annotations.
    if ann == "u1" or ann[:2] in ("fp", "bf"):
        specialize = False
    if not specialize:
        return (ann, None), bound
    # The annotation replaces the type; the key stays the value's (so an int 1 gives (ann, 1)).
    return (ann, ) + _native_specialization(kp, spec, True)[1:], bound


def _guards_for(kp, spec: ArgSpec, ty: str, key) -> list[SpecGuard]:
    """Runtime facts that pin ``(ty, key)`` for this parameter at a call site."""
    name = spec.name
    if ty == "constexpr":
        if spec.kind == "int" and not kp.is_constexpr:
            return [SpecGuard(name, "eq1", 1)]
        return [SpecGuard(name, "eq", spec.value)]
    annotated = bool(kp.annotation_type)
    guards = []
    if spec.kind == "tensordesc":
        # its base's dtype, as a tensor's; the block shape is the call site's (a constant of the
        # captured program), and nothing else is in the key
        if not annotated:
            guards.append(SpecGuard(name, "dtype", spec.dtype))
    elif spec.kind == "tensor":
        if not annotated:
            guards.append(SpecGuard(name, "dtype", spec.dtype))
        # Under do_not_specialize_on_alignment the key is "" whatever the pointer.
        if key == "D":
            guards.append(SpecGuard(name, "align16"))
        elif key == "" and not kp.do_not_specialize_on_alignment:
            guards.append(SpecGuard(name, "not_align16"))
    elif spec.kind == "int" and spec.value is None:
        if not annotated:  # the value is not known: only the type's range is assumed
            guards.append(SpecGuard(name, "range_" + ty))
    elif spec.kind == "int":
        if key == 1 and type(key) is int:
            guards.append(SpecGuard(name, "eq1", 1))
        elif key == "D":
            guards.append(SpecGuard(name, "div16"))
        elif key == "":
            check = "not1" if kp.do_not_specialize_on_alignment else "not_div16_not1"
            guards.append(SpecGuard(name, check))
        if not annotated:
            guards.append(SpecGuard(name, "range_" + ty))
    elif spec.kind in ("float", "bool") and not annotated:
        guards.append(SpecGuard(name, "dtype", ty))
    return guards


def _bind(fn: JITFunction, args: list[ArgSpec]) -> list[ArgSpec]:
    """Order ``args`` by the kernel's parameters, filling defaults like ``sig.bind``."""
    by_name = {}
    for spec in args:
        if spec.name in by_name:
            raise TypeError(f"{fn.__name__}: argument {spec.name!r} given twice")
        by_name[spec.name] = spec
    unknown = set(by_name) - set(fn.arg_names)
    if unknown:
        raise TypeError(f"{fn.__name__}: unknown arguments {sorted(unknown)}")
    bound = []
    for kp in fn.params:
        if kp.name in by_name:
            bound.append(by_name[kp.name])
        elif kp.has_default:
            bound.append(argspec_from_value(kp.name, kp.default))
        else:
            raise TypeError(f"{fn.__name__}: missing argument {kp.name!r}")
    return bound


def _launch_options(fn: JITFunction, options: dict | None) -> dict:
    """The ``**options`` dict JITFunction.run hands the binder (same order, same defaults)."""
    opts = dict(options or {})
    opts["debug"] = opts.get("debug", fn.debug) or knobs.runtime.debug
    opts["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    return opts


def _check_options(fn: JITFunction, backend, opts: dict) -> None:
    known = backend.parse_options(dict(opts)).__dict__
    for k in opts:
        if k in fn.arg_names:
            raise TypeError(f"{fn.__name__}: {k!r} is a kernel parameter; pass it as an ArgSpec")
        if k not in known:
            # Same error JITFunction._pack_args raises for an unrecognised kwarg.
            raise KeyError(f"Keyword argument {k} was specified but unrecognised ({fn.__name__})")


def _replace_callables(obj):
    """``compute_cache_key`` keys JIT functions by their source hash, not their repr."""
    if isinstance(obj, list):
        return [_replace_callables(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_replace_callables(x) for x in obj)
    if isinstance(obj, JITCallable):
        return obj.cache_key
    return obj


def _require_jit(fn) -> JITFunction:
    if not isinstance(fn, JITFunction):
        raise TypeError(f"expected a triton JITFunction, got {fn!r}; unwrap autotune/heuristics "
                        "with unwrap_kernel() and apply their values first")
    return fn


def specialize(fn, args: list[ArgSpec], options: dict | None = None,
               target: GPUTarget | None = None) -> tuple[dict, dict, dict, list[SpecGuard], str]:
    """Reproduce Triton 3.6 JIT specialization of ``fn`` for one call site.

    ``args`` name the kernel's parameters (any order; omitted ones take their
    Python defaults).  ``options`` are the launch kwargs that are not kernel
    parameters (num_warps, num_stages, debug, ...), in call order.
    Returns ``(signature, constexprs, attrs, guards, cache_key)`` equal to what
    ``JITFunction.run`` builds: ``signature`` {name: type}, ``constexprs``
    {(idx,): value}, ``attrs`` {(idx,): [["tt.divisibility", 16]] or []} and
    ``cache_key`` = ``str(specialization) + str(options)``.
    """
    fn = _require_jit(fn)
    backend = _backend(target or DEFAULT_TARGET)
    opts = _launch_options(fn, options)
    _check_options(fn, backend, opts)
    specialization, bound, guards = [], [], []
    for kp, spec in zip(fn.params, _bind(fn, args)):
        (ty, key), value = _param_specialization(kp, spec)
        specialization.append((ty, key))
        bound.append(value)
        guards += _guards_for(kp, spec, ty, key)
    cache_key = str(_replace_callables(specialization)) + str(opts)
    # The next lines follow JITFunction._pack_args so nested values behave identically.
    sigvals = [ty for ty, _ in specialization]
    signature = dict(zip(fn.arg_names, sigvals))
    constexprs = {p: get_iterable_path(bound, p) for p in find_paths_if(sigvals, lambda _, v: v == "constexpr")}
    attrvals = [key for _, key in specialization]
    attrs = {p: backend.parse_attr(get_iterable_path(attrvals, p))
             for p in find_paths_if(attrvals, lambda _, v: isinstance(v, str))}
    return signature, constexprs, attrs, guards, cache_key


def runtime_params(fn, signature: dict[str, str], tensordesc_meta: list | None = None) -> list[KernelParam]:
    """The cubin's parameter list: non-constexpr entries in order, then the two scratch pointers.

    Mirrors ``make_launcher`` in backends/nvidia/driver.py (``params`` array), including its
    expansion of a tensor descriptor (``_expand_signature``): where the kernel uses TMA for it
    (``tensordesc_meta``, one entry per descriptor, from the compiled metadata), a CUtensorMap by
    value (``tmadesc``) then the shape as i32 and the strides as i64; where it does not (its entry
    None), the base pointer, shape and strides as i64, the padding flag, then shape and strides
    again as i32 and i64. Each expanded parameter is named ``desc.field`` (``.map``, ``.base``,
    ``.shape0``, ``.stride0``, ``.nan``) after its descriptor.
    """
    fn = _require_jit(fn)
    params, desc = [], 0
    for index, (name, ty) in enumerate(signature.items()):
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):
            raise NotImplementedError(f"{name}: tuple parameters ({ty}) are not supported")
        if ty.startswith("tensordesc"):
            meta = tensordesc_meta[desc] if tensordesc_meta else None
            desc += 1
            ndim = ty[ty.index("[") + 1:ty.index("]")].count(",") + 1
            at = fn.arg_names.index(name)
            expanded = [("map", "tmadesc")] if meta is not None else \
                [("base", "ptr")] + [(f"shape{k}", "i64") for k in range(ndim)] + \
                [(f"stride{k}", "i64") for k in range(ndim)] + [("nan", "i8")]
            expanded += [(f"shape{k}", "i32") for k in range(ndim)] + [(f"stride{k}", "i64") for k in range(ndim)]
            params += [KernelParam(f"{name}.{field}", ctype, at) for field, ctype in expanded]
            continue
        ctype = "ptr" if ty.startswith("*") else _SCALAR_CTYPES.get(ty)
        if ctype is None:
            raise NotImplementedError(f"{name}: no launch C type for signature type {ty!r}")
        params.append(KernelParam(name, ctype, fn.arg_names.index(name)))
    if tensordesc_meta and desc != len(tensordesc_meta):
        raise ValueError(f"{len(tensordesc_meta)} tensor descriptors' metadata for {desc} descriptor parameters")
    return params + [KernelParam(name, "ptr", -1) for name in SCRATCH_PARAMS]


# triton.compile's results in this process, by what decides them. A program launches the same few
# kernels once per layer: Triton's own lookup of a compiled kernel (options parsed, source hashed,
# its cache directory's files read, metadata objects made) cost about 0.8 ms per launch site, most
# of the time to lower a new specialization whose kernels exist. The source's hash (fn.cache_key,
# which covers the functions it calls) is part of the key, so an edited kernel is compiled again.
# Only a kernel's metadata and cubin are kept, not the IR texts a CompiledKernel also holds.
_COMPILED: dict = {}
_COMPILED_MAX = 1024


@functools.lru_cache(maxsize=None)
def _backend(target: GPUTarget):
    return make_backend(target)


@functools.lru_cache(maxsize=None)
def _option_names(target: GPUTarget) -> tuple:
    """The compile options the target's backend knows (its options dataclass's fields, in order)."""
    return tuple(_backend(target).parse_options({}).__dict__)


# Seconds this thread spent in triton.compile (its disk cache's hits included): the lowering reads
# it before and after, to report the Triton compiles apart (counters' triton_compile_seconds).
_TRITON_TIME = threading.local()


def triton_compile_seconds() -> float:
    """Seconds the calling thread has spent in triton.compile so far."""
    return getattr(_TRITON_TIME, "seconds", 0.0)


def _compiled(fn, signature, constexprs, attrs, target, opts, cache_key):
    key = (fn.cache_key, str(target), cache_key, repr(sorted(opts.items())), repr(sorted(signature.items())),
           repr(sorted(constexprs.items())), repr(sorted(attrs.items())))
    ck = _COMPILED.get(key)
    if ck is None:
        t0 = time.perf_counter()
        try:
            full = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=opts)
        finally:
            _TRITON_TIME.seconds = triton_compile_seconds() + time.perf_counter() - t0
        ck = types.SimpleNamespace(metadata=full.metadata, asm={"cubin": full.asm["cubin"]})
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        _COMPILED[key] = ck
    return ck


# compile_kernel's results by what decides them: a program's launch sites repeat the same few
# (kernel, arguments) once per layer, and specializing one again cost about 0.3 ms (options parsed,
# parameters bound and keyed). Results are shared: callers must not change them.
_SPECIALIZED: dict = {}


def _arg_key(spec: ArgSpec) -> tuple:
    v = spec.value
    value = ("jit", v.cache_key) if isinstance(v, JITCallable) else (type(v).__qualname__, repr(v))
    return spec.name, spec.kind, str(spec.dtype), spec.aligned16, value


def compile_kernel(fn, args: list[ArgSpec], target: GPUTarget | None = None,
                   options: dict | None = None) -> CompiledTritonKernel:
    """compile_kernel_uncached, the same result for the same kernel, arguments, target and
    options (as Triton's knobs set them now) given again."""
    fn = _require_jit(fn)
    target = target or DEFAULT_TARGET
    key = (id(fn), fn.cache_key, tuple(_arg_key(a) for a in args), str(target),
           repr(sorted(_launch_options(fn, options).items())))
    ck = _SPECIALIZED.get(key)
    if ck is None:
        ck = compile_kernel_uncached(fn, args, target, options)
        if len(_SPECIALIZED) >= _COMPILED_MAX:
            _SPECIALIZED.clear()
        _SPECIALIZED[key] = ck
    return ck


def compile_kernel_uncached(fn, args: list[ArgSpec], target: GPUTarget | None = None,
                            options: dict | None = None) -> CompiledTritonKernel:
    """Compile the variant of ``fn`` that Triton's JIT would pick for ``args``.

    Goes through ``triton.compile(ASTSource(...), target=..., options=...)`` with the
    same options dict JITFunction.run uses, so the result (and its on-disk cache
    entry) matches a real JIT compile.  Needs no GPU and no active driver.
    ``args`` are treated as keyword arguments: one naming a compile option
    (e.g. a ``num_stages: tl.constexpr`` parameter) also sets that option.
    """
    fn = _require_jit(fn)
    target = target or DEFAULT_TARGET
    signature, constexprs, attrs, guards, cache_key = specialize(fn, args, options, target)
    option_names = _option_names(target)
    # JITFunction._pack_args parses options from *all* keyword args, so a kernel
    # parameter named like an option (the softmax tutorial's `num_stages: tl.constexpr`)
    # also sets that option when passed by keyword, which is how such kernels are called.
    # It never enters the cache key, which only holds the non-parameter kwargs.
    opts = _launch_options(fn, options)
    opts.update({s.name: s.value for s in args if s.name in option_names and s.value is not None})
    ck = _compiled(fn, signature, constexprs, attrs, target, opts, cache_key)
    md = ck.metadata
    return CompiledTritonKernel(
        name=md.name,
        cubin=ck.asm["cubin"],
        num_warps=md.num_warps,  # total warps: warp specialization may raise it
        num_ctas=md.num_ctas,
        shared=md.shared,
        global_scratch_size=md.global_scratch_size,
        global_scratch_align=md.global_scratch_align,
        profile_scratch_size=md.profile_scratch_size,
        profile_scratch_align=md.profile_scratch_align,
        launch_pdl=md.launch_pdl,
        launch_cooperative_grid=md.launch_cooperative_grid,
        params=runtime_params(fn, signature, getattr(md, "tensordesc_meta", None)),
        tensordesc_meta=list(getattr(md, "tensordesc_meta", None) or []),
        signature=signature,
        constexprs=constexprs,
        attrs=attrs,
        guards=guards,
        cache_key=cache_key,
        options={k: getattr(md, k) for k in option_names if hasattr(md, k)},
    )


def unwrap_kernel(obj) -> tuple:
    """Split ``autotune(heuristics(jit))``-style stacks into their parts.

    Returns ``(jit_fn, autotuner_or_None, [Heuristics, outermost first])``.
    Raises TypeError for anything that is not a JITFunction, Autotuner or
    Heuristics, and for stacks with more than one Autotuner (no single config).
    """
    autotuner, heuristics, current = None, [], obj
    while not isinstance(current, JITFunction):
        if isinstance(current, Autotuner):
            if autotuner is not None:
                raise TypeError(f"{obj!r}: nested @triton.autotune decorators are not supported")
            autotuner = current
        elif isinstance(current, Heuristics):
            heuristics.append(current)
        else:
            raise TypeError(f"not a Triton kernel (JITFunction, Autotuner or Heuristics): {current!r}")
        current = current.fn
    return current, autotuner, heuristics
