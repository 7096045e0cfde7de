"""Differential test of the compiled decision program (csrc/guards/decision.cpp).

Contract: ``scm.select(*args)`` returns the LOWEST-numbered specialization whose guards all hold for
the call, or -1; a false hit (selecting a spec one of whose guards fails) must never happen.

Four evaluators are compared on every (call, module) trial:

* ``scm.select``        the generated C decision program (structure groups, hoisted guards, switches);
* ``scm.select_by_guards`` the guards interpreted spec after spec, as a module selects while its
                        decision program compiles (python/bindings/selector_builds.h);
* ``scm.explain_call``  the cold C++ evaluator (guards/explain.cpp), read as a linear scan;
* ``PyGuards``          an independent Python evaluator of the guard text over ``_C.describe_args``
                        leaf dicts, so that a mistake shared by both C++ paths is caught as well.

Modules are built from a fixed-seed pool of argument signatures that differ in argument count and
kind (tensor/int/float/bool/None, nested tuple/list, keywords), dtype, rank 0..4, sizes (0 and 1
included), strides (contiguous, permuted, step-sliced, expanded with stride 0, as_strided), storage
offset, requires_grad, Python scalar values and grad mode. Each spec starts from the guards the
lowering emits for one signature (``trident.lowering.lower.guard_lines``) and is then loosened and perturbed:
guards dropped, literals moved to a neighbour value, range guards, relations between two fields,
``divby 16`` / ``notdivby 16`` on ``ival``, ``data_ptr`` and ``storage_offset``, order shuffled,
earlier specs duplicated. Rebuilding a module costs tens of milliseconds per add_spec, so each
module is built once and then called a few hundred times.

Constructs that once had defects (found by this differential and fixed) are kept out of the random
generator and pinned by the regression tests at the end of this file instead: NaN
literals with ``!=``; relations naming a float field (explain.cpp); literals outside int32 on int32
fields (a false hit through the switch); size/stride indices outside 0..MAX_DIM-1; keyword names
containing ';' or '='; ``divby`` with a zero divisor or INT64_MIN % -1 (the process traps); and the
exponential size of the decision program, which also bounds what the generator may build here
(SELECT_SOURCE_LIMIT).
"""
from __future__ import annotations

import faulthandler
import math
import os
import random
import re
import time

import pytest
import torch

from trident import _C
from trident.lowering.lower import _float, guard_lines

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool]
SIZES = [0, 1, 1, 2, 2, 3, 4, 5]
INTS = [-1, 0, 1, 2, 3, 3, 7, 16, 32, 48, 2 ** 40]
FLOATS = [0.0, -0.0, 0.5, 1.0, 1.0, 2.5, 1e-3, -3.25, math.inf, -math.inf, math.nan]
LAYOUTS = ["contiguous", "contiguous", "permuted", "sliced", "expanded", "as_strided", "offset"]

# leaf codes -> how the leaves are arranged into (args, kwargs); the structure string follows.
TEMPLATES = [
    ("T", lambda l: ((l[0],), {})),
    ("Ti", lambda l: ((l[0], l[1]), {})),
    ("TT", lambda l: ((l[0], l[1]), {})),
    ("Tfb", lambda l: ((l[0], l[1], l[2]), {})),
    ("Tni", lambda l: ((l[0], l[1], l[2]), {})),
    ("TiTT", lambda l: (((l[0], l[1]), [l[2], l[3]]), {})),
    ("ii", lambda l: ((l[0], l[1]), {})),
    ("Tif", lambda l: ((l[0],), {"n": l[1], "scale": l[2]})),
    ("iiT", lambda l: (([l[0], l[1], l[2]],), {})),
    ("TTTi", lambda l: ((l[0], l[1], l[2], l[3]), {})),
    ("", lambda l: ((), {})),
    # dicts, with keys made of leaf-code letters (a key is not a leaf) and an empty dict
    ("TiT", lambda l: ((l[0], {"Tb": l[1], "nif": [l[2]]}), {})),
    ("Tf", lambda l: (({"T": l[0], "e": {}},), {"f": {"b": l[1]}})),
]


# ---------------------------------------------------------------------------------------------
# argument pool


