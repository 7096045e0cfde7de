"""A spec's return statement: the output tree of what the function returns, and the updates that
leave the objects it was given as eager's code would have left them.

A capture of arguments that hold objects returns, besides the function's result, every argument
as it is after the call (compiled._function_module), so export's output spec holds each object's
post-call attributes. `post_updates` compares them with the call's own objects (arg_objects.Node)
and says, as `update(K) {...}` operands, which attributes and list contents to write: a tensor the
call replaced (a DynamicCache's `torch.cat`), a flag it set, a layer it appended. An object or
list is updated in place, so the caller's objects stay the same objects; a tuple that changed is a
new tuple set on its parent. What the call left alone costs nothing at run time.

Output tree text (host IR return syntax): tuples, lists, dicts, `none`, leaf operands; an object
of a class arg_objects admitted as `object(K) {"name": v, ...}`; one of a dict-like class another
library registered as a pytree node (a transformers ModelOutput) as `object(K) call {...}`, which
calls the class with those keyword arguments; an argument object the function returns as
`node(K)`, the caller's object itself."""
from __future__ import annotations

import collections

import torch

from .. import _compat, arg_objects, object_table
from ..arg_objects import Node
from ..errors import UnsupportedError

_MISSING = object()


def _tuple_class(kind, context):
    """The tuple class of a pytree node that is a namedtuple (pytree's node type is then the
    `namedtuple` function, the class its context), a structseq or a torch.Size (the node type is
    the class)."""
    if kind is collections.namedtuple and isinstance(context, type) and issubclass(context, tuple):
        return context
    if isinstance(kind, type) and issubclass(kind, tuple) and (hasattr(kind, "n_sequence_fields") or kind is torch.Size):
        return kind
    return None


