"""ATen ops lowered to trident's own Triton kernels (builtin_kernels.py) and launched natively, when
the result is exactly ATen's: a copy between same-dtype tensors of one shape (the in-place slice
writes of a KV cache), a one-position index_copy_ (HF StaticCache's writes), a clone into a
contiguous result (HF's repeat_kv), and on contiguous fp16/bf16/fp32 tensors `a + b` of one shape
with alpha 1 (a residual add), `a * b` of one shape (HF's MLP), `a + c` and `a * c` for a Python
number c (`x + 1`, HF's rotary scaling), `where(mask, c, a)` and `where(mask, a, c)` (HF's attention
mask) and `relu(a)`, and the dtype conversions that round at most once (HF's rotary); on contiguous
int32/int64 tensors `a + b` (b also a 0-dim tensor) and `a + c` for a Python int c the dtype holds
(a decoder's cache positions). Everything else, and every case with a symbolic size or stride, stays
an ATen call. lower.py also sends the write-backs of mutated inputs and buffers to copy().

Which devices: TRIDENT_BUILTIN_KERNELS (config.py): auto (the default: CUDA tensors), off, or all (any
device; the launch then fails on CPU tensors, which is how CPU tests check the lowering without a GPU)."""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx
from torch._prims_common import make_contiguous_strides_for

from . import builtin_kernels, hir, lazy_views
from .. import config
from .reinplace import SCATTERS
from .triton_specialize import ArgSpec, argspec_from_value, compile_kernel

BLOCK = 1024
_INT32_MAX = 2 ** 31 - 1
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_INT_DTYPES = (torch.int32, torch.int64)
# (from, to) dtype conversions the convert kernel computes as ATen's CUDA copy does: each rounds at
# most once. fp16 or an integer to bf16 goes through fp32 in ATen (two roundings) and would round
# once in Triton; fp64 and narrower integers are not needed by the models served.
_CONVERSIONS = {(torch.float32, torch.bfloat16), (torch.float32, torch.float16), (torch.bfloat16, torch.float32),
                (torch.float16, torch.float32), (torch.int32, torch.float32), (torch.int64, torch.float32)}


def _eligible(lw, fake) -> bool:
    """The builtin kernels may serve this spec on fake's device: they record no autograd history,
    so never in a spec that may record it (lw.records_autograd)."""
    if lw.records_autograd:
        return False
    mode = config.builtin_kernels()
    return mode == "all" or (mode == "auto" and fake.device.type == "cuda")


def _static(values) -> bool:
    return all(isinstance(v, int) for v in values)


def _fits_int32(fake) -> bool:
    """Every element offset the kernel computes fits its int32 index arithmetic."""
    span = sum((s - 1) * abs(st) for s, st in zip(fake.shape, fake.stride()))
    return fake.numel() <= _INT32_MAX and span <= _INT32_MAX


def _plain(fake) -> bool:
    return (isinstance(fake, torch.Tensor) and fake.layout == torch.strided and not fake.is_conj()
            and not fake.is_neg() and _static(fake.shape) and _static(fake.stride()) and fake.numel() > 0
            and _fits_int32(fake))


def _launch(lw, node: fx.Node, kernel, tensors: dict, values: dict, n: int, grid_y: int = 1,
            options: dict | None = None):
    """Compile `kernel` for these arguments (tensors: name -> (operand, fake)) and Triton compile
    options, and emit its launch."""
    specs = []
    for name in kernel.arg_names:
        if name in tensors:
            fake = tensors[name][1]
            aligned = lw.alignment(fake)
            specs.append(ArgSpec(name, "tensor", dtype=fake.dtype, aligned16=aligned))
            if aligned:
                lw.guard_alignment(fake)
        else:
            specs.append(argspec_from_value(name, values[name]))
    ck = compile_kernel(kernel, specs, config.triton_target(), dict(options or {}))
    from .triton_lower import _cubin_path
    kid = lw.add_kernel(ck, _cubin_path(ck.cubin))
    operands = []
    for p in ck.params:
        if p.arg_index < 0:
            continue  # scratch pointers: appended by the runtime
        name = kernel.arg_names[p.arg_index]
        operands.append(tensors[name][0] if name in tensors else lw.literal(node, values[name]))
    grid = (n + BLOCK - 1) // BLOCK
    lw.lines.append(hir.launch(kid, [str(grid), str(grid_y), "1"], operands))
    lw.ops.append(f"builtin:{kernel.fn.__name__}")


