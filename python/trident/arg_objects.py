"""Objects that arguments hold: a transformers cache and its layers, a dataclass, any plain class
whose state is its instance dictionary, a namedtuple or structseq (by its items, as pytree flattens
it). Their instances are arguments like tuples and dicts: the
native flattener walks their attributes (python/bindings/flatten.h), a capture sees them through
torch.export as pytree nodes, and a run leaves them as eager's code would have (new tensors,
attributes and list contents written back by the output tree's updates).

What is decided here, on the miss path only: which classes qualify (`admits`), registering them
with the native table, the pytree registration export needs while it captures, and the output tree
that turns a trace's post-call state of each object into updates (`effects`)."""
from __future__ import annotations

import contextlib
import dataclasses
import enum

import torch
import torch.utils._pytree as pytree

from . import _compat, object_table
from .errors import UnsupportedError

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined by a class statement
_MAX_DEPTH = 8      # flatten.cpp's kMaxDepth

_registered: set[type] = set()  # classes the native table flattens: by attributes, a dict subclass by items


def is_constant(value) -> bool:
    """A direct attribute value, or an argument itself, that is guarded by value (an enum member
    and a class by identity) instead of being a leaf (flatten.cpp: add_constant)."""
    return type(value) is str or isinstance(value, (torch.dtype, torch.device, type, enum.Enum))


def is_item_constant(value) -> bool:
    """An item of a tuple, list or dict argument that is such a constant: a str, the one export
    takes as an input its trace specializes on and as an output (flatten.cpp: Place::kItem)."""
    return type(value) is str


def tuple_class(cls: type) -> bool:
    """A namedtuple or structseq class (torch.return_types.topk): a tuple whose items are its whole
    state, flattened by position (flatten.cpp: add_sequence), as pytree flattens it."""
    if not isinstance(cls, type) or not issubclass(cls, tuple) or cls is tuple:
        return False
    if hasattr(cls, "n_sequence_fields"):  # a structseq: every field is an item
        return getattr(cls, "n_fields", None) == cls.n_sequence_fields
    return isinstance(getattr(cls, "_fields", None), tuple) and hasattr(cls, "_make")


def admits(cls: type) -> str | None:
    """None when instances of cls may be flattened by their attributes (or, a namedtuple or
    structseq, by their items), else why not. Such a class is defined in Python, derives from
    object alone (no C state besides the instance dictionary), has no __slots__, and is not a
    module, an enum or a tensor; a tuple class has no instance dictionary (whose attributes its
    items would not hold)."""
    sequence = tuple_class(cls)
    if sequence and hasattr(cls, "n_sequence_fields"):
        return None  # a structseq (defined in C, torch.return_types'): its items are its state
    if not isinstance(cls, type) or not cls.__flags__ & _HEAPTYPE:
        return f"{getattr(cls, '__name__', cls)} is not a class defined in Python"
    if sequence:
        if cls.__dictoffset__:
            return f"{cls.__name__} is a namedtuple subclass with an instance dictionary: give it __slots__ = ()"
        if any(not c.__flags__ & _HEAPTYPE and c not in (tuple, object) for c in cls.__mro__):
            return f"{cls.__name__} derives from a built-in class besides tuple"
        return None
    if issubclass(cls, (torch.nn.Module, torch.Tensor, enum.Enum, BaseException)):
        return f"{cls.__name__} is a {'module' if issubclass(cls, torch.nn.Module) else 'special class'}"
    builtin = [c for c in cls.__mro__ if not c.__flags__ & _HEAPTYPE and c is not object]
    if builtin:
        return f"{cls.__name__} derives from {builtin[0].__name__}"
    if any(vars(c).get("__slots__") for c in cls.__mro__):
        return f"{cls.__name__} has __slots__"
    if not cls.__dictoffset__:
        return f"{cls.__name__} has no instance dictionary"
    return None


