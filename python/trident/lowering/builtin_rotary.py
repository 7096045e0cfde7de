"""The rotary embedding as Hugging Face models write it, lowered to one builtin launch:

    x * cos + cat([-x[..., h:], x[..., :h]], -1) * sin        (`rotate_half`, h = x.shape[-1] / 2)

ATen runs that as seven ops and five kernels (mul, neg, cat, mul, add) per tensor, twice per layer
(q and k); trident's kernel (builtin_kernels.rotate_half_rotary) computes the same values: in fp32,
rounded to the tensor's dtype after each multiplication as ATen's kernels round their results, then
added and rounded. The kernel is compiled without fp contraction: with Triton's default, LLVM
folds a rounded product and the sum into one fp16/bf16 fma and skips that rounding. Only fp16 and
bf16 (fp32 would be exact the same way but has no GPU test, so it stays ATen's), static shapes of
at most 4 dimensions, the rotated dimension last, cos and sin of x's dtype broadcast to x's shape,
and the pattern's inner results read by nothing else. Anything else stays ATen's ops.

plan() finds the patterns before lowering; Lowering.call skips their inner nodes (absorbed) and
emits the launch at the final add (lower)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from . import builtin_kernels, hir, lazy_views

aten = torch.ops.aten
_INT64_MAX = 2 ** 63 - 1
_DTYPES = (torch.float16, torch.bfloat16)


@dataclass
class Rotary:
    x: fx.Node
    cos: fx.Node
    sin: fx.Node
    inner: tuple  # the pattern's nodes before the add: lowered as nothing


def plan(lw) -> tuple[dict, set]:
    """({add node: Rotary}, the inner nodes of every match) for the graph lowered by lw."""
    from .builtin_lower import _eligible
    matches, absorbed = {}, set()
    nodes = list(lw.ep.graph.nodes)
    order = {n: k for k, n in enumerate(nodes)}
    for node in nodes:
        m = _match(node)
        if m is None or node in lw.folded or not _eligible(lw, node.meta["val"]):
            continue
        first = min(order[n] for n in m.inner)
        if any(n in lw.inplace for n in nodes[first:order[node]]):
            continue  # a write between the pattern's reads and the add: keep ATen's order
        matches[node] = m
        absorbed.update(m.inner)
    return matches, absorbed


def _call(n, target) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and n.target is target


def _only_used_by(n: fx.Node, users: set) -> bool:
    return set(n.users) <= users


def _match(add: fx.Node) -> Rotary | None:
    if not _call(add, aten.add.Tensor) or len(add.args) != 2 or add.kwargs.get("alpha", 1) != 1:
        return None
    for direct, rotated in (add.args, add.args[::-1]):
        m = _match_products(add, direct, rotated)
        if m is not None:
            return m
    return None


def _operands(mul: fx.Node, want) -> tuple | None:
    """(a, b) of mul with `want(a)` true, trying both orders."""
    if not _call(mul, aten.mul.Tensor) or len(mul.args) != 2 or mul.kwargs:
        return None
    for a, b in (mul.args, mul.args[::-1]):
        if isinstance(b, fx.Node) and want(a):
            return a, b
    return None


def _match_products(add, direct, rotated) -> Rotary | None:
    r = _operands(rotated, lambda a: _call(a, aten.cat.default))
    if r is None:
        return None
    cat, sin = r
    if len(cat.args) < 1 or len(cat.args[0]) != 2 or cat.kwargs:
        return None
    neg, low = cat.args[0]
    if not _call(neg, aten.neg.default) or not _call(low, aten.slice.Tensor):
        return None
    high = neg.args[0]
    if not _call(high, aten.slice.Tensor):
        return None
    x = high.args[0]
    d = _operands(direct, lambda a: a is x)
    if d is None or low.args[0] is not x:
        return None
    cos = d[1]
    if not _shapes_fit(x, cos, sin, add, cat, high, low):
        return None
    inner = (direct, rotated, cat, neg, high, low)
    users = set(inner) | {add}
    if not all(_only_used_by(n, users) for n in inner):
        return None
    return Rotary(x, cos, sin, inner)


def _slice(n: fx.Node, ndim: int):
    """(dim, start, end) of a step-1 slice, dim made non-negative."""
    args = list(n.args) + [None] * (5 - len(n.args))
    dim, start, end, step = args[1] or 0, args[2] or 0, args[3], args[4] or 1
    if n.kwargs or step != 1 or not all(isinstance(v, int) for v in (dim, start)):
        return None
    return dim % ndim, start, _INT64_MAX if end is None else end


def _shapes_fit(x, cos, sin, add, cat, high, low) -> bool:
    fakes = [n.meta.get("val") for n in (x, cos, sin, add)]
    if not all(isinstance(f, torch.Tensor) for f in fakes):
        return False
    fx_, fc, fs, out = fakes
    if not all(f.dtype == fx_.dtype and f.device == fx_.device and f.layout == torch.strided
               and all(isinstance(v, int) for v in (*f.shape, *f.stride())) for f in fakes):
        return False
    nd = fx_.dim()
    if fx_.dtype not in _DTYPES or not 1 <= nd <= 4 or fx_.numel() == 0 or list(out.shape) != list(fx_.shape):
        return False
    if fx_.is_neg() or fx_.is_conj() or fc.dim() > nd or fs.dim() > nd:
        return False
    for f in (fc, fs):  # broadcast to x's shape
        shape = [1] * (nd - f.dim()) + list(f.shape)
        if any(a not in (1, b) for a, b in zip(shape, fx_.shape)):
            return False
    size = fx_.shape[-1]
    if size % 2:
        return False
    h = size // 2
    cat_dim = cat.args[1] if len(cat.args) > 1 else 0
    if not isinstance(cat_dim, int) or cat_dim % nd != nd - 1:
        return False
    hi, lo = _slice(high, nd), _slice(low, nd)
    return (hi is not None and lo is not None and hi[:2] == (nd - 1, h) and hi[2] >= size
            and lo == (nd - 1, 0, h))


def _strides4(fake, shape4) -> list[int]:
    """fake's element strides over the 4-D shape it is broadcast to (0 where it broadcasts)."""
    pad = 4 - fake.dim()
    sizes, strides = [1] * pad + list(fake.shape), [0] * pad + list(fake.stride())
    return [0 if s == 1 and t != 1 else st for s, t, st in zip(sizes, shape4, strides)]