def copy(lw, node: fx.Node, dst, dst_view, src, src_fake) -> bool:
    """dst.copy_(src) as a native launch; False when the ATen call must stay (nothing but view calls
    emitted). dst_view() gives the fake of the destination (computed only when the source
    qualifies); dst(fake) and src() give the launch operands (lazy_views: pointers where they can)."""
    if not (_plain(src_fake) and _eligible(lw, src_fake)):
        return False
    dst_fake = dst_view()
    if not _plain(dst_fake):
        return False
    if (src_fake.device != dst_fake.device or src_fake.dtype != dst_fake.dtype
            or list(src_fake.shape) != list(dst_fake.shape) or dst_fake.dim() > 4):
        return False
    if _storage(src_fake) == _storage(dst_fake):
        return False  # overlapping memory: ATen checks and orders it, the kernel would not
    this = _Copy(lw, node, dst(dst_fake), dst_fake, src(), src_fake)
    if this.dst_memory & this.src_memory:
        return False  # the same, seen through the runtime values (memory_root)
    return _hold_or_pair(lw, this)


def _hold_or_pair(lw, this: "_Copy") -> bool:
    """Launch `this` together with the held copy when they pair (same kind, see pairs_with), else
    launch the held one alone and hold `this` for the next one. True: `this` is taken care of."""
    held = lw.pending_copy
    if held is not None and type(held) is type(this) and held.pairs_with(this):
        lw.pending_copy = None
        held.launch(lw, this)
        return True
    flush(lw)
    lw.pending_copy = this  # launched with the next copy it pairs with, or alone (flush)
    return True


class _Copy:
    """A copy lowered to a builtin launch whose emission is held back one node, in case the next
    node is a copy it can share a launch with (lower.py flushes it before anything that touches
    memory)."""

    def __init__(self, lw, node, dst: str, dst_fake, src: str, src_fake):
        self.node, self.dst, self.dst_fake, self.src, self.src_fake = node, dst, dst_fake, src, src_fake
        # what each side's memory is known as: fake storages and the runtime values it is a view of
        self.dst_memory = {_storage(dst_fake), lazy_views.memory_root(lw, dst)}
        self.src_memory = {_storage(src_fake), lazy_views.memory_root(lw, src)}

    def pairs_with(self, other: "_Copy") -> bool:
        """One launch may do both: same shape and dtype, and neither copy's destination is memory
        the other touches (the two run concurrently)."""
        a, b = self.dst_fake, other.dst_fake
        if (a.dtype != b.dtype or a.device != b.device or list(a.shape) != list(b.shape)):
            return False
        return not (self.dst_memory & (other.dst_memory | other.src_memory)
                    or other.dst_memory & self.src_memory)

    def launch(self, lw, other: "_Copy | None" = None) -> None:
        """This copy alone, or this and `other` (one it pairs with) in one launch."""
        if other is None:
            _launch(lw, self.node, builtin_kernels.strided_copy,
                    {"dst": (self.dst, self.dst_fake), "src": (self.src, self.src_fake)},
                    {**_index_space(self), **_strides(self, "d", "r")}, self.dst_fake.numel())
            return
        values = {**_index_space(other), **_strides(self, "d", "r"), **_strides(other, "e", "q")}
        _launch(lw, self.node, builtin_kernels.strided_copy_pair,
                {"dst0": (self.dst, self.dst_fake), "src0": (self.src, self.src_fake),
                 "dst1": (other.dst, other.dst_fake), "src1": (other.src, other.src_fake)},
                values, other.dst_fake.numel(), grid_y=2)


