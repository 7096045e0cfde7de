"""What a capture made under torch.autocast casts on every call: the parameters autocast converts
to its dtype (a float32 model's weights before each matmul). Eager autocast casts each such
parameter once per autocast region and keeps the copy (its weight cache: leaf tensors that require
grad); the captured program holds the cast as an op, so a native call reads the float32 weight
and writes the copy again every time. trident says so once (compiled.py), with what to do."""
from __future__ import annotations

import torch

_TO_COPY = torch.ops.aten._to_copy.default


def recast_parameters(ep) -> tuple[int, int, torch.dtype | None]:
    """(how many, bytes read and written, the dtype cast to) of the parameters `ep` casts on every
    call where eager autocast's weight cache would cast once: float32 parameters that require grad,
    cast to the autocast dtype of their device (as the cache's own condition reads; a model's own
    `.float()` of a weight is cast every call in eager too). Nothing outside torch.autocast."""
    params = ep.graph_signature.inputs_to_parameters
    count = moved = 0
    low = None
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in params:
            continue
        val = node.meta.get("val")
        if not (isinstance(val, torch.Tensor) and val.requires_grad and val.dtype == torch.float32
                and val.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(val.device.type)):
            continue
        to = torch.get_autocast_dtype(val.device.type)
        casts = sum(1 for u in node.users if u.target is _TO_COPY and u.kwargs.get("dtype") == to)
        if casts:
            count, low = count + 1, to
            moved += val.numel() * (val.element_size() + to.itemsize) * casts
    return count, moved, low


def note(ep) -> str:
    """The one-time note for a capture under autocast that recasts parameters every call; "" when
    it recasts none."""
    count, moved, dtype = recast_parameters(ep)
    if not count:
        return ""
    size = f"{moved / 2**20:.1f} MiB" if moved >= 2**20 else f"{moved / 2**10:.1f} KiB"
    return (f"under torch.autocast, this program casts {count} parameters to {str(dtype).replace('torch.', '')} "
            f"on every call ({size} read and written), where eager's autocast casts each once "
            f"per autocast region; a model converted to that dtype (model.to({dtype})) skips the casts")
