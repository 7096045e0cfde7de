"""torch.compile(model, backend="trident"): each graph Dynamo produces goes through AOTAutograd to a
functional ATen graph and becomes its own Specialization Cache Module, lowered exactly as
trident.compile lowers an exported program (ATen calls and user Triton kernels, natively).

Registered through the `torch_dynamo_backends` entry point (pyproject.toml), so the string
"trident" works without importing trident first.

Inference is the supported mode. A graph whose inputs require grad while grad mode is on runs the
Dynamo graph as is (eager ATen, correct gradients), logged once per process.

Input mutations: AOTAutograd (keep_inference_input_mutations) ends the forward graph with
`input.copy_(new_value)` for each input it mutates, `new_value` being functional (a KV cache write is
`slice_scatter(cache, k, ...)`, a full copy of the cache). Those trailing copies become the input
mutations of the program the lowering reads, as torch.export states them, so the backend's graphs
get what trident.compile's do: the scatter re-inplaced (reinplace.py), no write-back copy, and the
written inputs guarded against overlapping the other tensor arguments but parameters, which Dynamo
does not guard for aliasing either (aliasing.py, _unguarded_parameters).
"""
from __future__ import annotations

import logging
import weakref
from types import SimpleNamespace

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.export.graph_signature import (ConstantArgument, InputKind, InputSpec, OutputKind, OutputSpec,
                                          SymIntArgument, TensorArgument)

from . import _compat
from .compiled import CompiledFunction
from .config import Options
from .lowering.lower import lower

log = logging.getLogger("trident")

# Weak references to the controllers of the graphs the backend compiled in this process, in compile
# order, for trident.explain; a controller lives as long as Dynamo keeps its compiled graph.
GRAPHS: list[weakref.ref] = []


def live_graphs(refs: list[weakref.ref] | None = None) -> list["GraphFunction"]:
    """The controllers among `refs` (default: all of GRAPHS) still alive, in compile order."""
    return [g for g in (r() for r in (GRAPHS if refs is None else refs)) if g is not None]


_autograd_logged = False


def _input_mutations_as_outputs(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[str]]:
    """The AOTAutograd forward graph `gm` as the lowering reads it, and the inputs it mutates. The
    copies into inputs that end the graph (each `placeholder.copy_(value)` with no users, followed only
    by other such copies and the output, placeholders distinct) are left out of a copy of the graph,
    whose output returns their values ahead of the graph's own outputs; the names of those
    placeholders, in that order, are returned with it. `gm` itself is not changed: a call trident
    does not run natively (a fallback) runs it as it is, copies included."""
    nodes = list(gm.graph.nodes)
    tail = []
    for n in reversed(nodes[:-1]):
        if not (n.op == "call_function" and n.target is torch.ops.aten.copy_.default and len(n.args) == 2
                and not n.kwargs and not n.users and isinstance(n.args[0], fx.Node)
                and n.args[0].op == "placeholder" and isinstance(n.args[1], fx.Node)):
            break
        tail.append(n)
    targets = [n.args[0] for n in reversed(tail)]
    if not tail or len(set(targets)) != len(targets):
        return gm, []
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in nodes[:-1]:
        if n not in tail:
            env[n] = graph.node_copy(n, lambda x: env[x])
    values = [env[n.args[1]] for n in reversed(tail)]
    outs = [fx.map_arg(o, lambda x: env[x]) for o in nodes[-1].args[0]]
    graph.output(tuple(values) + tuple(outs))
    return fx.GraphModule(gm, graph), [t.name for t in targets]


def _program(gm: fx.GraphModule, mutated: list[str]):
    """The fields of an ExportedProgram the lowering reads, for an AOTAutograd forward graph:
    every placeholder is a user input; the first len(mutated) outputs are the new values of the
    placeholders named in `mutated` (_input_mutations_as_outputs), the rest user outputs of a flat tuple."""
    inputs = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        val = n.meta.get("val")
        arg = (TensorArgument(name=n.name) if isinstance(val, torch.Tensor) else
               SymIntArgument(name=n.name) if isinstance(val, torch.SymInt) else
               ConstantArgument(name=n.name, value=val))
        inputs.append(InputSpec(kind=InputKind.USER_INPUT, arg=arg, target=None))
    (out_node,) = [n for n in gm.graph.nodes if n.op == "output"]
    outs = list(out_node.args[0])
    outputs = [OutputSpec(kind=OutputKind.USER_INPUT_MUTATION, arg=TensorArgument(name=outs[i].name), target=name)
               for i, name in enumerate(mutated)]
    outputs += [OutputSpec(kind=OutputKind.USER_OUTPUT, arg=TensorArgument(name=f"out{i}"), target=None)
                for i in range(len(outs) - len(mutated))]
    out_spec = pytree.tree_flatten(tuple(range(len(outs) - len(mutated))))[1]
    return SimpleNamespace(graph=gm.graph, graph_module=gm, constants={}, state_dict={},
                           graph_signature=SimpleNamespace(input_specs=inputs, output_specs=outputs),
                           call_spec=SimpleNamespace(out_spec=out_spec))