def make_tensor(rng: random.Random, dtype=None, sizes=None, layout=None, requires_grad=None):
    dtype = dtype if dtype is not None else rng.choice(DTYPES)
    sizes = list(sizes) if sizes is not None else [rng.choice(SIZES) for _ in range(rng.randint(0, 4))]
    layout = layout or rng.choice(LAYOUTS)
    if requires_grad is None:
        requires_grad = dtype.is_floating_point and rng.random() < 0.3
    requires_grad = requires_grad and dtype.is_floating_point
    rank = len(sizes)
    if rank == 0 and layout in ("permuted", "sliced", "expanded"):
        layout = "offset"
    if rank == 1 and layout == "permuted":
        layout = "sliced"

    def base(shape):
        t = torch.zeros(shape, dtype=dtype)
        return t.requires_grad_() if requires_grad else t

    with torch.enable_grad():
        if layout == "contiguous":
            t = base(sizes)
        elif layout == "permuted":
            perm = list(range(rank))
            while perm == sorted(perm):
                rng.shuffle(perm)
            inv = [perm.index(d) for d in range(rank)]
            t = base([sizes[p] for p in perm]).permute(inv)
        elif layout == "sliced":
            d = rng.randrange(rank)
            step = rng.choice([2, 3])
            shape = list(sizes)
            shape[d] = sizes[d] * step
            t = base(shape)[(slice(None),) * d + (slice(None, None, step),)]
        elif layout == "expanded":
            shape = [1 if rng.random() < 0.6 else s for s in sizes]
            t = base(shape).expand(sizes)
        elif layout == "as_strided":
            strides = [rng.choice([0, 1, 2, 3, 5]) for _ in sizes]
            offset = rng.randint(0, 5)
            need = offset + sum(max(s - 1, 0) * st for s, st in zip(sizes, strides)) + 1
            t = base([need]).as_strided(sizes, strides, offset)
        else:  # "offset": contiguous, but not at the start of its storage
            k = rng.randint(1, 3)
            numel = math.prod(sizes)
            t = base([k + numel])[k:].view(sizes)
    return t


def make_leaf(rng: random.Random, code: str):
    if code == "T":
        return make_tensor(rng)
    if code == "i":
        return rng.choice(INTS)
    if code == "f":
        return rng.choice(FLOATS)
    if code == "b":
        return rng.random() < 0.5
    return None


def mutate_leaf(rng: random.Random, code: str, old):
    """A neighbour of `old`: one property changed (tensors) or a new value (scalars)."""
    if code != "T":
        return make_leaf(rng, code)
    what = rng.choice(["layout", "dtype", "size", "grad", "fresh"])
    dtype, sizes, rg = old.dtype, list(old.shape), old.requires_grad
    if what == "dtype":
        dtype = rng.choice(DTYPES)
    elif what == "size" and sizes:
        sizes[rng.randrange(len(sizes))] = rng.choice(SIZES)
    elif what == "grad":
        rg = not rg
    elif what == "fresh":
        return make_tensor(rng)
    return make_tensor(rng, dtype=dtype, sizes=sizes, requires_grad=rg)


class Sig:
    """One concrete call: arguments, grad mode, and what the native flattener makes of them."""

    def __init__(self, template: int, leaves: list, grad: bool):
        self.template, self.leaves, self.grad = template, leaves, grad
        self.args, self.kwargs = TEMPLATES[template][1](leaves)
        self.structure, self.desc = _C.describe_args(*self.args, **self.kwargs)
        assert self.structure is not None, self.desc

    def neighbour(self, rng: random.Random) -> "Sig":
        codes = TEMPLATES[self.template][0]
        leaves = list(self.leaves)
        grad = self.grad
        if not codes or rng.random() < 0.15:
            grad = not grad
        else:
            k = rng.randrange(len(codes))
            leaves[k] = mutate_leaf(rng, codes[k], leaves[k])
        return Sig(self.template, leaves, grad)


def build_pool(seed: int, per_template: int = 24) -> dict[int, list[Sig]]:
    rng = random.Random(seed)
    pool: dict[int, list[Sig]] = {}
    for t, (codes, _) in enumerate(TEMPLATES):
        sigs: list[Sig] = []
        for _ in range(per_template if codes else 2):
            if sigs and rng.random() < 0.6:
                sigs.append(rng.choice(sigs).neighbour(rng))  # near neighbours share most guards
            else:
                sigs.append(Sig(t, [make_leaf(rng, c) for c in codes], rng.random() < 0.5))
        pool[t] = sigs
    return pool


