"""The private memory pools of the ATen calls that replay their recorded launches
(csrc/runtime/replay/op_replay.h), shared between recordings.

A recording's outputs and workspace must stay memory no one else is given, so a recording routes
the thread's CUDA allocations to a private pool of PyTorch's caching allocator, as torch.cuda.graph
does. A pool's smallest segment is 2 MiB: with a pool per recording, the 8 cuDNN attention sites of
an HF Llama reserved 50-66 MiB at batch 8 against eager's 20 (benchmarks/NOTES.md, session 14).
Recordings for one (device, caller stream) share a pool instead.

Why sharing is safe. A pool hands its free blocks to the next recording routed to it, so no record
may still use a free block of a pool that stays shared:
  - a record's kept returns are allocated blocks until the record is dropped, and then no record
    uses them;
  - a workspace is a block the call frees at its end while its recorded launches use it: a
    recording during which any block of the device was freed (PyTorch's cumulative free count
    moved) retires the pool. The recording keeps its use, later recordings get a new pool, and the
    retired pool's memory goes back to PyTorch when its last record is dropped.
A dropped record's blocks go to a later recording whose replays are ordered after the old ones
only on the same stream: hence a pool per caller stream. PyTorch refuses two routings to one pool
at once: a recording that finds the current pool routed by another thread gets a pool of its own.

PyTorch counts a pool's uses (each routing adds one, each release takes one back); a pool whose
count reached zero may be freed, and routing to it again is an internal assertion. The registry's
count of each pool is PyTorch's, and a pool whose count reaches zero is forgotten. Every change,
PyTorch's calls included, happens under one lock; a thread waiting for it releases the GIL.
"""
from __future__ import annotations

import threading
from typing import Callable, Hashable

Pool = Hashable  # PyTorch's pool id, a pair of ints


class RecordingPools:
    """begin/end/release/segments as the native runtime calls them (csrc/runtime/memory/private_pool.h),
    over PyTorch's functions: begin_routing(device, pool), end_routing(device, pool),
    release_pool(device, pool), new_pool() -> an unused id, frees(device) -> the device's cumulative
    count of freed blocks, pool_segments(device, pool) -> [(address, bytes)]."""

    def __init__(self, begin_routing: Callable, end_routing: Callable, release_pool: Callable,
                 new_pool: Callable[[], Pool], frees: Callable[[int], int],
                 pool_segments: Callable[[int, Pool], list] = lambda device, pool: []):
        self._begin_routing, self._end_routing, self._release_pool = begin_routing, end_routing, release_pool
        self._new_pool, self._frees, self._pool_segments = new_pool, frees, pool_segments
        self._lock = threading.Lock()
        self._current: dict[tuple[int, int], Pool] = {}  # (device, stream) -> the pool recordings share
        self._uses: dict[tuple[int, Pool], int] = {}     # (device, pool) -> PyTorch's use count
        self._routing: dict[tuple[int, Pool], int] = {}  # (device, pool) -> frees(device) at begin

    def begin(self, device: int, stream: int) -> Pool:
        """Routes the calling thread's allocations on `device` to the pool of (device, stream)."""
        with self._lock:
            pool = self._current.get((device, stream))
            if pool is None or (device, pool) in self._routing:
                pool = tuple(self._new_pool())
                if (device, stream) not in self._current:
                    self._current[(device, stream)] = pool
            self._routing[(device, pool)] = self._frees(device)
            try:
                self._begin_routing(device, pool)
            except BaseException:
                del self._routing[(device, pool)]
                self._forget(device, pool)
                raise
            self._uses[(device, pool)] = self._uses.get((device, pool), 0) + 1
            return pool

    def end(self, device: int, pool: Pool) -> None:
        pool = tuple(pool)
        with self._lock:
            at_begin = self._routing.pop((device, pool))
            self._end_routing(device, pool)
            if self._frees(device) != at_begin:  # maybe a workspace the recorded launches use
                self._forget(device, pool)

    def release(self, device: int, pool: Pool) -> None:
        pool = tuple(pool)
        with self._lock:
            left = self._uses.get((device, pool), 1) - 1
            if left > 0:
                self._uses[(device, pool)] = left
            else:
                self._uses.pop((device, pool), None)
                self._forget(device, pool)
            self._release_pool(device, pool)

    def segments(self, device: int, pool: Pool) -> list[tuple[int, int]]:
        """The pool's segments as (address, bytes); read outside the lock (a snapshot of PyTorch's)."""
        return list(self._pool_segments(device, tuple(pool)))

    def pools(self) -> int:
        """Pools with uses: those recordings share, those retired and still used."""
        with self._lock:
            return len(self._uses)

    def _forget(self, device: int, pool: Pool) -> None:
        """No recording is routed to `pool` again."""
        for key in [k for k, p in self._current.items() if k[0] == device and p == pool]:
            del self._current[key]
