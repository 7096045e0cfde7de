"""Test corpus for ``trident.compile``.

Every entry of :data:`CORPUS` is a :class:`Case`:

* ``make_fn()`` returns a *fresh* function object or ``nn.Module`` (modules are
  in eval mode and deterministically initialised; parameters keep
  ``requires_grad=True``).
* ``make_inputs(seed, dtype=None)`` returns a tuple of fresh positional
  arguments (CPU tensors, Python ints/floats/bools, ``None``, nested
  tuples/lists) drawn from a ``torch.Generator`` seeded with ``seed``.  The
  *signature* of the inputs (structure, dtypes, shapes, strides, Python scalar
  values) does not depend on ``seed``; only tensor values do.  ``dtype``
  selects the floating point dtype of the floating inputs (``None`` means
  float32); it is only honoured for the dtypes listed in ``Case.dtypes``.
* ``atol``/``rtol`` are the float32 tolerances; see :func:`tolerances` for the
  other dtypes.
* ``grad=True`` cases are run with grad mode enabled (inputs that require
  grad), every other case runs under ``torch.no_grad()``.

The module also holds the pytree helpers that the tests share (cloning inputs
while keeping their exact layout, structural comparison of outputs, aliasing
signatures).
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "Case",
    "CORPUS",
    "CASES_BY_NAME",
    "tolerances",
    "instantiate",
    "clone_tree",
    "tensor_leaves",
    "assert_tree_close",
    "alias_signature",
]

F32 = torch.float32
F64 = torch.float64
BF16 = torch.bfloat16
FLOAT_VARIANTS = (F64, BF16)


@dataclass
class Case:
    name: str
    make_fn: Callable[[], Any]
    make_inputs: Callable[..., tuple]
    atol: float
    rtol: float
    grad: bool = False
    # Extra floating dtypes (besides float32) that make_inputs accepts.  For
    # nn.Module cases the module is converted with ``module.to(dtype)``.
    dtypes: Tuple[torch.dtype, ...] = ()
    # Per-dtype overrides of (atol, rtol).
    dtype_tols: Dict[torch.dtype, Tuple[float, float]] = field(default_factory=dict)
    # Informational: the case returns outputs that alias inputs or each other,
    # or mutates inputs in place.
    aliases: bool = False
    mutates: bool = False


def tolerances(case: Case, dtype: Optional[torch.dtype]) -> Tuple[float, float]:
    """(atol, rtol) for running ``case`` with floating dtype ``dtype``."""
    if dtype is None or dtype == F32:
        return case.atol, case.rtol
    if dtype in case.dtype_tols:
        return case.dtype_tols[dtype]
    if dtype == F64:
        return 1e-9, 1e-9
    if dtype == BF16:
        return max(case.atol, 5e-2), max(case.rtol, 5e-2)
    if dtype == torch.float16:
        return max(case.atol, 1e-2), max(case.rtol, 1e-2)
    raise ValueError(f"no tolerances for {dtype}")


def instantiate(case: Case, dtype: Optional[torch.dtype] = None):
    """``case.make_fn()``, converted to ``dtype`` when it is a module."""
    fn = case.make_fn()
    if dtype is not None and dtype != F32 and isinstance(fn, nn.Module):
        fn = fn.to(dtype)
    return fn


# ---------------------------------------------------------------------------
# pytree helpers shared by the tests
# ---------------------------------------------------------------------------


def clone_tree(tree, _memo=None):
    """Deep clone of an input tree.

    Tensors are cloned *with their exact layout*: the whole underlying storage
    is copied and the clone is rebuilt with the same storage offset, sizes and
    strides (so transposed, sliced or expanded inputs keep their strides).
    Tensors that share a storage in ``tree`` share the (cloned) storage in the
    result.  ``requires_grad`` is preserved (clones are leaves).
    """
    memo = {} if _memo is None else _memo
    if isinstance(tree, torch.Tensor):
        st = tree.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if key not in memo:
            memo[key] = st.clone()
        with torch.no_grad():
            out = torch.empty(0, dtype=tree.dtype, device=tree.device)
            out.set_(memo[key], tree.storage_offset(), tree.size(), tree.stride())
        if tree.requires_grad:
            out.requires_grad_(True)
        return out
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(clone_tree(t, memo) for t in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(clone_tree(t, memo) for t in tree)
    if isinstance(tree, dict):
        return type(tree)((k, clone_tree(v, memo)) for k, v in tree.items())
    return tree


def tensor_leaves(tree, prefix="") -> List[Tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor leaf in ``tree``, in pytree order."""
    out = []
    if isinstance(tree, torch.Tensor):
        out.append((prefix or "<root>", tree))
    elif isinstance(tree, (tuple, list)):
        for i, t in enumerate(tree):
            out.extend(tensor_leaves(t, f"{prefix}[{i}]"))
    elif isinstance(tree, dict):
        for k, v in tree.items():
            out.extend(tensor_leaves(v, f"{prefix}[{k!r}]"))
    return out


