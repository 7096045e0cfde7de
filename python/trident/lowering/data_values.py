"""Data-dependent values computed natively (docs/host_ir.md): what torch.export calls unbacked symbols.

A value the trace cannot know before the program runs becomes a `$N` the program computes:
  - `.item()` of a one-element tensor (`n.max().item()`; `.tolist()` is an `.item()` per element):
    `$N = item %t` for an int or bool, `$fN = item %t` for a float. Like eager's `.item()`, it
    waits for the device where the tensor is on one;
  - the size of a result whose size depends on data (`nonzero`, `masked_select`, `unique`):
    `$N = size %r, d`, read from the result ATen returned.
Later sizes, views, allocations, grids and kernel integers read them like any other symbol
(symbolic.py).

A branch on a tensor's value (`if mask.all():`) is traced the way this call takes it, the condition
recorded as `_assert_async(cond, BRANCH_MARK ...)` (_compat.py). Its program checks the condition
first, `$N = item %cond` and `expect $N, "..."`, the ops computing it moved before everything else
(they read only the call's arguments and module state: the capture refused conditions on anything
written in place): a call whose data goes the other way stops there, before anything is written,
and runs the next specialization whose guards hold, or is captured for its own branch. The trace's runtime assertions about them (`torch._check(n <= x.size(0))`, a size's
`u0 >= 0`) become `check $N, "message"`: the call raises RuntimeError with export's message where
the assertion fails, instead of running with a value the trace excluded. Assertions about sizes of
arguments only stay guards (the spec's, checked before it runs).
"""
from __future__ import annotations

import math

import sympy
import torch
import torch.fx as fx

from . import hir
from .float_symbols import FloatSym

ITEM_OPS = {torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default}
ASSERT_OP = torch.ops.aten._assert_scalar.default
ASSERT_ASYNC_OP = torch.ops.aten._assert_async.msg


def _unbacked_symbol(v) -> sympy.Symbol | None:
    """The unbacked symbol `v` is, when it is exactly one (a fresh data-dependent value)."""
    if not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return None
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    expr = v.node.expr
    return expr if isinstance(expr, sympy.Symbol) and expr in free_unbacked_symbols(expr) else None


def _item(lw, node: fx.Node, v: str, src: str) -> None:
    """`v = item src`: the host waits for the device to read a value, which no one CUDA graph can
    hold; the first such read is the program's `graph reads` line (lower.py)."""
    lw.lines.append(hir.item(v, src))
    if not lw.host_read:
        from .lower import user_file_line
        lw.host_read = user_file_line(node) or node.name


def lower_item(lw, node: fx.Node) -> bool:
    """`.item()` of a tensor the program computes (or an argument): True when lowered here."""
    if node.target not in ITEM_OPS or len(node.args) != 1 or not isinstance(node.args[0], fx.Node):
        return False
    from .float_symbols import is_item_of_float
    if is_item_of_float(lw, node):  # a float argument's own value (float_symbols.py)
        return False
    val = node.meta.get("val")
    symbol = _unbacked_symbol(val)
    if symbol is None:
        return False
    src = lw.operand(node, node.args[0])
    if isinstance(val, torch.SymFloat):
        v = lw.new_sym(float_=True)
        _item(lw, node, v, src)
        lw.syms.sym[symbol] = v
        lw.env[node] = FloatSym(v, math.nan)  # its value is the data's: nothing at lowering reads it
        return True
    v = lw.new_sym()
    _item(lw, node, v, src)
    lw.syms.sym[symbol] = v
    lw.env[node] = val
    return True


def bind_result_sizes(lw, node: fx.Node, name: str, results: list[str], val) -> None:
    """After a call: each data-dependent size of its tensor results becomes a `$N` read from it. A
    call that computes such a size from device data on the host waits for the device: the first is
    the program's `graph off` reason (lower.py). Those are the ops torch tags `dynamic_output_shape`
    (nonzero, masked_select, a boolean index, unique, bincount) and composite ops whose
    decomposition may call one (`torch.where(cond)`, `repeat_interleave` of a tensor: the lowering
    calls the composite). Other calls only carry a size the host already knows (a slice ending at an
    `.item()`, then a `mul` of it): reading it is no wait."""
    syncs = _sizes_on_the_host(node.target)
    fakes = val if isinstance(val, (list, tuple)) else [val]
    for r, fake in zip(results, fakes):
        if not isinstance(fake, torch.Tensor):
            continue
        for d, size in enumerate(fake.shape):
            symbol = _unbacked_symbol(size)
            if symbol is not None and symbol not in lw.syms.sym:
                v = lw.new_sym()
                lw.lines.append(hir.size(v, r, d))
                lw.syms.sym[symbol] = v
                if syncs and not lw.sizing_call:
                    from .lower import user_file_line
                    where = user_file_line(node)
                    lw.sizing_call = f"{name} computes its result's size on the host" + (f" at {where}" if where else "")


