"""Lowering of user Triton kernels: `triton_kernel_wrapper_functional` nodes become a compiled kernel
declaration and a native `launch` in the spec (see docs/host_ir.md).

For each kernel call this picks the autotune config (benchmarking on the real device at compile
time when there is more than one), applies heuristics, specializes exactly as Triton's JIT would
(triton_specialize.py), compiles the cubin for the target, and records the guards the
specialization relies on: a pointer is declared 16-byte aligned only when the call's tensor is, and
then the spec guards that alignment. Functional clones are elided when the cloned tensor has no
other use, so a kernel that writes its input in place (a KV cache) writes it in place natively.
"""
from __future__ import annotations

import hashlib
import inspect
import operator
import os
import threading

import sympy
import torch
import torch.fx as fx

from . import float_symbols, hir, lazy_views, reinplace
from .. import config
from .._compat import launch_regions
from ..errors import UnsupportedError
from .triton_specialize import ArgSpec, argspec_from_value, compile_kernel, unwrap_kernel


def _side_table():
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    return kernel_side_table


def _cubin_path(cubin: bytes) -> str:
    """Where the runtime loads this cubin from: a file named by its hash in the private cache
    (cache_dir.h). An existing file is used only when it is ours and holds exactly these bytes;
    anything else there is replaced."""
    from .. import _C
    d = _C.cache_subdir("cubins")
    path = os.path.join(d, hashlib.sha256(cubin).hexdigest()[:32] + ".cubin")
    held, _why = _C.read_private_file(path)
    if held == cubin:
        return path
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(cubin)
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    os.replace(tmp, path)
    return path


# The value a size or grid the program computes (`.item()`, a `nonzero`'s size) takes where the
# lowering runs a kernel on example tensors (autotuning over configs, heuristics). A library's
# autotuner keyed on other arguments answers from its cache without benchmarking; otherwise
# configs are compared at this size, on example data (floats random, integers 0).
EXAMPLE_SIZE = 1

# What a Triton specialization of a symbolic integer requires, as a guard expression over it.
_INT_CHECKS = {
    "eq1": "({e}) == 1",
    "not1": "({e}) != 1",
    "div16": "({e}) % 16 == 0",
    "not_div16_not1": "({e}) % 16 != 0 and ({e}) != 1",
    "range_i32": "({e}) >= -2147483648 and ({e}) <= 2147483647",
    "range_i64": "({e}) < -2147483648 or ({e}) > 2147483647",
}


def _sym(v):
    """The SymInt behind a kernel argument or grid entry, else None."""
    if isinstance(v, fx.Node):
        v = v.meta.get("val")
    return v if isinstance(v, torch.SymInt) else None




def _fresh_view_read_no_more(src: fx.Node, launch: fx.Node, name: str) -> bool:
    """Whether `src` is a view of memory this program allocated (an op result that aliases nothing)
    whose old contents nothing reads after `launch`: then writing it in place is what eager did,
    and the functional clone is a copy nobody sees. Libraries allocate an output and launch into a
    view of it (FlagGems' argmax squeezes its `empty`); the clone would be a copy kernel per call
    (and a call of a Python `copy_` where a library registered one). A later scatter of the
    kernel's result back into the same memory (how functionalization updates the base) reads it
    only as its destination, which then already holds that result."""
    root = reinplace.root_of(src)
    if root is src or root.op != "call_function" or _is_view(root):
        return False
    result = next((u for u in launch.users if u.target is operator.getitem and u.args[1] == name), None)
    order = {n: i for i, n in enumerate(launch.graph.nodes)}
    return not reinplace.read_later(root, launch, result, order)


def _is_view(n: fx.Node) -> bool:
    """Whether `n` may alias another value (a view op's result): writing it in place would be seen
    through that other value, so it must be cloned."""
    if n.op == "placeholder":
        return False
    target = n.target
    schema = getattr(target, "_schema", None)
    if schema is None:
        return True
    return any(r.alias_info is not None for r in schema.returns)