def assert_tree_close(actual, expected, atol, rtol, path="out", check_requires_grad=True):
    """Structural + numerical comparison.

    Containers must have the same type (tuple vs list vs dict, exactly), the
    same length / keys (in the same order); tensors must have the same dtype,
    shape and device and be close within (atol, rtol) -- exact for
    non-floating dtypes; Python scalars must be equal and of the same type.
    """
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__} != expected {type(expected).__name__}"
    )
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert actual.device == expected.device, f"{path}: device {actual.device} != {expected.device}"
        if check_requires_grad:
            assert actual.requires_grad == expected.requires_grad, (
                f"{path}: requires_grad {actual.requires_grad} != {expected.requires_grad}"
            )
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            a, r = atol, rtol
        else:
            a, r = 0, 0
        torch.testing.assert_close(
            actual.detach(), expected.detach(), atol=a, rtol=r, equal_nan=True,
            msg=lambda m: f"{path}: {m}",
        )
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{path}: len {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_close(a, e, atol, rtol, f"{path}[{i}]", check_requires_grad)
    elif isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), (
            f"{path}: keys {list(actual.keys())} != {list(expected.keys())}"
        )
        for k in expected:
            assert_tree_close(actual[k], expected[k], atol, rtol, f"{path}[{k!r}]", check_requires_grad)
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), f"{path}: {actual!r} != nan"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _storage_key(t: torch.Tensor):
    return t.untyped_storage().data_ptr()


def alias_signature(outputs, inputs):
    """Describe how output tensors alias the inputs and each other.

    Returns a list with one entry per output tensor leaf:
    ``(path, input_aliases, output_aliases, layout)`` where ``input_aliases`` is a
    sorted tuple of ``(input_path, byte_offset, sizes, strides)`` for every
    input leaf sharing the output's storage (``byte_offset`` is
    ``out.data_ptr() - inp.data_ptr()``), and ``output_aliases`` is the sorted
    tuple of the other output paths sharing the storage (with their relative
    byte offset); ``layout`` is ``(sizes, strides)`` of an output that aliases
    anything (``None`` otherwise).  Two runs with the same aliasing behaviour
    produce equal signatures.
    """
    outs = tensor_leaves(outputs)
    ins = tensor_leaves(inputs)
    sig = []
    for p, o in outs:
        if o.numel() == 0:
            sig.append((p, (), (), None))
            continue
        ia = tuple(
            sorted(
                (ip, o.data_ptr() - i.data_ptr(), tuple(o.shape), tuple(o.stride()))
                for ip, i in ins
                if i.numel() > 0 and _storage_key(i) == _storage_key(o)
            )
        )
        oa = tuple(
            sorted(
                (p2, o2.data_ptr() - o.data_ptr())
                for p2, o2 in outs
                if p2 != p and o2.numel() > 0 and _storage_key(o2) == _storage_key(o)
            )
        )
        layout = (tuple(o.shape), tuple(o.stride())) if (ia or oa) else None
        sig.append((p, ia, oa, layout))
    return sig


# ---------------------------------------------------------------------------
# input helpers
# ---------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _dt(dtype):
    return F32 if dtype is None else dtype


def _randn(g, *shape, dtype=None, scale=1.0, requires_grad=False):
    t = (torch.randn(shape, generator=g) * scale).to(_dt(dtype))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rand(g, *shape, dtype=None, low=0.0, high=1.0):
    return (torch.rand(shape, generator=g) * (high - low) + low).to(_dt(dtype))


def _randint(g, low, high, *shape, dtype=torch.int64):
    return torch.randint(low, high, shape, generator=g, dtype=dtype)


def _bool_mask(g, *shape, p=0.5):
    return torch.rand(shape, generator=g) < p


def _fresh(f):
    """A new function object with the same code (so each make_fn() call
    returns a distinct callable)."""
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    g.__qualname__ = f.__qualname__
    return g


def _seeded_module(factory, seed=1234):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        m = factory()
    return m.eval()


# ---------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, d_in=32, d_hidden=64, d_out=16):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def _rope_tables(max_seq, head_dim, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    t = torch.arange(max_seq, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _apply_rope(x, cos, sin):
    # x: (B, H, T, D); cos/sin: (T, D)
    return x * cos + _rotate_half(x) * sin


class RotaryAttentionScores(nn.Module):
    """Parameters (q/k projections) + buffers (rotary cos/sin tables, a
    persistent per-head temperature)."""

    def __init__(self, dim=32, n_heads=4, max_seq=16):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        cos, sin = _rope_tables(max_seq, self.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("temperature", 0.5 + torch.rand(n_heads, 1, 1))

    def forward(self, x, start_pos):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        cos = self.cos[start_pos : start_pos + t]
        sin = self.sin[start_pos : start_pos + t]
        q = _apply_rope(q, cos, sin)
        k = _apply_rope(k, cos, sin)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim) * self.temperature
        return scores.softmax(dim=-1)


