"""Lowering: an exported, functional ATen graph becomes one host IR spec (text, see docs/host_ir.md).

Inputs map to IR as follows: user tensors are `arg K` (K = the leaf index the native flattener gives
that argument), parameters/buffers/lifted constants are `state K` (K = index in the compiled
function's state list), Python ints and floats are symbols computed natively where the capture
kept them symbolic (`$N`, `$fN`: symbolic.py, float_symbols.py) and are baked in otherwise (their
values guarded). ATen calls are
normalized against their schema, so every call site carries all arguments positionally. Inputs the
program mutates are written back in place after the body, as eager would have: by a builtin copy
(two per launch) where it is exact, else aten::copy_.

Anything the lowering cannot represent raises UnsupportedError naming the node and the construct.
"""
from __future__ import annotations

import operator
import os
import re
import typing

import sympy
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch.export.graph_signature import InputKind, OutputKind

from . import (builtin_lower, builtin_rotary, constant_fold, cse, data_values, float_symbols, hir, lazy_views,
               output_trees)
from .. import _compat, aliasing, arg_objects
from ..errors import UnsupportedError
from ..guard_fields import field as guard_field
from .guard_text import float_text as _float
from .guard_text import guard_lines
from .symbolic import Symbols

# Runtime assertion ops export inserts; the spec's guards already enforce what they check.
_SKIPPED_OPS = {
    getattr(getattr(torch.ops.aten, name, None), "default", None)
    for name in ("_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range_for_size",
                 "sym_constrain_range", "_assert_async")
} - {None}



def _only_asserted(node: fx.Node) -> bool:
    """Nothing reads node's value but export's runtime assertions about it (u0 >= 0 and the like)."""
    return all(u.target in _SKIPPED_OPS or (not isinstance(u.target, torch._ops.OpOverload) and _only_asserted(u))
               for u in node.users)


def _unbacked(val) -> bool:
    """Only data-dependent symbols (an op's number result nothing reads): an assertion about them
    checks a value the program never uses. Assertions about call sizes are not skipped this way."""
    from torch.fx.experimental.symbolic_shapes import free_symbols, free_unbacked_symbols
    return free_symbols(val) <= free_unbacked_symbols(val)


_LAYOUTS = {torch.strided: 0, torch.sparse_coo: 1, torch.sparse_csr: 2, torch.sparse_csc: 4}
_MEMFMTS = {torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2,
            torch.channels_last_3d: 3}
_DEVICE_TYPES = aliasing.DEVICE_TYPE_CODES
_DTYPE_CODES: dict[torch.dtype, int] = {}


def dtype_code(dtype: torch.dtype) -> int:
    """c10::ScalarType of a torch.dtype, read from the native side (no hand-kept table)."""
    if dtype not in _DTYPE_CODES:
        from .. import _C
        _DTYPE_CODES[dtype] = _C.describe_tensor(torch.empty(0, dtype=dtype))["dtype"]
    return _DTYPE_CODES[dtype]


@dataclass
class StateRef:
    """One captured tensor of the program (parameter, buffer or lifted constant)."""
    kind: str      # "parameter" | "buffer" | "constant"
    target: str    # fully qualified name, or the constant's name
    tensor: torch.Tensor
    shape_key: tuple = ()  # state_key(tensor) when the specializations were traced
    data_ptr: int = 0      # its address then (`.data = ...` keeps the object and moves the memory)


def state_key(t: torch.Tensor) -> tuple:
    """What of a state tensor the specializations depend on besides its data: a change of any of
    these drops them (CompiledFunction._on_state_change). requires_grad is here because a spec that
    records no autograd history may run trident's own kernels for differentiable ATen ops."""
    return (t.dtype, t.shape, t.device, t.requires_grad)


@dataclass
class Lowered:
    text: str                 # the spec, host IR text
    state: list[StateRef]     # state the spec refers to, in `state K` order of the caller's list
    ops: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)       # kernel declarations
    guards: list[str] = field(default_factory=list)        # guards the body relies on (alignment)
    kernel_notes: list[tuple] = field(default_factory=list)
    written: set = field(default_factory=set)  # user tensor leaves the program writes
    state_written: set = field(default_factory=set)  # names of the buffers the program writes
    route: str = ""           # how the program was captured (explain): Dynamo, or traced Python


def _user_line(node) -> str:
    """The user's source line a graph node came from ('File "model.py", line 40, in forward: code'),
    from the trace's stack; empty when unknown. Put before anything internal in lowering errors."""
    trace = getattr(node, "meta", {}).get("stack_trace") if node is not None else None
    if not trace:
        return ""
    frames = [ln.strip() for ln in trace.strip().splitlines()]
    for k in range(len(frames) - 1, -1, -1):
        if frames[k].startswith("File "):
            code = frames[k + 1] if k + 1 < len(frames) and not frames[k + 1].startswith("File ") else ""
            return frames[k] + (f": {code}" if code else "")
    return ""


