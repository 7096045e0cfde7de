"""transformers' generate() with a forward trident compiled.

`model.forward = trident.compile(model.forward)` is how a user hands generate() a faster forward.
Two more things then change for that model's generate(), and nothing for other models:

- Its automatic torch.compile is skipped. On a CUDA model with a compileable cache
  (`cache_implementation="static"`), generate() would wrap the model's `__call__` in its own
  `torch.compile` (`GenerationMixin._valid_auto_compile_criteria`), so every decode step would enter
  a Dynamo frame around trident's native callable: Dynamo's guards on each call, a graph break at
  the callable, and CUDA graphs of nothing. It is skipped as for `disable_compile=True`.
- Its mask creation is compiled too. With a compileable cache, generate() builds each step's
  attention mask before calling the model (`prepare_inputs_for_generation` calls transformers'
  `create_masks_for_generate`): a dozen eager ATen calls per token, run after generate()'s
  per-token synchronization, while the device waits. The model gets `create_masks_for_generate`
  of its own (GenerateMasks): transformers' function itself, compiled by trident, one native call.
  A model class with its own `create_masks_for_generate` (Gemma3, PaliGemma, ...) keeps it.
"""
from __future__ import annotations

import inspect
import threading
import weakref

_lock = threading.Lock()
_MARK = "_trident_skips_auto_compile"


def _forward_is_tridents(model) -> bool:
    from . import _C
    return isinstance(model.__dict__.get("forward"), _C.SCM)


def install_for(fn) -> None:
    """Called by trident.compile: when `fn` is a transformers model's bound forward, generate() of
    models whose forward trident compiled skips transformers' automatic torch.compile (installed
    once per class), and the model gets its GenerateMasks (other models are untouched)."""
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
                break

            def _valid_auto_compile_criteria(self, model_kwargs, generation_config, _orig=orig):
                if _forward_is_tridents(self):
                    return False
                return _orig(self, model_kwargs, generation_config)

            setattr(_valid_auto_compile_criteria, _MARK, True)
            _valid_auto_compile_criteria.__doc__ = orig.__doc__
            setattr(cls, "_valid_auto_compile_criteria", _valid_auto_compile_criteria)
            break
        if "create_masks_for_generate" not in owner.__dict__ and not hasattr(type(owner), "create_masks_for_generate"):
            masks = GenerateMasks.for_model(owner)
            if masks is not None:
                owner.create_masks_for_generate = masks


class GenerateMasks:
    """`model.create_masks_for_generate` of a model whose forward trident compiled: transformers'
    `create_masks_for_generate`, compiled by trident (`compiled`, for counters() and explain()).

    Contract: called as transformers calls it (config, inputs_embeds, attention_mask, the cache,
    position_ids and other keywords), it returns what transformers' function returns for them. The
    compiled function serves calls with the model's own config and no other mask inputs (block or
    token-type ids, mask functions: their values are not arguments of the compiled function); any
    other call, and every call once the model's forward is no longer trident's, goes to
    transformers' function as it is. Compiled without graphs: eager's mask decision reads the
    padding mask's values (a host synchronization), which no CUDA graph can hold."""


    def __init__(self, model, original, cache_keyword: str):
        from . import compile as trident_compile
        self._model = weakref.ref(model)
        self._config = config = model.config
        self._original = original
        self._cache_keyword = cache_keyword

        def create_masks_for_generate(inputs_embeds, attention_mask, cache, position_ids):
            return original(config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                            position_ids=position_ids, **{cache_keyword: cache})

        self.compiled = trident_compile(create_masks_for_generate, graphs=False)

    # A copied or pickled model (copy.deepcopy, torch.save) gets transformers' own function: the copy's
    # forward is not this model's compiled one.
    def __deepcopy__(self, memo):
        return self._original

    def __reduce__(self):
        return (_transformers_masks_function, ())

    @classmethod
    def for_model(cls, model):
        try:
            from transformers import masking_utils
        except ImportError:
            return None
        original = getattr(masking_utils, "create_masks_for_generate", None)
        if original is None or not hasattr(model, "config"):
            return None
        params = inspect.signature(original).parameters
        # transformers 5.24 names the cache `cache`, earlier 5.x `past_key_values`
        keyword = "cache" if "cache" in params else "past_key_values" if "past_key_values" in params else None
        return cls(model, original, keyword) if keyword else None

    def __call__(self, config, inputs_embeds, attention_mask, *args, **kwargs):
        model = self._model()
        if args or model is None or config is not self._config or not _forward_is_tridents(model) or \
                any(v is not None and not isinstance(v, bool)  # another mask input: not an argument of `compiled`
                    for k, v in kwargs.items() if k not in ("position_ids", self._cache_keyword)):
            return self._original(config, inputs_embeds, attention_mask, *args, **kwargs)
        return self.compiled(inputs_embeds, attention_mask, kwargs.get(self._cache_keyword),
                             kwargs.get("position_ids"))


def _transformers_masks_function():
    """What an unpickled GenerateMasks becomes: transformers' own create_masks_for_generate."""
    from transformers import masking_utils
    return masking_utils.create_masks_for_generate
