"""Module state identity, kept cheap: the native hot path compares the metadata of each captured
parameter and buffer, and a global epoch bumped whenever any module anywhere registers, assigns, sets
to None or deletes a parameter, buffer or submodule, or changes training mode (dropout and batch norm
trace differently). Only then does the cold path re-read attributes and compare the state, the
modules' training flags and which parameters and buffers exist with the capture's
(CompiledFunction._on_state_change). torch's registration hooks run for none of these but a new
submodule and a non-None parameter or buffer, so nn.Module's own methods are wrapped instead."""
from __future__ import annotations

import functools

import torch

from . import _C

_installed = False


def _bump(*_args):
    # Modules built while a graph is traced (HF's `self.layers[:n]` slices a ModuleList inside
    # forward) are temporaries of the trace, and Dynamo cannot trace a C function: skip them.
    if torch.compiler.is_compiling():
        return
    _C.bump_state_epoch()


def install_hooks() -> None:
    global _installed
    if _installed:
        return
    torch.nn.modules.module.register_module_module_registration_hook(_bump)
    # register_parameter/register_buffer cover what torch's parameter and buffer hooks would, None too
    for name in ("train", "register_parameter", "register_buffer", "__delattr__"):
        _bump_after(torch.nn.Module, name)
    _bump_after_state_setattr(torch.nn.Module)
    _installed = True


def _bump_after(cls, name: str) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        _bump()
        return out

    setattr(cls, name, wrapper)


def _bump_after_state_setattr(cls) -> None:
    """`module.name = value` where name is a parameter or buffer slot, None included: torch runs no
    registration hook for a buffer assigned over an existing name."""
    original = cls.__setattr__

    @functools.wraps(original)
    def wrapper(self, name, value):
        original(self, name, value)
        d = self.__dict__
        if name in d.get("_buffers", ()) or name in d.get("_parameters", ()):
            _bump()

    cls.__setattr__ = wrapper
