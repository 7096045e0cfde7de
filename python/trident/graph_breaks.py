"""Graph breaks under trident.compile: where a call cannot be captured as one program (a call into an
opaque extension or a torch.compiler.disable'd function, a construct the lowering cannot take), it
runs the way torch.compile(fn, backend="trident") runs it: Dynamo splits the function at its
breaks, each piece between two breaks is a native module of its own (backend.GraphFunction), and
Python runs what lies between the pieces. The strict capture's error names the first break (the
user's file and line first); it is said once per function and shown by trident.explain.

Contract: a call whose capture key split once goes this way from then on (the capture is not
tried again); other argument structures are still captured whole. `fullgraph=True` raises the
capture's UnsupportedError instead, as torch.compile(fullgraph=True) does."""
from __future__ import annotations

import dataclasses
import functools
import weakref

import torch

from .config import Options


class SplitRoute:
    """One function's calls that run split at graph breaks (one torch.compile of it, shared by every
    capture key that split: Dynamo guards and recompiles per call signature itself)."""

    def __init__(self, fn, options: Options):
        from .backend import trident_backend
        self.pieces: list[weakref.ref] = []  # the GraphFunctions Dynamo's graphs of fn became
        self.calls = 0
        backend = functools.partial(trident_backend, options=dataclasses.asdict(options), sink=self.pieces)
        self._run = torch.compile(fn, backend=backend)

    def __call__(self, args: tuple, kwargs: dict):
        self.calls += 1
        return self._run(*args, **kwargs)

    def live_pieces(self) -> list:
        from .backend import live_graphs
        return live_graphs(self.pieces)

    def counters(self) -> dict:
        """split_calls: calls that ran split; split_pieces: native modules of its pieces alive now;
        split_piece_hits / split_piece_fallbacks: their pieces' native hits and eager runs."""
        pieces = [g.scm.counters() for g in self.live_pieces() if g.scm is not None]
        return {"split_calls": self.calls, "split_pieces": len(pieces),
                "split_piece_hits": sum(c["hits"] for c in pieces),
                "split_piece_fallbacks": sum(c["fallbacks"] for c in pieces)}