class TritonCall:
    """Lowers one kernel-wrapper node inside a spec's _Lowerer."""

    def _hint(self, v):
        """The value an argument or grid entry has in this call (what Triton specializes on)."""
        s = _sym(v)
        if s is None:
            return int(v.meta["val"]) if isinstance(v, fx.Node) else v
        return self.lw.hint(s)

    def _note(self, v):
        """A grid entry for `explain`: its value in this call, or its expression when data-dependent."""
        s = _sym(v)
        return self._hint(v) if s is None or self.lw.known_when_lowering(s) else str(s.node.expr)

    def __init__(self, lw, node: fx.Node):
        self.lw, self.node = lw, node
        table = _side_table()
        self.kernel = table.get_kernel(node.kwargs["kernel_idx"])
        self.consts = dict(table.get_constant_args(node.kwargs["constant_args_idx"]))
        try:
            self.jit, self.autotuner, self.heuristics = unwrap_kernel(self.kernel)
        except TypeError as e:
            lw.fail(node, str(e))
        self.name = self.jit.fn.__name__
        # Host-side TMA descriptors (TensorDescriptor), as torch's capture records them: the argument
        # is the tensor the descriptor describes (its shape and strides), the block in the metadata
        # ("stable", (block,)), or set by the chosen config's pre_hook (library_launches).
        self.tma = {}
        for name, meta in (node.kwargs.get("tma_descriptor_metadata") or {}).items():
            if not (isinstance(meta, tuple) and len(meta) == 2 and meta[0] == "stable"):
                self.fail(f"argument {name} is a TMA descriptor of Triton's experimental API "
                          "(create_2d_tma_descriptor); trident captures triton.tools.tensor_descriptor's")
            self.tma[name] = tuple(int(b) for b in meta[1][0])

    def fail(self, what: str):
        raise UnsupportedError(f"Triton kernel {self.name}: {what}")

    # -- values -------------------------------------------------------------------------------
    def _tensor_example(self, a: fx.Node) -> torch.Tensor:
        """A real tensor shaped like `a` on its device, for autotuning and heuristics. Tensors that
        share storage with a call argument start from a copy of that argument's data; a size the
        program computes (an `.item()`, a `nonzero`'s size) is EXAMPLE_SIZE here."""
        fake = a.meta["val"]
        base = self.lw.real_base(fake)
        if base is not None:
            t = torch.empty(0, dtype=fake.dtype, device=fake.device)
            return t.set_(base.untyped_storage().clone(), self.lw.hint(fake.storage_offset()),
                          [self.lw.hint(x) for x in fake.shape], [self.lw.hint(x) for x in fake.stride()])
        shape = [self.lw.hint(x, EXAMPLE_SIZE) for x in fake.shape]
        stride = [self.lw.hint(x, EXAMPLE_SIZE) for x in fake.stride()]
        # filled as a dense buffer, then viewed: a broadcast (stride 0) operand overlaps itself,
        # which an in-place fill may refuse (FlagGems' `normal_` does, under flag_gems.enable())
        extent = 0 if 0 in shape else 1 + sum((n - 1) * st for n, st in zip(shape, stride))
        buf = torch.empty(extent, dtype=fake.dtype, device=fake.device)
        buf = buf.normal_() if fake.dtype.is_floating_point else buf.zero_()
        return buf.as_strided(shape, stride)

    def _aligned(self, a: fx.Node) -> bool:
        fake = a.meta["val"]
        return self.lw.alignment(fake)

    # -- config -------------------------------------------------------------------------------
    def _real_argument(self, name: str, v):
        """What Triton's launch gets for an argument when the lowering benchmarks or runs heuristics:
        a real tensor like `v`, as a TensorDescriptor where the launch had one."""
        if not isinstance(v, fx.Node):
            return v
        t = self._tensor_example(v)
        if name not in self.tma:
            return t
        from triton.tools.tensor_descriptor import TensorDescriptor
        return TensorDescriptor(t, list(t.shape), list(t.stride()), list(self.tma[name]))

    def _choose_config(self, args: dict, grids: list):
        """The autotune config Triton would launch and the index of its grid in `grids`."""
        at = self.autotuner
        if at is None:
            return None, 0
        if len(at.configs) == 1:
            return at.configs[0], 0
        if any(isinstance(v, torch.SymInt) for v in args.values()):
            self.fail(f"autotuning over {len(at.configs)} configs benchmarks this call's values, but "
                      f"{sorted(k for k, v in args.items() if isinstance(v, torch.SymInt))} are data-dependent")
        # a data-dependent grid (a tile count read by `.item()`) is benchmarked at EXAMPLE_SIZE
        grids = [tuple(self.lw.hint(_sym(x), EXAMPLE_SIZE) if _sym(x) is not None else self._hint(x) for x in g)
                 for g in grids]
        devices = {v.meta["val"].device for v in args.values() if isinstance(v, fx.Node)}
        if not any(d.type == "cuda" for d in devices) or not torch.cuda.is_available():
            self.fail(f"autotuning over {len(at.configs)} configs needs the GPU it will run on")
        real = {k: self._real_argument(k, v) for k, v in args.items()}
        configs = list(at.configs)
        # A library's autotuner chooses as it does in eager (its cache, its policy); configs whose
        # pre_hooks set descriptors' blocks are benchmarked with their hooks (library_launches).
        tuner = getattr(at, "_trident_tuner", None)

        def grid_fn(meta):
            for cfg, g in zip(configs, grids):
                if all(meta.get(k) == v for k, v in cfg.kwargs.items()):
                    return g
            return grids[0]

        if tuner is not None:
            from ..library_launches import tuner_choice
            tuner[grid_fn](**real)
            torch.cuda.synchronize()
            k = tuner_choice(tuner, configs)
            return configs[k], k
        self.kernel[grid_fn](**real)
        torch.cuda.synchronize()
        best = at.best_config
        return best, configs.index(best)

    # -- emission -----------------------------------------------------------------------------
    def lower(self):
        node, lw = self.node, self.lw
        names = list(self.jit.arg_names)
        kwargs = dict(node.kwargs["kwargs"])
        options = {k: v for k, v in self.consts.items() if k not in names}
        args = {k: v for k, v in {**self.consts, **kwargs}.items() if k in names}
        # Symbolic integers (dynamic sizes, a growing position): specialized on this call's value,
        # passed natively as $N, and guarded on what the specialization assumed (== 1, % 16, range).
        # A data-dependent one (a `nonzero`'s size, an `.item()`) has no value yet: it stays a
        # SymInt here and is compiled unspecialized, its i32 range checked at run time.
        symbolic = {k: _sym(v) for k, v in args.items() if _sym(v) is not None}
        data_dependent = {k for k, s in symbolic.items() if not lw.known_when_lowering(s)}
        for k in symbolic:
            args[k] = symbolic[k] if k in data_dependent else self._hint(args[k])
        # Run-time floats (float_symbols.py): this call's value for configs and heuristics, the $fN
        # at launch. Triton never specializes a float parameter, so nothing is guarded.
        floats = {k: lw.env[v] for k, v in args.items()
                  if isinstance(v, fx.Node) and isinstance(lw.env.get(v), float_symbols.FloatSym)}
        for k, f in floats.items():
            args[k] = f.value
        grids = [tuple(g) for g in node.kwargs["grid"]]

        cfg, chosen = self._choose_config(args, grids)
        grid = grids[chosen]
        # A config's pre_hook runs Python before every launch; one that only sets the descriptors'
        # blocks (kept apart by library_launches) is replayed here, once, on stand-ins.
        hook = getattr(cfg, "_trident_pre_hook", None)
        if cfg is not None and (cfg.pre_hook is not None or (hook is not None and not self.tma)):
            self.fail("the chosen autotune config has a pre_hook, which runs Python before every launch")
        if hook is not None:
            from ..library_launches import hooked_block_shapes
            nargs = {k: v.meta["val"] if isinstance(v, fx.Node) else v for k, v in args.items()}
            self.tma = hooked_block_shapes(hook, {**nargs, **cfg.all_kwargs()}, self.tma, f"Triton kernel {self.name}")
        full = dict(args)
        if cfg is not None:
            full.update(cfg.kwargs)
            options.update({k: v for k, v in cfg.all_kwargs().items() if k not in cfg.kwargs and v is not None})
        if self.heuristics:
            examples = {k: (v.meta["val"] if isinstance(v, fx.Node) else v) for k, v in full.items()}
            for h in self.heuristics:
                for name, fn in h.values.items():
                    examples[name] = full[name] = fn(examples)

        # A parameter the call omits takes its default, as Triton's binder gives it (FlagGems' Hopper
        # mm: `enable_warp_specialization=True`, a launch argument of its own).
        for p in self.jit.params:
            if p.name not in full and p.default is not inspect.Parameter.empty:
                full[p.name] = p.default
        specs, pointer_guards = [], []
        for name in names:
            if name not in full:
                continue  # no value and no default: compile_kernel names it
            v = full[name]
            if isinstance(v, fx.Node) and name in self.tma:
                # TMA reads from a 16-byte aligned base (Triton's TensorDescriptor asserts it)
                if not self._aligned(v):
                    self.fail(f"argument {name} is a host-side TMA descriptor over memory that is not "
                              "16-byte aligned")
                specs.append(ArgSpec(name, "tensordesc", dtype=v.meta["val"].dtype, block_shape=self.tma[name]))
                pointer_guards.append(v)
            elif isinstance(v, fx.Node):
                aligned = self._aligned(v)
                specs.append(ArgSpec(name, "tensor", dtype=v.meta["val"].dtype, aligned16=aligned))
                if aligned:
                    pointer_guards.append(v)
            elif name in data_dependent:
                specs.append(ArgSpec(name, "int", value=None))
            else:
                specs.append(argspec_from_value(name, v))
        try:
            ck = compile_kernel(self.jit, specs, config.triton_target(), options)
        except TypeError as e:
            self.fail(str(e))
        for v in pointer_guards:
            lw.guard_alignment(v.meta["val"])
        for g in ck.guards:
            if g.name in data_dependent:
                # checked where the value is computed, in the body: a guard runs before it exists
                assert g.check == "range_i32", f"trident bug: an unspecialized int assumed {g}"
                e = symbolic[g.name].node.expr
                ok = lw.syms.emit(sympy.And(e >= -2**31, e < 2**31), lw.lines, lw.new_sym)
                lw.lines.append(hir.check(ok, f"Triton kernel {self.name}: argument '{g.name}' is outside "
                                              "the 32-bit range it was compiled for"))
            elif g.name in symbolic and not symbolic[g.name].node.expr.is_number:
                if g.check not in _INT_CHECKS:
                    self.fail(f"argument '{g.name}' is symbolic but its specialization needs '{g.check}'")
                expr = _INT_CHECKS[g.check].format(e=lw.syms.guard_text(symbolic[g.name].node.expr))
                line = hir.guard_expr(expr)
                if line not in lw.extra_guards:
                    lw.extra_guards.append(line)

        kid = lw.add_kernel(ck, _cubin_path(ck.cubin))
        results = self._outputs(kwargs, node.kwargs.get("tensors_to_clone", []))
        operands = []
        for p in ck.params:
            if p.arg_index < 0:
                continue  # scratch pointers: appended by the runtime
            name = names[p.arg_index]
            v = full[name]
            if name in self.tma:
                operands.append(self._descriptor_operand(p.name[len(name) + 1:], v, results.get(name)))
            elif name in symbolic:
                operands.append(lw.sym_operand(symbolic[name]))
            elif name in floats:
                operands.append(floats[name].text)
            elif isinstance(v, fx.Node):
                operands.append(results.get(name) or lazy_views.launch_operand(lw, node, v))
            elif v is None:
                operands.append("none")
            else:
                operands.append(lw.literal(node, v))
        dims = [lw.sym_operand(_sym(g)) if _sym(g) is not None else str(self._hint(g)) for g in grid]
        # a launch inside a launch region (_compat.py: WHEN_MARK) runs when its condition holds: its
        # first grid dimension times the condition's 1 or 0 (an empty grid launches nothing)
        for ident in launch_regions(node.kwargs["constant_args_idx"]):
            if ident not in lw.when:
                self.fail("a launch under a condition the program does not compute")
            v = lw.new_sym()
            lw.lines.append(hir.sym(v, "mul", dims[0], lw.when[ident]))
            dims[0] = v
            lw.region_launches[ident] = lw.region_launches.get(ident, 0) + 1
        lw.lines.append(hir.launch(kid, dims, operands))
        lw.env[node] = {k: results.get(k) or lw.env[v] for k, v in kwargs.items() if isinstance(v, fx.Node)}
        lw.ops.append(f"triton:{self.name}")
        lw.kernel_notes.append((self.name, getattr(cfg, "kwargs", None), tuple(self._note(g) for g in grid), ck.cache_key))

    def _descriptor_operand(self, field: str, v: fx.Node, written: str | None) -> str:
        """One launch operand of a host-side descriptor (triton_specialize.runtime_params' expansion):
        the tensor it describes for its CUtensorMap (`map`, encoded by the runtime per launch) or its
        base pointer (`base`), one of its sizes or strides, or its padding flag (zero padding: 0)."""
        fake = v.meta["val"]
        if field == "map":  # the runtime encodes it from the tensor's own sizes and strides
            return written or self.lw.operand(self.node, v)
        if field == "base":
            return written or lazy_views.launch_operand(self.lw, self.node, v)
        if field == "nan":
            return "0"
        for prefix, values in (("shape", fake.shape), ("stride", fake.stride())):
            if field.startswith(prefix):
                x = values[int(field[len(prefix):])]
                return self.lw.sym_operand(x)
        raise AssertionError(f"trident bug: descriptor field {field!r}")

    def _outputs(self, kwargs: dict, to_clone: list[str]) -> dict:
        """Values the kernel writes: the tensor itself when nothing else reads it (in place, as
        eager), else a clone, as the functional graph says. `to_clone` names tensors only (both
        supported torch versions filter scalars out: _compat.capturing for 2.11)."""
        out = {}
        for name in to_clone:
            src = kwargs[name]
            if (len(src.users) == 1 and not _is_view(src)) or _fresh_view_read_no_more(src, self.node, name):
                out[name] = self.lw.operand(self.node, src)
            else:
                v = self.lw.value()
                self.lw.lines.append(hir.call(v, "aten::clone", [self.lw.operand(self.node, src), "none"]))
                out[name] = v
        return out