def index_copy(lw, node: fx.Node) -> bool:
    """dst.index_copy_(dim, index, src), chosen to run in place (reinplace.py), as a native launch
    when the index has one element (a decode step's KV-cache write at the position a device tensor
    holds: HF's StaticCache): same dtype, static shapes of at most 4 dimensions equal but at `dim`,
    where src has size 1, and dst, src and index in three different memories. Two such writes in a
    row (k and v) share a launch. One element means no duplicate positions, whose order ATen leaves
    unspecified; a position outside dst fails a device assert, as in ATen's kernel. False when the
    ATen call must stay (nothing emitted)."""
    dst, dim, index, src = node.args[:4]
    fd, fi, fs = (a.meta.get("val") if isinstance(a, fx.Node) else None for a in (dst, index, src))
    if not (isinstance(dim, int) and _plain(fd) and _plain(fs) and _eligible(lw, fd)):
        return False
    if not (isinstance(fi, torch.Tensor) and fi.dtype == torch.int64 and fi.dim() <= 1 and fi.numel() == 1
            and fi.device == fd.device and fi.layout == torch.strided):
        return False
    nd = fd.dim()
    if not (1 <= nd <= 4 and fs.dim() == nd and fs.dtype == fd.dtype and fs.device == fd.device):
        return False
    dim %= nd
    if fs.shape[dim] != 1 or any(a != b for k, (a, b) in enumerate(zip(fd.shape, fs.shape)) if k != dim):
        return False
    if len({_storage(fd), _storage(fs), _storage(fi)}) < 3:
        return False
    this = _IndexCopy(lw, node, lazy_views.launch_operand(lw, node, dst), fd,
                      lazy_views.launch_operand(lw, node, src), fs, lazy_views.launch_operand(lw, node, index), dim)
    if this.dst_memory & this.src_memory:
        return False
    return _hold_or_pair(lw, this)


class _IndexCopy(_Copy):
    """A one-position index_copy_ held back like a copy, for the next one to share its launch.
    dst_fake is the whole destination; the index space is src's."""

    def __init__(self, lw, node, dst: str, dst_fake, src: str, src_fake, index: str, dim: int):
        super().__init__(lw, node, dst, dst_fake, src, src_fake)
        self.index, self.dim = index, dim
        self.src_memory |= {_storage(node.args[2].meta["val"]), lazy_views.memory_root(lw, index)}

    def pairs_with(self, other: "_Copy") -> bool:
        return (isinstance(other, _IndexCopy) and other.dim == self.dim
                and list(other.src_fake.shape) == list(self.src_fake.shape) and super().pairs_with(other))

    def launch(self, lw, other: "_IndexCopy | None" = None) -> None:
        _launch_index_copies(lw, self, other)


def _launch_index_copies(lw, a: _IndexCopy, b: _IndexCopy | None) -> None:
    """a alone (grid y 1; its operands fill the second slot too, never run), or a and b together."""
    pad = [0] * (4 - a.src_fake.dim())
    sizes = [1] * len(pad) + list(a.src_fake.shape)
    values = {"n": a.src_fake.numel(), "s1": sizes[1], "s2": sizes[2], "s3": sizes[3], "BLOCK": BLOCK,
              "dim_size": a.dst_fake.shape[a.dim], "step0": a.dst_fake.stride(a.dim),
              "step1": (b or a).dst_fake.stride(a.dim)}
    tensors = {}
    for k, (c, dn, sn) in enumerate(((a, "d", "r"), (b or a, "e", "q"))):
        d, r = pad + list(c.dst_fake.stride()), pad + list(c.src_fake.stride())
        values.update({f"{dn}{i}": d[i] for i in range(4)} | {f"{sn}{i}": r[i] for i in range(4)})
        tensors.update({f"dst{k}": (c.dst, c.dst_fake), f"src{k}": (c.src, c.src_fake),
                        f"index{k}": (c.index, c.node.args[2].meta["val"])})
    _launch(lw, a.node, builtin_kernels.index_copy_pair, tensors, values, a.src_fake.numel(),
            grid_y=2 if b is not None else 1, options={"debug": True})  # debug: the device assert


def clone(lw, node: fx.Node) -> bool:
    """x.clone() whose result is contiguous (whatever memory_format asked for: the traced result's
    strides decide) as an allocation and a builtin copy, held like a copy so that two clones of one
    shape share a launch (HF's repeat_kv copies k and then v of the cache). Same dimensions for the
    copy's index space once merged (_merged_dims): at most 4. False when ATen must clone it (nothing
    emitted)."""
    x = node.args[0] if len(node.args) == 1 and set(node.kwargs) <= {"memory_format"} else None
    fs, out = (x.meta.get("val") if isinstance(x, fx.Node) else None), node.meta.get("val")
    if not (_plain(fs) and _plain(out) and _eligible(lw, out) and fs.dtype == out.dtype
            and fs.device == out.device and list(fs.shape) == list(out.shape)
            and list(out.stride()) == list(make_contiguous_strides_for(out.shape))):
        return False
    merged = _merged_dims(out, fs)
    if merged is None:
        return False
    res = _allocate(lw, node, out)
    return _hold_or_pair(lw, _Copy(lw, node, res, merged[0], lazy_views.launch_operand(lw, node, x), merged[1]))