def user_file_line(node) -> str:
    """'model.py:40' of the user's line a node came from (_user_line), or empty."""
    m = re.match(r'File "([^"]*)", line (\d+)', _user_line(node))
    return f"{os.path.basename(m.group(1))}:{m.group(2)}" if m else ""


def _written_view(node: fx.Node, kind: str):
    """The fake of the view a slice/select/copy scatter writes (its destination's region)."""
    args = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in node.args]
    dst = args[0]
    if kind == "slice":
        dim, start, end, step = (args[2:] + [0, None, None, 1][len(args) - 2:])[:4]
        return torch.ops.aten.slice.Tensor(dst, dim, start, end, step)
    if kind == "select":
        return torch.ops.aten.select.int(dst, args[2], args[3])
    return dst


class _Lowerer:
    def __init__(self, ep, structure: str, leaf_of_input: list[int | None], state_index,
                 leaf_values: list | None = None, grad_mode: bool = False, pre_state: list | None = None,
                 state_prefix: str = ""):
        self.ep = ep
        self.state_prefix = state_prefix  # see lower()
        # The call's arguments as arg_objects.Nodes when the capture also returned them as they are
        # after the call (objects among them): the return then writes their changes back.
        self.pre_state = pre_state
        self.leaf_operand: dict[int, str] = {}  # leaf -> its operand in the body (%N, $N or a literal)
        # Whether a run of this spec may record autograd history: then every differentiable ATen op
        # stays an ATen call (builtin_lower). Guarded: grad mode and the inputs' requires_grad by the
        # spec's guards, the state's by state_key.
        self.records_autograd = grad_mode and any(
            isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].requires_grad
            for n in ep.graph.nodes if n.op == "placeholder")
        self.leaf_values = leaf_values or []
        self.kernels: list[str] = []          # kernel declarations of the spec
        self.kernel_notes: list[tuple] = []   # (name, chosen config kwargs, grid, cache key)
        self.extra_guards: list[str] = []
        self.bases: list[tuple] = []          # (fake, real tensor, leaf index or None) per input
        self._base_by_storage: dict = {}      # _base_of's index of `bases`, by storage
        self._bases_indexed = 0
        self.syms = Symbols()
        self.fakes: dict[int, object] = {}    # leaf -> traced value (FakeTensor, SymInt, int)
        self.next_sym = 0
        cse.eliminate(ep.graph)               # before every plan below: they see the merged graph
        from .reinplace import plan
        self.inplace = plan(ep)               # scatter nodes executed as in-place writes
        self.when: dict[int, str] = {}      # launch region -> the $N of its condition (data_values.lower_when)
        self.region_launches: dict[int, int] = {}  # launch region -> its launches lowered under it
        self.host_read = ""                 # where the program first reads a device value on the host
        self.sizing_call = ""               # the first ATen call sizing its result on the host, and where
        self.view_key: dict[str, tuple] = {}  # value -> what it is a view of, for no-op copies
        self.value_fakes: dict[str, object] = {}  # tensor value -> its fake where defined (lazy_views)
        self.pending_copy = None  # a builtin copy held back to share a launch (builtin_lower.copy)
        self.state_refs: list[StateRef] = []  # state the spec refers to, in `state K` order
        self.folded = constant_fold.plan(self)  # node -> its value, computed now (constant_fold.py)
        # HF's rotary embedding as one builtin launch: at its add; its inner nodes lower to nothing
        self.rotaries, self.absorbed = builtin_rotary.plan(self)
        self.structure = structure
        # per user-input placeholder: leaf index (a tensor), (leaf,) (an int), ("float", leaf) (a
        # run-time float: float_symbols.py) or None (a constant)
        self.leaf_of_input = leaf_of_input
        self.state_index = state_index      # callable(StateRef) -> int
        self.lines: list[str] = []
        self.env: dict[fx.Node, object] = {}  # node -> "%N" | list["%N"] | python constant
        self.next_value = 0
        self.ops: list[str] = []

    # -- facts about real inputs, for Triton specialization -------------------------------------
    def real_base(self, fake):
        found = self._base_of(fake)
        return found[1] if found else None

    def _base_of(self, fake):
        """The first input in `bases` that shares `fake`'s storage (by storage, indexed once per
        growth of `bases`: the lowering asks for every kernel operand)."""
        if self._bases_indexed != len(self.bases):
            for f, real, leaf in self.bases[self._bases_indexed:]:
                self._base_by_storage.setdefault(f.untyped_storage()._cdata, (f, real, leaf))
            self._bases_indexed = len(self.bases)
        return self._base_by_storage.get(fake.untyped_storage()._cdata)

    def alignment(self, fake) -> bool:
        """Whether a kernel may assume this tensor's data pointer is 16-byte aligned. Intermediates
        come from the caching allocator (aligned storage); views of inputs are aligned only when the
        input is and the view's offset keeps it so (then guard_alignment guards the input)."""
        size = fake.element_size()
        if not isinstance(fake.storage_offset(), int):
            return False  # a symbolic offset: assume nothing (always correct, maybe slower)
        found = self._base_of(fake)
        if found is None:
            return (fake.storage_offset() * size) % 16 == 0
        f, real, leaf = found
        if not isinstance(f.storage_offset(), int):
            return False
        delta = (fake.storage_offset() - f.storage_offset()) * size
        return real.data_ptr() % 16 == 0 and delta % 16 == 0

    def guard_alignment(self, fake):
        found = self._base_of(fake)
        if found is not None and found[2] is not None:
            g = hir.guard(guard_field("data_ptr", found[2]), "divby", 16)
            if g not in self.extra_guards:
                self.extra_guards.append(g)

    def add_kernel(self, ck, cubin_path: str) -> int:
        kid = len(self.kernels)
        self.kernels.append(hir.kernel(kid, ck, cubin_path))
        return kid

    def new_sym(self, float_: bool = False) -> str:
        """A new `$N` (or `$fN`, a float: float_symbols.py); the two share one numbering."""
        v = f"${'f' if float_ else ''}{self.next_sym}"
        self.next_sym += 1
        return v

    def sym_operand(self, v) -> str:
        """An integer operand: a literal, or `$k` computed natively from the symbols."""
        if isinstance(v, torch.SymInt):
            expr = v.node.expr
            if expr.is_number:
                return str(int(expr))
            return self.syms.emit(expr, self.lines, self.new_sym)
        return str(int(v))

    def known_when_lowering(self, v) -> bool:
        """Whether this call's value of integer `v` is known while lowering: every symbol in it is
        defined by an argument. Not so for a data-dependent value (an `.item()`, a `nonzero`'s
        size), which only the native program computes."""
        if not isinstance(v, torch.SymInt):
            return True
        return all(sym in self.syms.field for sym in v.node.expr.free_symbols)

    def hint(self, v, data_dependent: int | None = None) -> int:
        """The value a symbolic integer has in THIS call, from the call's own arguments (the trace's
        example values may come from another call: Dynamo's graph is reused across calls).
        `data_dependent`: the value a symbol the program computes stands at (for shaping example
        tensors only); None: such a symbol raises UnsupportedError."""
        if not isinstance(v, torch.SymInt):
            return int(v)
        expr = v.node.expr
        if expr.is_number:
            return int(expr)
        values = {}
        for sym in expr.free_symbols:
            field = self.syms.field.get(sym)
            if field is None and data_dependent is not None:
                values[sym] = data_dependent
                continue
            if field is None:
                raise UnsupportedError(f"{expr} is data-dependent ({sym} is computed by the program, not "
                                       "given by an argument), but its value is needed while compiling")
            leaf, _, rest = field[1:].partition(".")
            obj = self.leaf_values[int(leaf)]
            values[sym] = obj.shape[int(rest[5:-1])] if rest.startswith("size[") else int(obj)
        return int(expr.xreplace(values))

    def bind_symbols(self, leaf: int, node: fx.Node, val):
        """Symbols first seen in this argument are defined from its fields."""
        if isinstance(val, torch.SymInt):
            self._define_symbol(val, guard_field("ival", leaf), "int", str(leaf))
        elif isinstance(val, torch.Tensor):
            for d, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt):
                    self._define_symbol(size, guard_field("size", leaf, d), "size", f"{self.env[node]}, {d}")

    def _define_symbol(self, value: torch.SymInt, field: str, op: str, operands: str):
        """A bare symbol not yet defined becomes `$N = op operands`, bound to the call field it reads."""
        expr = value.node.expr
        self.syms.shape_env = value.node.shape_env
        if isinstance(expr, sympy.Symbol) and expr not in self.syms.field:
            v = self.new_sym()
            self.lines.append(hir.sym(v, op, operands))
            self.syms.bind(expr, field, None, v)

    def value(self) -> str:
        v = f"%{self.next_value}"
        self.next_value += 1
        return v

    def fail(self, node: fx.Node, what: str):
        raise UnsupportedError(f"cannot lower node '{node.name}' ({node.format_node()}): {what}")

    # -- operands --------------------------------------------------------------------------
    def operand(self, node: fx.Node, a) -> str:
        if isinstance(a, fx.Node):
            v = self.env[a]
            if isinstance(v, lazy_views.LazyView):
                return lazy_views.materialize(self, v)
            if isinstance(v, torch.SymInt):
                return self.sym_operand(v)
            if isinstance(v, str):
                return v
            if isinstance(v, float_symbols.FloatSym):
                return v.text
            if isinstance(v, float_symbols.FloatInput):
                return float_symbols.input_operand(self, v)
            return self.literal(node, v)
        return self.literal(node, a)

    def literal(self, node: fx.Node, a) -> str:
        if a is None:
            return "none"
        if isinstance(a, bool):
            return "true" if a else "false"
        if isinstance(a, int):
            return str(a)
        if isinstance(a, float):
            return _float(a)
        if isinstance(a, str):
            return hir.quote(a)
        if isinstance(a, torch.dtype):
            return f"dtype({dtype_code(a)})"
        if isinstance(a, torch.layout):
            if a not in _LAYOUTS:
                self.fail(node, f"layout {a}")
            return f"layout({_LAYOUTS[a]})"
        if isinstance(a, torch.memory_format):
            return f"memfmt({_MEMFMTS[a]})"
        if isinstance(a, torch.device):
            if a.type not in _DEVICE_TYPES:
                self.fail(node, f"device type {a.type}")
            return f"device({_DEVICE_TYPES[a.type]}:{-1 if a.index is None else a.index})"
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(self.operand(node, x) for x in a) + "]"
        if isinstance(a, torch.SymInt):
            return self.sym_operand(a)
        if isinstance(a, torch.SymFloat):
            self.fail(node, f"a symbolic float ({a}) that is not computed natively")
        self.fail(node, f"argument of type {type(a).__name__}")

    # -- nodes -----------------------------------------------------------------------------
    def call(self, node: fx.Node):
        """Lower one call node by the first rule of RULES that takes it."""
        for rule in RULES:
            if rule.lower(self, node):
                return
        raise AssertionError(f"trident bug: no lowering rule took node {node.format_node()}")  # aten_call takes all

    def symbolic_value(self, node: fx.Node) -> bool:
        """Shape arithmetic (sym_size, operator.add, ...): computed natively where it is used."""
        val, op = node.meta.get("val"), node.target
        if not (isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat)) or (
                isinstance(val, (int, float, bool)) and not isinstance(op, torch._ops.OpOverload))):
            return False
        if isinstance(val, (torch.SymBool, torch.SymFloat)) and not (_only_asserted(node) and _unbacked(val)) \
                and not data_values.only_a_when_condition(node):
            self.fail(node, "symbolic bool/float values are not supported")
        self.env[node] = val
        return True

    def run_time_float(self, node: fx.Node) -> bool:
        """A run-time float, or arithmetic on one (float_symbols.py); a float only assertions read
        falls through to symbolic_value."""
        val = node.meta.get("val")
        if not (isinstance(val, torch.SymFloat) or float_symbols.is_item_of_float(self, node)):
            return False
        try:
            return float_symbols.lower(self, node)
        except UnsupportedError:
            if not (_only_asserted(node) and _unbacked(val)):
                raise
            return False

    def marked(self, node: fx.Node) -> bool:
        """Nodes an analysis before the run claimed: runtime asserts the guards enforce, in-place
        updates kept in place (reinplace.py), ops absorbed into a rotary launch or folded to
        constants (builtin_rotary.py, constant_fold.py)."""
        if node.target in _SKIPPED_OPS:
            self.env[node] = None  # runtime asserts: the guards already enforce them
        elif node in self.inplace:
            self.inplace_call(node)
        elif node in self.absorbed:
            self.env[node] = None  # read only by its rotary pattern's launch (builtin_rotary)
        elif node in self.rotaries:
            builtin_rotary.lower(self, node, self.rotaries[node])
        elif node in self.folded:
            self.folded_constant(node)
        else:
            return False
        return True

    def triton_kernel(self, node: fx.Node) -> bool:
        if getattr(node.target, "__name__", "") != "triton_kernel_wrapper_functional":
            return False
        from .triton_lower import TritonCall
        TritonCall(self, node).lower()
        return True

    def aten_call(self, node: fx.Node) -> bool:
        """Any other ATen op: a native call of its kernel through the dispatcher (the last rule:
        anything else is an error)."""
        op = node.target
        if not isinstance(op, torch._ops.OpOverload):
            self.fail(node, f"call to {getattr(op, '__name__', op)!r}, which is not an ATen operator")
        schema = op._schema
        self.check_scalar_results_unused(node, schema)
        args = self.schema_args(node, schema)
        name = lazy_views.qualified(op)
        if lazy_views.defer(self, node, name, args):
            return True
        operands = [self.operand(node, a) for a in args]
        self.ops.append(name)
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            results = [self.value() for _ in val]
            self.env[node] = results
            self.value_fakes.update((r, f) for r, f in zip(results, val) if isinstance(f, torch.Tensor))
        elif val is None and len(schema.returns) == 0:
            results = []
            self.env[node] = None
        else:
            results = [self.value()]
            self.env[node] = results[0]
            if isinstance(val, torch.Tensor):
                self.value_fakes[results[0]] = val
        self.lines.append(hir.call(", ".join(results) if results else None, name, operands))
        data_values.bind_result_sizes(self, node, name, results, val)
        if len(results) == 1 and schema.returns[0].alias_info is not None and operands:
            self.view_key[results[0]] = (self.view_key.get(operands[0], operands[0]), name, tuple(operands[1:]))
        return True

    def folded_constant(self, node: fx.Node):
        """A value computed at lowering (constant_fold.py): module state the run reads, unless only
        other folded values read it."""
        if all(u in self.folded for u in node.users):
            self.env[node] = None
            return
        tensor = self.folded[node]
        ref = StateRef("constant", "folded " + node.name, tensor)
        v = self.value()
        self.lines.append(hir.state(v, self.state_index(ref)))
        self.state_refs.append(ref)
        self.env[node] = v
        self.value_fakes[v] = node.meta["val"]
        self.bases.append((node.meta["val"], tensor, None))
        self.ops.append("folded")

    def schema_args(self, node: fx.Node, schema) -> list:
        """The call's arguments, positional and complete: defaults filled in from the schema."""
        args = []
        for k, formal in enumerate(schema.arguments):
            if k < len(node.args) and not formal.kwarg_only:
                args.append(node.args[k])
            elif formal.name in node.kwargs:
                args.append(node.kwargs[formal.name])
            elif formal.has_default_value():
                args.append(formal.default_value)
            else:
                self.fail(node, f"missing argument '{formal.name}' of {schema.name}")
        return args

    def check_scalar_results_unused(self, node: fx.Node, schema):
        """Ops may return ints or floats beside their tensors (the attention kernels' max lengths,
        which only a backward reads). The host program holds no such value: the op may run only if
        nothing in the graph reads one."""
        scalar = [k for k, r in enumerate(schema.returns)
                  if r.type.kind() not in ("TensorType", "OptionalType", "ListType")]
        if not scalar:
            return
        if len(schema.returns) == 1:
            if node.users:
                self.fail(node, f"{schema.name} returns a non-tensor value, which the program reads")
            return
        for user in node.users:
            if user.target is not operator.getitem or (user.args[1] in scalar and not _only_asserted(user)):
                self.fail(node, f"{schema.name} returns a non-tensor value (result {user.args[1] if user.target is operator.getitem else '?'}), "
                                "which the program reads")

    def inplace_call(self, node: fx.Node):
        """A scatter into a tensor nothing else reads afterwards (reinplace.py): write in place.
        Its result is the destination itself; copying a view onto itself is skipped."""
        from .reinplace import SCATTERS
        kind = SCATTERS[node.target]
        dst_node, src_node = node.args[0], node.args[1]

        if kind in ("slice", "select", "copy"):
            if kind == "slice":
                dim, start, end, step = (list(node.args[2:]) + [0, None, None, 1][len(node.args) - 2:])[:4]
                opname, args = "aten::slice.Tensor", [self.operand(node, x) for x in (dim, start, end, step)]
            elif kind == "select":
                opname, args = "aten::select.int", [self.operand(node, x) for x in node.args[2:4]]
            else:
                opname, args = None, []
            dst_key = lazy_views.key_of(self, dst_node)
            key = (dst_key, opname, tuple(args)) if opname else dst_key
            if lazy_views.key_of(self, src_node) != key:  # else src already is that very view: nothing to copy

                def target(written=None):
                    """The written region: a pointer when a kernel writes it, else a view tensor."""
                    p = lazy_views.pointer_into(self, dst_node, written) if written is not None else None
                    if p is not None:
                        return p
                    t = self.operand(node, dst_node)
                    if opname:
                        view = self.value()
                        self.lines.append(hir.call(view, opname, [t] + args))
                        self.view_key[view] = key
                        t = view
                    return t

                if not builtin_lower.copy(self, node, target, lambda: _written_view(node, kind),
                                          lambda: lazy_views.launch_operand(self, node, src_node),
                                          src_node.meta.get("val")):
                    builtin_lower.flush(self)
                    dst = target()
                    self.lines.append(hir.call(self.value(), "aten::copy_", [dst, self.operand(node, src_node), "false"]))
        elif kind == "index_copy" and builtin_lower.index_copy(self, node):
            pass  # a builtin launch, maybe held back to pair with the next one
        else:
            builtin_lower.flush(self)  # a held copy or index copy goes first, as the graph orders them
            a = [self.operand(node, x) for x in node.args]
            if kind == "index_copy":
                self.lines.append(hir.call(self.value(), "aten::index_copy_", a[:4]))
            else:  # index_put
                accumulate = a[3] if len(a) > 3 else "false"
                self.lines.append(hir.call(self.value(), "aten::index_put_", [a[0], a[1], a[2], accumulate]))
        self.env[node] = self.env[dst_node]  # the destination itself (a view stays one)
        self.ops.append(f"inplace:{kind}")

    def getitem(self, node: fx.Node):
        src, idx = node.args
        vals = self.env[src]
        if isinstance(vals, dict):  # a Triton kernel's written tensors, by parameter name
            self.env[node] = vals[idx]
            return
        if not isinstance(vals, list):
            self.fail(node, "indexing a value that is not a list of tensors")
        self.env[node] = vals[idx]

    def output_tree(self, spec, leaves: list) -> str:
        """The return operand (output_trees.py). With pre_state, export's result is (the function's
        result, every argument after the call): the updates come first, then the result."""
        def pre_operand(marker):
            if arg_objects.is_item_constant(marker):  # a str a list or dict held
                return arg_objects.constant_text(marker, hir.quote, dtype_code)
            k = marker.index
            if k in self.leaf_operand:
                return self.leaf_operand[k]
            return self.literal(None, self.leaf_values[k]) if k < len(self.leaf_values) else None

        trees = output_trees.Trees(hir.quote, dtype_code, pre_operand)
        if self.pre_state is None:
            return trees.result(spec, leaves)
        result_spec, post_spec = _compat.treespec_children(spec)
        n = _compat.treespec_num_leaves(result_spec)
        updates = trees.post_updates(self.pre_state, post_spec, leaves[n:])
        tree = trees.result(result_spec, leaves[:n])
        return f"effects({', '.join(updates + [tree])})" if updates else tree

    def run(self) -> Lowered:
        sig = self.ep.graph_signature
        spec_by_name = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
        user_k = 0
        state = self.state_refs
        node = None
        try:
            for node in data_values.program_order(self.ep.graph):
                if node.op == "placeholder":
                    ispec = spec_by_name[node.name]
                    if ispec.kind == InputKind.USER_INPUT:
                        leaf = self.leaf_of_input[user_k]
                        user_k += 1
                        if leaf is None:
                            self.env[node] = ispec.arg.value if hasattr(ispec.arg, "value") else node.meta.get("val")
                            continue
                        if isinstance(leaf, tuple) and leaf[0] == "float":  # a run-time float: ("float", leaf)
                            k = leaf[1]
                            self.env[node] = float_symbols.FloatInput(k, float(self.leaf_values[k]))
                            self.fakes[k] = float_symbols.RUNTIME
                            continue
                        if isinstance(leaf, tuple):  # a Python int: (leaf,)
                            val = node.meta.get("val")
                            if isinstance(val, torch.SymInt) and val.node.expr.is_number:
                                val = int(val.node.expr)  # specialized by the trace after all
                                self.fakes[leaf[0]] = node.meta.get("val")
                            if isinstance(val, torch.SymInt):  # kept symbolic by the trace
                                self.fakes[leaf[0]] = val
                                self.bind_symbols(leaf[0], node, val)
                                self.env[node] = val
                                if not isinstance(val.node.expr, sympy.Symbol):
                                    # An int the trace expressed by others (Dynamo's `7 - s10` beside
                                    # `s10` when split sizes must sum to a size): its own value, read
                                    # here, stands for that expression; the symbols in it may be bound
                                    # by later arguments, and the guards relate them.
                                    v = self.new_sym()
                                    self.lines.append(hir.sym(v, "int", str(leaf[0])))
                                    self.syms.sym.setdefault(val.node.expr, v)
                                self.leaf_operand[leaf[0]] = self.sym_operand(val)
                            else:
                                traced = ispec.arg.value if hasattr(ispec.arg, "value") else val
                                self.env[node] = traced
                                if type(traced) is int and leaf[0] not in self.fakes:
                                    # The program holds the traced value: guard that one, not this call's
                                    # (a capture reused for another value must be refused, then redone).
                                    self.fakes[leaf[0]] = traced
                            continue
                        v = self.value()
                        self.lines.append(hir.arg(v, leaf))
                        self.env[node] = v
                        self.leaf_operand[leaf] = v
                        self.value_fakes[v] = node.meta.get("val")
                        self.fakes[leaf] = node.meta.get("val")
                        self.bind_symbols(leaf, node, node.meta.get("val"))
                        if leaf < len(self.leaf_values):
                            self.bases.append((node.meta["val"], self.leaf_values[leaf], leaf))
                    else:
                        ref = self.state_ref(ispec)
                        v = self.value()
                        self.lines.append(hir.state(v, self.state_index(ref)))
                        state.append(ref)
                        self.env[node] = v
                        if isinstance(node.meta.get("val"), torch.Tensor):
                            self.value_fakes[v] = node.meta["val"]
                        if isinstance(node.meta.get("val"), torch.Tensor) and isinstance(ref.tensor, torch.Tensor):
                            self.bases.append((node.meta["val"], ref.tensor, None))
                elif node.op == "get_attr":  # a constant tensor held by the graph module
                    tensor = self.ep.graph_module
                    for part in node.target.split("."):
                        tensor = getattr(tensor, part)
                    if not isinstance(tensor, torch.Tensor):
                        self.fail(node, f"attribute of type {type(tensor).__name__}")
                    ref = StateRef("constant", node.target, tensor)
                    v = self.value()
                    self.lines.append(hir.state(v, self.state_index(ref)))
                    state.append(ref)
                    self.env[node] = v
                elif node.op == "call_function":
                    if self.pending_copy is not None and not builtin_lower.holds_across(node, self.inplace):
                        builtin_lower.flush(self)
                    if node.target is operator.getitem:
                        self.getitem(node)
                    else:
                        self.call(node)
                elif node.op == "output":
                    builtin_lower.flush(self)
                    data_values.check_regions(self)
                    outs = list(node.args[0])
                    written = self.write_back(outs, sig)
                    # Returning a mutated input returns the input itself, as eager does (same object),
                    # and a view of one is that view of the input.
                    user = [o for o, s in zip(outs, sig.output_specs) if s.kind == OutputKind.USER_OUTPUT]
                    tree = self.output_tree(self.ep.call_spec.out_spec, [self.output_operand(node, o, written) for o in user])
                    self.lines.append(hir.ret(tree))
                else:
                    self.fail(node, f"node kind {node.op}")
        except UnsupportedError as e:
            where = _user_line(node)
            if where and not str(e).startswith(where):
                raise UnsupportedError(f"{where}: {e}") from e
            raise
        return Lowered("\n".join(self.lines), state, self.ops, self.kernels, self.extra_guards, self.kernel_notes)

    def state_ref(self, ispec) -> StateRef:
        kind = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
                InputKind.CONSTANT_TENSOR: "constant"}.get(ispec.kind)
        if kind is None:
            raise UnsupportedError(f"input kind {ispec.kind} is not supported")
        if kind == "constant":
            tensor = self.ep.constants[ispec.target]
        else:
            tensor = self.ep.state_dict.get(ispec.target)
            if tensor is None:
                tensor = self.ep.constants.get(ispec.target)  # non-persistent buffers
        target = ispec.target
        if self.state_prefix and kind != "constant" and target.startswith(self.state_prefix):
            target = target[len(self.state_prefix):]
        return StateRef(kind, target, tensor)

    def output_operand(self, node: fx.Node, o, written: dict) -> str:
        """A returned value: the input itself for an input's new value; for a chain of views of one,
        the same views taken of the input after its write-back (eager returns views of x after
        `x.mul_(2)`; the functional graph views the new value, which is a separate tensor here)."""
        if not isinstance(o, fx.Node):
            return self.operand(node, o)
        if o in written:
            return self.operand(node, written[o])
        chain, root = [], o
        while (root not in written and root.op == "call_function" and isinstance(root.target, torch._ops.OpOverload)
               and lazy_views.qualified(root.target) in lazy_views.VIEW_OPS and root.args
               and isinstance(root.args[0], fx.Node)):
            chain.append(root)
            root = root.args[0]
        if root not in written or not chain:
            return self.operand(node, o)
        value = self.operand(node, written[root])
        for view in reversed(chain):
            args = self.schema_args(view, view.target._schema)
            operands = [value] + [self.operand(view, a) for a in args[1:]]
            value = self.value()
            self.lines.append(hir.call(value, lazy_views.qualified(view.target), operands))
            self.ops.append(lazy_views.qualified(view.target))
        return value

    def write_back(self, outs, sig) -> dict:
        """Inputs and buffers the program mutated get their new value copied in place: a builtin
        copy where builtin_lower.copy takes it (a decoder's per-layer position counters: two per
        launch), else ATen's copy_. Returns {new-value node: input placeholder} for the values
        written back."""
        written = {}
        by_name = {n.name: n for n in self.ep.graph.nodes if n.op == "placeholder"}
        for o, s in zip(outs, sig.output_specs):
            if s.kind == OutputKind.USER_INPUT_MUTATION:
                target = by_name[s.target]
            elif s.kind == OutputKind.BUFFER_MUTATION:
                target = next(by_name[i.arg.name] for i in sig.input_specs
                              if i.kind == InputKind.BUFFER and i.target == s.target)
            else:
                continue
            dst = self.env[target]
            if not isinstance(dst, str):
                raise UnsupportedError(f"mutation of non-tensor input {s.target}")
            written[o] = target
            if self.operand(o, o) == dst:
                continue  # already written in place (a Triton kernel given the input itself)
            # a builtin copy where it is exact (same shape and dtype); two such share a launch
            if not builtin_lower.copy(self, o, lambda _fake, dst=dst: dst, lambda target=target: target.meta["val"],
                                      lambda o=o: lazy_views.launch_operand(self, o, o), o.meta.get("val")):
                builtin_lower.flush(self)
                self.lines.append(hir.call(self.value(), "aten::copy_", [dst, self.operand(o, o), "false"]))
        builtin_lower.flush(self)
        return written