# ---------------------------------------------------------------------------------------------
# independent Python evaluator of guard text

_GUARD = re.compile(r"^guard (\S+) (==|!=|>=|<=|>|<|divby|notdivby) (\S+)$")
_FIELD = re.compile(r"^(?:L(\d+)\.)?([a-z_]+)(?:\[(\d+)\])?$")
_U64 = 1 << 64


def _i64(v: int) -> int:
    return v - _U64 if v >= (1 << 63) else v


def _field_reader(text: str):
    m = _FIELD.match(text)
    assert m, text
    leaf, name, idx = m.group(1), m.group(2), m.group(3)
    if name == "grad_mode":
        return lambda leaves, grad: int(grad)
    if name == "num_leaves":
        return lambda leaves, grad: len(leaves)
    k = int(leaf)
    if name in ("size", "stride"):
        d, key = int(idx), name + "s"
        # The ABI zero-fills sizes/strides beyond the rank (and for non-tensor leaves).
        return lambda leaves, grad: leaves[k][key][d] if d < len(leaves[k][key]) else 0
    if name in ("keyset", "data_ptr"):
        return lambda leaves, grad: _i64(leaves[k][name])
    return lambda leaves, grad: leaves[k][name]


_OPS = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, "<": lambda a, b: a < b,
    "divby": lambda a, b: b != 0 and a % b == 0, "notdivby": lambda a, b: b != 0 and a % b != 0,
}


def compile_guard(line: str):
    m = _GUARD.match(line.strip())
    assert m, line
    lhs, op, rhs = m.groups()
    read_l = _field_reader(lhs)
    is_float = lhs.endswith("fval")
    if rhs[0] == "L" or rhs in ("grad_mode", "num_leaves"):
        read_r = _field_reader(rhs)
        is_float = is_float or rhs.endswith("fval")
    else:
        lit = float(rhs) if is_float else int(rhs)
        read_r = lambda leaves, grad: lit  # noqa: E731
    f = _OPS[op]
    if is_float:  # C compares in double once either side is a double
        return lambda leaves, grad: f(float(read_l(leaves, grad)), float(read_r(leaves, grad)))
    return lambda leaves, grad: f(read_l(leaves, grad), read_r(leaves, grad))


class PyGuards:
    def __init__(self):
        self.specs: list[tuple[str, list[str], list]] = []

    def add(self, structure: str, guards: list[str]):
        self.specs.append((structure, guards, [compile_guard(g) for g in guards]))

    def failing(self, k: int, sig: Sig, grad: bool) -> str | None:
        """The first guard of spec k that does not hold for `sig` under `grad`, or None."""
        structure, texts, fns = self.specs[k]
        if structure != sig.structure:
            return f"structure {structure!r} != {sig.structure!r}"
        for text, fn in zip(texts, fns):
            if not fn(sig.desc, grad):
                return text
        return None

    def select(self, sig: Sig, grad: bool) -> int:
        for k in range(len(self.specs)):
            if self.failing(k, sig, grad) is None:
                return k
        return -1


# ---------------------------------------------------------------------------------------------
# spec generation


def _int_fields(sig: Sig, grad: bool) -> list[tuple[str, int]]:
    """(field text, value) of integer-valued fields that range guards and relations may name."""
    out = [("grad_mode", int(grad))]
    for k, l in enumerate(sig.desc):
        if l["kind"] == 1:
            out += [(f"L{k}.dim", l["dim"]), (f"L{k}.storage_offset", l["storage_offset"])]
            for d in range(min(l["dim"] + 1, 4)):  # one dimension past the rank reads 0
                out.append((f"L{k}.size[{d}]", l["sizes"][d] if d < l["dim"] else 0))
                out.append((f"L{k}.stride[{d}]", l["strides"][d] if d < l["dim"] else 0))
        elif l["kind"] in (2, 4):
            out.append((f"L{k}.ival", l["ival"]))
    return out


def _divisible_fields(sig: Sig) -> list[tuple[str, int]]:
    out = []
    for k, l in enumerate(sig.desc):
        if l["kind"] == 1:
            out += [(f"L{k}.data_ptr", _i64(l["data_ptr"])), (f"L{k}.storage_offset", l["storage_offset"])]
        elif l["kind"] == 2:
            out.append((f"L{k}.ival", l["ival"]))
    return out


