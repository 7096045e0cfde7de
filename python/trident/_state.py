"""Module state identity, kept cheap: the native hot path compares the metadata of each captured
parameter and buffer, and a global epoch that these registration hooks bump whenever any module
anywhere assigns a parameter, buffer or submodule. Only then does the cold path re-read attributes."""
from __future__ import annotations

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
    m = torch.nn.modules.module
    m.register_module_parameter_registration_hook(_bump)
    m.register_module_buffer_registration_hook(_bump)
    m.register_module_module_registration_hook(_bump)
    _installed = True
