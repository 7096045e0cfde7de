"""The Python controller behind one compiled function: the miss path (capture, lower, add a
specialization), the module-state bookkeeping and the policies. The callable users hold is the
native SCM object; this controller is reached only on a miss or a state change."""
from __future__ import annotations

import enum
import functools
import inspect
import logging
import os
import re
import struct
import sys
import threading
import time
import types
import warnings
import weakref

import torch
import torch.utils._pytree as pytree

from . import _C, _compat, aliasing, arg_objects, autocast_weights, python_kernels
from .config import Options
from .errors import CaptureRaisedError, MissPolicyError, UnsupportedError
from .lowering import triton_specialize
from .lowering.lower import StateRef, lower, state_key

log = logging.getLogger("trident")


def _function_module(fn, npos: int, kwnames: list[str], post_state: bool = False,
                     float_paths: list | None = None, reached_from=None,
                     module_arguments: list | None = None, size_paths: list | None = None) -> torch.nn.Module:
    """Lets torch.export capture a plain function: a module whose forward has one named parameter
    per argument (export's dynamic_shapes are keyed by those names; *args forwards break it). The
    parameters are a0.. for positional arguments and k0.. for keyword arguments, whatever the
    caller named them (`class`, `self`, `a0`, non-ASCII names are all fine): the forward passes
    keyword j to fn under kwnames[j], so no name of the caller's is ever spelled in code.

    `post_state`: the forward returns (fn's result, every argument as it is after the call), so
    export's output spec holds what the call did to the objects it was given (output_trees.py).
    fn may be a module (trident.compile(model) called with objects): it becomes submodule `fn`.

    `float_paths`: where in (a0.., k0..) run-time floats arrive as 0-dim tensors (_leaf_paths);
    the forward passes fn their `.item()` (the arguments it returns after the call stay as given).
    `size_paths`: where torch.Size arguments arrive as tuples (export's dynamic_shapes cannot
    describe a Size); the forward passes fn a torch.Size of their items.

    `reached_from`: the function whose closure and globals hold the state (fn's own by default; the
    user's function where fn puts bound arguments back, _bind_arguments). `module_arguments`:
    every module the function has been passed as an argument, submodule `argmod_<k>` each, so that
    every specialization's state names (`argmod_1.weight`) resolve on the latest wrapper."""
    params = [f"a{i}" for i in range(npos)]
    kparams = [f"k{j}" for j in range(len(kwnames))]
    sig = ", ".join(["self"] + params + (["*"] + kparams if kparams else []))
    everything = ", ".join(params + kparams) + ("," if len(params + kparams) == 1 else "")
    inner = params + kparams
    prologue = ""
    if float_paths or size_paths:
        inner = [f"v{i}" for i in range(len(inner))]
        prologue = f"    ({', '.join(inner)},) = _items_at(({everything}), self.float_paths, self.size_paths)\n"
    ipos, ikw = inner[:npos], inner[npos:]
    call = ", ".join(ipos + ([f"**dict(zip(self.kwnames, ({', '.join(ikw)},)))"] if ikw else []))
    close = f"), ({everything})" if post_state else ")"
    ns: dict = {"_items_at": _items_at}
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        # A bound method of a module (model.decode_step): the module becomes a submodule, so export
        # lifts its parameters and buffers by name instead of meeting them as closure constants.
        exec(f"def forward({sig}):\n{prologue}    return (self.fn(self.owner, {call}){close}\n", ns)
        module = type("TridentFunction", (torch.nn.Module,), {"forward": ns["forward"]})()
        module.owner = owner
        module.fn = fn.__func__
        module.kwnames = tuple(kwnames)
        module.float_paths = list(float_paths or ())
        module.size_paths = list(size_paths or ())
        return module
    exec(f"def forward({sig}):\n{prologue}    return (self.fn({call}){close}\n", ns)
    module = type("TridentFunction", (torch.nn.Module,), {"forward": ns["forward"]})()
    module.fn = fn
    module.kwnames = tuple(kwnames)
    module.float_paths = list(float_paths or ())
    module.size_paths = list(size_paths or ())
    # Modules and parameters the function reaches through its closure or the globals it names: export
    # lifts a parameter only under a name of the module it exports (a KeyError otherwise), so they
    # become the wrapper's submodules and parameters.
    for name, value in _reached_state(reached_from or fn).items():
        if isinstance(value, torch.nn.Parameter):
            module.register_parameter(f"reached_{name}", value)
        else:
            module.add_module(f"reached_{name}", value)
    for k, value in enumerate(module_arguments or ()):
        module.add_module(f"argmod_{k}", value)
    owner = getattr(reached_from, "__self__", None)
    if isinstance(owner, torch.nn.Module) and reached_from is not fn:
        module.owner = owner  # a bound method's module, called with module arguments: as above
    return module


_HELPER_DEPTH = 4  # how many calls deep _reached_state follows the module's own helper functions


