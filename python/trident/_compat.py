"""Every difference between the torch versions we support (2.11 on GPU machines, 2.13 on CPU CI)
is handled here and nowhere else."""
from __future__ import annotations

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
    ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=True)
    return ep.run_decompositions({})


def dim_auto():
    """The export marker for "symbolic unless the trace specializes it"."""
    return torch.export.Dim.AUTO