def _merged_dims(dst, src):
    """dst and src (one shape) as views of at most 4 dimensions that address the same elements in
    the same order: size-1 dimensions dropped, neighbours merged where both tensors' strides allow.
    None when more than 4 remain."""
    dims = [(n, a, b) for n, a, b in zip(dst.shape, dst.stride(), src.stride()) if n != 1]
    merged = []
    for n, a, b in dims:
        if merged and merged[-1][1] == a * n and merged[-1][2] == b * n:
            merged[-1] = (merged[-1][0] * n, a, b)
        else:
            merged.append((n, a, b))
    if len(merged) > 4:
        return None
    shape = [n for n, _, _ in merged]
    return (dst.as_strided(shape, [a for _, a, _ in merged], dst.storage_offset()),
            src.as_strided(shape, [b for _, _, b in merged], src.storage_offset()))


def _storage(fake):
    return fake.untyped_storage()._cdata


def _index_space(c: _Copy) -> dict:
    """The copy kernels' index space: n elements over [n / (s1 s2 s3), s1, s2, s3]."""
    sizes = [1] * (4 - c.dst_fake.dim()) + list(c.dst_fake.shape)
    return {"n": c.dst_fake.numel(), "s1": sizes[1], "s2": sizes[2], "s3": sizes[3], "BLOCK": BLOCK}


def _strides(c: _Copy, dst_name: str, src_name: str) -> dict:
    pad = [0] * (4 - c.dst_fake.dim())
    d, r = pad + list(c.dst_fake.stride()), pad + list(c.src_fake.stride())
    return {**{f"{dst_name}{i}": d[i] for i in range(4)}, **{f"{src_name}{i}": r[i] for i in range(4)}}


def flush(lw):
    """Launch the held copy (or index copy) alone."""
    c = lw.pending_copy
    if c is None:
        return
    lw.pending_copy = None
    c.launch(lw)


def holds_across(node: fx.Node, inplace) -> bool:
    """Whether a held copy may stay held while `node` is lowered: the node is a copy it may pair
    with, or it touches no memory (views, `_unsafe_view`, shape arithmetic, getitem, export's
    assertions)."""
    if node.op != "call_function":
        return False
    if node in inplace:
        return SCATTERS.get(node.target) in ("slice", "select", "copy", "index_copy")
    if node.target is operator.getitem or isinstance(node.meta.get("val"), (int, torch.SymInt)):
        return True
    if node.target is torch.ops.aten.clone.default:
        return True  # a copy it may pair with; elementwise() flushes first where ATen must clone
    return isinstance(node.target, torch._ops.OpOverload) and (
        lazy_views.qualified(node.target) in lazy_views.VIEW_OPS or node.target is torch.ops.aten._unsafe_view.default)


def elementwise(lw, node: fx.Node) -> bool:
    """An ATen elementwise op as an allocation and a native launch of a builtin kernel, when the
    kernel computes exactly what ATen does: `add.Tensor` (a + b, a + number), `mul.Tensor` (a * b,
    a * number), `where` of a mask, a tensor and a number, `_to_copy` (a dtype conversion), `relu`
    and `clone` (a held copy, see clone()). False when ATen must run it (nothing
    emitted)."""
    if node.target is torch.ops.aten.add.Tensor:
        return _add(lw, node)
    if node.target is torch.ops.aten.mul.Tensor:
        return _mul(lw, node)
    if node.target in (torch.ops.aten.where.ScalarSelf, torch.ops.aten.where.ScalarOther):
        return _where(lw, node)
    if node.target is torch.ops.aten._to_copy.default:
        return _convert(lw, node)
    if node.target is torch.ops.aten.clone.default:
        if clone(lw, node):
            return True
        flush(lw)  # holds_across kept a held copy across this clone; ATen's clone may read its target
        return False
    if node.target is torch.ops.aten.relu.default and len(node.args) == 1 and not node.kwargs:
        a = node.args[0]
        return isinstance(a, fx.Node) and _same_layout(lw, a.meta.get("val"), node.meta.get("val")) and _emit(
            lw, node, builtin_kernels.relu, {"a": a}, {})
    return False