def lower(lw, node: fx.Node, m: Rotary) -> None:
    """Allocate the add's result with eager's strides and launch the kernel that computes it."""
    from .builtin_lower import BLOCK, _launch
    out = node.meta["val"]
    res = lw.value()
    lw.lines.append(hir.call(res, "aten::empty_strided", [
        lw.operand(node, list(out.shape)), lw.operand(node, list(out.stride())), lw.operand(node, out.dtype), "none",
        lw.operand(node, out.device), "false"]))
    lw.ops.append("aten::empty_strided")
    shape4 = [1] * (4 - out.dim()) + list(out.shape)
    values = {"n": out.numel(), "s1": shape4[1], "s2": shape4[2], "s3": shape4[3], "HALF": shape4[3] // 2,
              "BLOCK": BLOCK}
    tensors = {}
    for name, prefix, n in (("x", "x", m.x), ("c", "c", m.cos), ("sn", "t", m.sin)):
        fake = n.meta["val"]
        tensors[name] = (lazy_views.launch_operand(lw, node, n), fake)
        values.update({f"{prefix}{i}": st for i, st in enumerate(_strides4(fake, shape4))})
    tensors["out"] = (res, out)
    values.update({f"o{i}": st for i, st in enumerate(_strides4(out, shape4))})
    # No fp contraction: with it, LLVM turns the rounded products and their sum into one bf16x2/f16x2
    # fma, which skips the product's rounding (1 ulp off eager in a quarter of the elements on an H200).
    _launch(lw, node, builtin_kernels.rotate_half_rotary, tensors, values, out.numel(),
            options={"enable_fp_fusion": False})
    lw.env[node] = res
    lw.value_fakes[res] = out