class LlamaBlock(nn.Module):
    """A small Llama-like decoder block with a KV cache passed as inputs.

    The key cache is written with slice assignment, the value cache with
    ``index_copy_``; both are mutated in place.
    """

    def __init__(self, dim=32, n_heads=4, n_kv_heads=2, hidden=64, max_seq=16, return_cache=False):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = dim // n_heads
        self.return_cache = return_cache
        self.attn_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        cos, sin = _rope_tables(max_seq, self.head_dim)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x, k_cache, v_cache, pos):
        b, t, d = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        cos = self.rope_cos[pos : pos + t]
        sin = self.rope_sin[pos : pos + t]
        q = _apply_rope(q, cos, sin)
        k = _apply_rope(k, cos, sin)
        # KV cache update (in place on the caller's tensors)
        k_cache[:, :, pos : pos + t] = k
        v_cache.index_copy_(2, torch.arange(pos, pos + t, device=x.device), v)
        keys = k_cache[:, :, : pos + t]
        values = v_cache[:, :, : pos + t]
        rep = self.n_heads // self.n_kv_heads
        keys = keys.repeat_interleave(rep, dim=1)
        values = values.repeat_interleave(rep, dim=1)
        i = torch.arange(t, device=x.device).unsqueeze(1)
        j = torch.arange(pos + t, device=x.device).unsqueeze(0)
        mask = j <= (i + pos)
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        attn = attn.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)
        x = x + self.wo(attn)
        h = self.ffn_norm(x)
        x = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        if self.return_cache:
            return x, k_cache, v_cache
        return x


