"""FlagGems operators as their users call them (`flag_gems.ops.<name>(...)`, the library's own
entry points, unmodified), at LLM decode and prefill shapes: the paper's kernel suite. Shared by
benchmarks/flaggems_ops.py and tests/python/test_flaggems_gpu.py.

With make_cases(through_torch=True) the same operators are called through torch instead, for use
under `flag_gems.enable()` or `use_gems()`, FlagGems' other entry point.

A case is (name, kind, make): make(tokens, hidden, device) returns (fn, args) where fn calls one
FlagGems operator; kind is "pointwise", "norm", "reduce", "gemm" or "data" (the pointwise ones
carry the issue's 5x target). Shapes are (tokens, hidden): tokens 1 and 8 are decode steps, 128
and 1024 prefill; hidden 4096 (Llama-8B) and 14336 (its MLP)."""
import sys

import torch

SHAPES = [(1, 4096), (8, 4096), (1, 14336), (128, 4096), (1024, 4096)]
DECODE_TOKENS = (1, 8)
DTYPE = torch.bfloat16


def _ops():
    import flag_gems.ops as ops
    return ops


class _TorchCalls:
    """The same operators called through torch, as code written for PyTorch calls them: under
    `flag_gems.enable()` / `use_gems()` FlagGems' kernels serve these ATen ops (its second way of
    use, make_cases(through_torch=True))."""
    add, mul, sub = staticmethod(torch.add), staticmethod(torch.mul), staticmethod(torch.sub)
    silu, gelu = staticmethod(torch.nn.functional.silu), staticmethod(torch.nn.functional.gelu)
    exp, lt, masked_fill = staticmethod(torch.exp), staticmethod(torch.lt), staticmethod(torch.masked_fill)
    pow_tensor_scalar, where_self = staticmethod(torch.pow), staticmethod(torch.where)
    rms_norm, layer_norm = staticmethod(torch.nn.functional.rms_norm), staticmethod(torch.nn.functional.layer_norm)
    softmax, sum, argmax = staticmethod(torch.softmax), staticmethod(torch.sum), staticmethod(torch.argmax)
    cumsum, sort, topk = staticmethod(torch.cumsum), staticmethod(torch.sort), staticmethod(torch.topk)
    mm, addmm, cat = staticmethod(torch.mm), staticmethod(torch.addmm), staticmethod(torch.cat)
    index_select = staticmethod(torch.index_select)

    @staticmethod
    def embedding(w, i):
        return torch.nn.functional.embedding(i, w)


def _x(t, h, dev, dtype=DTYPE):
    return torch.randn(t, h, device=dev, dtype=dtype)


def _case(fn, *args):
    return fn, args


def make_cases(through_torch: bool = False):
    """through_torch: each operator called through torch (run it under flag_gems.use_gems())."""
    g = _TorchCalls if through_torch else _ops()

    def add(t, h, dev): return _case(lambda x, y: g.add(x, y), _x(t, h, dev), _x(t, h, dev))
    def mul(t, h, dev): return _case(lambda x, y: g.mul(x, y), _x(t, h, dev), _x(t, h, dev))
    def sub(t, h, dev): return _case(lambda x, y: g.sub(x, y), _x(t, h, dev), _x(t, h, dev))
    def silu(t, h, dev): return _case(lambda x: g.silu(x), _x(t, h, dev))
    def gelu(t, h, dev): return _case(lambda x: g.gelu(x), _x(t, h, dev))
    def exp(t, h, dev): return _case(lambda x: g.exp(x), _x(t, h, dev))
    def pow_(t, h, dev): return _case(lambda x: g.pow_tensor_scalar(x, 2), _x(t, h, dev))
    def lt(t, h, dev): return _case(lambda x, y: g.lt(x, y), _x(t, h, dev), _x(t, h, dev))
    def masked_fill(t, h, dev):
        return _case(lambda x, m: g.masked_fill(x, m, -1e4), _x(t, h, dev), _x(t, h, dev) > 0)
    def where(t, h, dev):
        return _case(lambda c, x, y: g.where_self(c, x, y), _x(t, h, dev) > 0, _x(t, h, dev), _x(t, h, dev))
    def rms_norm(t, h, dev):
        return _case(lambda x, w: g.rms_norm(x, [h], w, 1e-6), _x(t, h, dev), _x(1, h, dev)[0])
    def layer_norm(t, h, dev):
        return _case(lambda x, w, b: g.layer_norm(x, [h], w, b, 1e-5), _x(t, h, dev), _x(1, h, dev)[0],
                     _x(1, h, dev)[0])
    def softmax(t, h, dev): return _case(lambda x: g.softmax(x, -1), _x(t, h, dev))
    def sum_(t, h, dev): return _case(lambda x: g.sum(x), _x(t, h, dev))
    def argmax(t, h, dev): return _case(lambda x: g.argmax(x, -1), _x(t, h, dev))
    def cumsum(t, h, dev): return _case(lambda x: g.cumsum(x, -1), _x(t, h, dev, torch.float32))
    def sort(t, h, dev): return _case(lambda x: g.sort(x, -1), _x(t, h, dev, torch.float32))
    def topk(t, h, dev): return _case(lambda x: g.topk(x, 8, -1), _x(t, h, dev, torch.float32))
    def mm(t, h, dev): return _case(lambda x, w: g.mm(x, w), _x(t, h, dev), _x(h, 1024, dev) * h ** -0.5)
    def addmm(t, h, dev):
        return _case(lambda b, x, w: g.addmm(b, x, w), _x(1, 1024, dev)[0], _x(t, h, dev), _x(h, 1024, dev) * h ** -0.5)
    def embedding(t, h, dev):
        return _case(lambda w, i: g.embedding(w, i), _x(32000, h, dev), torch.randint(0, 32000, (t,), device=dev))
    def cat(t, h, dev): return _case(lambda x, y: g.cat([x, y], -1), _x(t, h, dev), _x(t, h, dev))
    def index_select(t, h, dev):
        return _case(lambda x, i: g.index_select(x, 0, i), _x(t, h, dev), torch.randint(0, t, (t,), device=dev))

    return [("add", "pointwise", add), ("mul", "pointwise", mul), ("sub", "pointwise", sub),
            ("silu", "pointwise", silu), ("gelu", "pointwise", gelu), ("exp", "pointwise", exp),
            ("pow", "pointwise", pow_), ("lt", "pointwise", lt), ("masked_fill", "pointwise", masked_fill),
            ("where", "pointwise", where), ("rms_norm", "norm", rms_norm), ("layer_norm", "norm", layer_norm),
            ("softmax", "norm", softmax), ("sum", "reduce", sum_), ("argmax", "reduce", argmax),
            ("cumsum", "reduce", cumsum), ("sort", "reduce", sort), ("topk", "reduce", topk),
            ("mm", "gemm", mm), ("addmm", "gemm", addmm), ("embedding", "data", embedding),
            ("cat", "data", cat), ("index_select", "data", index_select)]


def python_calls_into(package: str, f, args) -> int:
    """How many Python functions of `package` one call f(*args) enters (0: none of its Python)."""
    calls = 0

    def profile(frame, event, _arg):
        nonlocal calls
        if event == "call" and f"/{package}/" in frame.f_code.co_filename:
            calls += 1
    sys.setprofile(profile)
    try:
        f(*args)
    finally:
        sys.setprofile(None)
    return calls