def _sizes_on_the_host(target) -> bool:
    """Whether an op may compute its result's size from device data (bind_result_sizes)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.dynamic_output_shape in target.tags:
        return True
    return torch._C._dispatch_has_kernel_for_dispatch_key(target.name(), "CompositeImplicitAutograd")


def lower_assert(lw, node: fx.Node) -> bool:
    """`_assert_scalar(cond, msg)` about data-dependent values the program computes: a native check.
    True when lowered here; False for assertions the guards already enforce (argument sizes only)
    or about values the program never computes (nothing reads them)."""
    if node.target is not ASSERT_OP or not node.args or not isinstance(node.args[0], fx.Node):
        return False
    cond = node.args[0].meta.get("val")
    if not isinstance(cond, torch.SymBool):
        return False
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    expr = cond.node.expr
    unbacked = free_unbacked_symbols(expr)
    if not unbacked or not all(s in lw.syms.sym for s in unbacked):
        return False
    v = lw.syms.emit(expr, lw.lines, lw.new_sym)
    message = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], str) else f"Runtime assertion failed: {expr}"
    lw.lines.append(hir.check(v, message))
    return True


def _is_branch(node: fx.Node) -> bool:
    from .._compat import BRANCH_MARK
    return (node.op == "call_function" and node.target is ASSERT_ASYNC_OP and len(node.args) == 2
            and isinstance(node.args[1], str) and node.args[1].startswith(BRANCH_MARK))


def program_order(graph: fx.Graph) -> list[fx.Node]:
    """The graph's nodes in the order the program runs them: inputs, then every traced branch's
    condition with what it depends on (so a call whose data goes the other way stops before the
    program has done anything), then the rest, each part in graph order."""
    nodes = list(graph.nodes)
    first: set = set()
    todo = [n for n in nodes if _is_branch(n)]
    while todo:
        n = todo.pop()
        if n not in first:
            first.add(n)
            todo.extend(n.all_input_nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    return inputs + [n for n in nodes if n in first and n.op != "placeholder"] + \
        [n for n in nodes if n not in first and n.op != "placeholder"]


def lower_branch(lw, node: fx.Node) -> bool:
    """A traced branch's condition: `$N = item %cond` and `expect $N, "..."`. True when lowered."""
    if not _is_branch(node):
        return False
    from ..errors import UnsupportedError
    cond = node.args[0]
    if lw.inplace & set(_ancestors(cond)):
        raise UnsupportedError(f"{node.args[1][len('trident: the program took this branch at '):]}: a branch on "
                               "a tensor the program writes in place before it")
    v = lw.new_sym()
    _item(lw, node, v, lw.operand(node, cond))
    lw.lines.append(hir.expect(v, node.args[1]))
    lw.env[node] = None
    return True


def _is_when(node: fx.Node) -> bool:
    from .._compat import WHEN_MARK
    return (node.op == "call_function" and node.target is ASSERT_ASYNC_OP and len(node.args) == 2
            and isinstance(node.args[1], str) and node.args[1].startswith(WHEN_MARK))


def when_tensor_of_sizes(node: fx.Node) -> bool:
    """A launch region's condition on data-dependent sizes alone, made a tensor for its marker only:
    `scalar_tensor(u0 > 0)` (a CPU tensor, by default), which lower_when computes from the symbols
    instead: no such tensor exists in the program."""
    return (node.op == "call_function" and node.target is torch.ops.aten.scalar_tensor.default and bool(node.args)
            and isinstance(node.args[0], fx.Node) and isinstance(node.args[0].meta.get("val"), torch.SymBool)
            and bool(node.users) and all(_is_when(u) for u in node.users))


def only_a_when_condition(node: fx.Node) -> bool:
    """Whether a symbolic bool is read only as a launch region's condition (lower_when)."""
    return bool(node.users) and all(when_tensor_of_sizes(u) for u in node.users)


def lower_when(lw, node: fx.Node) -> bool:
    """A launch region's condition (_compat.py: WHEN_MARK), where its `if` stands:
    `$N = item %cond`, by which the region's kernel launches multiply their first grid dimension
    (triton_lower.py). True when lowered."""
    from .._compat import WHEN_MARK, region_launch_count
    from ..errors import UnsupportedError
    if when_tensor_of_sizes(node):
        lw.env[node] = None
        return True
    if not _is_when(node):
        return False
    ident = int(node.args[1][len(WHEN_MARK):].split(" ", 1)[0])
    if region_launch_count(ident) is None:
        raise UnsupportedError(f"{node.args[1][len(WHEN_MARK):]}: a launch region whose end the capture did not "
                               "check")
    cond = node.args[0]
    if when_tensor_of_sizes(cond):
        # a condition on data-dependent sizes alone: computed from the symbols, no tensor read
        lw.when[ident] = lw.syms.emit(cond.args[0].meta["val"].node.expr, lw.lines, lw.new_sym)
    else:
        v = lw.new_sym()
        _item(lw, node, v, lw.operand(node, cond))
        lw.when[ident] = v
    lw.env[node] = None
    return True


def check_regions(lw) -> None:
    """Every launch the capture saw in a launch region was lowered under its condition: one found
    without it would launch whatever the condition."""
    from .._compat import region_launch_count
    from ..errors import UnsupportedError
    for ident in lw.when:
        want, got = region_launch_count(ident), lw.region_launches.get(ident, 0)
        if got != want:
            raise UnsupportedError(f"launch region {ident}: {want} kernel launches under its condition at capture, "
                                   f"{got} found under it when lowering (trident bug)")


def _ancestors(node: fx.Node) -> list[fx.Node]:
    seen, todo = [], [node]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.append(n)
            todo.extend(n.all_input_nodes)
    return seen
