"""ATen ops whose kernel for the device is a Python function: inlined at capture.

A library can replace ATen's own kernels with Python ones through torch.library (FlagGems'
`flag_gems.enable()` and `use_gems()` register its Triton operators for the CUDA dispatch key this
way). The captured graph still says `aten::add.Tensor`: export runs on fake tensors, which never
reach a device key. Called natively, such a node would enter the interpreter on every hit. Instead
`inline` runs the Python kernel once on the node's fake tensors, with library Triton launches made
recordable (library_launches.py), and splices the ATen calls and launches it made in place of the
node; the rest of the pipeline sees them as any other ops and launches. What the kernel does besides
(a log line, a cache of generated code) happens at capture, not per call, as with the traced-Python
route. Size checks the kernel makes on symbolic sizes become the specialization's guards (the
ShapeEnv records them, symbolic.py turns them into guards).

Only `aten` ops are inlined, and only functional ones (no argument written, no result aliasing an
argument): their meaning is ATen's, the Python kernel one implementation of it. A custom op's
Python implementation is its own contract (often opaque on purpose) and stays a call. A kernel
that cannot be traced this way stays a call too, and `explain` says so with the reason: it runs its
Python on every call, as eager does.
"""
from __future__ import annotations

import operator
import os
import re

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

_DEVICE_KEYS = {"cuda": "CUDA", "cpu": "CPU"}
_DEPTH = 4  # a Python kernel's own ATen calls may have Python kernels too; a cycle stops here


def python_kernel_site(op, device_type: str) -> str | None:
    """Where the Python kernel now registered for aten op `op` on `device_type`'s dispatch key was
    registered ("file:line"), or None when the kernel there is not a Python one."""
    key = _DEVICE_KEYS.get(device_type)
    if key is None or not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return None
    return _site(op.name(), key)


def _site(qualname: str, key: str) -> str | None:
    """The dispatcher's own table (a library can register and unregister at any moment): the
    kernel `qualname` has for `key`, when it is one of torch.library's Python kernels (boxed only,
    no C++ signature, registered from a Python file)."""
    try:
        dump = torch._C._dispatch_dump(qualname)
    except RuntimeError:
        return None
    for line in dump.splitlines():
        if line.startswith(f"{key}: registered at "):
            m = re.match(rf"{key}: registered at (.+):(\d+) :: \(none\) \[ boxed \]$", line)
            if m is None or m.group(1).endswith((".cpp", ".cc", ".cu", ".h")):
                return None
            return f"{m.group(1)}:{m.group(2)}"
    return None


def _table(key: str) -> dict[str, str]:
    """{"aten::op.overload": "file:line"} of the aten ops whose kernel for `key` is Python now, from
    torch.library's record of the registrations it made ("ns/op/key"), each confirmed in the
    dispatcher's table (the record keeps entries a later C++ registration overrode)."""
    names = {k.split("/")[1] for k in getattr(torch.library, "_impls", ()) if k.startswith("aten/")
             and k.endswith("/" + key)}
    found = {}
    for name in names:
        base, _, overload = name.partition(".")
        qualname = f"aten::{base}" + (f".{overload}" if overload and overload != "default" else "")
        site = _site(qualname, key)
        if site is not None:
            found[qualname] = site
    return found


def _from_torch(site: str) -> bool:
    """Whether a Python kernel is torch's own (torch 2.13 registers a few at import)."""
    return site.startswith(os.path.dirname(torch.__file__) + os.sep)


def registrations() -> list[str]:
    """The aten ops a library (not torch itself) gave Python kernels for the CPU or CUDA, as
    "aten::op/KEY": what a saved specialization is keyed on, since a capture inlines them
    (artifacts.py)."""
    return sorted(f"{op}/{key}" for key in _DEVICE_KEYS.values()
                  for op, site in _table(key).items() if not _from_torch(site))


def _is_functional(op) -> bool:
    schema = op._schema
    return not any(a.alias_info is not None for a in list(schema.arguments) + list(schema.returns))


def _device_type(node: fx.Node) -> str | None:
    for a in pytree.tree_leaves((node.args, node.kwargs)):
        val = a.meta.get("val") if isinstance(a, fx.Node) else None
        if isinstance(val, torch.Tensor):
            return val.device.type
    return None


class _StaysACall(Exception):
    """A node that cannot be replaced by native ops: (what, why)."""


