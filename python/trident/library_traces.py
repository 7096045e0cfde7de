"""What trident changes in third-party libraries while it captures, and only then.

Libraries branch on "am I being traced?" because a trace without guards (torch.export, ONNX) must
serve inputs it never saw. trident's trace has guards: every size and int a branch reads becomes
a guard of the specialization. Where a library's traced branch differs from its eager one only
for that reason, trident's capture takes the eager branch, so the program computes what eager
computes, bit for bit.

transformers' `masking_utils._ignore_causal_mask_sdpa`: eager skips building an attention mask (SDPA
then runs with `is_causal`, or unmasked for one query) where it can, deciding from sizes, ints and
the values of the padding mask and of a StaticCache's offset tensor. Traced, it always builds the
explicit mask, which selects another SDPA kernel and rounds differently in bf16 (a random-weight
model's greedy tokens then leave eager's). During trident's capture transformers' own function runs
with its tracing checks answered as eager answers them: what it reads of sizes becomes guards, and
what it reads of tensor values becomes the program's branch check (`expect`, data_values.py), so
a call whose padding mask or offset leads elsewhere runs the specialization of that branch.

Liger-Kernel's `LigerExperts.forward` (its MoE experts, which it puts in place of transformers'):
it loops over the experts the routing hit (`for expert_idx in expert_hit`, the rows of a
`nonzero`), a loop whose trip count is data; strict export stops there, and the program would run
split into pieces with Python between them. During capture it loops over every expert instead:
an expert no token chose gathers no rows, and its GEMMs, Liger's SwiGLU kernel (an empty grid) and
its `index_add_` of no rows change nothing, while the experts that were hit add their rows in the
same order as eager, so the result is eager's bit for bit, from one native program. The stand-in is
used only for the forward whose source it was written from (Liger 0.7.0); another is left alone.

Liger-Kernel's `dispatch` (0.8.5: its op dispatcher, which rotary embedding goes through): it picks
an implementation in Python (a registry behind locks, capability checks, environment overrides) and
is wrapped with `torch.compiler.disable`, so strict export stopped at every Liger-patched model's
rotary, and the Python route that follows cannot trace an MoE's `int(t.item())` (Liger's fused
MoE in Qwen3-MoE). During capture a stand-in makes the same choice by calling Liger's own resolver
outside the trace (`torch._dynamo.assume_constant_result`, keyed by the op, the requested
implementation and the inputs' device), then calls that implementation, which Dynamo traces to its
kernels. Used only for the dispatcher whose source it was written from (Liger 0.8.5).

Installed by `_compat.capturing()` for the duration of a capture; outside a trace the function that
stands in gives the original's answers (its tracing checks answer False there anyway).
Reading a tensor's value costs what it costs eager: the call waits for the device there.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import types

import torch

def _untraced(fn, **answers):
    """fn with the globals named in `answers` replaced: a copy of the function over a copy of its
    module's namespace (the module itself is untouched)."""
    scope = dict(fn.__globals__)
    scope.update(answers)
    return types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)


def _mask_skip_decision(orig):
    eager = _untraced(orig, is_tracing=lambda *a, **k: False, is_torchdynamo_exporting=lambda: False,
                      is_torchdynamo_compiling=lambda: False)

    def _ignore_causal_mask_sdpa(padding_mask, q_length, kv_length, q_offset, kv_offset, *args, **kwargs):
        return eager(padding_mask, q_length, kv_length, q_offset, kv_offset, *args, **kwargs)

    return _ignore_causal_mask_sdpa


# sha256 of `inspect.getsource(LigerExperts.forward)` in liger-kernel 0.7.0, which _every_expert restates
_LIGER_EXPERTS_0_7_0 = "db3c85ff4a87ea732ec7d7f81c383c21a50844db562f0ad4af405cdb360e73d7"