def by_items(x) -> bool:
    """Whether x may be flattened by its dict items: an instance of a dict subclass its library
    registered as a pytree node flattened exactly so (transformers' ModelOutput: an encoder-decoder
    model's `encoder_outputs` argument), which export then captures by that registration."""
    node = pytree.SUPPORTED_NODES.get(type(x))
    if not isinstance(x, dict) or node is None or type(x).__flags__ & _HEAPTYPE == 0:
        return False
    try:
        values, context = node.flatten_fn(x)
    except Exception:  # noqa: BLE001  (another library's code: any failure means no)
        return False
    keys = list(x.keys())
    return list(context) == keys and len(values) == len(keys) and all(
        a is b for a, b in zip(values, x.values())) and all(type(k) is str and k.isidentifier() for k in keys)


def is_flattened(cls: type) -> bool:
    """Flattened by its attributes (a registered class that is neither a dict nor a tuple subclass)."""
    return cls in _registered and not issubclass(cls, (dict, tuple))


def is_sequence(cls: type) -> bool:
    """Flattened by its items (a registered namedtuple or structseq class: tuple_class)."""
    return cls in _registered and issubclass(cls, tuple)


def is_by_items(cls: type) -> bool:
    """Flattened by its items (a registered dict subclass: by_items admitted it)."""
    return cls in _registered and issubclass(cls, dict)


def _register(cls: type) -> int:
    """cls's number, its instances flattened from now on, natively and here alike (a class known to
    one side only would make the capture's leaves disagree with the native flattener's)."""
    _registered.add(cls)
    return object_table.register_class(cls)  # the native table walks a dict subclass by its items


def register_saved(cls: type) -> int:
    """_register for a class a saved specialization flattens (artifacts.py): ValueError when it no
    longer qualifies in this process (its definition changed since)."""
    ok = admits(cls) is None if not issubclass(cls, dict) else (
        cls in pytree.SUPPORTED_NODES and cls.__flags__ & _HEAPTYPE)
    if not ok:
        raise ValueError(f"{cls.__qualname__} is no longer a class whose instances trident flattens")
    return _register(cls)


def _state(x) -> dict:
    """What the native flattener walks of a registered object: its items (by key, or by position for
    a tuple class) or its attributes."""
    if isinstance(x, tuple):
        return dict(enumerate(x))
    return x if isinstance(x, dict) else vars(x)


def _objects(tree, admit: bool):
    """The objects of registered classes in a call's (args, kwargs), in the native flattener's visit
    order (its containers and depth limit); with `admit`, objects of classes that qualify are
    registered as they are met (and so yielded and descended into)."""
    def visit(x, depth):
        if depth > _MAX_DEPTH:
            return
        t = type(x)
        if t in (tuple, list):
            for v in x:
                yield from visit(v, depth + 1)
        elif t is dict:
            for v in x.values():
                yield from visit(v, depth + 1)
        else:
            if admit and t not in _registered and not isinstance(x, torch.Tensor) and (
                    by_items(x) or (tuple_class(t) and admits(t) is None)
                    or (hasattr(x, "__dict__") and not isinstance(x, dict) and admits(t) is None)):
                _register(t)
            if t in _registered:
                yield x
                for v in _state(x).values():
                    yield from visit(v, depth + 1)

    yield from visit(tree, -2)  # tree is (args, kwargs): each argument at the flattener's depth 0


def register_classes(args: tuple, kwargs: dict) -> None:
    """Admit the classes of the objects the arguments hold (miss path): from then on the native
    flattener describes them, and a class that does not qualify leaves the call unsupported with
    the native flattener's message."""
    for _ in _objects((args, kwargs), admit=True):
        pass


def why_refused(message: str, args: tuple, kwargs: dict) -> str:
    """The native flattener's refusal (`argument 1: Loose is not supported natively`) with, where it
    names the class of an object the arguments hold, why that class is not flattened (admits)."""
    name = message.rsplit(": ", 1)[-1].removesuffix(" is not supported natively")

    def values(x, depth):  # what the native flattener visits, to its depth limit
        yield x
        t = type(x)
        inner = x.values() if t is dict else x if t in (tuple, list) else _state(x).values() if t in _registered else ()
        if depth < _MAX_DEPTH:
            for v in inner:
                yield from values(v, depth + 1)

    for x in values(tuple(args) + tuple(kwargs.values()), -1):
        if name in (type(x).__name__, type(x).__qualname__) and not isinstance(x, torch.Tensor):
            reason = admits(type(x))
            if reason:
                return f"{message} ({reason})"
    return message


