"""What a lowering rule may use of the lowering in progress: the interface the rule modules
(builtin_lower, builtin_rotary, constant_fold, data_values, float_symbols, lazy_views,
triton_lower) are written against, instead of the whole `lower._Lowerer`. That class implements it;
tests/python/test_lowering_context.py checks that the rule modules touch nothing else of it, so a
change to the lowerer's other fields cannot break a rule, and a rule's needs are read here."""
from __future__ import annotations

from typing import Any, NoReturn, Protocol

import torch.fx as fx


class LoweringContext(Protocol):
    # -- the program being lowered, and what analyses decided before the run
    ep: Any                         # the ExportedProgram
    inplace: dict                   # node -> how it writes in place (reinplace.py)
    folded: dict                    # node -> the constant it folds to (constant_fold.py)
    records_autograd: bool          # the call runs with grad mode on and some input requires grad
    pending_copy: Any               # a builtin copy held back to share one launch (builtin_lower.copy)
    when: dict                      # launch region -> the $N of its condition (data_values.lower_when)
    region_launches: dict           # launch region -> its launches lowered under it (check_regions)
    host_read: str                  # where the program first reads a device value on the host (graph reads)
    sizing_call: str                # the first ATen call that computes its result's size on the host (graph off)

    # -- what the spec holds so far
    lines: list[str]                # the body's host IR lines, in order (hir.py writes each)
    ops: list[str]                  # what each emitted call or launch is, for explain
    extra_guards: list[str]         # guards the body's specializations need (alignment, % 16)
    kernel_notes: list[tuple]       # (kernel, config, grid, cache key) per launch, for explain

    # -- values
    env: dict                       # fx node -> its operand (%N, $N, a LazyView, a SymInt, ...)
    value_fakes: dict               # %N -> the fake tensor it holds
    view_key: dict                  # %N of a view -> (its base's key, op, operands): views computed once
    leaf_operand: dict              # argument leaf -> its operand in the body
    syms: Any                       # symbolic.Symbols: the symbols bound so far and their guards

    def value(self) -> str: ...                                   # a new %N
    def new_sym(self, float_: bool = False) -> str: ...           # a new $N (or $fN)
    def operand(self, node: fx.Node, a) -> str: ...               # an argument as an IR operand
    def literal(self, node: fx.Node, a) -> str: ...               # a Python constant as an operand
    def sym_operand(self, v) -> str: ...                          # an int or SymInt as an operand
    def hint(self, v, data_dependent: int | None = None) -> int: ...  # a SymInt's value in this call
    def known_when_lowering(self, v) -> bool: ...                 # not data-dependent
    def fail(self, node: fx.Node, what: str) -> NoReturn: ...     # UnsupportedError naming the node

    # -- kernels and the tensors they read
    def add_kernel(self, ck, cubin_path: str) -> int: ...         # a kernel declaration, its id
    def real_base(self, fake): ...                                # the real tensor a fake one views
    def alignment(self, fake) -> bool: ...                        # whether its data is 16-byte aligned
    def guard_alignment(self, fake) -> None: ...                  # and guard that it stays so