# c10's names of the dtypes, as eager's casting error spells them.
_C10_DTYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
                    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
                    torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
                    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}


@dataclass(frozen=True)
class Rule:
    """One family of call nodes: `lower(lw, node)` lowers the node and returns True, or returns
    False to leave it to the next rule."""
    name: str
    lower: typing.Callable[[_Lowerer, fx.Node], bool]


def _elementwise(lw: _Lowerer, node: fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and builtin_lower.elementwise(lw, node)


# Every call node goes to the first rule here that takes it. A new op goes to the rule of its family
# (a new family gets a rule here, before aten_call). The order matters where families overlap:
# data-dependent values and run-time floats come before shape arithmetic (an `.item()`'s value is
# a SymInt too); nodes an earlier analysis claimed come before the op families that would take
# them otherwise; trident's own kernels (builtin_lower.py) before the dispatcher's.
RULES = (
    Rule("data-dependent value (.item(), runtime assertion, branch on data)",
         lambda lw, n: data_values.lower_item(lw, n) or data_values.lower_assert(lw, n) or
         data_values.lower_branch(lw, n) or data_values.lower_when(lw, n)),
    Rule("run-time float", _Lowerer.run_time_float),
    Rule("shape arithmetic", _Lowerer.symbolic_value),
    Rule("claimed by an analysis (skipped, kept in place, rotary, folded)", _Lowerer.marked),
    Rule("user Triton kernel", _Lowerer.triton_kernel),
    Rule("builtin elementwise kernel", _elementwise),
    Rule("ATen call (a lazy view, or the dispatcher)", _Lowerer.aten_call),
)


def _check_inplace_casts(ep):
    """An in-place op is functionalized into its functional op, a `_to_copy` to the input's dtype
    and a write-back, and `_to_copy` casts whatever the op computed. Eager's in-place op refuses a
    result its input's dtype cannot hold (`int_tensor.mul_(1.5)`); so does this call, with eager's
    error. (`copy_` itself casts in eager too, and `.to()` is an explicit cast: neither is checked.)"""
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten._to_copy.default or not node.args:
            continue
        source = (node.meta.get("source_fn_stack") or [("", None)])[-1][0]
        if not source.endswith("_") or source.startswith("copy_") or source.startswith("__"):
            continue
        src, out = node.args[0].meta.get("val"), node.meta.get("val")
        if isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor) and not torch.can_cast(src.dtype, out.dtype):
            name = lambda d: _C10_DTYPE_NAMES.get(d, str(d).replace("torch.", ""))  # noqa: E731
            raise RuntimeError(f"result type {name(src.dtype)} can't be cast to the desired output type "
                               f"{name(out.dtype)}")