class NormModules(nn.Module):
    """nn.LayerNorm + nn.BatchNorm1d (eval: running-stat buffers) + Dropout
    (identity in eval)."""

    def __init__(self, c=8, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.bn = nn.BatchNorm1d(c)
        self.drop = nn.Dropout(0.3)
        with torch.no_grad():
            self.ln.weight.copy_(1 + 0.1 * torch.randn(d))
            self.ln.bias.copy_(0.1 * torch.randn(d))
            self.bn.weight.copy_(1 + 0.1 * torch.randn(c))
            self.bn.bias.copy_(0.1 * torch.randn(c))
            self.bn.running_mean.copy_(0.2 * torch.randn(c))
            self.bn.running_var.copy_(0.5 + torch.rand(c))

    def forward(self, x):
        return self.drop(self.bn(self.ln(x)))


class EmbedProject(nn.Module):
    def __init__(self, vocab=50, dim=16, out=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.proj = nn.Linear(dim, out)

    def forward(self, ids):
        return self.proj(self.emb(ids)).tanh()


# ---------------------------------------------------------------------------
# functions
# ---------------------------------------------------------------------------


def f_mlp_tanh_gelu(x, w1, b1, w2):
    return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2)


def f_sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def f_sdpa_bool_mask(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def f_sdpa_float_mask_scale(q, k, v, bias):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)


def f_attention_manual(q, k, v, key_valid):
    # q, k, v: (B, H, T, D); key_valid: (B, T) bool
    t = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=q.device))
    allowed = causal & key_valid[:, None, None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return probs @ v, probs


def f_layer_norm_aten(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def f_view_ops(x):
    a = x.reshape(6, 32)
    b = x.view(2, 12, 8)
    c = x.transpose(1, 3)
    d = x.permute(3, 1, 0, 2)
    return a * 2, b + 1, c.sum(1), d * d, x.mT.reshape(-1)[:5] * 1.5


def f_split_chunk_cat_stack(x):
    a, b, c = x.split([3, 4, 5], dim=1)
    p, q = x.chunk(2, dim=0)
    y = torch.cat([c, a * 2, b], dim=1)
    z = torch.stack([p, q * 3], dim=0)
    u = torch.cat([p, q], dim=-1)
    parts = torch.unbind(x[:, :2], dim=1)
    return y, z, u, parts[0] - parts[1]


def f_slicing(x):
    a = x[::2] + 1
    b = x[1:-1:3] * 2
    c = x[-3:, -1] - x[:3, 0]
    d = x[..., 1::2].sum(-1)
    e = x[-2, 1::4, :3] * x[None, 0, -1, -3:]
    f = x.narrow(1, 2, 5).flip(0) - x[:, 2:7]
    return a, b, c, d, e, f


def f_expand_squeeze(x, y):
    a = x.expand(4, 5, 8) + y.unsqueeze(0).unsqueeze(0)
    b = x.squeeze(1) * 2
    c = a.flatten(1)
    d = y[None, :, None].expand(3, 8, 2).flatten(0, 1) + 1
    e = x.unsqueeze(-1).expand(-1, -1, -1, 3).flatten(start_dim=2).squeeze() - 1
    return a, b, c, d, e


def f_broadcasting(a, b, c, d):
    return a * b + c - d, torch.maximum(a, b), (a > b), a / (b.abs() + 1) ** d.abs()


def f_int_scalar(x, n, k):
    y = x * n + (n // 2) - k
    z = x.view(n, -1).sum(0) * k
    w = x.roll(k, dims=0) + n % 4
    return y, z, w, torch.arange(n, dtype=x.dtype) * k


def f_float_scalar(x, alpha, beta):
    return torch.clamp(x * alpha, min=-beta, max=beta) + alpha ** 2, x.abs().pow(beta) * (1.0 / alpha)


def f_bool_branch(x, use_relu):
    if use_relu:
        return x.relu() * 2
    return torch.sigmoid(x) - 0.5


def f_none_arg(x, w, bias, mask):
    y = x @ w
    if bias is not None:
        y = y + bias
    if mask is None:
        return y.softmax(-1)
    return y.masked_fill(mask, 0.0)


def f_masked_fill_where(x, mask):
    a = x.masked_fill(mask, -1.0)
    b = torch.where(mask, x, torch.zeros_like(x))
    c = torch.where(x > 0, x, 0.5 * x)
    d = torch.where(mask, 3.0, x)
    e = x.masked_fill(x.abs() < 0.5, float("-inf")).amax(-1)
    return a, b, c, d, e


def f_multiple_outputs(x, y):
    return x + y, x * y, (x - y).abs().mean(-1), (x * y).sum(), y.max(dim=-1)[0]


def f_nested_outputs(x, y):
    return {
        "a": (x + 1, [y * 2, x @ y.t()]),
        "b": [(x.sum(0),), {"c": y.mean(), "d": [x - y]}],
    }


def f_nested_inputs(xs, pair):
    a, (b, scale) = pair
    total = xs[0] + xs[1] * xs[2]
    return total * scale + a, [b.t() @ total, xs[2].sum()]


def f_alias_identity(x, y):
    return x, y + 1


def f_alias_view(x):
    return x.view(4, -1), x.transpose(0, 1), x.unsqueeze(0), x.reshape(-1)


def f_alias_slice(x):
    return x[1:], x[:, ::2], x[-1], x * 2


def f_outputs_alias_each_other(x, w):
    y = x @ w
    return y, y.t(), y[0]


def f_kv_cache_index_copy(k_cache, v_cache, k, v, idx, q):
    k_cache.index_copy_(2, idx, k)
    v_cache.index_copy_(2, idx, v)
    return F.scaled_dot_product_attention(q, k_cache, v_cache)


def f_kv_cache_slice_assign(cache, k, pos):
    cache[:, pos] = k
    return cache[:, : pos + 1].sum(1)


def f_kv_cache_returns_cache(cache, new, pos):
    cache[:, :, pos : pos + 2] = new
    return cache, cache[:, :, : pos + 2].mean(2)


def f_inplace_input_mutation(x, y):
    x.mul_(2).add_(y)
    y.clamp_(min=0.0)
    return x.sum(-1)


def f_inplace_intermediate(x):
    y = x.clone()
    y[:, 0] = 1.0
    y.add_(1.0)
    y.relu_()
    z = torch.zeros_like(x)
    z[1:, ::2] += x[1:, ::2]
    return y, z


def f_rotary_fn(x, cos, sin, offset):
    t = x.shape[-2]
    return _apply_rope(x, cos[offset : offset + t], sin[offset : offset + t])


def f_rotary_complex(x, freqs_cis):
    # Llama-style interleaved rotary embedding via complex multiplication.
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs_cis).flatten(-2)
    return out.type_as(x)


def f_softmax_logsoftmax(x):
    return (
        F.softmax(x, dim=-1),
        F.log_softmax(x, dim=0),
        torch.softmax(x * 3, dim=1, dtype=torch.float64),
        x.logsumexp(-1),
    )


def f_embedding_functional(ids, weight):
    return F.embedding(ids, weight) * 2.0


def f_argmax_topk(x):
    values, indices = torch.topk(x, 5, dim=-1)
    mx = x.max(dim=0)
    return (
        x.argmax(-1),
        x.argmax(),
        values,
        indices,
        x.argmin(0, keepdim=True),
        mx[0],
        mx[1],
        torch.sort(x[0], descending=True)[1],
    )


def f_cumsum(x, ints):
    return (
        x.cumsum(-1),
        x.cumsum(0, dtype=torch.float64),
        ints.cumsum(0),
        (x * 0.1 + 1).cumprod(1),
        x.logcumsumexp(1),
    )


def f_integer_ops(a, b):
    return (
        a + b,
        a * 3 - 7,
        torch.div(a, b, rounding_mode="floor"),
        torch.div(a, b, rounding_mode="trunc"),
        a // b,
        a % b,
        a & 7,
        a | b,
        a ^ b,
        a.abs() << 2,
        a.abs() >> 1,
        (a.abs() > 5).sum(),
        a.sum(dtype=torch.int64),
        torch.bitwise_not(a),
        a.float() / b,
        a.max(),
        torch.clamp(a, -5, 5),
    )


def f_bool_ops(p, q, x):
    return (
        p & q,
        p | q,
        p ^ q,
        ~p,
        torch.logical_and(p, q.t()),
        p.any(-1),
        q.all(0),
        p.sum(),
        p.to(torch.uint8) + q.to(torch.uint8),
        (x > 0) == p,
    )


def f_einsum(q, k, a, b, v):
    return (
        torch.einsum("bhqd,bhkd->bhqk", q, k),
        torch.einsum("ij,jk->ik", a, b),
        torch.einsum("bij->bji", q[0] * 2),
        torch.einsum("i,i->", v, v),
        torch.einsum("ij,j->i", a, v[: a.shape[1]]),
    )


def f_baddbmm_addmm(inp, b1, b2, bias, m1, m2, vec):
    return (
        torch.baddbmm(inp, b1, b2, beta=0.5, alpha=2.0),
        torch.addmm(bias, m1, m2),
        torch.bmm(b1, b2),
        torch.addmm(bias, m1, m2, beta=0.25, alpha=-1.5),
        torch.addmv(vec, m1, m2[:, 0]),
    )


def f_clamp_where_abs_exp(x):
    y = x.clamp(-1, 1).abs().exp()
    z = torch.where(y > 1.5, y.log(), -y)
    return z.exp().neg().sigmoid() * x.tanh(), x.clamp(min=-0.5).exp2() - x.abs().sqrt()


def f_dtype_conversion(x):
    h = x.to(torch.float16)
    back = h.to(x.dtype)
    return (
        back * 2,
        x.half().float().to(x.dtype) - x,
        (x * 10).to(torch.int32),
        x.to(torch.bfloat16).to(x.dtype),
        (x > 0).to(x.dtype),
        h * 2,
    )


def f_factory_ops(x):
    n = x.shape[-1]
    a = x + torch.arange(n, dtype=x.dtype)
    b = torch.zeros(3, n, dtype=x.dtype) + x[:3]
    c = x * torch.ones_like(x) + torch.full((n,), 2.5, dtype=x.dtype)
    d = torch.arange(0, 16, 2) * 3
    e = torch.ones(2, n, dtype=torch.int32).cumsum(1)
    f = torch.eye(n, dtype=x.dtype) @ x.t()
    g = torch.linspace(-1, 1, steps=n, dtype=x.dtype) * x
    return a, b, c, d, e, f, g


def f_contiguous_after_transpose(x):
    a = x.transpose(1, 2).contiguous().view(2, 4, 48)
    b = x.permute(0, 3, 1, 2).contiguous()
    return a, b * 2, b.view(-1)[:7]


def f_noncontiguous_inputs(a, b, c):
    return a + b * c, a @ b.t(), (a * c).sum(0)


def f_gather_scatter_index(x, idx, perm, src):
    return (
        torch.gather(x, 1, idx),
        x.index_select(0, perm),
        torch.zeros_like(x).scatter_add(1, idx, src),
        x.scatter(1, idx, src),
        x[perm, :3],
        x[:, idx[0]],
    )


def f_cross_entropy(logits, targets):
    return (
        F.cross_entropy(logits, targets),
        F.nll_loss(F.log_softmax(logits, dim=-1), targets, reduction="none"),
        F.cross_entropy(logits, targets, label_smoothing=0.1),
    )


def f_grad_tanh_matmul(x, w):
    return torch.tanh(x @ w).sum(-1), (x * x).mean()


# ---------------------------------------------------------------------------
# input factories
# ---------------------------------------------------------------------------


def i_mlp(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 8, 32, dtype=dtype),)


def i_mlp_grad(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 3, 32, dtype=dtype, requires_grad=True),)