def _perturb(rng: random.Random, line: str) -> str:
    """Move the literal of an integer equality guard to a neighbour value."""
    m = _GUARD.match(line)
    lhs, op, rhs = m.groups()
    if op != "==" or lhs.endswith(("fval", "keyset")) or not re.fullmatch(r"-?\d+", rhs):
        return line
    v = int(rhs)
    return f"guard {lhs} == {v + rng.choice([-2, -1, 1, 1, 2])}"


def make_guards(rng: random.Random, sig: Sig, grad: bool, exact: bool = False) -> list[str]:
    guards = guard_lines(sig.structure, sig.desc, grad)
    if exact:
        return guards
    drop = rng.choice([0.0, 0.0, 0.15, 0.4, 0.8])
    guards = [g for g in guards if rng.random() >= drop]
    if rng.random() < 0.25 and guards:
        k = rng.randrange(len(guards))
        guards[k] = _perturb(rng, guards[k])
    ints = _int_fields(sig, grad)
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        kind = rng.choice(["range", "range", "relation", "div", "float"])
        if kind == "range":
            f, v = rng.choice(ints)
            op = rng.choice([">=", "<=", ">", "<", "!="])
            guards.append(f"guard {f} {op} {v + rng.choice([-1, 0, 0, 1])}")
        elif kind == "relation":
            (fa, va), (fb, vb) = rng.choice(ints), rng.choice(ints)
            if rng.random() < 0.6:  # prefer pairs that hold for this signature
                same = [(f, v) for f, v in ints if v == va and f != fa]
                if same:
                    fb, vb = rng.choice(same)
            op = rng.choice(["==", "==", "!=", ">=", "<="])
            guards.append(f"guard {fa} {op} {fb}")
        elif kind == "div":
            cands = _divisible_fields(sig)
            if cands:
                f, v = rng.choice(cands)
                holds = "divby" if v % 16 == 0 else "notdivby"
                other = "notdivby" if holds == "divby" else "divby"
                guards.append(f"guard {f} {holds if rng.random() < 0.7 else other} 16")
        else:
            fl = [(k, l["fval"]) for k, l in enumerate(sig.desc) if l["kind"] == 3]
            if fl:
                k, v = rng.choice(fl)
                lit = v if math.isfinite(v) else 0.0  # no NaN literals here: see the regression tests below
                op = rng.choice(["==", "!=", ">=", "<=", ">", "<"])
                guards.append(f"guard L{k}.fval {op} {_float(lit + rng.choice([-0.5, 0.0, 0.0, 0.5]))}")
    if guards and rng.random() < 0.1:  # a repeated guard, or a second equality on the same field
        g = rng.choice(guards)
        guards.append(g if rng.random() < 0.5 else _perturb(rng, g))
    if rng.random() < 0.3:
        rng.shuffle(guards)
    return guards


def spec_text(structure: str, guards: list[str]) -> str:
    quoted = '"' + structure.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"spec 0 structure {quoted} {{\n" + "".join(f"  {g}\n" for g in guards) + "  return none\n}\n"


def _no_miss(*args, **kwargs):
    raise AssertionError("select/explain_call never call on_miss")


# The decision program's size is exponential in some spec mixes (unconstrained candidates are copied
# into every branch, recursively; see test_regression_select_code_size_is_exponential). Every add_spec
# recompiles the whole module with the system C compiler, so a 40-spec module whose select source
# reaches megabytes takes minutes to build. To stay within the time budget a draw that would push
# the select source past this many bytes is redrawn (counted and printed; the blowup is pinned below).
SELECT_SOURCE_LIMIT = 150_000


def module_ir(texts) -> str:
    return "".join(spec_text(s, g).replace("spec 0", f"spec {k}", 1) for k, (s, g) in enumerate(texts))


