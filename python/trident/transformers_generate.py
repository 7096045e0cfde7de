"""transformers' generate() with a forward trident compiled.

`model.forward = trident.compile(model.forward)` is how a user hands generate() a faster forward. On
a CUDA model with a compileable cache (`cache_implementation="static"`), generate() would also wrap
the model's `__call__` in its own `torch.compile` (`GenerationMixin._valid_auto_compile_criteria`),
so every decode step would enter a Dynamo frame around trident's native callable: Dynamo's guards on
each call, a graph break at the callable, and CUDA graphs of nothing. Once trident has compiled a
model's forward, that model's generate() skips its automatic torch.compile, as it does for
`disable_compile=True`; a model whose forward is its own keeps transformers' behaviour.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_MARK = "_trident_skips_auto_compile"


def _forward_is_tridents(model) -> bool:
    from . import _C
    return isinstance(model.__dict__.get("forward"), _C.SCM)


def install_for(fn) -> None:
    """Called by trident.compile: when `fn` is a transformers model's bound forward, generate() of
    models whose forward trident compiled skips transformers' automatic torch.compile (once per
    process; other models are untouched)."""
    owner = getattr(fn, "__self__", None)
    criteria = getattr(type(owner), "_valid_auto_compile_criteria", None) if owner is not None else None
    # the class's forward, whatever its name (Liger's apply_liger_kernel_to_* installs lce_forward)
    if criteria is None or getattr(fn, "__func__", None) is not getattr(type(owner), "forward", None):
        return
    with _lock:
        for cls in type(owner).__mro__:
            orig = cls.__dict__.get("_valid_auto_compile_criteria")
            if orig is None:
                continue
            if getattr(orig, _MARK, False):
                return

            def _valid_auto_compile_criteria(self, model_kwargs, generation_config, _orig=orig):
                if _forward_is_tridents(self):
                    return False
                return _orig(self, model_kwargs, generation_config)

            setattr(_valid_auto_compile_criteria, _MARK, True)
            _valid_auto_compile_criteria.__doc__ = orig.__doc__
            setattr(cls, "_valid_auto_compile_criteria", _valid_auto_compile_criteria)
            return