def classes_named(name: str) -> list[type]:
    """The admitted classes of that name among the loaded modules' globals, each admitted (a class
    a traced function created and returned an instance of, known to export only by name). Read
    from each module's own namespace, never through getattr: a library's lazy module (transformers')
    imports a submodule for a name it lists, which can fail (transformers 5.17 imported an image
    processor needing torchvision while looking for `DynamicCache`) or cost seconds. The class of an
    instance the function made is loaded already, so its module holds it."""
    import sys
    found = []
    for module in list(sys.modules.values()):
        try:
            cls = vars(module).get(name) if module is not None else None
        except TypeError:  # an entry without a namespace of its own
            continue
        if isinstance(cls, type) and cls.__name__ == name and cls not in found and admits(cls) is None:
            found.append(cls)
    for cls in found:
        _register(cls)
    return found


@contextlib.contextmanager
def capturing_objects_of(tree):
    """as_pytree_nodes for the classes of the objects in a call's (args, kwargs)."""
    objs = [o for o in _objects(tree, admit=False) if not isinstance(o, (dict, tuple))]  # pytree nodes already
    with as_pytree_nodes(list(dict.fromkeys(type(o) for o in objs)), objs):
        yield


# ---- capture: the objects as pytree nodes --------------------------------------------------------

_post_names: dict[type, tuple] = {}  # while capturing: class -> attribute names to read after the call


def _assigned_names(cls: type) -> list[str]:
    """Names the class's own code assigns as `self.NAME = ...` (its MRO's source, where readable)."""
    import ast
    import inspect
    import textwrap
    names: list[str] = []
    for c in cls.__mro__[:-1]:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(c)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self" \
                            and e.attr not in names:
                        names.append(e.attr)
    return names


def _flatten(obj):
    if torch.compiler.is_compiling() and not _compat.DYNAMO_LISTS_INSTANCE_DICTS:
        # Inside the trace, export flattening what the call leaves: Dynamo 2.11 cannot list an
        # instance dictionary, so the attributes are read by name (as_pytree_nodes's names): an
        # attribute the call adds under a name neither the instance had nor its class's code
        # assigns is not seen there.
        d = {}
        for k in _post_names.get(type(obj), ()):
            v = getattr(obj, k, _ABSENT)  # a str sentinel: Dynamo 2.11 takes no object default here
            if not (isinstance(v, str) and v == _ABSENT):
                d[k] = v
    else:
        d = vars(obj)
    names = tuple(d)
    children = [v for v in d.values() if not is_constant(v)]
    constants = tuple((k, v) for k, v in d.items() if is_constant(v))
    return children, (names, constants)


def _flatten_with_keys(obj):
    children, context = _flatten(obj)
    names = [k for k in context[0] if k not in dict(context[1])]
    return [(pytree.GetAttrKey(k), v) for k, v in zip(names, children)], context


def _unflatten(cls):
    def unflatten(children, context):
        names, constants = context
        obj = object.__new__(cls)
        consts = dict(constants)
        it = iter(children)
        for k in names:
            obj.__dict__[k] = consts[k] if k in consts else next(it)
        return obj
    return unflatten


_ABSENT = "\x00trident: no such attribute\x00"


def _names_after(cls: type, seen: list) -> tuple:
    """The attributes an instance of cls may have after a call: those of its instances the call was
    given, in their order, then those its code assigns, less class-level names (a method, a class
    default or a property read by name is not instance state)."""
    names = list(dict.fromkeys(k for obj in seen for k in vars(obj)))
    for k in _assigned_names(cls):
        if k not in names and not hasattr(cls, k):
            names.append(k)
    return tuple(names)