def inline(gm: fx.GraphModule) -> tuple[list[str], list[tuple[str, str]]]:
    """Replace each node of `gm` whose op has a Python kernel for its device by what that kernel
    records (a composite op whose decomposition reaches one by that decomposition first), with the
    same done to the recording's own ops. A node is replaced only when all of it becomes native:
    where some op inside stays Python (a kernel that calls another op in a loop), replacing the
    outer op would run that inner Python once per iteration on every hit, slower than the one
    Python call eager makes, so the outer op stays one call instead. Returns (inlined, kept):
    "aten::op (file:line) xN" for each op inlined, and ("aten::op (file:line)", why) for each left
    a call."""
    tables = {device: _table(key) for device, key in _DEVICE_KEYS.items()}
    if not any(tables.values()):
        return [], []  # the usual case: nothing to look up
    # Composite ops are decomposed only where a library registered Python kernels for the device
    # (torch's own few are inlined where they appear, but do not make every capture trace every
    # composite op's decomposition).
    libraries = {device for device, t in tables.items() if any(not _from_torch(s) for s in t.values())}
    plain: set = set()  # ops whose decomposition reaches no Python kernel (or that have none)

    def site_of(node: fx.Node) -> str | None:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            return None
        return tables.get(_device_type(node) or "", {}).get(op.name())

    def expansion(node: fx.Node, depth: int, counts: dict[str, int]) -> fx.GraphModule | None:
        """What replaces `node`, all native (None: it has no Python kernel and its decomposition
        reaches none); raises _StaysACall when some part of it cannot be native."""
        site = site_of(node)
        if site is None:
            device = _device_type(node) or ""
            if node.op != "call_function" or device not in libraries or node.target in plain:
                return None
            sub = _decomposition_reaching_python(node, device, site_of)
            if sub is None:
                plain.add(node.target)
                return None
        else:
            what = f"{node.target.name()} ({site})"
            if depth > _DEPTH:
                raise _StaysACall(what, f"its Python calls itself more than {_DEPTH} levels deep")
            if not _is_functional(node.target):
                raise _StaysACall(what, "it writes an argument or returns a view of one")
            try:
                sub = _record(node)
            except Exception as e:  # noqa: BLE001  (the node stays a call; explain says why)
                raise _StaysACall(what, f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}")
            counts[what] = counts.get(what, 0) + 1
        for inner in list(sub.graph.nodes):
            try:
                part = expansion(inner, depth + 1, counts)
                if part is not None:
                    _splice(sub, inner, part)
            except (_StaysACall, RuntimeError) as e:
                if not isinstance(e, _StaysACall):
                    e = _StaysACall(f"{inner.target.name()} ({site_of(inner)})", str(e))
                if site is None:
                    raise e
                raise _StaysACall(what, f"its kernel calls {e.args[0]}, which stays a call: {e.args[1]}")
        return sub

    inlined: dict[str, int] = {}
    kept: dict[str, str] = {}
    changed = False
    for node in list(gm.graph.nodes):
        counts: dict[str, int] = {}
        try:
            sub = expansion(node, 0, counts)
            if sub is not None:
                _splice(gm, node, sub)
        except _StaysACall as e:
            kept.setdefault(e.args[0], e.args[1])
            continue
        except Exception as e:  # noqa: BLE001  (splicing refused: the node stays a call)
            kept.setdefault(f"{node.target.name()} ({site_of(node)})", f"{type(e).__name__}: {str(e)[:200]}")
            continue
        changed |= sub is not None
        for what, n in counts.items():
            inlined[what] = inlined.get(what, 0) + n
    if changed:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return [f"{k} x{n}" for k, n in inlined.items()], list(kept.items())


def _decomposition_reaching_python(node: fx.Node, device: str, site_of) -> fx.GraphModule | None:
    """ATen's decomposition of the node's composite op, recorded, when one of the ops it makes has a
    Python kernel for `device` (site_of(node) not None); else None."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten" or not _is_functional(op) \
            or not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return None
    from torch.fx.experimental.proxy_tensor import make_fx
    try:
        sub = make_fx(_calling(node, op.decompose), tracing_mode="symbolic")(*_input_values(node))
    except Exception:  # noqa: BLE001  (the op stays as it was: a call, as before)
        return None
    reaches = any(n.op == "call_function" and site_of(n) is not None for n in sub.graph.nodes)
    return sub if reaches else None


def _input_values(node: fx.Node) -> list:
    return [a.meta["val"] for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, fx.Node)]


def _calling(node: fx.Node, fn):
    """fn called with the node's arguments, its fx.Node inputs (tree order) replaced by the values
    passed in."""
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    at = [i for i, a in enumerate(flat) if isinstance(a, fx.Node)]

    def run(*inputs):
        leaves = list(flat)
        for i, v in zip(at, inputs):
            leaves[i] = v
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return fn(*args, **kwargs)
    return run


def _record(node: fx.Node) -> fx.GraphModule:
    """The node's Python kernel run on its fake inputs, recorded as a functional ATen graph whose
    placeholders are the node's fx.Node inputs in tree order."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functionalize

    from . import library_launches

    values = _input_values(node)
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, _DEVICE_KEYS[_device_type(node)]))
    op = node.target
    run = _calling(node, lambda *args, **kwargs: op.redispatch(keyset, *args, **kwargs))

    # First the Python as it is (it may read data_ptr() of its fake tensors, which a functional
    # wrapper refuses), then that recording functionalized: launches become functional launches.
    with library_launches.traceable():
        recorded = make_fx(run, tracing_mode="symbolic")(*values)
    return make_fx(functionalize(recorded, remove="mutations"), tracing_mode="symbolic")(*values)


def _splice(gm: fx.GraphModule, node: fx.Node, sub: fx.GraphModule) -> None:
    """`sub` (placeholders: the node's fx.Node inputs in tree order) in place of `node`."""
    if any(n.op == "get_attr" for n in sub.graph.nodes):
        raise RuntimeError("the kernel makes tensor constants")
    for user in node.users:
        if isinstance(node.meta.get("val"), (list, tuple)) and (
                user.op != "call_function" or user.target is not operator.getitem):
            raise RuntimeError(f"a multi-result op used as a whole by {user.format_node()}")
    inputs = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, fx.Node)]
    env: dict[fx.Node, object] = {}
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    env.update(zip(placeholders, inputs))
    trace = node.meta.get("stack_trace")
    result = None
    with gm.graph.inserting_before(node):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                result = fx.map_arg(n.args[0], lambda a: env[a])
                break
            new = gm.graph.node_copy(n, lambda a: env[a])
            if trace is not None:
                new.meta["stack_trace"] = trace  # errors name the user's line, not the library's
            env[n] = new
    if isinstance(result, (list, tuple)):
        for user in list(node.users):
            user.replace_all_uses_with(result[user.args[1]])
            gm.graph.erase_node(user)
    else:
        node.replace_all_uses_with(result)
    gm.graph.erase_node(node)