def _add(lw, node: fx.Node) -> bool:
    if len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1 or set(node.kwargs) - {"alpha"}:
        return False
    a, b = node.args
    if not isinstance(a, fx.Node):
        return False
    out = node.meta.get("val")
    if type(b) in (int, float):  # not a bool (type() excludes it), not symbolic (a traced int is a node)
        if _same_layout(lw, a.meta.get("val"), out, _INT_DTYPES):
            bits = torch.iinfo(out.dtype).bits - 1
            if type(b) is not int or not -2 ** bits <= b < 2 ** bits:
                return False  # a number the integer dtype cannot hold: ATen's rule (or error) applies
            return _emit(lw, node, builtin_kernels.add_int_scalar, {"a": a}, {"s": b})
        if not _same_layout(lw, a.meta.get("val"), out):
            return False
        return _emit(lw, node, builtin_kernels.add_scalar, {"a": a}, {"s": _as_opmath(b)})
    if not isinstance(b, fx.Node):
        return False
    fa, fb = a.meta.get("val"), b.meta.get("val")
    if _same_layout(lw, fa, out) and _same_layout(lw, fb, out):
        return _emit(lw, node, builtin_kernels.add_contiguous, {"a": a, "b": b}, {})
    if _single(fa, out) and _same_layout(lw, fb, out, _INT_DTYPES):
        a, b, fa, fb = b, a, fb, fa  # integer addition commutes exactly
    if _same_layout(lw, fa, out, _INT_DTYPES):
        if _same_layout(lw, fb, out, _INT_DTYPES):
            return _emit(lw, node, builtin_kernels.add_int, {"a": a, "b": b}, {"b_step": 1})
        if _single(fb, out):
            return _emit(lw, node, builtin_kernels.add_int, {"a": a, "b": b}, {"b_step": 0})
    return False


def _mul(lw, node: fx.Node) -> bool:
    """Floating tensors only: an integer product's dtype rules (and a float number times an integer
    tensor) stay ATen's."""
    if len(node.args) != 2 or node.kwargs:
        return False
    a, b = node.args
    if not isinstance(a, fx.Node) or not _same_layout(lw, a.meta.get("val"), node.meta.get("val")):
        return False
    if type(b) in (int, float):  # not a bool, not symbolic
        return _emit(lw, node, builtin_kernels.mul_scalar, {"a": a}, {"s": _as_opmath(b)})
    if isinstance(b, fx.Node) and _same_layout(lw, b.meta.get("val"), node.meta.get("val")):
        return _emit(lw, node, builtin_kernels.mul_contiguous, {"a": a, "b": b}, {})
    return False


def _where(lw, node: fx.Node) -> bool:
    """where(mask, number, x) or where(mask, x, number): a contiguous bool mask of the result's shape,
    x a floating tensor of the result's dtype, contiguous of its shape or 0-dim (HF's mask conversion
    takes its minimum as a 0-dim constant). ATen fills a 0-dim tensor of the result's dtype with the
    number (`scalar_tensor`); the same CPU conversion rounds it here. A NaN number stays ATen's (its
    payload would travel as fp32), and so does one the dtype cannot hold (ATen raises)."""
    if len(node.args) != 3 or node.kwargs:
        return False
    mask, a, b = node.args
    number_where_true = node.target is torch.ops.aten.where.ScalarSelf
    number, x = (a, b) if number_where_true else (b, a)
    out = node.meta.get("val")
    if type(number) not in (int, float) or not isinstance(x, fx.Node) or not isinstance(mask, fx.Node):
        return False
    fm, fx_ = mask.meta.get("val"), x.meta.get("val")
    if not (_same_layout(lw, out, out) and _plain(fm) and fm.dtype == torch.bool and fm.is_contiguous()
            and fm.device == out.device and list(fm.shape) == list(out.shape)):
        return False  # out: a plain contiguous floating result the kernels serve; the mask: out's shape
    if _same_layout(lw, fx_, out):
        x_step = 1
    elif _single(fx_, out):
        x_step = 0
    else:
        return False
    if math.isfinite(number) and abs(number) > torch.finfo(out.dtype).max:
        return False  # ATen's fill raises (c10::checked_convert): its call stays, to raise as eager's
    value = float(torch.scalar_tensor(number, dtype=out.dtype).item())
    if value != value:
        return False
    return _emit(lw, node, builtin_kernels.where_scalar, {"mask": mask, "x": x},
                 {"s": value, "x_step": x_step, "NUMBER_WHERE_TRUE": number_where_true})