def _global_names(code) -> set:
    """The global names a code object reads, its nested code (comprehensions, inner lambdas) included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _reached_state(fn) -> dict:
    """{name: module or parameter} that fn reaches through its closure cells and the globals its code
    names, and, the same way, through the plain functions of fn's own Python module that it names
    (its helpers), up to _HELPER_DEPTH calls deep; and the modules and parameters a functools.partial
    binds (`partial(step, model)`), with its function's. Functions of other modules (libraries) are not
    followed; state reached only there makes capture fail with an error saying so (_capture_hint)."""
    found: dict = {}
    seen: set = set()

    def visit(f, prefix: str, depth: int):
        if isinstance(f, functools.partial):  # trident.compile(functools.partial(step, model))
            bound = list(enumerate(f.args)) + list((f.keywords or {}).items())
            for name, v in bound:
                if isinstance(v, (torch.nn.Module, torch.nn.Parameter)):
                    found.setdefault(f"{prefix}partial_{name}", v)
            visit(f.func, prefix, depth)
            return
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen:
            return
        seen.add(id(f))
        values = {}
        for name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
            try:
                values[name] = cell.cell_contents
            except ValueError:  # an empty cell: a name assigned after the function was made
                pass
        g = getattr(f, "__globals__", {})
        for name in sorted(_global_names(code)):
            if name in g and name not in values:
                values[name] = g[name]
        for name, v in values.items():
            if isinstance(v, (torch.nn.Module, torch.nn.Parameter)):
                found.setdefault(prefix + name, v)
            elif (isinstance(v, types.FunctionType) and depth < _HELPER_DEPTH
                  and v.__module__ == getattr(fn, "__module__", None)):
                visit(v, f"{prefix}{name}_", depth + 1)

    visit(fn, "", 0)
    return found


def _capture_reason(e: Exception) -> str:
    """The failure in a line. Where Dynamo reports that running an op on fake tensors raised (the
    call's own error: `x * None`, a view of the wrong size), that error, as eager would name it."""
    lines = [ln.strip() for ln in str(e).strip().splitlines()]
    first = f"{type(e).__name__}: {lines[0] if lines else ''}"
    explanation = next((ln for ln in lines if ln.startswith("Explanation:")), "")
    m = re.search(r": (call_\w+ [^(]*)\(.*: got (\w+)\((.*)\)$", explanation)
    if not m:
        return first
    op, kind, text = m.group(1), m.group(2), m.group(3)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    text = text.replace("\\'", "'").replace("FakeTensor", "Tensor")
    return f"{kind}: {text} (in {op}; the call would fail the same way eagerly)"


def _holds_dtensors(module) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    return any(isinstance(t, DTensor) for t in module.parameters()) or \
        any(isinstance(t, DTensor) for t in module.buffers())


def _stop_frame(e: Exception):
    """The frame a Dynamo failure stopped in: its innermost frame outside torch and trident; None
    when the exception carries no stack."""
    return _outside_torch_and_trident(getattr(e, "real_stack", None) or ())


def _outside_torch_and_trident(frames):
    """The innermost of `frames` (outermost first) whose file is neither torch's nor trident's."""
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    for frame in reversed(list(frames)):
        if not os.path.abspath(frame.filename).startswith((torch_dir + os.sep, _PACKAGE_DIR + os.sep)):
            return frame
    return None


def _capture_where_traced(e: Exception) -> str:
    """'File "lib.py", line 9, in op: ' for the innermost frame outside torch and trident of an
    exception raised while the traced-Python route ran the function; empty when there is none."""
    import traceback
    frame = _outside_torch_and_trident(traceback.extract_tb(e.__traceback__))
    return f'File "{frame.filename}", line {frame.lineno}, in {frame.name}: ' if frame else ""


def _capture_where(e: Exception) -> str:
    """'File "model.py", line 40, in forward: code: ' for the user's frame a Dynamo failure stopped
    in (_stop_frame), to put before anything internal; empty when the exception carries no stack."""
    frame = _stop_frame(e)
    if frame is None:
        return ""
    code = (frame.line or "").strip()
    return f'File "{frame.filename}", line {frame.lineno}, in {frame.name}' + (f": {code}" if code else "") + ": "


def _raised_by_user_code(e: Exception) -> bool:
    """Whether a capture failure is the traced code's own exception rather than something Dynamo or
    the lowering cannot take: Dynamo's "Observed exception" (the user's `raise`, an IndexError of a
    Python list), or an exception that is not Dynamo's (an op refusing its fake arguments). torch's
    symbolic reasoning failing on this call's value (a negative int index captured with the range
    of a position, `ValueRangeError`) is not the user's: the capture is tried again without symbols."""
    from torch._dynamo.exc import TorchDynamoException, Unsupported
    if _outside_symbol_ranges(e):
        return False
    if isinstance(e, Unsupported):
        return str(e).lstrip().startswith("Observed exception")
    if isinstance(e, TorchDynamoException):
        return bool(re.search(r": got \w+\(", str(e)))  # a fake-tensor call that raised (_capture_reason)
    return not isinstance(e, (UnsupportedError, KeyError, AssertionError, NotImplementedError))


def _outside_symbol_ranges(e: BaseException) -> bool:
    """Whether a capture failed on torch's value ranges (ValueRangeError somewhere in its causes)."""
    from torch.utils._sympy.value_ranges import ValueRangeError
    seen = 0
    while e is not None and seen < 16:
        if isinstance(e, ValueRangeError):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _capture_hint(e: Exception) -> str:
    """What to do about a capture failure we can explain; empty otherwise."""
    key = e.args[0] if isinstance(e, KeyError) and e.args else None
    if isinstance(key, str) and key.startswith(("G_", "L_")):
        # export's parameter table misses a parameter Dynamo met outside the exported module
        return ("; a parameter or buffer was reached outside any module trident can see (Dynamo's name "
                f"for it: {key}), e.g. through a function of another Python module that the compiled "
                "function calls: compile the module itself, or a method of it, or reach the module from "
                "the compiled function's own globals or closure or its helpers in the same file")
    m = re.search(r"unrecognized type \w+\((\w+)\) at output", str(e))
    if m:
        return (f"; the function returns a {m.group(1)}, which is not a tensor, a number or a tuple, list "
                "or dict of them: return what the caller needs (a Hugging Face model: call it with "
                "use_cache=False and return_dict=False, or return its .logits)")
    return ""


def _describe(args: tuple, kwargs: dict):
    """_C.describe_args, after admitting the classes of the objects the arguments hold (the miss
    path's first look at them): (structure, leaves) or (None, why not)."""
    structure, leaves = _C.describe_args(*args, **kwargs)
    if structure is None:
        arg_objects.register_classes(args, kwargs)
        structure, leaves = _C.describe_args(*args, **kwargs)
        if structure is None:
            leaves = arg_objects.why_refused(leaves, args, kwargs)
    return structure, leaves


class _Leaf:
    """Stands for flattened leaf `index` while we find where export put each argument."""

    def __init__(self, index: int):
        self.index = index


def _map_arg_tree(x, fn, path: str, objects_as_lists: bool = False):
    """Rebuild x with fn(leaf, path) for each leaf, descending exactly the containers the native
    flattener descends (python/bindings/flatten.h: tuples, lists and dicts, exact types, dicts in
    insertion order; objects of admitted classes by their attributes, namedtuples and structseqs by
    their items, arg_objects.py), in its order. path names the leaf (`caches[3][0]`, `batch['ids']`,
    `cache.layers[0].keys`, `state.pos`). An object
    becomes a new instance holding the mapped attributes (constants as they are), or with
    `objects_as_lists` the list of its mapped non-constant attributes (export's dynamic_shapes for
    a pytree node)."""
    if type(x) in (tuple, list, torch.Size):  # a Size as a tuple: what export is given (_sizes_as_tuples)
        return (list if type(x) is list else tuple)(
            _map_item(v, fn, f"{path}[{i}]", objects_as_lists) for i, v in enumerate(x))
    if type(x) is dict:
        return {k: _map_item(v, fn, f"{path}[{k!r}]", objects_as_lists) for k, v in x.items()}
    if arg_objects.is_sequence(type(x)):
        # a namedtuple or structseq: one of its class, also as export's dynamic_shapes (pytree
        # counts both among its built-in containers, which must match in type)
        fields = getattr(type(x), "_fields", None) or ()
        return _remake_tuple(x, [_map_item(v, fn, f"{path}.{fields[i]}" if i < len(fields) else f"{path}[{i}]",
                                           objects_as_lists) for i, v in enumerate(x)])
    if arg_objects.is_by_items(type(x)):  # a dict subclass its library flattens by items (ModelOutput)
        if objects_as_lists:
            return [_map_arg_tree(v, fn, f"{path}[{k!r}]", True) for k, v in x.items()]
        # made again as its library's pytree registration makes it (what export sees)
        return pytree.SUPPORTED_NODES[type(x)].unflatten_fn(
            [_map_arg_tree(v, fn, f"{path}[{k!r}]") for k, v in x.items()], list(x.keys()))
    if arg_objects.is_flattened(type(x)):
        if objects_as_lists:
            return [_map_arg_tree(v, fn, f"{path}.{k}", True) for k, v in vars(x).items()
                    if not arg_objects.is_constant(v)]
        attrs = {k: v if arg_objects.is_constant(v) else _map_arg_tree(v, fn, f"{path}.{k}")
                 for k, v in vars(x).items()}
        obj = object.__new__(type(x))
        obj.__dict__.update(attrs)
        return obj
    return fn(x, path)


def _remake_tuple(x: tuple, items) -> tuple:
    """A tuple of x's class (a plain tuple, a namedtuple or a structseq) holding `items`."""
    if type(x) is tuple:
        return tuple(items)
    if hasattr(type(x), "_make"):
        return type(x)._make(items)
    return type(x)(items)  # a structseq takes its items as one sequence


def _map_item(v, fn, path: str, objects_as_lists: bool):
    """_map_arg_tree of a tuple's, list's or dict's item: a constant there (a str,
    arg_objects.is_item_constant) stays as it is, no leaf (in export's dynamic_shapes, None)."""
    if arg_objects.is_item_constant(v):
        return None if objects_as_lists else v
    return _map_arg_tree(v, fn, path, objects_as_lists)


def _mark_leaves(args: tuple, kwargs: dict):
    """Replace every leaf by a _Leaf, in the order the native flattener numbers them
    (positional arguments, then keyword arguments in call order; containers as _map_arg_tree).
    Also returns the leaf objects themselves in that order."""
    values: list = []

    def mark(x, _path):
        values.append(x)
        return _Leaf(len(values) - 1)

    margs = tuple(a if _is_bound_argument(a) else _map_arg_tree(a, mark, "") for a in args)
    mkwargs = {k: v if _is_bound_argument(v) else _map_arg_tree(v, mark, "") for k, v in kwargs.items()}
    return margs, mkwargs, values


def _is_module_argument(x) -> bool:
    """A module passed as an argument itself: the native flattener guards it by identity and makes
    no leaf of it (flatten.h, "M<N>"); the capture reaches it as a closure's module (_lower_with)."""
    return isinstance(x, torch.nn.Module)


def _is_bound_argument(x) -> bool:
    """An argument itself (not inside a container) the native flattener guards without a leaf: a
    module (by identity), or a constant (by value, arg_objects.is_constant). The capture binds it
    into the call (_bind_arguments)."""
    return _is_module_argument(x) or arg_objects.is_constant(x)


def _bind_arguments(fn, args: tuple, kwargs: dict):
    """(function, args, kwargs) without the bound arguments (_is_bound_argument): the function puts
    them back where the caller passed them, so the capture reaches each module as it reaches one a
    closure holds, and each constant as a closure's constant."""
    at = [(i, a) for i, a in enumerate(args) if _is_bound_argument(a)]
    named = {k: v for k, v in kwargs.items() if _is_bound_argument(v)}

    def with_bound(*rest, **rest_kwargs):
        full = list(rest)
        for i, v in at:
            full.insert(i, v)
        return fn(*full, **rest_kwargs, **named)

    return (with_bound, tuple(a for a in args if not _is_bound_argument(a)),
            {k: v for k, v in kwargs.items() if not _is_bound_argument(v)})


def _leaf_paths(args: tuple, kwargs: dict, sizes: list | None = None) -> list[tuple]:
    """(leaf, path) per leaf in _mark_leaves order: its path into (*args, *kwargs.values()), each
    step an index (a tuple, namedtuple, structseq or list), ("key", k) (a dict) or ("attr", name)
    (an object flattened by its attributes), where a run-time float may arrive as a 0-dim tensor
    and be turned back inside the trace (_items_at); None inside a dict subclass flattened by its
    items (its library's pytree code makes it, which trident does not redo). With `sizes`, appends
    there the path of each torch.Size (export is given a tuple in its place: _sizes_as_tuples)."""
    out: list = []

    def walk(x, path):
        if path is None:
            _map_arg_tree(x, lambda v, _p: out.append((v, None)), "")
        elif type(x) in (tuple, list, torch.Size) or arg_objects.is_sequence(type(x)):
            if type(x) is torch.Size and sizes is not None:
                sizes.append(path)
            for i, v in enumerate(x):
                if not arg_objects.is_item_constant(v):
                    walk(v, path + (i,))
        elif type(x) is dict:
            for k, v in x.items():
                if not arg_objects.is_item_constant(v):
                    walk(v, path + (("key", k),))
        elif arg_objects.is_flattened(type(x)):
            for k, v in vars(x).items():
                if not arg_objects.is_constant(v):
                    walk(v, path + (("attr", k),))
        elif arg_objects.is_by_items(type(x)):
            walk(x, None)
        else:
            out.append((x, path))

    for i, v in enumerate(list(args) + list(kwargs.values())):
        if not _is_bound_argument(v):
            walk(v, (i,))
    return out


def _floats_as_tensors(values: tuple, paths: list) -> tuple:
    """values with the float at each path replaced by a 0-dim float64 tensor: how a run-time
    float reaches export (float_symbols.py); _items_at turns it back inside the trace. The
    containers on the way are copies: the caller's own are never changed."""
    for path in paths:
        values = _replace_at(values, path, lambda v: torch.tensor(v, dtype=torch.float64), copy=True)
    return values


def _sizes_as_tuples(values: tuple, paths: list) -> tuple:
    """values with the torch.Size at each path a tuple of its ints (copies on the way, as
    _floats_as_tensors): export takes a Size's ints only through dynamic_shapes it cannot match."""
    for path in paths:
        values = _replace_at(values, path, tuple, copy=True)
    return values


def _items_at(values: tuple, paths: list, size_paths: list = ()) -> tuple:
    """Inside the capture: each path's 0-dim tensor back to a Python float (a SymFloat), and each
    size path's tuple back to a torch.Size. A list, dict or object on the way is set in place (the
    function and the state the wrapper returns after the call see the one container, as eager's
    code would); a tuple is made again."""
    for path in paths:
        values = _replace_at(values, path, lambda t: t.item(), copy=False)
    for path in size_paths:
        values = _replace_at(values, path, torch.Size, copy=False)
    return values


def _replace_at(x, path: tuple, fn, copy: bool):
    """x with fn applied at path (_leaf_paths' steps): tuples made again; lists, dicts and objects
    copied first with `copy`, else set in place."""
    step, rest = path[0], path[1:]
    if isinstance(step, int) and type(x) is not list:  # a tuple, namedtuple or structseq
        items = list(x)
        items[step] = fn(items[step]) if not rest else _replace_at(items[step], rest, fn, copy)
        return _remake_tuple(x, items)
    if copy:
        if type(x) in (list, dict):
            x = type(x)(x)
        else:
            new = object.__new__(type(x))
            new.__dict__.update(vars(x))
            x = new
    if isinstance(step, int) or step[0] == "key":
        k = step if isinstance(step, int) else step[1]
        x[k] = fn(x[k]) if not rest else _replace_at(x[k], rest, fn, copy)
    else:
        v = getattr(x, step[1])
        # object.__setattr__: a frozen dataclass's own __setattr__ refuses
        object.__setattr__(x, step[1], fn(v) if not rest else _replace_at(v, rest, fn, copy))
    return x


def _leaf_names(args: tuple, kwargs: dict, signature) -> list[str]:
    """A readable name per leaf, in _mark_leaves order: the parameter name, indexed into tuples,
    lists and dicts (`caches[3][0]`, `batch['ids']`)."""
    params = []
    for name, p in (signature.parameters.items() if signature is not None else ()):
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        params.append(name)
    names: list[str] = []
    for k, a in enumerate(args):
        if not _is_bound_argument(a):
            _map_arg_tree(a, lambda _x, path: names.append(path), params[k] if k < len(params) else f"args[{k}]")
    for k, v in kwargs.items():
        if not _is_bound_argument(v):
            _map_arg_tree(v, lambda _x, path: names.append(path), k)
    return names


def _bound_argument_words(args: tuple, kwargs: dict, signature) -> list[str]:
    """Per bound argument (_is_bound_argument), what a spec serves in words (explain): `lin: the
    Linear it was captured with (by identity)`, `mode == 'mean'`."""
    params = [n for n, p in (signature.parameters.items() if signature is not None else ())
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = [(params[k] if k < len(params) else f"args[{k}]", a) for k, a in enumerate(args)] + list(kwargs.items())
    return [f"{name}: the {type(v).__name__} it was captured with (by identity)" if _is_module_argument(v)
            else f"{name} is {type(v).__name__}.{v.name}" if isinstance(v, enum.Enum)
            else f"{name} == {v!r}" for name, v in named if _is_bound_argument(v)]


def _dense_layout(sizes, strides) -> tuple:
    """Which dims are ordered and strided as a contiguous tensor's would be, and the stride order:
    what a capture with symbolic sizes may have relied on (contiguity decides view vs copy)."""
    expect, dense = 1, []
    for size, stride in reversed(list(zip(sizes, strides))):
        dense.append(stride == expect or size == 1)
        expect *= size
    order = tuple(sorted(range(len(strides)), key=lambda d: (-strides[d], d)))
    return tuple(reversed(dense)), order


def capture_key(structure: str, leaves: list[dict], marks: set, grad_mode: bool) -> tuple:
    """Everything a capture specialized on: the leaves with the marked (symbolic) sizes and ints
    and floats masked out. Two calls with the same key differ only in values the captured program computes
    symbolically, so it is valid for both, up to its shape guards (which the spec carries and the
    controller checks). Data pointers are not baked into a program (alignment is the spec's guard)."""
    sized = {(leaf, d) for kind, leaf, *rest in marks if kind == "size" for d in rest}
    ints = {leaf for kind, leaf, *_ in marks if kind == "int"}
    floats = {leaf for kind, leaf, *_ in marks if kind == "float"}
    parts = []
    for k, l in enumerate(leaves):
        if l["kind"] == _C.LEAF_TENSOR:
            symbolic = any((k, d) in sized for d in range(l["dim"]))
            sizes = tuple(None if (k, d) in sized else n for d, n in enumerate(l["sizes"]))
            layout = _dense_layout(l["sizes"], l["strides"]) if symbolic else tuple(l["strides"])
            parts.append((1, l["dtype"], l["device_type"], l["device_index"], l["dim"], l["flags"], l["keyset"],
                          sizes, layout))
        elif l["kind"] == _C.LEAF_INT:
            parts.append((2, None if k in ints else l["ival"]))
        elif k in floats:
            parts.append((3, None))
        else:  # a float by its bits: -0.0 == 0.0, but a program that baked one in is wrong for the other
            parts.append((l["kind"], l["ival"], struct.pack("<d", l["fval"])))
    return structure, frozenset(marks), grad_mode, tuple(parts)


def _data_ptr(t: torch.Tensor) -> int:
    """t's address, 0 for a tensor without plain storage."""
    try:
        return t.data_ptr()
    except RuntimeError:
        return 0


def _module_layout(module) -> tuple | None:
    """What a capture of `module` read besides its tensors' values: each submodule's training flag
    and which parameters and buffers exist (one set to None or deleted drops out; one added to a
    module traced without it comes in). For a plain function, `module` is its wrapper
    (_function_module), whose submodules are the modules it reaches and is passed: `m.train()` of a
    module a closure holds changed what its dropout traced to, and no spec noticed before."""
    if module is None:
        return None
    return (tuple(m.training for m in module.modules()), tuple(n for n, _ in module.named_parameters()),
            tuple(n for n, _ in module.named_buffers()))


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


_DYNAMO_DIR = os.path.dirname(os.path.abspath(torch._dynamo.__file__))


def _caller_stacklevel() -> int:
    """warnings.warn's stacklevel, called from here, of the first frame outside this package and
    Dynamo's wrapper around the miss callback (_outside_dynamo)."""
    def inside(frame) -> bool:
        d = os.path.dirname(os.path.abspath(frame.f_code.co_filename))
        return any(d == p or d.startswith(p + os.sep) for p in (_PACKAGE_DIR, _DYNAMO_DIR))

    frame, level = sys._getframe(1), 1
    while frame is not None and inside(frame):
        frame, level = frame.f_back, level + 1
    return level


def _outside_dynamo(method):
    """`method` (a controller's callback the native module calls) run with Dynamo's frame evaluation
    off. A trident-compiled function called inside a torch.compile region (transformers' generate()
    wraps the model's __call__ in one) is a builtin to Dynamo, which runs it as is; on a miss its
    callback would otherwise be traced as user code, with the capture inside the trace. `__self__`
    stays the controller (trident.controller).

    Not torch._dynamo.disable: while any thread exports, its wrapper enters fx.traceback.annotate,
    which edits one process-wide dict, and two threads inside it at once raise KeyError. This one
    turns frame evaluation off for its thread (the setting is per thread) and its own frame is
    skipped by Dynamo."""
    from torch._C._dynamo.eval_frame import set_eval_frame
    from torch._dynamo.decorators import skip

    def run(*args, **kwargs):
        prior = set_eval_frame(None)
        try:
            return method(*args, **kwargs)
        finally:
            set_eval_frame(prior)
    skip(run)
    run.__self__ = method.__self__
    return run


class CompiledFunction:
    def __init__(self, fn, options: Options):
        self.fn = fn
        self.module = fn if isinstance(fn, torch.nn.Module) else None
        # The module parameters and buffers are read from, by the names export gave them: the
        # compiled module, or the wrapper of a plain function or bound method (_function_module),
        # whose submodules are the modules the function reaches. Set at the first capture.
        self._state_owner: torch.nn.Module | None = self.module
        # Modules the function was passed as arguments (flatten.h "M<N>"), in first-seen order: held
        # while this function lives, as the specializations' state they are (_function_module).
        self._module_arguments: list[torch.nn.Module] = []
        self.options = options
        self.name = getattr(fn, "__qualname__", type(fn).__name__)
        target = fn.forward if self.module is not None else fn
        try:
            self.signature = inspect.signature(target)
        except (TypeError, ValueError):
            self.signature = None
        self.state: list[StateRef] = []
        self._state_keys: dict = {}
        self.lock = threading.RLock()
        self.kernels: list = []          # Triton kernels recorded by captures (explain)
        self.last_ops: list[list[str]] = []
        self._cap_logged = False
        # Automatic dynamic: per argument structure, the first leaves seen and the dims/ints that
        # have since varied: ("size", leaf, dim) or ("int", leaf).
        self._first_seen: dict[str, list[dict]] = {}
        self._dynamic: dict[str, set] = {}
        self._fallback_logged: set[str] = set()
        # Captured programs by capture_key(): a call that differs from an earlier capture only in
        # the values of symbolic sizes and ints (a Triton `% 16` or `== 1` specialization, a new
        # pointer alignment) is lowered again from the same program instead of exported again.
        self._captures: dict[tuple, object] = {}
        self._said_python_kernels: set[str] = set()
        self._layout = None  # _module_layout at the captures (None: no module, or none yet)
        # (structure, overlapping leaf pairs) -> why such calls run eagerly (aliasing.py)
        self._overlap_eager: dict[tuple, str] = {}
        self._pins_state = False  # some spec's guards hold state addresses (aliasing.guard_lines)
        self._warming = threading.local()  # .depth > 0 inside trident.warmup on this thread
        # capture_key (no symbolic marks) -> why calls like it run eagerly: their capture stopped on
        # an exception eager did not raise (CaptureRaisedError)
        self._eager_keys: dict[tuple, str] = {}
        # capture_key -> why calls like it run split at graph breaks (graph_breaks.SplitRoute, made at
        # the first such call)
        self._split_keys: dict[tuple, str] = {}
        self._split_route = None
        # Saved specializations (artifacts.py): what each installed spec was made of, in order; the
        # cache file's path (False: not yet computed); whether the first miss looked for one.
        self.installed: list[dict] = []
        self._auto_path = False
        self._auto_tried = False
        self.artifact_loads = 0
        self.captures = 0  # torch.export runs (a saved specialization installs without one)
        self.artifacts_rejected = 0
        # (structure, symbolic marks, grad mode) whose symbolic capture failed: static from then on
        self._static_only: set = set()
        self._floats_said: set = set()  # names of floats said not to be run-time values (_lower)
        self.capture_seconds = 0.0   # in torch.export (Dynamo, decompositions), all captures
        self.lowering_seconds = 0.0  # in the lowering to host IR (Triton kernels' compiles included)
        self.triton_compile_seconds = 0.0  # of lowering_seconds, in triton.compile
        scm = _C.SCM(_outside_dynamo(self._on_miss), _outside_dynamo(self._on_state_change),
                     reuse_outputs=options.reuse_outputs, graphs=options.graphs)
        self._scm = weakref.ref(scm)
        self._held = scm  # until detach()

    @property
    def scm(self):
        """The callable this controller serves (None once it is gone)."""
        return self._scm()

    def detach(self):
        """Hand the callable out. From then on the controller refers to it weakly: the callable
        alone keeps both alive (its miss handler is this controller's method), so dropping it frees
        both at once, with the function and module they hold, without waiting for the cycle
        collector. (The module's tensors are also referred to by the capture's fx graphs, which sit
        in cycles of their own: those the collector frees, as it frees torch.compile's.)"""
        scm, self._held = self._held, None
        return scm

    # ---- miss path -------------------------------------------------------------------------
    def _on_miss(self, /, *args, **kwargs):
        with self.lock:
            self._check_arguments(args, kwargs)
            structure, leaves = _describe(args, kwargs)
            if structure is None:
                return self._fallback(args, kwargs, f"{leaves}; running the original function eagerly")
            if self.scm.select(*args, **kwargs) >= 0:
                return NotImplemented  # another thread compiled it while we waited for the lock
            if not self._auto_tried:
                self._auto_tried = True
                self._load_automatic()
                if self.scm.select(*args, **kwargs) >= 0:
                    return NotImplemented  # a saved specialization serves it
            margs, mkwargs, values = _mark_leaves(args, kwargs)
            pairs = tuple(aliasing.overlapping_pairs(values))
            # Export merges an argument that is a parameter or buffer with it: capture from a copy.
            in_state = tuple(aliasing.leaves_overlapping(values, self._module_tensors(args, kwargs)))
            overlap_key = (structure, pairs) if not in_state else \
                (structure, pairs, in_state, capture_key(structure, leaves, set(), torch.is_grad_enabled()))
            if (pairs or in_state) and overlap_key in self._overlap_eager:
                return self._fallback(args, kwargs, self._overlap_eager[overlap_key])
            key = capture_key(structure, leaves, set(), torch.is_grad_enabled())
            if key in self._split_keys:
                return self._split(args, kwargs)
            eager_why = self._eager_keys.get(key)
            if eager_why is not None:
                return self._fallback(args, kwargs, eager_why)
            reasons = self.scm.explain_call(*args, **kwargs)
            if reasons:
                log.info("trident: recompiling %s: %s", self.name,
                         "; ".join(f"spec {i}: {why}" for i, why in reasons))
            warming = getattr(self._warming, "depth", 0) > 0
            if (self.options.on_miss != "compile" and not warming) or len(reasons) >= self.options.max_specializations:
                return self._apply_policy(args, kwargs, reasons)
            try:
                with arg_objects.capturing_objects_of((args, kwargs)):
                    why = self._compile_any(args, kwargs, margs, mkwargs, structure, leaves, pairs, in_state,
                                            overlap_key)
            except CaptureRaisedError as e:
                # The function's own exception: eager raises it as the user wrote it (their type, their
                # line). Should it not, the eager result stands, said once, and calls with the same
                # capture key run eagerly from then on without trying to capture again.
                result = self.fn(*args, **kwargs)
                why = f"{e}; this call ran the original function eagerly, which did not raise"
                self._eager_keys[capture_key(structure, leaves, set(), torch.is_grad_enabled())] = why
                self._warn_fallback(why)
                return result
            except UnsupportedError as e:
                return self._on_unsupported(e, key, args, kwargs)
            return NotImplemented if why is None else self._fallback(args, kwargs, why)

    def _on_unsupported(self, error: UnsupportedError, key: tuple, args, kwargs):
        """A call that cannot be captured whole: with fullgraph=True the error is the caller's;
        otherwise calls with this capture key run split at the graph breaks (graph_breaks.py), said
        once, the error's first line (the user's file and line first) saying where."""
        if self.options.fullgraph:
            raise error
        from .graph_breaks import SplitRoute
        if self._split_route is None:
            self._split_route = SplitRoute(self.fn, self.options)
        first = str(error).strip().splitlines()[0][:400]
        self._split_keys[key] = first
        # the error says the call "cannot be compiled", which the split then does in pieces
        where = first.replace(f"{self.name}: capture failed, so this call cannot be compiled",
                              "cannot be captured as one program", 1)
        self._warn_once(f"{where}; calls like this run split there, as torch.compile splits them: the pieces "
                        "before and after run natively, Python between them (fullgraph=True raises instead)")
        return self._split(args, kwargs)

    def _split(self, args, kwargs):
        return self._split_route(args, kwargs)

    def _compile_any(self, args, kwargs, margs, mkwargs, structure, leaves, pairs, in_state, overlap_key):
        if pairs or in_state:
            return self._compile_overlapping(args, kwargs, (margs, mkwargs), structure, leaves, pairs, in_state,
                                             overlap_key)
        return self._compile(args, kwargs, structure, leaves)

    def warm(self, args, kwargs):
        """trident.warmup: this thread's call compiles on a miss whatever the on_miss policy."""
        self._warming.depth = getattr(self._warming, "depth", 0) + 1
        try:
            return self.scm(*args, **kwargs)
        finally:
            self._warming.depth -= 1

    def _check_arguments(self, args, kwargs):
        if self.signature is None:
            return
        params = self.signature.parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            # named first, as Python names it (bind would report a missing argument instead)
            unknown = [k for k in kwargs if k not in params or params[k].kind is inspect.Parameter.POSITIONAL_ONLY]
            if unknown:
                raise TypeError(f"{self.name}() (compiled by trident): got an unexpected keyword argument "
                                f"{unknown[0]!r}")
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}() (compiled by trident): {e}") from None

    def _apply_policy(self, args, kwargs, reasons):
        why = "; ".join(f"spec {i}: {w}" for i, w in reasons) or "no specialization yet"
        at_cap = len(reasons) >= self.options.max_specializations
        if self.options.on_miss == "error":
            cause = (f"max_specializations={self.options.max_specializations} reached"
                     if at_cap else "on_miss='error'")
            raise MissPolicyError(f"{self.name}: call matches no specialization and {cause}; failed guards: {why}")
        if at_cap and not self._cap_logged:
            self._cap_logged = True
            log.warning("trident: %s reached max_specializations=%d; further misses run eagerly. "
                        "Failed guards of the first such call: %s", self.name,
                        self.options.max_specializations, why)
        self.scm.note_fallback()
        return self.fn(*args, **kwargs)

    def _fallback(self, args, kwargs, reason: str):
        self._warn_fallback(reason)
        return self.fn(*args, **kwargs)

    def _warn_fallback(self, reason: str):
        """Count a call that runs eagerly, and say why once per reason (at the caller's line)."""
        self._warn_once(reason)
        self.scm.note_fallback()

    def lower_call(self, /, *args, **kwargs):
        """Capture and lower for these arguments without compiling or installing anything: the
        host IR a miss would add (an inspection aid, also used by tests on machines without a GPU)."""
        structure, leaves = _describe(args, kwargs)
        if structure is None:
            raise UnsupportedError(leaves)
        with self.lock, arg_objects.capturing_objects_of((args, kwargs)):
            return self._lower(args, kwargs, structure, leaves)

    def _compile_overlapping(self, args, kwargs, marked, structure, leaves, pairs, in_state, key) -> str | None:
        """Compile a call whose tensors overlap each other (`pairs`) or module state (`in_state`) from
        distinct copies of them (aliasing.py); None when the spec is installed, else why calls like it
        run eagerly (then remembered under `key`)."""
        copies = list(pairs) + [(-1, k) for k in in_state]
        cap_args, cap_kwargs = aliasing.distinct_copies(marked, (args, kwargs), copies)
        lowered = self._lower(cap_args, cap_kwargs, structure, leaves)
        names = _leaf_names(args, kwargs, self.signature)
        written = [(i, j) for i, j in pairs if i in lowered.written or j in lowered.written]
        why = None
        if written:
            i, j = written[0]
            w = names[i] if i in lowered.written else names[j]
            why = (f"arguments {names[i]} and {names[j]} share memory and the function writes {w}; "
                   "compiled code assumes a written tensor overlaps no other argument, so calls like "
                   "this run the original function eagerly")
        elif (clash := self._state_clash(lowered, args, kwargs)) is not None:
            why = clash
        elif (reject := _C.spec_rejects(lowered.text, *args, **kwargs)):
            what = (f"arguments {names[pairs[0][0]]} and {names[pairs[0][1]]}" if pairs
                    else f"argument {names[in_state[0]]} and module state")
            why = f"{what} share memory ({reject}); running eagerly"
        if why is not None:
            self._overlap_eager[key] = why
            return why
        self._install(lowered, _leaf_names(args, kwargs, self.signature), _bound_argument_words(args, kwargs, self.signature))
        return None

    def _module_tensors(self, args=(), kwargs=None) -> list:
        """The parameters and buffers the function may read: the compiled module's, or those of the
        modules and parameters a plain function reaches (_reached_state), and of the modules it is
        passed (this call's among them)."""
        roots = [self.module] if self.module is not None else list(_reached_state(self.fn).values())
        roots += self._module_arguments
        roots += [v for v in list(args) + list((kwargs or {}).values()) if _is_module_argument(v)]
        owner = getattr(self.fn, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            roots.append(owner)
        out = []
        for r in roots:
            if isinstance(r, torch.nn.Module):
                out += list(r.parameters()) + list(r.buffers())
            elif isinstance(r, torch.Tensor):
                out.append(r)
        return out

    def _compile(self, args, kwargs, structure: str, leaves: list[dict]) -> str | None:
        """Capture, lower and install a spec for this call; None when installed, else why the call
        runs eagerly instead (a written argument that is also module state the program reads)."""
        lowered = self._lower(args, kwargs, structure, leaves)
        why = self._state_clash(lowered, args, kwargs)
        if why is None:
            self._install(lowered, _leaf_names(args, kwargs, self.signature), _bound_argument_words(args, kwargs, self.signature))
        return why

    def _state_clash(self, lowered, args, kwargs) -> str | None:
        """Why this call must run eagerly because an argument the program writes is (or overlaps)
        module state it reads; None when none is."""
        _, _, values = _mark_leaves(args, kwargs)
        clash = aliasing.state_overlaps(lowered.written, values, lowered.state, lowered.state_written)
        if not clash:
            return None
        k, target = clash[0]
        return (f"argument {_leaf_names(args, kwargs, self.signature)[k]} shares memory with {target}, which "
                "the function reads, and the function writes one of them; compiled code assumes what it "
                "writes overlaps nothing else it reads, so calls like this run the original function eagerly")

    def _install(self, lowered, leaf_names: list[str], bound_words: list[str] = ()):
        """Adds a captured spec; `leaf_names` names its leaves as the installing call did, and
        `bound_words` its arguments bound into the capture: modules, constants (explain)."""
        from . import process_groups
        self._add_spec(lowered.text, sorted(lowered.written), sorted(lowered.state_written), lowered.ops,
                       [tuple(str(x) for x in n) for n in lowered.kernel_notes], bool(lowered.state),
                       lowered.route, process_groups.used_by(lowered.text))
        self.installed[-1]["leaf_names"] = leaf_names
        self.installed[-1]["bound_words"] = list(bound_words)
        self._save_automatic()

    def _add_spec(self, text: str, written: list, state_written: list, ops: list, kernel_notes: list,
                  reads_state: bool, route: str = "", groups: list | None = None):
        """Adds one specialization (a capture's, or a saved one: artifacts.py) to the module.
        `groups`: [name, rank, size] of the process groups its collectives run on
        (process_groups.py); such specs are dropped when a process group is destroyed."""
        if groups:
            from . import process_groups
            process_groups.hold(self)
        self._pins_state = self._pins_state or bool((written or state_written) and reads_state)
        self.scm.set_state([r.tensor for r in self.state])
        self.scm.add_spec(text)
        self.installed.append({"text": text, "written": list(written), "state_written": list(state_written),
                               "ops": list(ops), "kernel_notes": [list(n) for n in kernel_notes],
                               "reads_state": reads_state, "route": route, "groups": list(groups or [])})
        self.last_ops.append(ops)
        self.kernels.extend(tuple(n) for n in kernel_notes)

    # ---- saved specializations (artifacts.py) ----------------------------------------------------
    def _artifact_path(self) -> str | None:
        """Where this function's specializations are kept in the cache directory (None: not kept)."""
        if self._auto_path is False:
            from . import artifacts
            self._auto_path = artifacts.automatic_path(self)
        return self._auto_path

    def _save_automatic(self):
        path = self._artifact_path()
        if path is None:
            return
        from . import artifacts
        try:
            artifacts.write(artifacts.build(self), path)
        except Exception as e:  # noqa: BLE001  (keeping them is best effort: the call itself succeeded)
            log.info("trident: %s: specializations not kept in the cache directory: %s: %s", self.name,
                     type(e).__name__, e)

    def _load_automatic(self):
        """At the first miss: the specializations another process kept for this function, if any."""
        path = self._artifact_path()
        if path is None or not os.path.exists(path):
            return
        from . import artifacts
        try:
            header, blobs = artifacts.read(path, trusted_cache=True)
            if header.get("pid") == os.getpid():
                return  # written by this process: its own specializations are its functions' own
            self.install_saved(header, blobs, path)
        except artifacts.ArtifactRejected as e:
            self._reject_artifact(path, e)

    def _reject_artifact(self, path: str, why) -> None:
        self.artifacts_rejected += 1
        log.warning("trident: %s: saved specializations %s not used (%s); capturing again", self.name, path, why)

    def install_saved(self, header: dict, blobs: list, path: str) -> None:
        """Installs the specializations of a checked file (artifacts.read); ArtifactRejected, with
        nothing installed, when it is not this function's."""
        from . import artifacts
        artifacts.check(header, self)
        if self.installed or self.state:
            raise artifacts.ArtifactRejected("this function already holds specializations")
        try:
            if self.module is None and self._state_owner is None and \
                    any(s["kind"] != "constant" for s in header["state"]):
                self._state_owner = _function_module(self.fn, 0, [])
            for k, entry in enumerate(header["state"]):
                if entry["kind"] == "constant":
                    ref = StateRef("constant", entry["target"], artifacts.constant(entry, blobs[entry["blob"]]))
                else:
                    ref = StateRef(entry["kind"], entry["target"], None)
                if self._state_index(ref) != k:
                    raise artifacts.ArtifactRejected(f"state {entry['target']} is listed twice")
            if artifacts.state_signature(self.state) != header["state_signature"]:
                raise artifacts.ArtifactRejected("the module state's names, dtypes, shapes or devices changed")
            from . import process_groups
            for spec in header["specs"]:
                why = process_groups.mismatch(spec.get("groups") or [])
                if why:
                    raise artifacts.ArtifactRejected(why)
            for spec, text in zip(header["specs"], artifacts.texts(header, blobs, self.state)):
                self._add_spec(text, spec["written"], spec["state_written"], spec["ops"], spec["kernel_notes"],
                               spec["reads_state"], spec.get("route", ""), spec.get("groups"))
                self.installed[-1]["leaf_names"] = spec.get("leaf_names")
        except (AttributeError, KeyError, ImportError, ValueError, RuntimeError, TypeError) as e:
            self._forget_specs()
            raise artifacts.ArtifactRejected(f"{type(e).__name__}: {e}") from None
        except artifacts.ArtifactRejected:
            self._forget_specs()
            raise
        self._layout = _module_layout(self._state_owner)
        self.artifact_loads += 1
        log.info("trident: %s: %d specializations installed from %s", self.name, len(header["specs"]), path)

    def forget_for_groups(self):
        """A process group was destroyed (process_groups.py): drop every specialization, since one
        that calls collectives may name a group whose rank or size will differ when it comes back.
        The next call captures again."""
        with self.lock:
            if any(spec.get("groups") for spec in self.installed):
                log.info("trident: %s: a process group was destroyed; its specializations are dropped", self.name)
                self._forget_specs()

    def _forget_specs(self):
        """Drops every specialization and what they read (a module state change, a rejected file)."""
        self.scm.clear()
        self.state.clear()
        self._state_keys.clear()
        self._captures.clear()
        self.installed.clear()
        self._layout = None
        self._pins_state = False
        self._overlap_eager.clear()
        self._eager_keys.clear()
        self.scm.set_state([])

    def _dynamic_marks(self, structure: str, leaves: list[dict], float_leaves: set) -> set:
        """Which sizes, ints and floats to capture symbolically for this call (see Options.dynamic).
        `float_leaves`: the leaves that can be run-time floats (_leaf_paths)."""
        if self.options.dynamic is False:
            return set()
        marks = self._dynamic.setdefault(structure, set())
        if self.options.dynamic is True:
            for k, l in enumerate(leaves):
                if l["kind"] == _C.LEAF_TENSOR:
                    marks |= {("size", k, d) for d in range(l["dim"])}
                elif l["kind"] == _C.LEAF_INT:
                    marks.add(("int", k))
                elif l["kind"] == _C.LEAF_FLOAT and k in float_leaves:
                    marks.add(("float", k))
            return marks
        # Floats are run-time values from the first call (float_symbols.py): a float is a number the
        # program computes with far more often than a switch; one that decides a branch is
        # captured again as a constant, said once (_lower).
        marks |= {("float", k) for k in float_leaves if leaves[k]["kind"] == _C.LEAF_FLOAT}
        first = self._first_seen.setdefault(structure, leaves)
        for k, (a, b) in enumerate(zip(first, leaves)):
            if a["kind"] == _C.LEAF_TENSOR and a["dim"] == b["dim"]:
                marks |= {("size", k, d) for d in range(a["dim"]) if a["sizes"][d] != b["sizes"][d]}
            elif a["kind"] == _C.LEAF_INT and a["ival"] != b["ival"]:
                marks.add(("int", k))
        return marks

    def _lower(self, args, kwargs, structure: str, leaves: list[dict]):
        paths = _leaf_paths(args, kwargs)
        marks = self._dynamic_marks(structure, leaves, {k for k, (_, p) in enumerate(paths) if p is not None})
        # The symbolic attempts, most general first: a float that cannot be a run-time value (it
        # decides a branch) must not cost the sizes and ints their symbols.
        attempts = [marks] if marks else []
        if any(m[0] == "float" for m in marks) and any(m[0] != "float" for m in marks):
            attempts.append({m for m in marks if m[0] != "float"})
        names = None
        for attempt in attempts:
            static_key = (structure, frozenset(attempt), torch.is_grad_enabled())
            if static_key in self._static_only:
                continue
            try:
                return self._lower_with(args, kwargs, structure, leaves, attempt)
            except CaptureRaisedError:
                raise
            except UnsupportedError as e:
                if _outside_symbol_ranges(e):
                    # this call's value lies outside the range its symbol assumes (a negative int
                    # index): this call alone is captured for its values; the symbols still serve others
                    self._warn_once(f"a call with values outside the ranges of its symbols (a negative index) is "
                                    f"compiled for its values: {str(e).strip().splitlines()[0][:200]}")
                    break
                # Not silent: every new value of what varies now costs a capture and a compile. Said
                # once; later calls like it skip this attempt (it would fail the same way).
                self._static_only.add(static_key)
                names = names or _leaf_names(args, kwargs, self.signature)
                dropped = attempt if attempt is attempts[-1] else attempt - attempts[-1]  # what the next attempt drops
                varying = sorted({names[leaf] for _, leaf, *_ in dropped if leaf < len(names)})
                reason = str(e).strip().splitlines()[0][:300]
                tail = f"up to max_specializations={self.options.max_specializations}"
                if all(m[0] == "float" for m in dropped):
                    if tuple(varying) not in self._floats_said:  # once, whatever else varied with them
                        self._floats_said.add(tuple(varying))
                        self._warn_once(f"the floats {', '.join(varying)} cannot be run-time values ({reason}); "
                                        f"each new value of them compiles a specialization of its own, {tail}")
                else:
                    self._warn_once(f"the arguments that vary ({', '.join(varying)}) could not be captured "
                                    f"symbolically ({reason}); each new value compiles a specialization of "
                                    f"its own, {tail}")
        return self._lower_with(args, kwargs, structure, leaves, set())

    @property
    def said(self) -> list[str]:
        """What this function warned about once (fallbacks, specializations it must repeat)."""
        return sorted(self._fallback_logged)

    def _warn_once(self, reason: str):
        """A RuntimeWarning, once per reason, at the first frame outside this package (the
        caller's line, however deep the miss path is), and a log line at INFO (at WARNING, logging
        printed it twice)."""
        if reason not in self._fallback_logged:
            self._fallback_logged.add(reason)
            msg = f"trident: {self.name}: {reason}"
            warnings.warn(msg, RuntimeWarning, stacklevel=_caller_stacklevel())
            log.info(msg)

    def _lower_with(self, args, kwargs, structure: str, leaves: list[dict], marks: set):
        if self.module is not None and _holds_dtensors(self.module):
            # Tensor parallelism by parallelize_module: its input hooks call DTensor.from_local,
            # which torch.export cannot capture (torch 2.11 and 2.13). Dynamo and AOTAutograd can:
            # the call takes the graph-break route, whose graphs are native (backend.py).
            raise UnsupportedError(f"{self.name}: its parameters are DTensors (tensor parallelism), which "
                                   "torch.export cannot capture whole")
        margs, mkwargs, leaf_values = _mark_leaves(args, kwargs)
        if self.signature is not None:
            bound = self.signature.bind(*args, **kwargs)
            mbound = self.signature.bind(*margs, **mkwargs)
            ex_args, ex_kwargs = tuple(bound.args), dict(bound.kwargs)
            m_args, m_kwargs = tuple(mbound.args), dict(mbound.kwargs)
        else:
            ex_args, ex_kwargs, m_args, m_kwargs = args, kwargs, margs, mkwargs
        fn = self.fn
        if any(_is_bound_argument(v) for v in tuple(ex_args) + tuple(ex_kwargs.values())):
            if self.module is not None:
                raise UnsupportedError(f"{self.name}: a module, str, dtype, device or class passed as an argument "
                                       "to a compiled module is not captured (compile a function that calls the "
                                       "module with it)")
            for v in tuple(ex_args) + tuple(ex_kwargs.values()):
                if _is_module_argument(v) and not any(v is m for m in self._module_arguments):
                    self._module_arguments.append(v)
            fn, ex_args, ex_kwargs = _bind_arguments(self.fn, tuple(ex_args), dict(ex_kwargs))
            _, m_args, m_kwargs = _bind_arguments(self.fn, tuple(m_args), dict(m_kwargs))
        # Run-time floats (float_symbols.py) reach export as 0-dim tensors at these paths of the
        # wrapper's (a0.., k0..): the leaves _leaf_paths finds among the marked ones.
        floats = {leaf for kind, leaf, *_ in marks if kind == "float"}
        size_paths: list = []
        _leaf_paths(ex_args, ex_kwargs, size_paths)  # for the Sizes' paths alone
        if size_paths:
            values = _sizes_as_tuples(tuple(ex_args) + tuple(ex_kwargs.values()), size_paths)
            ex_args, ex_kwargs = values[:len(ex_args)], dict(zip(ex_kwargs, values[len(ex_args):]))
        float_paths = []
        if floats:
            float_paths = [p for m, p in _leaf_paths(m_args, m_kwargs)
                           if p is not None and isinstance(m, _Leaf) and m.index in floats]
            values = _floats_as_tensors(tuple(ex_args) + tuple(ex_kwargs.values()), float_paths)
            ex_args, ex_kwargs = values[:len(ex_args)], dict(zip(ex_kwargs, values[len(ex_args):]))
        # export's user inputs are the pytree leaves of (args, kwargs), None included.
        marks_ = pytree.tree_leaves((m_args, m_kwargs), is_leaf=lambda x: x is None)
        values = pytree.tree_leaves((ex_args, ex_kwargs), is_leaf=lambda x: x is None)
        leaf_of_input = [("float", m.index) if isinstance(m, _Leaf) and m.index in floats
                         else m.index if isinstance(v, torch.Tensor) else (m.index,) if type(v) is int else None
                         for m, v in zip(marks_, values)]
        # numbered in call order (the native flattener's), listed in the wrapper's parameter order
        pre_state = arg_objects.pre_state(margs, mkwargs, list(m_args) + list(m_kwargs.values()), args, kwargs)
        post_state = arg_objects.holds_mutables(pre_state)
        if not post_state:
            pre_state = None
        state_prefix = ""
        if self.module is not None and not post_state and not float_paths and not size_paths:
            wrapper, names = self.module, list(self.signature.bind(*ex_args, **ex_kwargs).arguments) \
                if self.signature is not None else None
        else:
            # A compiled module called with objects becomes submodule `fn` of a wrapper that also
            # returns the arguments' state; its state keeps the names it has in the module, where
            # _state_index reads it (the lowering strips the prefix).
            wrapper = _function_module(self.module or fn, len(ex_args), list(ex_kwargs), post_state=post_state,
                                       float_paths=float_paths, size_paths=size_paths, reached_from=self.fn,
                                       module_arguments=self._module_arguments)
            names = [f"a{i}" for i in range(len(ex_args))] + [f"k{j}" for j in range(len(ex_kwargs))]
            # keyword arguments travel under the wrapper's own parameter names (_function_module)
            ex_kwargs = dict(zip(names[len(ex_args):], ex_kwargs.values()))
            m_kwargs = dict(zip(names[len(ex_args):], m_kwargs.values()))
            if self.module is not None:
                state_prefix = "fn."
            else:
                self._state_owner = wrapper  # same submodule names at every capture
        dynamic_shapes = None
        if marks and names is not None:
            def leaf_spec(m, _path):
                dims = {d: _compat.dim_auto() for (kind, leaf, *rest) in marks
                        for d in rest if kind == "size" and leaf == m.index}
                if ("int", m.index) in marks:
                    return _compat.dim_auto()
                return dims or None
            dynamic_shapes = dict(zip(names, [_map_arg_tree(m, leaf_spec, "", objects_as_lists=True)
                                              for m in list(m_args) + list(m_kwargs.values())]))
        key = capture_key(structure, leaves, marks, torch.is_grad_enabled())

        def lowered_from(program):
            t0, triton0 = time.perf_counter(), triton_specialize.triton_compile_seconds()
            try:
                lowered = lower(program, structure, leaves, leaf_of_input, torch.is_grad_enabled(), self._state_index,
                                leaf_values, pre_state=pre_state, state_prefix=state_prefix)
                lowered.route = getattr(program, "_trident_route", "")
                inlined, kept = getattr(program, "_trident_python_kernels", ((), ()))
                if inlined:
                    lowered.route += "; ATen ops' Python kernels inlined: " + ", ".join(inlined)
                if kept:
                    lowered.route += "; ATen ops that run their Python kernel on every call: " + "; ".join(kept)
                return lowered
            finally:
                self.lowering_seconds += time.perf_counter() - t0
                self.triton_compile_seconds += triton_specialize.triton_compile_seconds() - triton0

        # A call whose data took a branch no specialization was traced for is captured anew: the
        # capture of the same key holds the other branch.
        scm = self.scm
        ep = None if scm is not None and scm.branch_missed() else self._captures.get(key)
        if ep is not None:
            lowered = lowered_from(ep)
            why = _C.spec_rejects(lowered.text, *args, **kwargs)
            if not why:
                return lowered
            # The program's own shape assumptions exclude this call: capture it again.
            log.info("trident: %s: captured program does not fit this call (%s); capturing again", self.name, why)
            del self._captures[key]
        t0 = time.perf_counter()
        try:
            ep = self._export(wrapper, ex_args, ex_kwargs, dynamic_shapes)
            ep._trident_route = "Dynamo (strict export)"
        except UnsupportedError:
            raise
        except Exception as e:  # capture failures name the construct; keep the original as cause
            user_error = _raised_by_user_code(e)
            # An exception Dynamo observed inside a library may be the fake tensors' (a data_ptr()
            # read): the library's Python, run by the second route, raises it again if it is real.
            traced = None if self._stopped_in_own_file(e) else \
                self._export_traced(wrapper, ex_args, ex_kwargs, dynamic_shapes, e)
            if not isinstance(traced, torch.export.ExportedProgram):
                error = CaptureRaisedError if user_error else UnsupportedError
                also = f"; the traced-Python route failed too: {traced}" if traced else ""
                raise error(
                    f"{_capture_where(e)}{self.name}: capture failed, so this call cannot be compiled: "
                    f"{_capture_reason(e)}{_capture_hint(e)}{also}") from e
            ep = traced
        finally:
            self.capture_seconds += time.perf_counter() - t0
            self.captures += 1
        n_user = sum(1 for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT")
        if n_user != len(leaf_of_input):
            raise UnsupportedError(
                f"{self.name}: export produced {n_user} user inputs for {len(leaf_of_input)} arguments; "
                "argument structure not supported")
        _compat.forget_example_inputs(ep)
        self._layout = _module_layout(self._state_owner)
        lowered = lowered_from(ep)
        why = _C.spec_rejects(lowered.text, *args, **kwargs) if marks else ""
        if why:
            # A symbolic trace whose own assumptions exclude the example it was traced with (export
            # can assume a range the example is outside of): the caller captures statically instead.
            raise UnsupportedError(f"{self.name}: the symbolic capture does not accept its own example ({why})")
        self._captures[key] = ep
        if said := autocast_weights.note(ep):
            self._warn_once(said)
        return lowered

    def _stopped_in_own_file(self, e: Exception) -> bool:
        """Whether Dynamo stopped in the compiled function's own source file (or the module's).
        There the construct is the user's (a print, Python's random, a branch on a value), which
        must run on every call: the call is split there (graph_breaks.py), as torch.compile splits
        it. Elsewhere it is a library's, taken by the traced-Python route (_export_traced)."""
        frame = _stop_frame(e)
        if frame is None:
            return True
        target = self.module.forward if self.module is not None else self.fn
        try:
            own = inspect.getsourcefile(inspect.unwrap(getattr(target, "__func__", target)))
        except TypeError:
            return True
        return own is not None and os.path.abspath(frame.filename) == os.path.abspath(own)

    def _export_traced(self, wrapper, args, kwargs, dynamic_shapes, strict_error: Exception):
        """The second route (library_launches.py): non-strict export, which runs the function's
        Python itself once, on fake tensors, with library Triton launches made recordable. Taken
        where Dynamo stopped in a library's code (_stopped_in_own_file). What that Python does besides tensor ops and launches (caching
        generated code, logging) happens at capture, not per call. None when this route fails too
        (then the caller reports Dynamo's error, which names the construct)."""
        from . import library_launches
        try:
            with library_launches.traceable() as launchers:
                ep = self._export(wrapper, args, kwargs, dynamic_shapes, strict=False)
        except Exception as e:
            return f"{_capture_where_traced(e)}{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
        via = ", ".join(f"{n} x{k}" for n, k in sorted(launchers.items()))
        where = _capture_where(strict_error).rstrip(": ")
        ep._trident_route = ("Python traced by non-strict export, where Dynamo stopped"
                       + (f" ({where})" if where else "") + (f"; Triton launches via {via}" if via else ""))
        return ep

    def _export(self, wrapper, args, kwargs, dynamic_shapes, strict: bool = True):
        """export_program; where the result holds an object of a class not yet a pytree node (a
        DynamicCache the model made itself, returned in its ModelOutput), that class is admitted
        (arg_objects.classes_named) and the capture tried again, a few classes at most."""
        extra: list = []
        while True:
            try:
                with arg_objects.as_pytree_nodes(extra):
                    ep = _compat.export_program(wrapper, args, kwargs, dynamic_shapes, strict=strict)
                self._inline_python_kernels(ep)
                return ep
            except AssertionError as e:
                m = re.search(r"unrecognized type UserDefinedObjectVariable\((\w+)\) at output", str(e))
                found = [c for c in arg_objects.classes_named(m.group(1)) if c not in extra] if m else []
                if not found or len(extra) >= 8:
                    raise
                extra += found

    def _inline_python_kernels(self, ep) -> None:
        """ATen ops a library gave Python kernels for the device (FlagGems' enable()) are replaced
        by what those kernels do (python_kernels.py); one that cannot be is said once, since each
        call of it runs Python."""
        with _compat.capturing():
            inlined, kept = python_kernels.inline(ep.graph_module)
        ep._trident_python_kernels = inlined, [f"{what}: {why}" for what, why in kept]
        for what, why in kept:
            if what not in self._said_python_kernels:
                self._said_python_kernels.add(what)
                log.warning("trident: %s: %s runs its Python kernel on every call; it could not be "
                            "inlined: %s", self.name, what, why)

    # ---- module state ----------------------------------------------------------------------
    def _state_index(self, ref: StateRef) -> int:
        if ref.kind in ("parameter", "buffer") and self._state_owner is not None:
            ref.tensor = self._read_state(ref)
            key = (ref.kind, ref.target)
        else:
            key = ("constant", id(ref.tensor))
        if key not in self._state_keys:
            ref.shape_key = state_key(ref.tensor)
            ref.data_ptr = _data_ptr(ref.tensor)
            self._state_keys[key] = len(self.state)
            self.state.append(ref)
        return self._state_keys[key]

    def _read_state(self, ref: StateRef) -> torch.Tensor:
        if ref.kind == "parameter":
            return self._state_owner.get_parameter(ref.target)
        return self._state_owner.get_buffer(ref.target)

    def _on_state_change(self):
        """Cold path: some module (re)registered state, or a captured tensor's metadata changed.
        New tensor objects or a change of dtype, shape, device or requires_grad (lower.state_key)
        invalidate every specialization; a new data pointer alone (`param.data = ...` of the same
        shape) only needs a new snapshot."""
        with self.lock:
            invalid = False
            for ref in self.state:
                if ref.kind not in ("parameter", "buffer") or self._state_owner is None:
                    continue
                try:
                    now = self._read_state(ref)
                except AttributeError:
                    invalid = True
                    continue
                if not isinstance(now, torch.Tensor):  # a buffer set to None
                    invalid = True
                    continue
                # Triton specializations may assume a state tensor's pointer is 16-byte aligned, and
                # a spec that writes an argument holds the state's addresses in its overlap guards
                # (aliasing.guard_lines).
                moved = _data_ptr(now) != ref.data_ptr if self._pins_state else \
                    _data_ptr(now) % 16 != ref.data_ptr % 16
                if now is not ref.tensor or state_key(now) != ref.shape_key or moved:
                    ref.tensor = now
                    invalid = True
            if self._layout is not None and self._layout != _module_layout(self._state_owner):
                invalid = True  # train()/eval(), or a parameter or buffer that came or went
            if invalid:
                log.info("trident: %s: module state changed; dropping %d specializations",
                         self.name, self.scm.counters()["specializations"])
                self._forget_specs()
            self.scm.set_state([r.tensor for r in self.state])
