"""A small Triton operator library built the way FlagGems builds its operators, for tests that must
run without FlagGems (and without a GPU): kernels behind a `triton.KernelInterface` subclass with
its own kernel cache (FlagGems' `LibEntry`), kernel source generated per operator, written to a
file and imported at run time (its `pointwise_dynamic`), tensors handed to kernels as
`StridedBuffer`s that read `data_ptr()` (its tensor_wrapper), and a library autotuner subclass with
options of its own (its `LibTuner`). Dynamo cannot trace any of it."""
import hashlib
import importlib.util
import math
import os
import tempfile
import threading

import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner


class LibEntry(triton.KernelInterface):
    """Launches `fn`; keeps the compiled kernel per dtypes, pointer alignment and constexprs and
    launches it directly on a hit, as FlagGems' LibEntry does."""

    def __init__(self, fn):
        self.fn = fn
        self.arg_names = fn.arg_names
        self.kernel_cache = {}
        self.lock = threading.Lock()

    def run(self, *args, grid, warmup=False, **kwargs):
        key = tuple((a.dtype, a.data_ptr() % 16 == 0) if hasattr(a, "data_ptr") else
                    (type(a), a.base.dtype) if hasattr(a, "block_shape") else (type(a), a) for a in args)
        key += tuple(sorted(kwargs.items()))
        with self.lock:
            hit = self.kernel_cache.get(key)
            if hit is None:
                kernel = self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)
                self.kernel_cache[key] = (kernel, self._chosen_constexprs(args, kwargs))
                return kernel
        kernel, constexprs = hit
        named = {**dict(zip(self.arg_names, args)), **kwargs, **constexprs}
        g = grid(named) if callable(grid) else grid
        g = tuple(g) + (1,) * (3 - len(g))
        jit = self.fn
        while not isinstance(jit, triton.runtime.JITFunction):
            jit = jit.fn
        kernel[g](*[named[p.name] if p.name in named else p.default for p in jit.params])
        return kernel

    def _chosen_constexprs(self, args, kwargs) -> dict:
        """What the decorators under this entry chose for the call (autotune config, heuristics)."""
        chosen, fn = {}, self.fn
        while not isinstance(fn, triton.runtime.JITFunction):
            if isinstance(fn, Autotuner):
                chosen.update(fn.best_config.kwargs)
            elif isinstance(fn, triton.runtime.Heuristics):
                for name, h in fn.values.items():
                    chosen[name] = h({**dict(zip(fn.arg_names, args)), **kwargs, **chosen})
            fn = fn.fn
        return chosen


def libentry():
    return LibEntry


class LibTuner(Autotuner):
    """A library's autotuner: Triton's, with options of its own (torch's capture refuses them)."""

    def __init__(self, fn, arg_names, configs, key, strategy="default", **kw):
        super().__init__(fn, arg_names, configs, key, None, None, **kw)
        self.strategy = strategy


def libtuner(configs, key, strategy="default"):
    return lambda fn: LibTuner(fn, fn.arg_names, configs, key, strategy=strategy, prune_configs_by={})


class StridedBuffer:
    """A tensor seen with another shape, strides or offset: what the generated wrappers hand to
    kernels (FlagGems' StridedBuffer). Holds a pointer into the base tensor, not a view of it."""

    def __init__(self, base: torch.Tensor, shape=None, strides=None, offset=0):
        self._base = base
        self.dtype = base.dtype
        self._data_ptr = base.data_ptr() + offset * base.element_size()
        self.shape = tuple(base.shape if shape is None else shape)
        self._strides = tuple(base.stride() if strides is None else strides)
        self.device = base.device

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._data_ptr

    def numel(self):
        return math.prod(self.shape)


_TEMPLATE = '''import triton
import triton.language as tl


@triton.jit
def {name}_kernel(in0, in1, out0, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(in0 + offs, mask=m)
    y = tl.load(in1 + offs, mask=m)
    tl.store(out0 + offs, {expr}, mask=m)
'''

_code_dir = tempfile.mkdtemp(prefix="mini_gems_")
_generated = {}