def build_module(rng: random.Random, pool: dict[int, list[Sig]], nspecs: int, stats: dict):
    """An SCM with `nspecs` specs over 1..3 structures, its Python mirror, and the specs' bases."""
    nonempty = [t for t in pool if TEMPLATES[t][0]]
    templates = rng.sample(nonempty, rng.choice([1, 1, 2, 3]))
    if rng.random() < 0.1:
        templates.append(next(t for t in pool if not TEMPLATES[t][0]))  # the no-argument structure
    scm, mirror, bases, texts = _C.SCM(_no_miss), PyGuards(), [], []
    for _ in range(nspecs):
        for attempt in range(8):
            base = None
            if texts and rng.random() < 0.08 and attempt < 7:  # an exact or reordered duplicate
                structure, guards = rng.choice(texts)
                guards = rng.sample(guards, len(guards))
            else:
                base = rng.choice(pool[rng.choice(templates)])
                grad = base.grad if rng.random() < 0.8 else not base.grad
                # the last attempt takes the lowering's guards as they are: fully constrained specs
                # add a branch but do not multiply the tree
                structure, guards = base.structure, make_guards(rng, base, grad, exact=attempt == 7)
            if attempt == 7 or nspecs < 8 or \
                    len(_C.ir_pass("select", module_ir(texts + [(structure, guards)]))) <= SELECT_SOURCE_LIMIT:
                break
            stats["redrawn"] += 1
        if base is not None:
            bases.append(base)
        scm.add_spec(spec_text(structure, guards))
        mirror.add(structure, guards)
        texts.append((structure, guards))
    scm.counters()  # waits for the selector still compiling: select() then runs the compiled one
    return scm, mirror, templates, bases, texts


def call_sigs(rng: random.Random, pool, templates, bases) -> list[Sig]:
    sigs = [s for t in templates for s in pool[t]]                     # same structures
    sigs += bases                                                      # each spec's own signature
    sigs += [b.neighbour(rng) for b in bases for _ in range(3)]        # one property off a spec's
    sigs += [rng.choice(sigs).neighbour(rng) for _ in range(120)]      # ... or off anything above
    others = [s for t in pool if t not in templates for s in pool[t]]
    sigs += rng.sample(others, min(12, len(others)))                   # other structures: all miss
    return sigs


# ---------------------------------------------------------------------------------------------
# the test

SCHEDULE = [(1, 12), (3, 10), (8, 8), (40, 3)]  # (specs per module, modules)


def _describe_failure(texts, sig: Sig, grad: bool, what: str) -> str:
    return (f"{what}\ncall: structure {sig.structure!r}, grad_mode {int(grad)}\nleaves: {sig.desc}\n"
            f"args: {sig.args!r} kwargs: {sig.kwargs!r}\nmodule:\n{module_ir(texts)}")


def test_select_agrees_with_linear_reference():
    stats, failures = run_differential(pool_seed=20240611, seed=7, schedule=SCHEDULE)
    print(f"\n{stats}, {len(failures)} disagreements")
    assert not failures, f"{len(failures)} disagreements; first:\n" + failures[0]
    assert stats["trials"] >= 10_000
    # The generator must exercise both outcomes, and lowest-id-wins beyond spec 0.
    assert stats["hits"] >= 2000 and stats["misses"] >= 2000 and stats["hits_above_0"] >= 1000


def run_differential(pool_seed: int, seed: int, schedule) -> tuple[dict, list[str]]:
    t0 = time.perf_counter()
    pool = build_pool(seed=pool_seed)
    rng = random.Random(seed)
    stats = {"trials": 0, "hits": 0, "hits_above_0": 0, "misses": 0, "modules": 0, "redrawn": 0}
    failures: list[str] = []
    for nspecs, nmodules in schedule:
        for _ in range(nmodules):
            scm, mirror, templates, bases, texts = build_module(rng, pool, nspecs, stats)
            stats["modules"] += 1
            for sig in call_sigs(rng, pool, templates, bases):
                for grad in (False, True):
                    with torch.set_grad_enabled(grad):
                        got = scm.select(*sig.args, **sig.kwargs)
                        interpreted = scm.select_by_guards(*sig.args, **sig.kwargs)
                        explained = scm.explain_call(*sig.args, **sig.kwargs)
                    stats["trials"] += 1
                    assert [k for k, _ in explained] == list(range(nspecs))
                    ref = next((k for k, why in explained if why == ""), -1)
                    py = mirror.select(sig, grad)
                    stats["hits"] += got >= 0
                    stats["hits_above_0"] += got > 0
                    stats["misses"] += got < 0
                    if got >= 0 and mirror.failing(got, sig, grad) is not None:
                        failures.append(_describe_failure(
                            texts, sig, grad, f"FALSE HIT: select -> {got}, but guard "
                            f"{mirror.failing(got, sig, grad)!r} fails (explain: {explained[got][1]!r})"))
                    elif interpreted != got:
                        failures.append(_describe_failure(
                            texts, sig, grad, f"select -> {got}, select_by_guards -> {interpreted} "
                            f"(the guards interpreted while a selector compiles); explain: {explained}"))
                    elif got != ref:
                        failures.append(_describe_failure(
                            texts, sig, grad, f"select -> {got}, explain_call's linear scan -> {ref} "
                            f"(python: {py}); explain: {explained}"))
                    elif py != ref:
                        failures.append(_describe_failure(
                            texts, sig, grad, f"select and explain_call -> {ref}, python -> {py}"))
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    return stats, failures