def _source_digest(fn) -> str | None:
    import hashlib
    import inspect
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def _every_expert(orig):
    """LigerExperts.forward (0.7.0) with its loop over every expert in place of those hit."""
    silu_mul = orig.__globals__["LigerSiLUMulFunction"]

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = torch.nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = silu_mul.apply(gate, up)
            current_hidden_states = torch.nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states

    return forward


# sha256 of `inspect.getsource` of Liger-Kernel 0.8.5's `dispatch` (unwrapped), which _resolved_dispatch restates
_LIGER_DISPATCH_0_8_5 = "18846b9bf91fe2d343e90385ec07eeaa5930628249a40aadea6dc9d0a70fd681"


def _resolved_dispatch(inner):
    """Liger's dispatch (0.8.5; `inner` its undecorated function) with the implementation chosen by
    Liger's resolver outside the trace: the choice is a string, a constant of the program, and the
    implementation is read from Liger's registry by it."""
    resolve, infer = inner.__globals__["resolve_impl"], inner.__globals__["_infer_device"]
    registry = sys.modules["liger_kernel.backends.registry"]

    @torch._dynamo.assume_constant_result
    def chosen(op_name: str, requested, device_index) -> str:
        return resolve(op_name, requested=requested, device=device_index).impl_name

    def dispatch(op_name, *args, impl=None, backend=None, **kwargs):
        if impl is None and backend is not None:
            impl = backend
        device = infer(args)
        name = chosen(op_name, impl, None if device is None else device.index)
        return registry._REGISTRY[(op_name, name)].call(*args, **kwargs)

    return dispatch


def _liger_dispatch_swaps() -> list[tuple[object, str, object]]:
    """Every loaded Liger module's `dispatch` global that is the 0.8.5 dispatcher, with its stand-in."""
    import inspect
    module = sys.modules.get("liger_kernel.backends.dispatch")
    orig = vars(module).get("dispatch") if module is not None else None
    if orig is None or not inspect.getattr_static(orig, "_torchdynamo_disable", False):
        return []
    inner = inspect.unwrap(orig)
    if _source_digest(inner) != _LIGER_DISPATCH_0_8_5 or "liger_kernel.backends.registry" not in sys.modules:
        return []
    stand_in = _resolved_dispatch(inner)
    return [(m, "dispatch", stand_in) for name, m in list(sys.modules.items())
            if name.split(".")[0] == "liger_kernel" and m is not None and vars(m).get("dispatch") is orig]


def _swaps() -> list[tuple[object, str, object]]:
    """(namespace, name, stand-in) for each library function trident changes, of the libraries the
    process has imported (nothing is imported here)."""
    out = []
    masks = sys.modules.get("transformers.masking_utils")
    orig = getattr(masks, "_ignore_causal_mask_sdpa", None)
    code = getattr(orig, "__code__", None)
    # the decision's signature as this module knows it (transformers 5.x); another is left alone
    if code is not None and code.co_varnames[:5] == ("padding_mask", "q_length", "kv_length", "q_offset", "kv_offset"):
        out.append((masks, "_ignore_causal_mask_sdpa", _mask_skip_decision(orig)))
    experts = getattr(sys.modules.get("liger_kernel.transformers.swiglu"), "LigerExperts", None)
    forward = getattr(experts, "forward", None)
    if forward is not None and _source_digest(forward) == _LIGER_EXPERTS_0_7_0:
        out.append((experts, "forward", _every_expert(forward)))
    return out + _liger_dispatch_swaps()


_lock = threading.Lock()
_active = 0                    # captures in progress, over all threads
_swapped: list[tuple] = []     # (namespace, name, original) while _active > 0


@contextlib.contextmanager
def eager_decisions():
    """Within: the stand-ins are installed, for as long as any thread captures."""
    global _active
    with _lock:
        if _active == 0:
            for scope, name, stand_in in _swaps():
                _swapped.append((scope, name, getattr(scope, name)))
                setattr(scope, name, stand_in)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for scope, name, orig in reversed(_swapped):
                    setattr(scope, name, orig)
                _swapped.clear()