def i_mlp_tanh_gelu(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 6, 24, dtype=dtype),
        _randn(g, 48, 24, dtype=dtype, scale=0.2),
        _randn(g, 48, dtype=dtype, scale=0.1),
        _randn(g, 12, 48, dtype=dtype, scale=0.2),
    )


def i_qkv(seed, dtype=None, b=2, h=4, tq=8, tk=8, d=16):
    g = _gen(seed)
    return (
        _randn(g, b, h, tq, d, dtype=dtype),
        _randn(g, b, h, tk, d, dtype=dtype),
        _randn(g, b, h, tk, d, dtype=dtype),
    )


def i_sdpa_causal(seed, dtype=None):
    return i_qkv(seed, dtype)


def i_sdpa_bool_mask(seed, dtype=None):
    q, k, v = i_qkv(seed, dtype, tq=8, tk=12)
    g = _gen(seed + 1000)
    mask = _bool_mask(g, 8, 12, p=0.6)
    mask[:, 0] = True  # no fully-masked rows
    return q, k, v, mask


def i_sdpa_float_mask(seed, dtype=None):
    q, k, v = i_qkv(seed, dtype, b=1, h=2, tq=6, tk=10, d=8)
    g = _gen(seed + 1000)
    return q, k, v, _randn(g, 1, 2, 6, 10, dtype=dtype)


def i_attention_manual(seed, dtype=None):
    q, k, v = i_qkv(seed, dtype, b=2, h=2, tq=6, tk=6, d=8)
    g = _gen(seed + 1000)
    key_valid = _bool_mask(g, 2, 6, p=0.7)
    key_valid[:, 0] = True
    return q, k, v, key_valid


def i_layer_norm(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 4, 6, 32, dtype=dtype, scale=2.0) + 0.5,
        1 + _randn(g, 32, dtype=dtype, scale=0.1),
        _randn(g, 32, dtype=dtype, scale=0.1),
        1e-5,
    )


def i_rms_norm(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 3, 5, 24, dtype=dtype),)


def i_view_ops(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 2, 3, 4, 8, dtype=dtype),)


def i_split(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 12, 6, dtype=dtype),)


def i_slicing(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 8, 10, 6, dtype=dtype),)


def i_expand(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 1, 8, dtype=dtype), _randn(g, 8, dtype=dtype))


def i_broadcasting(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 4, 1, 6, dtype=dtype),
        _randn(g, 1, 5, 6, dtype=dtype),
        _randn(g, 6, dtype=dtype),
        _randn(g, dtype=dtype),  # 0-dim tensor
    )


def i_int_scalar(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 6, 8, dtype=dtype), 3, 2)


def i_float_scalar(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 5, 7, dtype=dtype), 0.75, 1.5)


def i_bool_true(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 5, 6, dtype=dtype), True)


def i_bool_false(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 6, 5, dtype=dtype), False)


def i_none_arg(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 10, dtype=dtype), _randn(g, 10, 7, dtype=dtype), None, None)


def i_none_mixed(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 3, 9, dtype=dtype),
        _randn(g, 9, 5, dtype=dtype),
        _randn(g, 5, dtype=dtype),
        _bool_mask(g, 3, 5),
    )


def i_masked(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 6, 9, dtype=dtype), _bool_mask(g, 6, 9))