def _host_tensor(ep, env: dict) -> str:
    """Why the program may not run as a CUDA graph (graphs=True, csrc/runtime/graphs/spec_graphs.h), or
    empty: a tensor of the program not on a CUDA device is computed by the host, which a graph's
    replay would not repeat. Names the first op making one, at the user's line; else an input. A
    run-time float's placeholder (a CPU 0-dim tensor only its `.item()` reads: float_symbols.py, the
    lowered program reads the leaf itself; `env` is the lowerer's) is not one."""
    def host(node):
        val = node.meta.get("val")
        return next((v.device.type for v in (val if isinstance(val, (list, tuple)) else (val,))
                     if isinstance(v, torch.Tensor) and v.device.type != "cuda"), None)

    inputs = None
    for node in ep.graph.nodes:
        device = host(node)
        if (device is None or data_values.when_tensor_of_sizes(node)
                or isinstance(env.get(node), float_symbols.FloatInput)):
            continue
        if node.op == "call_function":
            where = f" at {user_file_line(node)}" if user_file_line(node) else ""
            return f"a tensor on the {device} ({node.name}{where})"
        inputs = inputs or f"an input on the {device} ({node.name})"
    return inputs or ""


def lower(ep, structure: str, leaves: list[dict], leaf_of_input: list[int | None], grad_mode: bool,
          state_index, leaf_values: list | None = None, unguarded: frozenset[int] = frozenset(),
          pre_state: list | None = None, state_prefix: str = "") -> Lowered:
    """The full spec text: header, guards, kernels, body. `unguarded`: tensor leaves that written
    leaves are not guarded against overlapping (aliasing.guard_lines). `pre_state`: see _Lowerer.
    `state_prefix`: what export's state names carry that the caller's do not (the submodule a
    compiled module is when a wrapper captures it): stripped from the spec's state names."""
    _check_inplace_casts(ep)
    lw = _Lowerer(ep, structure, leaf_of_input, state_index, leaf_values, grad_mode, pre_state, state_prefix)
    body = lw.run()
    written = aliasing.written_leaves(ep, leaf_of_input)
    state_written = {t[len(state_prefix):] if state_prefix and t.startswith(state_prefix) else t
                     for t in aliasing.written_state(ep)}
    itemsize = {k: f.element_size() for k, f in lw.fakes.items() if isinstance(f, torch.Tensor)}
    lines = [hir.spec_open(structure)]
    lines += ["  " + g for g in guard_lines(structure, leaves, grad_mode, lw.fakes, lw.syms) + body.guards
              + aliasing.guard_lines(written, leaves, itemsize, body.state, state_written, unguarded)]
    lines += ["  " + k for k in body.kernels]
    if written:
        lines.append("  " + hir.writes(written))
    # A tensor on the host keeps the program out of graph mode, and so does an ATen call that sizes
    # its result on the host (it synchronizes inside, which stream capture refuses); a host read of
    # the program's own splits its graph into segments there, where the runtime's
    # TRIDENT_GRAPH_SEGMENTS allows (spec_graphs.h).
    host = _host_tensor(ep, lw.env)
    if host:
        lines.append("  " + hir.graph_off(host))
    elif lw.sizing_call:
        lines.append("  " + hir.graph_off(f"{lw.sizing_call} (a data-dependent size: the call waits for the "
                                          f"device, which a CUDA graph cannot hold)"))
    elif lw.host_read:
        lines.append("  " + hir.graph_reads(f"it reads a device value on the host at {lw.host_read} (an .item(), a "
                                            f"data-dependent size or branch)"))
    lines += ["  " + b for b in body.text.splitlines()]
    lines.append("}")
    return Lowered("\n".join(lines) + "\n", body.state, body.ops, body.kernels, body.guards, body.kernel_notes,
                   written, state_written)