class Trees:
    """Builds the texts; `quote` and `dtype_code` are the lowering's, `pre_operand(marker)` the
    operand a leaf of the call has in the spec (what an unchanged leaf's output operand is)."""

    def __init__(self, quote, dtype_code, pre_operand):
        self.quote = quote
        self.dtype_code = dtype_code
        self.pre_operand = pre_operand
        self.updates: list[str] = []
        self.node_of: dict[str, int] = {}  # an argument object's post-call text -> its node

    def key(self, k) -> str:
        """A dict key as output-tree text: a quoted str, or an int written bare."""
        return str(k) if type(k) is int else self.quote(k)

    # -- the function's result ------------------------------------------------------------------
    def result(self, spec, leaves) -> str:
        it = iter(leaves)
        text, _, _ = self._value(_MISSING, spec, it)
        return text

    # -- the arguments after the call -------------------------------------------------------------
    def post_updates(self, pre: list, spec, leaves) -> list[str]:
        """The updates that bring each argument from `pre` (arg_objects.pre_state) to its state in
        `spec` (the tuple of every argument after the call), with `leaves` its operands."""
        it = iter(leaves)
        kids = _compat.treespec_children(spec)
        if len(kids) != len(pre):
            raise UnsupportedError("internal: the arguments after the call do not match the call's")
        for p, s in zip(pre, kids):
            self._value(p, s, it)
        return self.updates

    def _value(self, pre, spec, it):
        """(text of the value after the call, whether it differs from `pre`, text of it built anew)."""
        if _compat.treespec_is_leaf(spec):
            text = next(it)
            changed = not (pre is not _MISSING and not isinstance(pre, Node) and text == self.pre_operand(pre))
            return text, changed, text
        kind = spec.type
        kids = _compat.treespec_children(spec)
        if kind is type(None):
            return "none", not (pre is not _MISSING and not isinstance(pre, Node) and self.pre_operand(pre) == "none"), \
                "none"
        same = isinstance(pre, Node) and pre.kind is kind
        if arg_objects.is_flattened(kind):
            return self._object(pre if same else _MISSING, kind, spec.context, kids, it)
        if kind in (tuple, list):
            parts = [self._value(pre.items.get(k, _MISSING) if same else _MISSING, c, it) for k, c in enumerate(kids)]
            texts, fresh = [p[0] for p in parts], [p[2] for p in parts]
            changed = not same or len(pre.items) != len(kids) or any(p[1] for p in parts)
            if kind is tuple:
                fresh_text = "(" + ", ".join(fresh) + ("," if len(fresh) == 1 else "") + ")"
                if not changed:
                    return f"node({pre.index})", False, fresh_text
                return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")", True, fresh_text
            fresh_text = "[" + ", ".join(fresh) + "]"
            if not same:
                return "[" + ", ".join(texts) + "]", True, fresh_text
            if changed:  # the caller's list, given its new contents
                self.updates.append(f"update({pre.index}) [" + ", ".join(texts) + "]")
            return f"node({pre.index})", False, fresh_text
        if kind is dict:
            keys = spec.context
            if not all(type(k) in (str, int) for k in keys):
                raise UnsupportedError(f"output dict with keys other than strings and ints {keys!r}")
            parts = [self._value(pre.items.get(k, _MISSING) if same else _MISSING, c, it) for k, c in zip(keys, kids)]
            fresh_text = "{" + ", ".join(f"{self.key(k)}: {p[2]}" for k, p in zip(keys, parts)) + "}"
            if same:  # the caller's dict, its new and changed items set (insertion order kept)
                gone = [k for k in pre.items if k not in keys]
                if gone or [k for k in keys if k in pre.items] != list(pre.items):
                    raise UnsupportedError(f"the function removes or reorders items of a dict it was given "
                                           f"({(gone or list(keys))[0]!r}), which trident does not write back")
                sets = [(k, p[0]) for k, p in zip(keys, parts) if p[1] or k not in pre.items]
                if sets:
                    self.updates.append(f"update({pre.index}) {{" +
                                        ", ".join(f"{self.key(k)}: {t}" for k, t in sets) + "}")
                return f"node({pre.index})", False, fresh_text
            return "{" + ", ".join(f"{self.key(k)}: {p[0]}" for k, p in zip(keys, parts)) + "}", True, fresh_text
        cls = _tuple_class(kind, spec.context)
        if cls is not None:
            # a namedtuple or structseq (torch.topk's torch.return_types.topk): the class holding its
            # items, made anew; an argument of that class whose items are unchanged is the caller's
            same = isinstance(pre, Node) and pre.kind is cls
            parts = [self._value(pre.items.get(k, _MISSING) if same else _MISSING, c, it) for k, c in enumerate(kids)]
            comma = "," if len(parts) == 1 else ""
            seq = lambda k: f"object({object_table.intern(cls)}) seq (" + ", ".join(p[k] for p in parts) + comma + ")"  # noqa: E731
            if same and len(pre.items) == len(kids) and not any(p[1] for p in parts):
                return f"node({pre.index})", False, seq(2)
            return seq(0), True, seq(2)
        if isinstance(kind, type) and issubclass(kind, dict) and isinstance(spec.context, (list, tuple)) and all(
                isinstance(k, str) for k in spec.context):
            # a dict-like class registered by its library (a transformers ModelOutput): made by
            # calling it with its fields
            parts = [self._value(_MISSING, c, it) for c in kids]
            body = ", ".join(f"{self.quote(k)}: {p[0]}" for k, p in zip(spec.context, parts))
            return f"object({object_table.intern(kind)}) call {{{body}}}", True, f"object({object_table.intern(kind)}) call {{{body}}}"
        raise UnsupportedError(
            f"output container {getattr(kind, '__name__', kind)} is not supported (use tuple, list or dict; a Hugging "
            "Face model returns a tuple with return_dict=False)")

    def _object(self, pre, kind, context, kids, it):
        names, constants = context
        consts = dict(constants)
        child = iter(kids)
        texts, fresh, sets = [], [], []
        for name in names:
            old = pre.items.get(name, _MISSING) if pre is not _MISSING else _MISSING
            if name in consts:
                v = consts[name]
                text = arg_objects.constant_text(v, self.quote, self.dtype_code)
                changed = not (old is not _MISSING and not isinstance(old, Node) and type(old) is type(v)
                               and (old is v if isinstance(v, type) else old == v))
                f = text
            else:
                text, changed, f = self._value(old, next(child), it)
            texts.append((name, text))
            fresh.append((name, f))
            if changed:
                sets.append((name, text))
        body = lambda pairs: ", ".join(f"{self.quote(k)}: {t}" for k, t in pairs)  # noqa: E731
        fresh_text = f"object({object_table.intern(kind)}) {{{body(fresh)}}}"
        if pre is _MISSING:
            node = self.node_of.get(fresh_text)  # an argument object the function returns
            if node is not None:
                return f"node({node})", False, fresh_text
            return f"object({object_table.intern(kind)}) {{{body(texts)}}}", True, fresh_text
        gone = [n for n in pre.items if n not in names]
        if gone:
            raise UnsupportedError(f"the function deletes attribute {gone[0]!r} of a {kind.__name__} it was given, "
                                   "which trident does not write back")
        if sets:
            self.updates.append(f"update({pre.index}) {{{body(sets)}}}")
        self.node_of.setdefault(fresh_text, pre.index)
        return f"node({pre.index})", False, fresh_text