def test_pool_covers_the_signature_space():
    """The pool really varies what the brief lists (guards against a generator silently narrowing)."""
    pool = build_pool(seed=20240611)
    tensors = [l for sigs in pool.values() for s in sigs for l in s.desc if l["kind"] == 1]
    assert {l["dtype"] for l in tensors} >= {_C.describe_tensor(torch.empty(0, dtype=d))["dtype"] for d in DTYPES}
    assert {l["dim"] for l in tensors} >= {0, 1, 2, 3, 4}
    assert any(0 in l["sizes"] for l in tensors) and any(1 in l["sizes"] for l in tensors)
    assert any(0 in l["strides"] for l in tensors)                           # expanded
    assert any(l["storage_offset"] > 0 for l in tensors)
    assert any(l["flags"] & 1 for l in tensors) and any(not l["flags"] & 1 for l in tensors)
    assert any(l["data_ptr"] % 16 for l in tensors) and any(l["data_ptr"] % 16 == 0 for l in tensors)
    noncontig = [l for l in tensors if l["dim"] >= 2 and list(l["strides"]) != sorted(l["strides"], reverse=True)]
    assert noncontig                                                          # permuted
    structures = {s.structure for sigs in pool.values() for s in sigs}
    assert {"T", "Ti", "TT", "Tfb", "Tni", "(Ti)[TT]", "ii", "T;n=i;scale=f", "[iiT]", "TTTi", ""} <= structures
    assert {s.grad for sigs in pool.values() for s in sigs} == {False, True}


# ---------------------------------------------------------------------------------------------
# Known defects found by this differential, pinned so they flip to XPASS when fixed.


def _scm(*specs):
    scm = _C.SCM(_no_miss)
    for structure, guards in specs:
        scm.add_spec(spec_text(structure, guards))
    scm.counters()  # waits for the selector still compiling: select() then runs the compiled one
    return scm


def _linear(scm, *args, **kwargs):
    return next((k for k, why in scm.explain_call(*args, **kwargs) if why == ""), -1)


def test_regression_nan_literal_with_not_equal():
    scm = _scm(("f", ["guard L0.fval != nan"]))
    assert _linear(scm, 1.0) == 0
    assert scm.select(1.0) == 0


def test_regression_explain_float_field_relation():
    scm = _scm(("ff", ["guard L0.fval == L1.fval"]))
    assert scm.select(1.0, 2.0) == -1
    assert _linear(scm, 1.0, 2.0) == -1


def test_regression_int32_switch_truncates_case_labels():
    scm = _scm(("T", ["guard L0.dim == 4294967298"]), ("T", ["guard L0.dim == 3"]))
    x = torch.zeros(2, 2)
    assert _linear(scm, x) == -1
    assert scm.select(x) == -1


def test_regression_verifier_accepts_out_of_range_dimension():
    for g in ("guard L0.size[-1] == 0", f"guard L0.size[{_C.MAX_DIM}] == 0", "guard L0.stride[100000000] == 0"):
        with pytest.raises(ValueError):
            _C.ir_verify(spec_text("T", [g]))


def test_regression_select_code_size_is_exponential():
    specs = [("T", [f"guard L0.size[{j}] == {v}"]) for j in range(7) for v in range(3)]
    src = _C.ir_pass("select", module_ir(specs))
    assert len(src) < 100_000, f"{len(specs)} one-guard specs -> {src.count(chr(10))} lines of select"


def test_regression_keyword_names_keep_structure_unambiguous():
    """Keyword names that are not identifiers (could contain ';' or '=') are not described natively,
    so two different calls can never share a structure string."""
    assert _C.describe_args(1, **{"x=T;": 2})[0] is None
    assert _C.describe_args(1, x=torch.zeros(1), **{"": 2})[0] is None
    assert _C.describe_args(1, x=torch.zeros(1))[0] == "i;x=T"


