"""Saved specializations (python/trident/artifacts.py): trident.save / trident.load, and the cache
directory's copy a new process installs at its first miss, with zero captures; every reason a file
is not used ends in a clean capture, counted, never a crash or a wrong result."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import trident
from trident import artifacts

torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


def step(x, scale: float):
    return MODEL(x) * scale + torch.arange(4.0)  # a folded constant, a run-time float


def _counts(fast):
    c = trident.counters(fast)
    return {k: c[k] for k in ("hits", "misses", "captures", "specializations", "artifact_loads",
                              "artifacts_rejected", "fallbacks")}


def _saved(tmp_path):
    fast = trident.compile(step)
    with torch.no_grad():
        for n, s in ((3, 1.0), (3, 2.0), (5, 1.5)):
            fast(torch.randn(n, 8), s)
    path = tmp_path / "step.trd"
    trident.save(fast, path)
    return path, trident.counters(fast)["specializations"]


def test_load_installs_the_saved_specializations_without_a_capture(tmp_path):
    path, n = _saved(tmp_path)
    fast = trident.load(path, step)
    with torch.no_grad():
        for rows in (3, 5, 7):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(fast(x, 0.5), step(x, 0.5), rtol=0, atol=0)
    c = _counts(fast)
    assert (c["captures"], c["artifact_loads"], c["specializations"], c["misses"], c["hits"]) == (0, 1, n, 0, 3), c


def test_save_without_a_specialization_says_so(tmp_path):
    with pytest.raises(ValueError, match="no specialization"):
        trident.save(trident.compile(step), tmp_path / "none.trd")


def _other_step(x, scale: float):
    return MODEL(x) * scale - 1.0


def _rejected(path, fn=step, **kw):
    fast = trident.load(path, fn, **kw)
    with torch.no_grad():
        x = torch.randn(3, 8)
        torch.testing.assert_close(fast(x, 2.0), fn(x, 2.0), rtol=0, atol=0)
    c = _counts(fast)
    assert (c["artifacts_rejected"], c["artifact_loads"], c["captures"]) == (1, 0, 1), c


def test_another_functions_code_is_rejected(tmp_path):
    path, _ = _saved(tmp_path)
    _rejected(path, _other_step)


def test_changed_parameter_shape_is_rejected(tmp_path, monkeypatch):
    path, _ = _saved(tmp_path)
    monkeypatch.setitem(MODEL._modules, "2", torch.nn.Linear(16, 4, bias=False))
    _rejected(path)


def test_other_torch_version_is_rejected(tmp_path, monkeypatch):
    path, _ = _saved(tmp_path)
    real = artifacts._versions
    monkeypatch.setattr(artifacts, "_versions", lambda: {**real(), "torch": "0.0.1"})
    _rejected(path)


def test_other_options_are_rejected(tmp_path):
    path, _ = _saved(tmp_path)
    _rejected(path, reuse_outputs=True)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped", "directory", "unreadable", "missing"])
def test_a_damaged_file_is_rejected_cleanly(tmp_path, damage):
    path, _ = _saved(tmp_path)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "flipped":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    elif damage == "unreadable":
        path.unlink()
        os.symlink(path, path)  # a link to itself: opening it fails (ELOOP), also for root
    else:
        path.unlink()
    _rejected(path)


_CHILD = textwrap.dedent("""
    import sys, torch, trident, transformers, warnings
    warnings.filterwarnings("ignore")
    from transformers import StaticCache
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    llm = transformers.LlamaForCausalLM(cfg).eval().requires_grad_(False)

    def function(x):
        return mlp(x).softmax(-1)

    def decode(ids, cache):
        return llm(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast_fn, fast_module, fast_decode = trident.compile(function), trident.compile(mlp), trident.compile(decode)
    with torch.no_grad():
        for n in (3, 5, 5):
            x = torch.randn(n, 8)
            torch.testing.assert_close(fast_fn(x), function(x), rtol=0, atol=0)
            torch.testing.assert_close(fast_module(x), mlp(x), rtol=0, atol=0)
        ids = torch.randint(1, 128, (1, 5), generator=torch.Generator().manual_seed(1))
        mine, ref = StaticCache(config=cfg, max_cache_len=16), StaticCache(config=cfg, max_cache_len=16)
        for _ in range(4):
            got, want = fast_decode(ids, mine), decode(ids, ref)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            ids = want[:, -1:].argmax(-1)
    for f in (fast_fn, fast_module, fast_decode):
        c = trident.counters(f)
        print(c["captures"], c["artifact_loads"], c["artifacts_rejected"], c["fallbacks"],
              int(c["compile_seconds"] > 0))
""")


def _run_child(script, cache_dir):
    env = {**os.environ, "TRIDENT_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1"}
    env.pop("TRIDENT_ARTIFACTS", None)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    # per function: captures, artifact loads, artifacts rejected, fallbacks, whether it compiled C
    return [tuple(int(v) for v in line.split()) for line in out.stdout.strip().splitlines()]


def test_a_second_process_needs_no_capture(tmp_path):
    """A function, a module and a tiny HF decoder over StaticCache: the first process captures, the
    second installs every specialization from the cache directory (zero captures) and matches eager,
    and compiles no C: its objects, selectors included, are the first process's (they hold no
    address, object number or path of the process that built them)."""
    pytest.importorskip("transformers")
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    first = _run_child(script, tmp_path / "cache")
    assert all(c[0] >= 2 and c[1] == 0 and c[4] == 1 for c in first), first
    second = _run_child(script, tmp_path / "cache")
    assert second == [(0, 1, 0, 0, 0)] * 3, second


def test_two_processes_saving_at_once_leave_a_file_a_third_loads(tmp_path):
    pytest.importorskip("transformers")
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "TRIDENT_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    assert not [f for f in os.listdir(tmp_path / "cache" / "artifacts") if f.endswith(".tmp")]
    assert _run_child(script, tmp_path / "cache") == [(0, 1, 0, 0, 0)] * 3


def test_the_warm_start_benchmark_runs_on_the_cpu(tmp_path):
    """benchmarks/warm_start.py's driver on a small Llama: the warm process captures nothing."""
    pytest.importorskip("transformers")
    import json
    script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "warm_start.py")
    dims = json.dumps({"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 128})
    run = subprocess.run([sys.executable, script, "--model", "llama-1b", "--device", "cpu", "--layers", "2",
                          "--dims", dims, "--modes", "trident-cold,trident-warm", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    cold, warm = json.loads((tmp_path / "llama-1b.json").read_text())
    assert (cold["captures"], cold["artifact_loads"]) == (2, 0), cold
    assert (warm["captures"], warm["artifact_loads"], warm["specializations"]) == (0, 1, 2), warm
    assert cold["max_abs_err"] == 0 and warm["max_abs_err"] == 0, (cold, warm)


def _scaled_by(k, table):
    return lambda x: x * k + table


def test_a_closure_value_or_tensor_of_another_value_is_rejected(tmp_path):
    """Values the code reads outside module state (an int baked into the program, a small tensor
    lifted as a constant) are part of the fingerprint: the same code over other values is rejected."""
    x = torch.randn(4)
    saved = trident.compile(_scaled_by(2, torch.ones(4)))
    saved(x)
    trident.save(saved, tmp_path / "k.trd")
    same = trident.load(tmp_path / "k.trd", _scaled_by(2, torch.ones(4)))
    torch.testing.assert_close(same(x), x * 2 + 1, rtol=0, atol=0)
    assert (trident.counters(same)["artifact_loads"], trident.counters(same)["captures"]) == (1, 0)
    for fn in (_scaled_by(3, torch.ones(4)), _scaled_by(2, torch.zeros(4))):
        other = trident.load(tmp_path / "k.trd", fn)
        torch.testing.assert_close(other(x), fn(x), rtol=0, atol=0)
        c = trident.counters(other)
        assert (c["artifacts_rejected"], c["captures"]) == (1, 1), c


_CONSTANTS_CHILD = textwrap.dedent("""
    import collections, enum, sys
    import torch
    import trident

    class A: pass
    class B: pass
    class Kind(enum.Enum):
        P = 1
        Q = 2
    NA = collections.namedtuple("NA", "t")
    NB = collections.namedtuple("NB", "t")

    def f(x, kind, mode):
        if isinstance(kind, tuple):  # a namedtuple: its class decides
            return kind.t * 2 if type(kind) is NA else kind.t + len(mode)
        return x * 2 if kind is A or kind is Kind.P else x + len(mode)

    fast = trident.compile(f)
    x = torch.full((3,), 3.0)
    kind = {"A": A, "B": B, "P": Kind.P, "Q": Kind.Q, "NA": NA(x), "NB": NB(x)}[sys.argv[1]]
    mode = sys.argv[2]
    same = torch.equal(fast(x, kind, mode), f(x, kind, mode))
    c = trident.counters(fast)
    print(int(same), c["captures"], c["artifact_loads"])
""")


@pytest.mark.parametrize("first, second", [("A", "B"), ("P", "Q"), ("NA", "NB")])
def test_a_class_or_enum_argument_selects_by_identity_across_processes(tmp_path, first, second):
    """A class, an enum member or a namedtuple's class is guarded by its number in this process's
    object table (c<N>, e<N>, <N(...)>); another process numbers its objects in another order. A
    saved spec names it by module and
    qualified name instead: the second process, passed the other class or member, must not be
    served the first one's specialization (before, it was: a wrong result), and a third and fourth
    process each load the specialization for their own."""
    script = tmp_path / "child.py"
    script.write_text(_CONSTANTS_CHILD)
    env = {**os.environ, "TRIDENT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRIDENT_ARTIFACTS", None)
    runs = []
    for arg in (first, second, first, second):
        out = subprocess.run([sys.executable, str(script), arg, "mean"], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(tuple(int(v) for v in out.stdout.split()))
    # (equal to eager, captures, artifact loads)
    assert runs == [(1, 1, 0), (1, 1, 1), (1, 0, 1), (1, 0, 1)], runs


_OBJECTS_CHILD = textwrap.dedent("""
    import collections, dataclasses, sys
    import torch
    import trident

    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
        k: int

    Pair = collections.namedtuple("Pair", "x k")

    def f(b):
        return b.x * b.k

    fast = trident.compile(f)
    same = True
    for n in map(int, sys.argv[1:]):
        for cls in (Batch, Pair):
            b = cls(torch.randn(n), 3)
            same &= torch.equal(fast(b), f(b))
    c = trident.counters(fast)
    print(int(same), c["captures"], c["artifact_loads"], c["split_calls"], c["fallbacks"])
""")


def test_an_object_class_a_saved_specialization_flattens_is_known_to_the_next_capture(tmp_path):
    """A second process that loads a specialization over a dataclass or namedtuple argument, then
    misses on a new size, captures with that class as the native flattener sees it: before, the
    load told only the native side, and the capture took the object for one leaf (a split call)."""
    script = tmp_path / "child.py"
    script.write_text(_OBJECTS_CHILD)
    env = {**os.environ, "TRIDENT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRIDENT_ARTIFACTS", None)
    runs = []
    for sizes in (["3"], ["3", "5", "7"]):
        out = subprocess.run([sys.executable, str(script), *sizes], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0 and "trident:" not in out.stderr, out.stderr[-3000:]
        runs.append(tuple(int(v) for v in out.stdout.split()))
    # (equal to eager, captures, artifact loads, split calls, fallbacks): the second process loads
    # size 3's two specs, then captures each class once at 5 and once more, symbolically, at 7
    assert runs == [(1, 2, 0, 0, 0), (1, 4, 1, 0, 0)], runs


def test_object_numbers_in_a_structure_string_become_placeholders_and_nothing_else():
    """Names and str constants are copied byte for byte, however much they look like codes."""
    seen = []

    def number(n, registered):
        seen.append((n, registered))
        return 10 + n

    tricky = "c0<0{e1;k=s3:é".encode()
    structure = b"T<4{a=c5,b=s%d:" % len(tricky) + tricky + b",e_c3=e7}>;mode=s4:c9e9;c2=[c1]@6.0"
    got = artifacts._structure_objects(structure, number)
    assert got == (b"T<@obj:14{a=c@obj:15,b=s%d:" % len(tricky) + tricky +
                   b",e_c3=e@obj:17}>;mode=s4:c9e9;c2=[c@obj:11]@6.0"), got
    assert seen == [(4, True), (5, False), (7, False), (1, False)]
    assert artifacts.hir.unquote(artifacts.hir.quote('a"\\n\né?')[1:-1]) == 'a"\\n\né?'.encode()