def _convert(lw, node: fx.Node) -> bool:
    """x.to(dtype) of a contiguous tensor into a contiguous result of its shape and device, for the
    conversions in _CONVERSIONS. Anything else `_to_copy` may be asked (a device, a layout, pinned
    memory, a non-contiguous result) stays ATen's."""
    x = node.args[0] if len(node.args) == 1 else None
    kw = node.kwargs
    if not isinstance(x, fx.Node) or set(kw) - {"dtype", "layout", "device", "pin_memory", "non_blocking",
                                                "memory_format"}:
        return False
    if kw.get("layout") not in (None, torch.strided) or kw.get("pin_memory") or kw.get("non_blocking"):
        return False
    fs, out = x.meta.get("val"), node.meta.get("val")
    if not (_plain(fs) and _plain(out) and _eligible(lw, out) and (fs.dtype, out.dtype) in _CONVERSIONS
            and fs.device == out.device and list(fs.shape) == list(out.shape) and fs.is_contiguous()
            and out.is_contiguous()):
        return False
    return _emit(lw, node, builtin_kernels.convert, {"a": x}, {})


def _single(fake, out) -> bool:
    """A 0-dim tensor of out's dtype and device: one element ATen broadcasts over out."""
    return (isinstance(fake, torch.Tensor) and fake.dim() == 0 and fake.layout == torch.strided
            and fake.dtype == out.dtype and fake.device == out.device)


def _same_layout(lw, fa, out, dtypes=_FLOAT_DTYPES) -> bool:
    """fa and the result are plain contiguous tensors of one shape, device and dtype, one of `dtypes`,
    that the builtin kernels serve: the only case they are written for."""
    return (_plain(fa) and _plain(out) and _eligible(lw, out) and fa.dtype == out.dtype
            and fa.dtype in dtypes and fa.device == out.device and list(fa.shape) == list(out.shape)
            and fa.is_contiguous() and out.is_contiguous())


def _emit(lw, node: fx.Node, kernel, inputs: dict, values: dict) -> bool:
    """Allocate node's result and launch `kernel` over its n elements: inputs are the kernel's tensor
    arguments (name -> fx node), values its other ones; `out`, `n` and `BLOCK` are filled in."""
    out = node.meta.get("val")
    res = _allocate(lw, node, out)
    tensors = {name: (lazy_views.launch_operand(lw, node, a), a.meta["val"]) for name, a in inputs.items()}
    _launch(lw, node, kernel, {**tensors, "out": (res, out)}, {**values, "n": out.numel(), "BLOCK": BLOCK},
            out.numel())
    return True


def _allocate(lw, node: fx.Node, out) -> str:
    """A contiguous tensor like `out` (node's traced result) as node's value: emitted and returned."""
    res = lw.value()
    lw.lines.append(hir.call(res, "aten::empty.memory_format", [
        lw.operand(node, list(out.shape)), lw.operand(node, out.dtype), "none", lw.operand(node, out.device), "false",
        "none"]))
    lw.ops.append("aten::empty.memory_format")
    lw.env[node] = res
    lw.value_fakes[res] = out
    return res


def _as_opmath(c) -> float:
    """The number ATen's CUDA add adds (and mul multiplies by): TensorIterator leaves a wrapped number on the CPU in its own
    dtype (int64 or double; only a CPU computation converts it to the tensor's dtype) and the kernel
    reads it as its opmath type, fp32 for fp16/bf16/fp32 tensors. So bf16 x + 0.3 adds fp32(0.3),
    not bf16(0.3). Converted here by the same ATen cast; an fp32 value is exact as the Python float
    the launch carries."""
    wrapped = torch.tensor(c, dtype=torch.int64 if isinstance(c, int) else torch.float64)
    return float(wrapped.to(torch.float32).item())
