"""Module state identity, kept cheap: the native hot path compares the metadata of each captured
parameter and buffer, and a global epoch that these registration hooks bump whenever any module
anywhere assigns a parameter, buffer or submodule. Only then does the cold path re-read attributes."""
from __future__ import annotations

import torch

from . import _C

_installed = False


def _bump(*_args):
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