def test_regression_dict_keys_keep_structure_unambiguous():
    """Dict keys must be identifier strings or ints (#<decimal>), so ',', '=', '}' never appear in a
    key; other dicts are not described natively. Keys are in insertion order, as pytree flattens them."""
    t = torch.zeros(1)
    assert _C.describe_args({"a": t, "b": (1, {})}, k={"n": None})[0] == "{a=T,b=(i{})};k={n=n}"
    assert _C.describe_args({"b": 1, "a": t})[0] == "{b=i,a=T}"
    assert _C.describe_args({1: t, -20: 2, "a": t})[0] == "{#1=T,#-20=i,a=T}"
    for bad in ({1.0: t}, {True: t}, {"a,b=T": t}, {"": t}):
        assert _C.describe_args(bad)[0] is None
    from collections import OrderedDict
    assert _C.describe_args(OrderedDict(a=t))[0] is None  # a subclass: its own flattening rules
    # the leaf count the decision program checks skips dict keys that look like leaf codes
    scm = _scm(("{Tif=T,n={}}", []))
    assert scm.select({"Tif": t, "n": {}}) == 0 and scm.select({"Tif": t, "n": {"x": 1}}) == -1


def _survives(scm, *args) -> bool:
    """Whether select and explain_call return normally (run in a forked child: they may kill it)."""
    pid = os.fork()
    if pid == 0:  # child: no pytest machinery, just the two calls
        faulthandler.disable()  # a trap is the expected failure here, not a traceback to print
        code = 0
        try:
            scm.select(*args)
            scm.explain_call(*args)
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("structure, guard, args", [
    ("i", "guard L0.ival divby 0", (5,)),                 # verifier accepts a zero literal
    ("ii", "guard L0.ival divby L1.ival", (5, 0)),        # a field divisor that is 0 at run time
    ("i", "guard L0.ival divby -1", (-2 ** 63,)),         # INT64_MIN % -1 traps on x86, in explain too
], ids=["literal0", "field0", "int64min"])
def test_regression_divby_can_trap(structure, guard, args):
    scm = _scm((structure, [guard]))
    assert _survives(scm, *args)


def test_regression_lowered_guards_reject_their_own_nan_call():
    args = (torch.ones(2), math.nan)
    structure, leaves = _C.describe_args(*args)
    scm = _scm((structure, guard_lines(structure, leaves, torch.is_grad_enabled())))
    assert scm.select(*args) == 0


@pytest.mark.parametrize("values", [
    [5, -3, 70, 12, 2 ** 40, -(2 ** 63), 2 ** 63 - 1, 0],  # one spec per value: a pick table
    [5, -3, 70, 12, 12, 0],                                 # a value twice: the lower id must win
    [1, 2],                                                 # two values: already a table
    [1, 2, 2],                                              # a branch of two specs: a switch
])
def test_one_spec_per_int_value_selects_as_the_linear_scan(values):
    """Pick tables (decision.cpp): a split whose branches are single specs is looked up in a sorted
    table of (value, spec) pairs; every value, its neighbours and far-off ones select what a linear
    scan of the guards selects."""
    scm = _scm(*[("i", ["guard L0.kind == 2", f"guard L0.ival == {v}"]) for v in values])
    probes = set()
    for v in values:
        probes.update(x for x in (v - 1, v, v + 1) if -(2 ** 63) <= x < 2 ** 63)
    probes.update((-(2 ** 62), 2 ** 62, 4, 6, 11))
    for p in sorted(probes):
        assert scm.select(p) == _linear(scm, p) == scm.select_by_guards(p), p
        assert scm.select(p) == (values.index(p) if p in values else -1), p


def test_a_dim_pick_table_compares_all_64_bits():
    """The table holds int64 values and the looked-up field is widened first: a literal that differs
    from the rank only above bit 31 is not a match (the int32 switch regression, as a table)."""
    scm = _scm(*[("T", ["guard L0.kind == 1", f"guard L0.dim == {d}"]) for d in (1, 3, 4, 2 ** 32 + 2)])
    assert scm.select(torch.zeros(2, 2)) == -1 == _linear(scm, torch.zeros(2, 2))
    assert scm.select(torch.zeros(2, 2, 2)) == 1