def _import_generated(name: str, src: str):
    """The module of source `src`, written to a file of the code directory and imported (Triton
    reads a jit function's source from its file), as FlagGems' code cache does."""
    path = os.path.join(_code_dir, f"{name}_{hashlib.sha256(src.encode()).hexdigest()[:8]}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"mini_gems_generated_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _generate(name: str, expr: str):
    """The kernel for `expr`, generated at its first use."""
    if name not in _generated:
        mod = _import_generated(name, _TEMPLATE.format(name=name, expr=expr))
        _generated[name] = LibEntry(getattr(mod, f"{name}_kernel"))
    return _generated[name]


def pointwise(name: str, expr: str):
    """A binary elementwise operator over same-shaped contiguous tensors."""

    def op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        kernel = _generate(name, expr)
        out = torch.empty_like(x)
        n = x.numel()
        a, b, o = (StridedBuffer(t, (n,), (1,)) for t in (x, y, out))
        kernel[(triton.cdiv(n, 256),)](a, b, o, n, BLOCK=256, num_warps=2)
        return out

    op.__name__ = name
    return op


add = pointwise("add", "x + y")
mul = pointwise("mul", "x * y")


@libentry()
@libtuner(configs=[triton.Config({"BLOCK_N": 128}, num_warps=4)], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK_N"] == 0})
@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, n, eps, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    if EVEN:
        x = tl.load(x_ptr + row * n + offs).to(tl.float32)
        w = tl.load(w_ptr + offs).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    y = x * rstd * w
    if EVEN:
        tl.store(out_ptr + row * n + offs, y)
    else:
        tl.store(out_ptr + row * n + offs, y, mask=offs < n)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Row RMS norm of a 2-D tensor with at most 128 columns: libentry over libtuner over
    heuristics over jit, FlagGems' decorator stack."""
    out = torch.empty_like(x)
    rows, n = x.shape
    _rms_norm_kernel[(rows,)](x, weight, out, n, eps)
    return out


def add_halves(x: torch.Tensor) -> torch.Tensor:
    """x[:n/2] + x[n/2:] of a 1-D tensor, the halves handed to the kernel as StridedBuffers at
    offsets into x."""
    kernel = _generate("add", "x + y")
    n = x.numel() // 2
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    lo, hi = StridedBuffer(x, (n,), (1,), offset=0), StridedBuffer(x, (n,), (1,), offset=n)
    kernel[(triton.cdiv(n, 256),)](lo, hi, StridedBuffer(out), n, BLOCK=256, num_warps=2)
    return out


_TORCH_TEMPLATE = '''def {name}(x, y):
    return {expr}
'''


def torch_pointwise(name: str, expr: str):
    """An operator of torch ops whose source is generated and imported at its first call, as the
    Triton ones above: the library's Python (file writes, imports) is what Dynamo cannot trace."""
    def op(x, y):
        if name not in _generated:
            _generated[name] = getattr(_import_generated(name, _TORCH_TEMPLATE.format(name=name, expr=expr)), name)
        return _generated[name](x, y)

    op.__name__ = name
    return op


scaled_residual = torch_pointwise("scaled_residual", "x + 0.5 * y.tanh()")


@libentry()
@triton.heuristics({"BLOCK_N": lambda args: triton.next_power_of_2(args["n"]),
                    "num_warps": lambda args: 4 if args["n"] <= 1024 else 8})
@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum of each row of a contiguous 2-D tensor, in fp32: libentry over heuristics (one of them
    choosing num_warps, as FlagGems' softmax does) over jit."""
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _row_sum_kernel[(x.shape[0], 1, 1)](x, out, x.shape[1])
    return out


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha, mask=m)


def scale_direct(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x, launched as `jit_fn.run(..., grid=..., warmup=False)` on StridedBuffers."""
    out = torch.empty_like(x)
    n = x.numel()
    _scale_kernel.run(StridedBuffer(x, (n,), (1,)), StridedBuffer(out, (n,), (1,)), n, alpha, BLOCK=128,
                      grid=(triton.cdiv(n, 128), 1, 1), warmup=False)
    return out


# Host-side TMA descriptors as FlagGems' Hopper mm makes them: built with a dummy [1, 1] block that
# each autotune config's pre_hook sets to the config's tile (matmul_tma_set_block_size_hook).
@triton.jit
def _tile_scale_jit(in_desc, out_desc, alpha, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    tile = in_desc.load([pm * BM, pn * BN])
    out_desc.store([pm * BM, pn * BN], (tile.to(tl.float32) * alpha).to(tl.float16))


def _set_tile_blocks(nargs):
    nargs["in_desc"].block_shape = [nargs["BM"], nargs["BN"]]
    nargs["out_desc"].block_shape = [nargs["BM"], nargs["BN"]]


_tile_one = libentry()(libtuner(configs=[triton.Config({"BM": 64, "BN": 32}, num_warps=4, pre_hook=_set_tile_blocks)],
                                key=["alpha"])(_tile_scale_jit))
_tile_two = libentry()(libtuner(configs=[triton.Config({"BM": 64, "BN": 32}, num_warps=4, pre_hook=_set_tile_blocks),
                                         triton.Config({"BM": 32, "BN": 64}, num_warps=4, pre_hook=_set_tile_blocks)],
                                key=["alpha"])(_tile_scale_jit))


def tile_scale(x: torch.Tensor, alpha: float, two_configs: bool = False) -> torch.Tensor:
    """alpha * x for a 2-D fp16 x, through host-side descriptors whose blocks the config's pre_hook
    sets (one config, or two for the autotuner to choose between)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    out = torch.empty_like(x)
    d_in = TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1])
    d_out = TensorDescriptor(out, list(out.shape), list(out.stride()), [1, 1])
    grid = lambda meta: (triton.cdiv(x.shape[0], meta["BM"]), triton.cdiv(x.shape[1], meta["BN"]))  # noqa: E731
    (_tile_two if two_configs else _tile_one)[grid](d_in, d_out, alpha)
    return out


def tile_scale_transposed(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """tile_scale for a column-major x (a transposed weight, as F.linear hands FlagGems' mm its B):
    the descriptors describe x.T's row-major layout, as FlagGems' general_mm makes them."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    out = torch.empty_like(x.T)
    d_in = TensorDescriptor(x, list(x.T.shape), list(x.T.stride()), [1, 1])
    d_out = TensorDescriptor(out, list(out.shape), list(out.stride()), [1, 1])
    grid = lambda meta: (triton.cdiv(out.shape[0], meta["BM"]), triton.cdiv(out.shape[1], meta["BN"]))  # noqa: E731
    _tile_one[grid](d_in, d_out, alpha)
    return out


@triton.jit
def _scaled_with_default(x_ptr, out_ptr, n, scale=3, BLOCK: tl.constexpr = 128):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)


_scaled_entry = libentry()(_scaled_with_default)


def scale_by_default(x: torch.Tensor) -> torch.Tensor:
    """x * 3 through a kernel whose non-constexpr `scale` and constexpr BLOCK are left to their
    defaults (FlagGems' Hopper mm leaves `enable_warp_specialization=True` so)."""
    out = torch.empty_like(x)
    _scaled_entry[(triton.cdiv(x.numel(), 128),)](x, out, x.numel())
    return out