def i_two_same(seed, dtype=None, shape=(5, 7)):
    g = _gen(seed)
    return (_randn(g, *shape, dtype=dtype), _randn(g, *shape, dtype=dtype))


def i_nested_outputs(seed, dtype=None):
    return i_two_same(seed, dtype, (4, 6))


def i_nested_inputs(seed, dtype=None):
    g = _gen(seed)
    xs = [_randn(g, 4, 5, dtype=dtype) for _ in range(3)]
    return (xs, (_randn(g, 5, dtype=dtype), (_randn(g, 4, 3, dtype=dtype), 3)))


def i_alias_identity(seed, dtype=None):
    return i_two_same(seed, dtype, (3, 4))


def i_alias_view(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 8, 6, dtype=dtype),)


def i_alias_slice(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 5, 8, dtype=dtype),)


def i_outputs_alias_each_other(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 6, dtype=dtype), _randn(g, 6, 5, dtype=dtype))


def i_kv_index_copy(seed, dtype=None):
    g = _gen(seed)
    b, h, s, d, t = 2, 2, 10, 8, 3
    k_cache = _randn(g, b, h, s, d, dtype=dtype)
    v_cache = _randn(g, b, h, s, d, dtype=dtype)
    k = _randn(g, b, h, t, d, dtype=dtype)
    v = _randn(g, b, h, t, d, dtype=dtype)
    idx = torch.randperm(s, generator=g)[:t]  # unique positions
    q = _randn(g, b, h, 4, d, dtype=dtype)
    return k_cache, v_cache, k, v, idx, q


def i_kv_slice_assign(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 2, 10, 4, 8, dtype=dtype), _randn(g, 2, 4, 8, dtype=dtype), 3)


def i_kv_returns_cache(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 2, 3, 12, 4, dtype=dtype), _randn(g, 2, 3, 2, 4, dtype=dtype), 5)


def i_inplace_input(seed, dtype=None):
    return i_two_same(seed, dtype, (4, 9))


def i_inplace_intermediate(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 5, 6, dtype=dtype),)


def i_rotary_module(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 2, 5, 32, dtype=dtype), 3)


def i_rotary_fn(seed, dtype=None):
    g = _gen(seed)
    cos, sin = _rope_tables(16, 16)
    x = _randn(g, 2, 4, 6, 16, dtype=dtype)
    # add seed-dependent jitter so the tables are not constant across seeds
    jitter = _randn(g, 16, 16, scale=1e-3)
    return x, (cos + jitter).to(_dt(dtype)), (sin - jitter).to(_dt(dtype)), 2


def i_rotary_complex(seed, dtype=None):
    g = _gen(seed)
    x = _randn(g, 2, 6, 4, 16, dtype=dtype)  # (B, T, H, D)
    angles = _rand(g, 6, 1, 8, high=2 * math.pi)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    return x, freqs_cis


def i_softmax(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 16, dtype=dtype, scale=2.0),)


def i_embedding_module(seed, dtype=None):
    g = _gen(seed)
    return (_randint(g, 0, 50, 2, 7),)


def i_embedding_functional(seed, dtype=None):
    g = _gen(seed)
    return (_randint(g, 0, 30, 3, 5), _randn(g, 30, 12, dtype=dtype))


def i_argmax_topk(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 6, 20, dtype=dtype),)


def i_cumsum(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 5, 12, dtype=dtype), _randint(g, -100, 100, 7, 3))


def i_integer_ops(seed, dtype=None):
    g = _gen(seed)
    return (_randint(g, -20, 20, 5, 6, dtype=torch.int32), _randint(g, 1, 10, 5, 6))


def i_bool_ops(seed, dtype=None):
    g = _gen(seed)
    return (_bool_mask(g, 6, 6), _bool_mask(g, 6, 6, p=0.3), _randn(g, 6, 6))


def i_llama_prefill(seed, dtype=None):
    g = _gen(seed)
    b, kv, s, hd = 2, 2, 16, 8
    return (
        _randn(g, b, 4, 32, dtype=dtype),
        _randn(g, b, kv, s, hd, dtype=dtype),
        _randn(g, b, kv, s, hd, dtype=dtype),
        0,
    )


def i_llama_decode(seed, dtype=None):
    g = _gen(seed)
    b, kv, s, hd = 2, 2, 16, 8
    return (
        _randn(g, b, 1, 32, dtype=dtype),
        _randn(g, b, kv, s, hd, dtype=dtype),
        _randn(g, b, kv, s, hd, dtype=dtype),
        6,
    )


def i_einsum(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 2, 3, 5, 8, dtype=dtype),
        _randn(g, 2, 3, 7, 8, dtype=dtype),
        _randn(g, 6, 9, dtype=dtype),
        _randn(g, 9, 4, dtype=dtype),
        _randn(g, 10, dtype=dtype),
    )


def i_baddbmm(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 3, 4, 5, dtype=dtype),
        _randn(g, 3, 4, 6, dtype=dtype),
        _randn(g, 3, 6, 5, dtype=dtype),
        _randn(g, 7, dtype=dtype),
        _randn(g, 5, 8, dtype=dtype),
        _randn(g, 8, 7, dtype=dtype),
        _randn(g, 5, dtype=dtype),
    )


def i_clamp_chain(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 6, 10, dtype=dtype, scale=1.5),)


