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
    return out


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
