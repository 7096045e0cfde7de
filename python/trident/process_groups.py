"""The process groups a compiled program's collectives run on, and when its specializations stop
being valid for them (tensor parallelism over torch.distributed).

A captured program names each group by its registered name (`_c10d_functional::all_reduce(x, "sum",
"0")`); the native call resolves that name on every run, on the caller's stream. What the traced
Python read of a group (`dist.get_rank()`, `get_world_size()`, the shard a rank slices) is baked
into the program, so a specialization is valid only while each group it names has the rank and
size it had at capture. Those cannot change while the group lives: a new group gets a new name,
and a name comes back only after `destroy_process_group` (the default group's "0" when the world
is initialized again). So the check costs nothing per call: when any process group is destroyed,
every compiled function holding specializations that call collectives drops them, and its next call
captures again for the groups then in force; saved specializations (artifacts.py) record each
spec's groups and install only where every one has the same rank and size.
"""
from __future__ import annotations

import logging
import re
import threading
import weakref

log = logging.getLogger("trident")

_CALL = re.compile(r'call "_c10d_functional::\w+" \((.*)\)\s*$')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')

_lock = threading.Lock()
_holders: "weakref.WeakSet" = weakref.WeakSet()
_hooked = False


def used_by(spec_text: str) -> list[list]:
    """[name, rank, size] of each process group the spec's collectives name, as they are now (the
    group name is a collective's last string argument)."""
    names = []
    for line in spec_text.splitlines():
        m = _CALL.search(line)
        if m:
            strings = _STRING.findall(m.group(1))
            if strings and strings[-1] not in names:
                names.append(strings[-1])
    return [[name, *identity(name)] for name in names]


def identity(name: str) -> tuple[int, int]:
    """(rank, size) of this process in the group registered as `name`; (-1, -1) when there is none."""
    import torch.distributed as dist
    try:
        from torch.distributed.distributed_c10d import _resolve_process_group
        group = _resolve_process_group(name)
        return dist.get_rank(group), dist.get_world_size(group)
    except (RuntimeError, ValueError, KeyError, AttributeError):
        return -1, -1


def mismatch(groups: list[list]) -> str | None:
    """Why specs recorded with `groups` do not fit this process's groups now; None when they do."""
    for name, rank, size in groups:
        now = identity(name)
        if now != (rank, size):
            here = "does not exist" if now == (-1, -1) else f"is rank {now[0]} of {now[1]}"
            return f"process group '{name}' {here} here; the specialization was captured as rank {rank} of {size}"
    return None


def hold(controller) -> None:
    """`controller` holds specs that call collectives: they are dropped when a group is destroyed."""
    global _hooked
    with _lock:
        _holders.add(controller)
        if _hooked:
            return
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
        original = c10d.destroy_process_group

        def destroy_process_group(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            finally:
                _forget_all()

        destroy_process_group.__wrapped__ = original
        destroy_process_group.__doc__ = original.__doc__
        c10d.destroy_process_group = destroy_process_group
        dist.destroy_process_group = destroy_process_group
        _hooked = True


def _forget_all() -> None:
    with _lock:
        holders = list(_holders)
        _holders.clear()
    for controller in holders:
        controller.forget_for_groups()