def i_dtype_conversion(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 8, dtype=dtype),)


def i_factory(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 8, dtype=dtype),)


def i_contiguous(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 2, 8, 4, 6, dtype=dtype),)


def i_noncontiguous(seed, dtype=None):
    g = _gen(seed)
    a = _randn(g, 16, 8, dtype=dtype).t()  # (8, 16), transposed strides
    b = _randn(g, 8, 32, dtype=dtype)[:, ::2]  # (8, 16), stride 2 in the last dim
    c = _randn(g, 8, 1, dtype=dtype).expand(8, 16)  # stride 0
    return a, b, c


def i_gather(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 6, 10, dtype=dtype),
        # unique column indices per row (scatter is only deterministic without duplicates)
        torch.stack([torch.randperm(10, generator=g)[:4] for _ in range(6)]),
        torch.randperm(6, generator=g),
        _randn(g, 6, 4, dtype=dtype),
    )


def i_cross_entropy(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 8, 10, dtype=dtype, scale=2.0), _randint(g, 0, 10, 8))


def i_norm_modules(seed, dtype=None):
    g = _gen(seed)
    return (_randn(g, 4, 8, 16, dtype=dtype, scale=1.5),)


def i_grad_tanh(seed, dtype=None):
    g = _gen(seed)
    return (
        _randn(g, 5, 8, dtype=dtype, requires_grad=True),
        _randn(g, 8, 6, dtype=dtype, requires_grad=True),
    )


# ---------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------

_VARIANTS = FLOAT_VARIANTS
_F64_ONLY = (F64,)


def _fn(f):
    return lambda: _fresh(f)


def _mod(factory):
    return lambda: _seeded_module(factory)