@contextlib.contextmanager
def as_pytree_nodes(classes: list[type], instances: list | None = None):
    """While capturing: the classes as pytree nodes whose children are the non-constant attributes
    in instance-dictionary order, exactly as flatten.cpp walks them, so export's inputs line up with
    the native leaves. Registered for the capture only (other libraries' pytree code never sees
    them); a class another library registered itself is refused (its flatten would not line up)."""
    added = []
    try:
        for cls in classes:
            _post_names[cls] = _names_after(cls, [o for o in instances or () if type(o) is cls])
            if cls in pytree.SUPPORTED_NODES:
                raise UnsupportedError(
                    f"{cls.__qualname__} is registered as a pytree node by other code, whose flattening trident "
                    "cannot read natively")
            pytree.register_pytree_node(cls, _flatten, _unflatten(cls), flatten_with_keys_fn=_flatten_with_keys,
                                        serialized_type_name=f"trident-capture:{cls.__module__}.{cls.__qualname__}")
            added.append(cls)
        yield
    finally:
        for cls in added:
            pytree._deregister_pytree_node(cls)
            _post_names.pop(cls, None)


# ---- capture: the state the call leaves -------------------------------------------------------

@dataclasses.dataclass
class Node:
    """A container or object of the call's arguments as the native flattener numbers it (node K),
    holding the marked values (_Leaf markers, constants, nested Nodes)."""
    index: int
    kind: type            # tuple, list, dict or the object's class
    items: dict           # position (tuple, list) or name (dict, object) -> value


def pre_state(marked_args: tuple, marked_kwargs: dict, order: list, args: tuple = (), kwargs: dict | None = None) -> list:
    """The arguments as Nodes, numbered in flatten.cpp's visit order (pre-order over positional,
    then keyword arguments in call order), one entry per argument of `order`: the same marked
    values as bound to the signature (signature.bind may reorder keywords and make them
    positional; it keeps the objects). `args`, `kwargs`: the call's own arguments, which the marked
    ones mirror, read for what marking does not keep: a torch.Size, marked as a tuple."""
    counter = iter(range(1 << 30))
    made: dict[int, object] = {}

    def visit(x, real):
        t = type(x)
        if t in (tuple, list):
            n = Node(next(counter), torch.Size if type(real) is torch.Size else t, {})
            n.items = {k: visit(v, real[k] if real is not None else None) for k, v in enumerate(x)}
            return n
        if t is dict:
            n = Node(next(counter), t, {})
            n.items = {k: visit(v, real[k] if real is not None else None) for k, v in x.items()}
            return n
        if t in _registered:
            n = Node(next(counter), t, {})
            own = _state(real) if real is not None else {}
            n.items = {k: visit(v, own.get(k)) for k, v in _state(x).items()}
            return n
        return x  # a leaf marker or a constant

    reals = list(args) + list((kwargs or {}).values())
    for k, a in enumerate(list(marked_args) + list(marked_kwargs.values())):
        made[id(a)] = visit(a, reals[k] if k < len(reals) else None)
    return [made[id(a)] for a in order]


def holds_mutables(pre: list) -> bool:
    """Whether the call's arguments hold something a function can change besides tensors' data: an
    object, a dict or a list (an item set, appended or replaced). Their state after the call is
    then part of the capture, and what changed is written back (output_trees.py): a flag set in a
    plain dict argument was lost, silently, before."""
    def any_mutable(x):
        if isinstance(x, Node):
            return not issubclass(x.kind, tuple) or any(any_mutable(v) for v in x.items.values())
        return False
    return any(any_mutable(p) for p in pre)


def constant_text(value, quote, dtype_code) -> str:
    """A constant attribute value as an output-tree operand (a device or class by the object
    table's number: the capture's own object, equal to the call's)."""
    if type(value) is str:
        return quote(value)
    if isinstance(value, torch.dtype):
        return f"dtype({dtype_code(value)})"
    return f"pyref({object_table.intern(value)})"
