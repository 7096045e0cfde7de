"""Common subexpressions of a captured program computed once: a pure ATen call whose op and
arguments equal an earlier call's is replaced by that call's result.

What it is for: a decoder builds some values once per layer from the same inputs. Hugging Face's
attention passes one boolean mask to every layer's scaled-dot-product attention, and the attention
converts it to an additive float mask inside each call (with sdpa decomposed at capture, _compat:
`scalar_tensor`, `where` and, for cuDNN, a `clone`, in each of the 8 layers of the benchmark's
Llama). After this pass the conversion runs once per step.

Contract: the graph is functional (torch.export's ATen graph, or aot_autograd's): a value never
changes after it is computed, so two calls of a pure op with equal arguments compute equal results.
Merged: ATen OpOverloads whose schema mutates nothing, that are not random (the
`nondeterministic_seeded` tag) and do not return uninitialized memory (`empty*`), and getitem of
merged results. Equal arguments: the same nodes, and constants of the same type and repr (0.0 and
-0.0 differ, True and 1 differ); a call with a symbolic argument is left alone. A call the output
reads is kept (the program's signature names outputs by node), but later duplicates may use it."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

_UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                            "empty_permuted"})


def eliminate(graph: fx.Graph) -> int:
    """Replace every duplicate pure call of `graph` by its first occurrence; the number replaced."""
    first: dict[tuple, fx.Node] = {}
    replaced = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not _pure(node.target):
            continue
        key = _key(node)
        if key is None:
            continue
        kept = first.get(key)
        if kept is None:
            first[key] = node
            continue
        if any(u.op == "output" for u in node.users):
            continue
        node.replace_all_uses_with(kept)
        graph.erase_node(node)
        replaced += 1
    return replaced


def _pure(target) -> bool:
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return schema.name.split("::")[-1] not in _UNINITIALIZED


class _Unkeyable(Exception):
    pass


def _frozen(a):
    """`a` (an argument tree) as a hashable value that keeps its structure: f(a, [b]) and
    f([a, b]) differ. Symbolic values and tensors have no key (raises _Unkeyable)."""
    if isinstance(a, fx.Node):
        return ("node", a)
    if isinstance(a, (tuple, list)):
        return (type(a).__name__, tuple(_frozen(x) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _frozen(v)) for k, v in a.items()))
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Tensor)):
        raise _Unkeyable
    return (type(a).__name__, repr(a))


def _key(node: fx.Node) -> tuple | None:
    try:
        return (node.target, _frozen(node.args), _frozen(node.kwargs))
    except _Unkeyable:
        return None