def _unguarded_parameters(args) -> frozenset[int]:
    """Leaves (here: argument positions) of the parameters among a graph's arguments, which the
    arguments the graph writes are not guarded against overlapping, as Dynamo does not guard them
    for aliasing either (torch._dynamo.config.skip_no_tensor_aliasing_guards_on_parameters, read at
    each lowering; with it off, every pair is guarded). A decoder's graph takes its weights as
    arguments: guarding its KV caches against each of them made thousands of guards."""
    if not getattr(torch._dynamo.config, "skip_no_tensor_aliasing_guards_on_parameters", False):
        return frozenset()
    return frozenset(i for i, a in enumerate(args) if isinstance(a, torch.nn.Parameter))


class GraphFunction(CompiledFunction):
    """A controller whose capture is already done: the AOT forward graph. A miss (new sizes where
    the graph is symbolic, a new alignment) only re-lowers the graph with the call's guards."""

    def __init__(self, gm: fx.GraphModule, options: Options, name: str):
        super().__init__(gm, options)  # self.fn: the graph as AOTAutograd made it, for eager calls
        self.lowered_gm, self.mutated = _input_mutations_as_outputs(gm)  # once, for every later miss
        self.name = name
        # ATen ops a library serves with Python kernels (flag_gems.enable()): inlined, as a capture
        # of trident.compile inlines them (python_kernels.py)
        self._inline_python_kernels(SimpleNamespace(graph_module=self.lowered_gm))
        self.signature = None
        self.module = None

    def _artifact_path(self):
        return None  # Dynamo recompiles the graph in a new process; nothing to keep

    def _on_unsupported(self, error, key, args, kwargs):
        """A graph the lowering cannot take runs as AOTAutograd made it (eager ATen), said once;
        calls with the same capture key do so from then on without trying again. (Dynamo already
        split the function: there is nothing left to split.)"""
        why = f"{str(error).strip().splitlines()[0][:400]}; this graph runs eagerly"
        self._eager_keys[key] = why
        return self._fallback(args, kwargs, why)

    def _lower(self, args, kwargs, structure, leaves):
        leaf_of_input = [i if isinstance(a, torch.Tensor) else (i,) if type(a) is int else None
                         for i, a in enumerate(args)]
        return lower(_program(self.lowered_gm, self.mutated), structure, leaves, leaf_of_input, torch.is_grad_enabled(),
                     self._state_index, list(args), _unguarded_parameters(args))


def _without_unused_objects(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[int] | None]:
    """The graph without the inputs that are opaque objects it never reads (a DTensor's DeviceMesh,
    which AOTAutograd passes along with the local tensors of a tensor-parallel module), and the
    positions of the inputs kept; (gm, None) when there are none. The native flattener takes no
    such object, and the graph does not need it."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    drop = [k for k, n in enumerate(placeholders) if not n.users and not isinstance(
        n.meta.get("val"), (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))
        and n.meta.get("val") is not None]
    if not drop:
        return gm, None
    graph = fx.Graph()
    env = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder" and placeholders.index(n) in drop:
            continue
        env[n] = graph.node_copy(n, lambda a: env[a])
    kept = fx.GraphModule(gm, graph)
    return kept, [k for k in range(len(placeholders)) if k not in drop]


def _needs_autograd(example_inputs) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


def trident_backend(gm: fx.GraphModule, example_inputs, options: dict | None = None,
                    sink: list | None = None):
    """The Dynamo backend. `options` takes the keyword arguments of trident.compile; `sink`, where
    given, also receives a weak reference to each graph's controller (a split trident.compile's
    pieces, graph_breaks.py)."""
    global _autograd_logged
    opts = Options(**(options or {}))
    if _needs_autograd(example_inputs):
        if not _autograd_logged:
            _autograd_logged = True
            log.warning("trident backend: a graph needs autograd (inputs require grad under grad mode); "
                        "running it through PyTorch unchanged. Use torch.no_grad() or "
                        "torch.inference_mode() for native execution.")
        return gm.forward
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def fw_compiler(fw_gm: fx.GraphModule, fw_inputs):
        fw_gm, keep = _without_unused_objects(fw_gm)
        ctl = GraphFunction(fw_gm, opts, f"graph {len(GRAPHS)}")
        GRAPHS.append(weakref.ref(ctl))
        if sink is not None:
            sink.append(GRAPHS[-1])
        scm = ctl.detach()
        if keep is None:
            def run(*args):
                return scm(*args)
        else:
            def run(*args):
                return scm(*[args[i] for i in keep])

        return make_boxed_func(run)

    with _compat.capturing():
        return aot_autograd(fw_compiler=fw_compiler, keep_inference_input_mutations=True)(gm, example_inputs)