CORPUS: List[Case] = [
    # --- MLPs --------------------------------------------------------------
    Case("mlp_module", _mod(MLP), i_mlp, 1e-5, 1e-4, dtypes=_VARIANTS),
    Case("mlp_tanh_gelu_functional", _fn(f_mlp_tanh_gelu), i_mlp_tanh_gelu, 1e-5, 1e-4, dtypes=_VARIANTS),
    # --- attention ----------------------------------------------------------
    Case("sdpa_causal", _fn(f_sdpa_causal), i_sdpa_causal, 1e-5, 1e-4, dtypes=_VARIANTS),
    Case("sdpa_bool_mask", _fn(f_sdpa_bool_mask), i_sdpa_bool_mask, 1e-5, 1e-4, dtypes=_VARIANTS),
    Case("sdpa_float_mask_scale", _fn(f_sdpa_float_mask_scale), i_sdpa_float_mask, 1e-5, 1e-4, dtypes=_VARIANTS),
    Case("attention_manual_masked", _fn(f_attention_manual), i_attention_manual, 1e-5, 1e-4, dtypes=_VARIANTS),
    # --- normalisation ------------------------------------------------------
    Case("layer_norm_aten", _fn(f_layer_norm_aten), i_layer_norm, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("rms_norm_module", _mod(lambda: RMSNorm(24)), i_rms_norm, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("norm_modules_ln_bn_dropout", _mod(NormModules), i_norm_modules, 1e-5, 1e-5, dtypes=_VARIANTS),
    # --- shape manipulation -------------------------------------------------
    Case("view_reshape_transpose_permute", _fn(f_view_ops), i_view_ops, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("split_chunk_cat_stack", _fn(f_split_chunk_cat_stack), i_split, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("slicing_steps_negative", _fn(f_slicing), i_slicing, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("expand_unsqueeze_squeeze_flatten", _fn(f_expand_squeeze), i_expand, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("broadcasting", _fn(f_broadcasting), i_broadcasting, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("contiguous_after_transpose", _fn(f_contiguous_after_transpose), i_contiguous, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("noncontiguous_inputs", _fn(f_noncontiguous_inputs), i_noncontiguous, 1e-5, 1e-5, dtypes=_VARIANTS),
    # --- Python-level arguments ---------------------------------------------
    Case("int_scalar_arg", _fn(f_int_scalar), i_int_scalar, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("float_scalar_arg", _fn(f_float_scalar), i_float_scalar, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("bool_arg_branch_true", _fn(f_bool_branch), i_bool_true, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("bool_arg_branch_false", _fn(f_bool_branch), i_bool_false, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("none_args", _fn(f_none_arg), i_none_arg, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("optional_args_given", _fn(f_none_arg), i_none_mixed, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("nested_inputs_list_tuple", _fn(f_nested_inputs), i_nested_inputs, 1e-5, 1e-5, dtypes=_VARIANTS),
    # --- masks ------------------------------------------------------------------
    Case("masked_fill_where", _fn(f_masked_fill_where), i_masked, 1e-6, 1e-6, dtypes=_VARIANTS),
    # --- output structure & aliasing -------------------------------------------
    Case("multiple_outputs", _fn(f_multiple_outputs), lambda s, dtype=None: i_two_same(s, dtype, (5, 7)),
         1e-5, 1e-5, dtypes=_VARIANTS),
    Case("nested_outputs_dict_tuple_list", _fn(f_nested_outputs), i_nested_outputs, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("alias_return_input", _fn(f_alias_identity), i_alias_identity, 1e-6, 1e-6, dtypes=_VARIANTS, aliases=True),
    Case("alias_return_views", _fn(f_alias_view), i_alias_view, 1e-6, 1e-6, dtypes=_VARIANTS, aliases=True),
    Case("alias_return_slices", _fn(f_alias_slice), i_alias_slice, 1e-6, 1e-6, dtypes=_VARIANTS, aliases=True),
    Case("outputs_alias_each_other", _fn(f_outputs_alias_each_other), i_outputs_alias_each_other,
         1e-5, 1e-5, dtypes=_VARIANTS, aliases=True),
    # --- in-place updates -------------------------------------------------------
    Case("kv_cache_index_copy", _fn(f_kv_cache_index_copy), i_kv_index_copy, 1e-5, 1e-4,
         dtypes=_VARIANTS, mutates=True),
    Case("kv_cache_slice_assign", _fn(f_kv_cache_slice_assign), i_kv_slice_assign, 1e-5, 1e-5,
         dtypes=_VARIANTS, mutates=True),
    Case("kv_cache_return_mutated_cache", _fn(f_kv_cache_returns_cache), i_kv_returns_cache, 1e-5, 1e-5,
         dtypes=_VARIANTS, aliases=True, mutates=True),
    Case("inplace_input_mutation", _fn(f_inplace_input_mutation), i_inplace_input, 1e-5, 1e-5,
         dtypes=_VARIANTS, mutates=True),
    Case("inplace_on_intermediates", _fn(f_inplace_intermediate), i_inplace_intermediate, 1e-6, 1e-6,
         dtypes=_VARIANTS),
    # --- modules with parameters & buffers, rotary ------------------------------
    Case("rotary_module_params_buffers", _mod(RotaryAttentionScores), i_rotary_module, 1e-5, 1e-4,
         dtypes=_VARIANTS),
    Case("rotary_embedding_fn", _fn(f_rotary_fn), i_rotary_fn, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("rotary_complex_freqs_cis", _fn(f_rotary_complex), i_rotary_complex, 1e-5, 1e-5, dtypes=_F64_ONLY,
         dtype_tols={F64: (1e-5, 1e-5)}),  # computes in float32/complex64 whatever the input dtype
    Case("llama_block_prefill", _mod(LlamaBlock), i_llama_prefill, 1e-4, 1e-4, dtypes=_VARIANTS, mutates=True,
         dtype_tols={BF16: (1e-1, 5e-2)}),
    Case("llama_block_decode_returns_cache", _mod(lambda: LlamaBlock(return_cache=True)), i_llama_decode,
         1e-4, 1e-4, dtypes=_VARIANTS, aliases=True, mutates=True, dtype_tols={BF16: (1e-1, 5e-2)}),
    # --- reductions, indexing, losses -------------------------------------------
    Case("softmax_log_softmax", _fn(f_softmax_logsoftmax), i_softmax, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("embedding_module", _mod(EmbedProject), i_embedding_module, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("embedding_functional", _fn(f_embedding_functional), i_embedding_functional, 1e-6, 1e-6,
         dtypes=_VARIANTS),
    Case("argmax_topk", _fn(f_argmax_topk), i_argmax_topk, 0.0, 0.0, dtypes=_F64_ONLY),
    Case("cumsum_cumprod", _fn(f_cumsum), i_cumsum, 1e-5, 1e-5, dtypes=_F64_ONLY),
    Case("gather_scatter_index_select", _fn(f_gather_scatter_index), i_gather, 1e-6, 1e-6, dtypes=_VARIANTS),
    Case("cross_entropy_nll", _fn(f_cross_entropy), i_cross_entropy, 1e-5, 1e-5, dtypes=_VARIANTS),
    # --- integer / bool dtypes --------------------------------------------------
    Case("integer_ops", _fn(f_integer_ops), i_integer_ops, 1e-6, 1e-6),
    Case("bool_ops", _fn(f_bool_ops), i_bool_ops, 0.0, 0.0),
    # --- linear algebra ----------------------------------------------------------
    Case("einsum", _fn(f_einsum), i_einsum, 1e-5, 1e-4, dtypes=_VARIANTS),
    Case("baddbmm_addmm_addmv", _fn(f_baddbmm_addmm), i_baddbmm, 1e-5, 1e-4, dtypes=_VARIANTS),
    # --- elementwise chains, conversions, factories -------------------------------
    Case("clamp_where_abs_exp_chain", _fn(f_clamp_where_abs_exp), i_clamp_chain, 1e-5, 1e-5, dtypes=_VARIANTS),
    Case("dtype_conversion_roundtrip", _fn(f_dtype_conversion), i_dtype_conversion, 1e-6, 1e-6,
         dtypes=_F64_ONLY),
    Case("factory_ops_inside", _fn(f_factory_ops), i_factory, 1e-6, 1e-6, dtypes=_VARIANTS),
    # --- grad mode ------------------------------------------------------------------
    Case("grad_mlp_module", _mod(MLP), i_mlp_grad, 1e-5, 1e-4, grad=True, dtypes=_F64_ONLY),
    Case("grad_tanh_matmul", _fn(f_grad_tanh_matmul), i_grad_tanh, 1e-5, 1e-5, grad=True, dtypes=_F64_ONLY),
]

CASES_BY_NAME: Dict[str, Case] = {c.name: c for c in CORPUS}
assert len(CASES_BY_NAME) == len(CORPUS), "duplicate case names"
