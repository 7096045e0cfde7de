"""Every difference between the torch versions we support (2.11 on GPU machines, 2.13 on CPU CI)
is handled here and nowhere else."""
from __future__ import annotations

import contextlib
import sys
import threading

import torch
import torch.utils._pytree as pytree

TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def treespec_children(spec: pytree.TreeSpec) -> list:
    """Child specs of a pytree TreeSpec (the attribute was renamed across releases)."""
    children = getattr(type(spec), "children", None)
    if callable(children):          # 2.13: a method; children_specs is deprecated there
        return list(spec.children())
    return list(spec.children_specs)


def treespec_is_leaf(spec: pytree.TreeSpec) -> bool:
    return spec.is_leaf()


def export_program(module: torch.nn.Module, args: tuple, kwargs: dict,
                   dynamic_shapes=None) -> "torch.export.ExportedProgram":
    """Dynamo-based capture to a functional ATen graph (torch.export, strict mode)."""
    with _no_real_value_copies():
        ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=True)
    return ep.run_decompositions({})


# Strict export makes Dynamo keep a *real* copy of every tensor it lifts (each parameter, buffer
# and tensor argument) in OutputGraph.real_value_cache: torch/_dynamo/variables/builder.py,
# cache_real_value_when_export and _wrap_fx_preexisting_tensor both call _clone_input ->
# torch/_dynamo/utils.py clone_input (empty + copy_(x.clone())). That is a transient extra copy of
# all module state during capture (one full copy plus two of the largest tensor at the peak),
# freed when Dynamo compiles the graph. The cache is read only by get_real_value (running real
# ops for a constant-sourced tensor branch or an assume_constant_result call); it never shapes
# the captured graph. During trident's capture those two call sites store the tensor itself
# instead, which is what torch.compile (non-export) Dynamo's get_real_value uses anyway.
_capture = threading.local()


def _install_real_value_alias() -> bool:
    try:
        from torch._dynamo.variables import builder
        codes = frozenset({builder.cache_real_value_when_export.__code__,
                           builder._wrap_fx_preexisting_tensor.__code__})
        orig = builder._clone_input
    except (ImportError, AttributeError):
        return False
    if getattr(orig, "_trident_alias", False):
        return True

    def _clone_input(value, fake_mode):
        if getattr(_capture, "active", False) and sys._getframe(1).f_code in codes:
            return value
        return orig(value, fake_mode)

    _clone_input._trident_alias = True
    builder._clone_input = _clone_input
    return True


_alias_lock = threading.Lock()


@contextlib.contextmanager
def _no_real_value_copies():
    with _alias_lock:
        _install_real_value_alias()
    prev = getattr(_capture, "active", False)
    _capture.active = True
    try:
        yield
    finally:
        _capture.active = prev


def forget_example_inputs(ep) -> None:
    """An ExportedProgram keeps the real tensors it was exported with (torch 2.11+: _example_inputs).
    trident keeps programs for later re-lowering and must not keep a call's tensors (KV caches)
    alive with them; lowering reads only the graph, signature, state_dict and constants."""
    if hasattr(ep, "_example_inputs"):
        ep._example_inputs = None


def dim_auto():
    """The export marker for "symbolic unless the trace specializes it"."""
    return torch.export.Dim.AUTO
