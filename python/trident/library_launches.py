"""Triton launches inside Python that Dynamo cannot trace: the second capture route.

Third-party Triton libraries reach their kernels through their own launchers and generated code
(FlagGems: a `triton.KernelInterface` subclass with its own kernel cache, `LibEntry`; wrappers it
generates, writes to files and imports at run time; `StridedBuffer`s that stand for tensors with
another shape or offset). Strict export (Dynamo) stops there. The second route is non-strict
export: torch runs the function's Python itself, on fake tensors, and records the ATen calls it
makes. While it does, `traceable()` makes the Triton launches recordable too:

  - `kernel[grid](...)` on any `KernelInterface` becomes the launch node Dynamo would have made
    (torch's `triton_kernel_wrapper` higher-order op, through its `TraceableTritonKernelWrapper`),
    for the kernel Triton would run: a launcher that is none of Triton's own classes is taken to
    launch its `.fn` with the arguments it was given (what `LibEntry.run` does after its cache
    lookup), down to a `JITFunction`, `Autotuner` or `Heuristics`. An autotuner subclass with
    options torch does not take (a library's own tuner) is launched as a plain `triton.autotune`
    over the same configs and key; the lowering then lets the library's tuner choose, as eager's
    launch would (its cache, its policy: tuner_choice). Heuristics outside any autotuner, which
    torch's capture refuses, are applied to the call's arguments first, as Triton applies them.
  - An argument that is not a tensor but has `data_ptr()` (a `StridedBuffer`, a typed pointer) is
    launched as the view of the tensor whose memory it points into, at its offset, with its
    shape and strides where it has them (nonnegative), else to the end of that memory.
  - A host-side TMA descriptor (triton.tools.tensor_descriptor.TensorDescriptor) is launched as
    the tensor it describes (its base, viewed with its shape and strides where they differ), with
    its block in the launch's TMA metadata, as Dynamo captures `TensorDescriptor.from_tensor`.
    Where the library makes it with a dummy block that each autotune config's pre_hook sets
    (FlagGems' Hopper mm), the configs go to torch without their hooks and the lowering replays the
    chosen config's hook once, on stand-ins (hooked_block_shapes): a hook that does anything but
    set blocks is refused. torch's analysis of which arguments such a launch writes misnames
    them (_compat._install_descriptor_writes says why and what trident does instead).
  - `jit_fn.run(..., grid=..., warmup=False)` called directly is the same launch; a
    `CompiledKernel` launched directly (a library's own cache of them) is refused, so nothing is
    ever launched with the made-up addresses below.
  - `data_ptr()` of a fake tensor, which torch refuses, gives an address made up per storage:
    16-byte aligned bases, the storage offset added. Libraries read it for cache keys and pointer
    arithmetic; the made-up address is how a wrapper's pointer is found again above. The program
    never sees these numbers: the lowering guards and launches the real pointers.

Only the thread that captures sees any of this (thread-local switch), only while it captures.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading

import torch

from .errors import UnsupportedError

_local = threading.local()
_install_lock = threading.Lock()
_active = 0           # captures on this route running now, all threads: the patches stay while > 0
_originals: dict = {}

_BASE = 1 << 44       # made-up addresses: far above any small integer a library may compare to
_STRIDE = 1 << 36     # room for a 64 GiB storage each


class _Addresses:
    """The made-up address of each fake storage seen in one capture, and the tensors on it whose
    address was read."""

    def __init__(self):
        self.bases: dict[int, int] = {}                        # storage key -> base address
        self.tensors: dict[int, list[torch.Tensor]] = {}       # storage key -> tensors read

    def of(self, t: torch.Tensor) -> int:
        key = t.untyped_storage()._cdata
        if key not in self.bases:
            self.bases[key] = _BASE + len(self.bases) * _STRIDE
            self.tensors[key] = []
        if not any(u is t for u in self.tensors[key]):
            self.tensors[key].append(t)
        return self.bases[key] + t.storage_offset() * t.element_size()

    def find(self, address: int) -> tuple[list[torch.Tensor], int] | None:
        """The tensors on the storage `address` points into, and its byte offset in that storage."""
        for key, base in self.bases.items():
            if base <= address < base + _STRIDE:
                return self.tensors[key], address - base
        return None


def capturing() -> bool:
    return getattr(_local, "addresses", None) is not None


@contextlib.contextmanager
def traceable():
    """While non-strict export runs on this thread: library launches and wrapper pointers become
    recordable (module docstring). Counts the launches it converted by launcher class in
    `launchers`, which the caller reports (explain). Triton's and torch's classes are patched only
    while some thread captures this way (other threads then see the originals' behaviour, through
    one more Python call), so launches outside a capture pay nothing."""
    _patch(+1)
    prev = getattr(_local, "addresses", None), getattr(_local, "launchers", None)
    _local.addresses, _local.launchers = _Addresses(), {}
    try:
        yield _local.launchers
    finally:
        _local.addresses, _local.launchers = prev
        _patch(-1)


def _patch(delta: int) -> None:
    global _active
    from triton.runtime.jit import KernelInterface
    with _install_lock:
        _active += delta
        if _active == 1 and delta > 0:
            from triton.compiler.compiler import CompiledKernel
            from triton.runtime.jit import JITFunction
            orig_getitem = _originals["getitem"] = KernelInterface.__dict__["__getitem__"]
            orig_run = _originals["run"] = JITFunction.__dict__["run"]
            orig_compiled = _originals["compiled"] = CompiledKernel.__dict__["__getitem__"]
            orig_data_ptr = _originals["data_ptr"] = torch.Tensor.data_ptr

            def __getitem__(self, grid):
                if not capturing():
                    return orig_getitem(self, grid)
                return lambda *args, **kwargs: _launch(self, grid, args, kwargs)

            # `jit_fn.run(*args, grid=..., warmup=False)` called directly is the same launch; a
            # CompiledKernel launched directly (a cache of its own) cannot be traced back to its
            # arguments' meaning: refused, never launched with made-up addresses.
            def run(self, *args, grid, warmup=False, **kwargs):
                if not capturing() or warmup:
                    return orig_run(self, *args, grid=grid, warmup=warmup, **kwargs)
                return _launch(self, grid, args, kwargs)

            def compiled_getitem(self, grid):
                if not capturing():
                    return orig_compiled(self, grid)
                raise UnsupportedError(f"Triton kernel {self.name}: launched as a compiled kernel, not through "
                                       "its JITFunction, autotuner or a launcher around them")

            def data_ptr(self):
                if capturing() and isinstance(self, torch._subclasses.fake_tensor.FakeTensor):
                    return _local.addresses.of(self)
                return orig_data_ptr(self)

            KernelInterface.__getitem__ = __getitem__
            JITFunction.run = run
            CompiledKernel.__getitem__ = compiled_getitem
            torch.Tensor.data_ptr = data_ptr
        elif _active == 0:
            from triton.compiler.compiler import CompiledKernel
            from triton.runtime.jit import JITFunction
            KernelInterface.__getitem__ = _originals.pop("getitem")
            JITFunction.run = _originals.pop("run")
            CompiledKernel.__getitem__ = _originals.pop("compiled")
            if "data_ptr" in torch.Tensor.__dict__:
                del torch.Tensor.data_ptr  # TensorBase's own again
            _originals.pop("data_ptr")


def _kernel_of(launcher):
    """The Triton kernel object `launcher[grid](...)` runs (module docstring), and the classes of
    the library launchers passed through on the way."""
    from triton.runtime.autotuner import Autotuner, Heuristics, autotune
    from triton.runtime.jit import JITFunction, KernelInterface
    k, passed = launcher, []
    while not isinstance(k, (JITFunction, Autotuner, Heuristics)):
        inner = getattr(k, "fn", None)
        if not isinstance(inner, KernelInterface):
            raise UnsupportedError(
                f"Triton launcher {type(k).__module__}.{type(k).__qualname__}: it launches no kernel that "
                "trident can find (no .fn attribute holding a triton.jit, autotune or heuristics kernel)")
        passed.append(type(k).__qualname__)
        k = inner
    if isinstance(k, Autotuner) and type(k) is not Autotuner:
        cached = getattr(k, "_trident_plain", None)
        if cached is None:
            cached = autotune(configs=list(k.configs), key=list(getattr(k, "keys", []) or []))(k.fn)
            # the library's own tuner chooses the config at lowering (its cache, its policy: eager's
            # choice), through the same configs in the same order (tuner_choice)
            cached._trident_tuner = k
            k._trident_plain = cached
        passed.append(type(k).__qualname__)
        k = cached
    return k, passed


class _HookTouched(Exception):
    pass


class _DescriptorStandIn:
    """What an autotune config's pre_hook sees of a host-side tensor descriptor while trident learns
    the block shape the hook sets (hooked_block_shapes): its block_shape; any other use raises."""
    __slots__ = ("_name", "block_shape")

    def __init__(self, name: str, block):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "block_shape", list(block))

    def __getattr__(self, attr):
        raise _HookTouched(f"{self._name}.{attr}")

    def __setattr__(self, attr, value):
        if attr != "block_shape":
            raise _HookTouched(f"{self._name}.{attr}")
        object.__setattr__(self, attr, value)


class _Opaque:
    """A tensor argument as hooked_block_shapes shows it to a pre_hook: any attribute use raises."""
    __slots__ = ("_name",)

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattribute__(self, attr):
        raise _HookTouched(object.__getattribute__(self, "_name") + ("" if attr.startswith("__") else "." + attr))


def hooked_block_shapes(hook, nargs: dict, blocks: dict, where: str) -> dict:
    """The block shape an autotune config's `pre_hook` sets on each host-side tensor descriptor in
    `blocks` (argument name -> the block it was made with), given the launch's other arguments and
    the config's values in `nargs` (ints and constexprs as they are). FlagGems' Hopper mm makes its
    descriptors with a dummy block that such a hook sets per config; trident replays exactly that,
    once, at capture. UnsupportedError when the hook does anything else (reads a tensor, sets
    another attribute): it would have to run before every launch."""
    stand = {k: _DescriptorStandIn(k, b) for k, b in blocks.items()}
    view = {k: stand[k] if k in stand else
            _Opaque(k) if isinstance(v, torch.Tensor) or hasattr(v, "data_ptr") or hasattr(v, "meta") else v
            for k, v in nargs.items()}
    view.update(stand)
    try:
        hook(view)
    except _HookTouched as e:
        raise UnsupportedError(f"{where}: its autotune config's pre_hook uses {e}; trident replays a pre_hook "
                               "only when all it does is set host-side descriptors' block shapes") from None
    except Exception as e:  # noqa: BLE001 - the library's code, run on stand-ins
        raise UnsupportedError(f"{where}: its autotune config's pre_hook failed on trident's stand-in "
                               f"descriptors ({type(e).__name__}: {e})") from None
    return {k: tuple(int(x) for x in s.block_shape) for k, s in stand.items()}


def _hooks_apart(autotuner):
    """`autotuner` (a plain triton.autotune whose configs have pre_hooks) as one torch's launch capture
    takes: the same configs without their hooks, each hook kept as the config's `_trident_pre_hook`
    (the lowering replays it on stand-ins: hooked_block_shapes), and the hooked autotuner as
    `_trident_hooked`, and the tuner that chooses (a library's own, or the hooked one) as
    `_trident_tuner`: the lowering benchmarks through it, so each config runs with its hook."""
    import copy

    from triton.runtime.autotuner import autotune
    apart = getattr(autotuner, "_trident_hooks_apart", None)
    if apart is None:
        configs = []
        for cfg in autotuner.configs:
            c = copy.copy(cfg)
            c._trident_pre_hook, c.pre_hook = cfg.pre_hook, None
            configs.append(c)
        apart = autotune(configs=configs, key=list(getattr(autotuner, "keys", []) or []))(autotuner.fn)
        apart._trident_hooked = autotuner
        apart._trident_tuner = getattr(autotuner, "_trident_tuner", autotuner)
        autotuner._trident_hooks_apart = apart
    return apart


# What a kernel may do with a descriptor argument without writing through it.
_DESCRIPTOR_READS = {"load", "gather", "shape", "strides", "block_shape", "dtype"}


def descriptor_writes(kernel, names) -> set:
    """The descriptor arguments in `names` that `kernel` (a JITFunction, or a launcher around one)
    may write through: every one its source uses other than by `.load(...)`, `.gather(...)` or
    reading its shape, strides, block or dtype (passed to another function, stored to, an atomic:
    counted as written). What torch's own analysis of a launch's writes misses for descriptors
    (_compat._install_descriptor_writes)."""
    import ast
    import textwrap
    jit = kernel
    while not hasattr(jit, "src") and hasattr(jit, "fn"):
        jit = jit.fn
    try:
        tree = ast.parse(textwrap.dedent(jit.src))
    except (AttributeError, SyntaxError):
        return set(names)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    if fn is None:
        return set(names)
    parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
    written = set()
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and node.id in names) or isinstance(parents.get(node), ast.arguments):
            continue
        up = parents.get(node)
        if isinstance(up, ast.Attribute) and up.attr in _DESCRIPTOR_READS and not isinstance(up.ctx, ast.Store):
            call = parents.get(up)
            if up.attr not in ("load", "gather") or (isinstance(call, ast.Call) and call.func is up):
                continue
        written.add(node.id)
    return written


def tuner_choice(tuner, configs: list):
    """The index in `configs` (the configs torch was given for `tuner`'s, in the same order) of the
    config `tuner` chose in its last run (its best_config: Triton's autotuner and FlagGems' LibTuner
    set it), matched by the values it launches with, since a library's tuner may hand back a copy
    of the config from its on-disk cache."""
    assert len(tuner.configs) == len(configs), "trident bug: a tuner's configs and torch's differ"
    best = tuner.best_config.all_kwargs()
    for i, cfg in enumerate(tuner.configs):
        if cfg.all_kwargs() == best:
            return i
    raise UnsupportedError(f"the autotuner {type(tuner).__qualname__} chose a config that is none of its "
                           f"configs ({tuner.best_config})")


def _descriptor_view(d, where: str):
    """A host-side TensorDescriptor as the tensor torch's launch capture takes for one ("stable"
    metadata: the descriptor is that tensor's shape and strides): its base viewed with them."""
    if getattr(d, "padding", "zero") != "zero":
        raise UnsupportedError(f"{where} is a host-side TMA descriptor with padding={d.padding!r}; trident "
                               "captures those with zero padding")
    base = _as_tensor(d.base, where)
    if not isinstance(base, torch.Tensor):
        raise UnsupportedError(f"{where} is a host-side TMA descriptor over a {type(d.base).__qualname__}")
    if tuple(d.shape) == tuple(base.shape) and tuple(d.strides) == tuple(base.stride()):
        return base  # the tensor itself: a write through it is a write of it (no view to scatter back)
    return base.as_strided(tuple(d.shape), tuple(d.strides), base.storage_offset())


def _as_tensor(v, where: str):
    """A launch argument as Triton would read it: tensors as they are; an object with data_ptr()
    as the view of the tensor its pointer points into (module docstring)."""
    if isinstance(v, torch.Tensor) or not hasattr(v, "data_ptr") or not hasattr(v, "dtype"):
        return v
    found = _local.addresses.find(v.data_ptr())
    if found is None:
        raise UnsupportedError(f"{where}: a {type(v).__qualname__} whose pointer is into no tensor this "
                               "function's trace holds")
    tensors, offset = found
    dtype = v.dtype
    if offset % dtype.itemsize:
        raise UnsupportedError(f"{where}: a {type(v).__qualname__} at an offset that is not a whole element")
    start = offset // dtype.itemsize
    shape = getattr(v, "shape", None)
    stride = v.stride() if callable(getattr(v, "stride", None)) else None
    known = shape is not None and stride is not None and len(shape) == len(stride) and all(s >= 0 for s in stride)
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if known and all(n > 0 for n in shape) else None
    # A tensor the pointer starts and whose memory holds all the wrapper reaches: launched as that
    # tensor itself, so a write through the wrapper is a write of it (no view to scatter back).
    for t in tensors:
        if (t.dtype == dtype and t.storage_offset() == start and t.is_contiguous()
                and extent is not None and extent <= t.numel()):
            return t
    t = tensors[0]
    if dtype != t.dtype:
        if dtype.itemsize != t.dtype.itemsize:
            raise UnsupportedError(f"{where}: a {type(v).__qualname__} of {dtype} over a tensor of {t.dtype}")
        t = t.view(dtype)
    if known:
        return t.as_strided(tuple(shape), tuple(stride), start)
    n = t.untyped_storage().nbytes() // dtype.itemsize
    return t.as_strided((n - start,), (1,), start)


def refuse_opaque_argument(v, where: str) -> None:
    """Raise UnsupportedError for a launch argument that holds tensors but is neither a tensor nor a
    pointer wrapper (_as_tensor): torch's launch capture would keep it as a constant, with the
    capture's fake tensors inside, and see no tensor the launch writes, so the launch would be
    dropped from the program as if it did nothing. A tuple of tensors (a Triton tuple parameter) is
    one; a host-side TMA descriptor was, until _launch launched it as the tensor it describes."""
    if isinstance(v, (torch.Tensor, int, float, bool, str, type(None), torch.dtype)):
        return
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # a Triton without host descriptors
        TensorDescriptor = ()
    if isinstance(v, TensorDescriptor):
        raise UnsupportedError(f"{where} is a host-side TMA descriptor (triton.tools.tensor_descriptor."
                               "TensorDescriptor), which trident does not capture yet; a descriptor made "
                               "inside the kernel (tl.make_tensor_descriptor) is captured")
    if isinstance(v, (tuple, list)) and _holds_tensors(v):
        raise UnsupportedError(f"{where} is a {type(v).__qualname__} holding tensors (a Triton tuple "
                               "parameter), which trident does not launch yet")
    if _holds_tensors(v):
        raise UnsupportedError(f"{where} is a {type(v).__qualname__} holding tensors, which trident cannot "
                               "launch with (pass the tensors themselves)")


def _holds_tensors(v) -> bool:
    """Whether `v` is a tensor or holds one: in a tuple, list or dict, or as an attribute."""
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, (tuple, list)):
        return any(_holds_tensors(x) for x in v)
    if isinstance(v, dict):
        return any(_holds_tensors(x) for x in v.values())
    fields = getattr(v, "__dict__", None)
    return isinstance(fields, dict) and any(isinstance(f, torch.Tensor) for f in fields.values())


def _launch(launcher, grid, args, kwargs):
    from torch._higher_order_ops.triton_kernel_wrap import TraceableTritonKernelWrapper
    from triton import Config
    from triton.runtime.autotuner import Autotuner, Heuristics, autotune
    from triton.runtime.jit import JITFunction
    kernel, passed = _kernel_of(launcher)
    # Heuristics outside any autotuner (torch's capture takes them only under one): applied here as
    # Triton's Heuristics.run applies them, on this call's arguments; one that sets num_warps or
    # num_stages becomes a launch option, as it does in Triton.
    while isinstance(kernel, Heuristics):
        for name, heuristic in kernel.values.items():
            kwargs = {**kwargs, name: heuristic({**dict(zip(kernel.arg_names, args)), **kwargs})}
        kernel = kernel.fn
        if not isinstance(kernel, (JITFunction, Autotuner, Heuristics)):
            kernel, more = _kernel_of(kernel)
            passed += more
    jit = kernel
    while not isinstance(jit, JITFunction):
        jit = jit.fn
    where = f"Triton kernel {jit.fn.__name__}"
    # Host-side TMA descriptors: each becomes the view it describes, with its block shape in the
    # launch's "stable" TMA metadata (as Dynamo captures TensorDescriptor.from_tensor).
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # a Triton without host descriptors
        TensorDescriptor = ()
    blocks = {}
    named = dict(zip(jit.arg_names, args))
    for name, v in [*named.items(), *kwargs.items()]:
        if isinstance(v, TensorDescriptor):
            blocks[name] = tuple(v.block_shape)
    args = tuple(_descriptor_view(a, f"{where}: argument {n}") if n in blocks else _as_tensor(a, where)
                 for n, a in zip(jit.arg_names, args))
    kwargs = {k: _descriptor_view(v, f"{where}: argument {k}") if k in blocks else _as_tensor(v, where)
              for k, v in kwargs.items()}
    for name, v in [*zip(jit.arg_names, args), *kwargs.items()]:
        refuse_opaque_argument(v, f"{where}: argument {name}")
    # What trident's strict capture also fixes (_compat._install_triton_launch_options): constexprs
    # left to their defaults are passed, num_ctas goes into a one-config autotuner.
    # Other parameters left to their defaults too (FlagGems' Hopper mm: `enable_warp_specialization=
    # True`), as Triton's binder passes them: torch's write analysis compiles the kernel with
    # exactly the arguments it is given, and failed on the missing one (every tensor then written).
    given = set(jit.arg_names[:len(args)]) | set(kwargs)
    for p in jit.params:
        if p.name not in given and p.default is not inspect.Parameter.empty:
            kwargs[p.name] = p.default
    if "num_ctas" in kwargs and not isinstance(kernel, Autotuner):
        options = {k: kwargs.pop(k) for k in ("num_ctas", "num_warps", "num_stages") if k in kwargs}
        kernel = autotune(configs=[Config({}, **options)], key=[])(kernel)
    for name in passed or ["(triton)"]:
        _local.launchers[name] = _local.launchers.get(name, 0) + 1
    if not blocks:
        return TraceableTritonKernelWrapper(kernel, None, grid)(*args, **kwargs)
    if isinstance(kernel, Autotuner) and any(c.pre_hook is not None for c in kernel.configs):
        kernel = _hooks_apart(kernel)
        first = kernel.configs[0]  # what torch's mutation analysis compiles with
        nargs = {**dict(zip(jit.arg_names, args)), **kwargs, **first.all_kwargs()}
        blocks = hooked_block_shapes(first._trident_pre_hook, nargs, blocks, where)
    hopifier = _descriptor_hopifier_class()({k: ("stable", (list(b),)) for k, b in blocks.items()})
    return hopifier.call_triton_kernel(TraceableTritonKernelWrapper(kernel, None, grid), args, kwargs, None)


@functools.lru_cache(maxsize=None)
def _descriptor_hopifier_class():
    """TracingTritonHOPifier with the TMA metadata of a launch's host-side descriptors, which torch's
    own leaves empty outside Dynamo (made on first use: torch's module imports Triton)."""
    from torch._higher_order_ops.triton_kernel_wrap import TracingTritonHOPifier, triton_kernel_wrapper_mutation

    class DescriptorHOPifier(TracingTritonHOPifier):
        def __init__(self, tma: dict):
            super().__init__()
            self.tma = tma

        def call_HOP(self, variable, grids, combined_args, tx):
            graphable, constant_args_idx = self.store_non_graphable_args(combined_args)
            return triton_kernel_wrapper_mutation(kernel_idx=variable.kernel_idx, constant_args_idx=constant_args_idx,
                                                  grid=grids, tma_descriptor_metadata=self.tma, kwargs=graphable)

    return DescriptorHOPifier
