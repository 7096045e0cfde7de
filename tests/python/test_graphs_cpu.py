"""graphs=True where CUDA graphs cannot serve (csrc/runtime/graphs/spec_graphs.h): the option is validated,
a program that computes on the CPU is marked `graph off` with the tensor and the user's line, runs
as without graphs with eager's results, and trident.explain says why; the spec's `writes` lists
exactly the arguments the program writes in place (what graph mode may not copy)."""
import os
import subprocess
import sys

import pytest
import torch

import trident


def accumulate(x, acc):
    acc.add_(x)
    return x * 2


def test_graphs_must_be_a_bool():
    with pytest.raises(ValueError, match="graphs must be True or False"):
        trident.compile(accumulate, graphs=1)


def test_a_cpu_program_runs_without_graphs_and_says_why():
    fast = trident.compile(accumulate, graphs=True)
    mine, theirs = torch.zeros(4), torch.zeros(4)
    for _ in range(5):
        x = torch.randn(4)
        torch.testing.assert_close(fast(x, mine), accumulate(x, theirs), rtol=0, atol=0)
    assert torch.equal(mine, theirs)
    c = trident.counters(fast)
    assert (c["graphs"], c["graph_captures"], c["graph_replays"], c["graph_rebinds"]) == (0, 0, 0, 0)
    assert c["hits"] == 4
    text = trident.explain(fast)
    assert "spec 0 does not replay as a CUDA graph: a tensor on the cpu" in text


def test_the_spec_lists_the_arguments_it_writes():
    def two_writes(a, b, c):
        a.mul_(2)
        c.copy_(b)
        return b + 1

    ir = trident.controller(trident.compile(two_writes)).lower_call(torch.ones(3), torch.ones(3), torch.zeros(3)).text
    assert "  writes 0, 2\n" in ir
    assert "graph off" in ir and "test_graphs_cpu.py" in ir  # the CPU tensor's line, for explain


def rows_above(x, limit):
    n = int((x > limit).sum().item())  # the host reads the count: a CUDA graph cannot hold it
    return x.new_zeros(n) + 1


def test_a_program_reading_a_device_value_on_the_host_says_where(monkeypatch):
    """Where every tensor is on the device, an `.item()` is the program's `graph reads` line (the first
    read's line): its graphs split there, or stop, instead of failing a capture on the GPU."""
    from trident.lowering import lower as lower_mod
    monkeypatch.setattr(lower_mod, "_host_tensor", lambda ep, env: "")  # as if every tensor were a CUDA one
    ir = trident.controller(trident.compile(rows_above)).lower_call(torch.arange(8.0), 3.0).text
    line = rows_above.__code__.co_firstlineno + 1
    assert f'graph reads "it reads a device value on the host at test_graphs_cpu.py:{line}' in ir, ir
    assert "graph off" not in ir
    plain = trident.controller(trident.compile(accumulate)).lower_call(torch.ones(2), torch.zeros(2)).text
    assert "graph off" not in plain and "graph reads" not in plain


def first_n_doubled(x, n):
    return x[: n.item()] * 2  # the slice's size is new to torch (min of n and the length), read from `mul`'s result


def test_a_size_the_host_already_knows_is_no_reason_for_graph_off(monkeypatch):
    """A call whose result carries a data-dependent size it did not compute (here `mul` of a slice
    ending at an `.item()`) reads that size without waiting for the device: the program's only host
    read is the `.item()` (`graph reads`, its graph split there), not `graph off`. Session 40's H100
    run of `item_as_a_slice_end` named `aten::mul.Tensor` before only `dynamic_output_shape` ops counted."""
    from trident.lowering import lower as lower_mod
    monkeypatch.setattr(lower_mod, "_host_tensor", lambda ep, env: "")  # as if every tensor were a CUDA one
    x = torch.arange(8.0)
    fast = trident.compile(first_n_doubled, graphs=True)
    ir = trident.controller(fast).lower_call(x, torch.tensor(3)).text
    line = first_n_doubled.__code__.co_firstlineno + 1
    assert f'graph reads "it reads a device value on the host at test_graphs_cpu.py:{line}' in ir, ir
    assert "graph off" not in ir, ir
    for n in (3, 5, 0):
        torch.testing.assert_close(fast(x, torch.tensor(n)), first_n_doubled(x, torch.tensor(n)), rtol=0, atol=0)


def positive_rows(x, limit):
    kept = x[x.sum(1) > limit]  # a boolean index: ATen waits for the device to size the result
    return kept * 2 + limit.item()


def test_an_aten_call_sizing_its_result_on_the_host_keeps_graphs_off_and_says_where(monkeypatch):
    """An ATen call whose result's size is data-dependent (nonzero, masked_select, unique, bincount)
    reads it on the host inside the call, which stream capture refuses: the program is `graph off`,
    naming the call and the user's line, ahead of any `.item()` of its own (which alone would split
    its graph), instead of failing a capture on the GPU. Eager's results on the CPU."""
    from trident.lowering import lower as lower_mod
    monkeypatch.setattr(lower_mod, "_host_tensor", lambda ep, env: "")  # as if every tensor were a CUDA one
    line = positive_rows.__code__.co_firstlineno + 1
    x, limit = torch.randn(6, 3, generator=torch.Generator().manual_seed(0)), torch.tensor(0.0)
    fast = trident.compile(positive_rows, graphs=True)
    ir = trident.controller(fast).lower_call(x, limit).text
    why = f"aten::index.Tensor computes its result's size on the host at test_graphs_cpu.py:{line}"
    assert f'graph off "{why} (a data-dependent size' in ir, ir
    assert "graph reads" not in ir
    for lim in (0.0, 1.0, -1.0):
        torch.testing.assert_close(fast(x, torch.tensor(lim)), positive_rows(x, torch.tensor(lim)), rtol=0, atol=0)
    assert f"spec 0 does not replay as a CUDA graph: {why}" in trident.explain(fast), trident.explain(fast)


def rows_above_or_none(x, limit):
    n = int((x > limit).sum().item())
    if n > 2:  # a branch on the value read: `expect`
        return x.new_zeros(n) + 1
    return x * 0


@pytest.mark.parametrize("segments", [None, "0", "1"])
def test_a_host_read_splits_graphs_unless_segments_are_off(monkeypatch, segments):
    """The runtime's choice at load (csrc/runtime/graphs/spec_graphs.h, Segments): by default (and
    with TRIDENT_GRAPH_SEGMENTS=1) the spec's graphs are split at the read (explain says so); with
    TRIDENT_GRAPH_SEGMENTS=0 the read stops graphs and explain names it and the switch; a program that
    also branches on the value keeps graphs off either way. The CPU runs every call plainly, with
    eager's results."""
    from trident.lowering import lower as lower_mod
    monkeypatch.setattr(lower_mod, "_host_tensor", lambda ep, env: "")
    if segments is None:
        monkeypatch.delenv("TRIDENT_GRAPH_SEGMENTS", raising=False)
    else:
        monkeypatch.setenv("TRIDENT_GRAPH_SEGMENTS", segments)
    line = rows_above.__code__.co_firstlineno + 1
    fast = trident.compile(rows_above, graphs=True)
    for limit in (3.0, 5.0, 3.0):
        torch.testing.assert_close(fast(torch.arange(8.0), limit), rows_above(torch.arange(8.0), limit), rtol=0, atol=0)
    text = trident.explain(fast)
    read = f"it reads a device value on the host at test_graphs_cpu.py:{line}"
    if segments != "0":
        assert f"spec 0's CUDA graphs are split into segments at each host read" in text and read in text, text
        assert "does not replay as a CUDA graph" not in text
    else:
        assert f"spec 0 does not replay as a CUDA graph: {read}" in text, text
        assert "TRIDENT_GRAPH_SEGMENTS=0 keeps its graphs whole" in text
    c = trident.counters(fast)
    assert (c["graphs"], c["graph_segments"], c["graph_read_misses"]) == (0, 0, 0)

    branching = trident.compile(rows_above_or_none, graphs=True)
    for limit in (3.0, 6.0):
        torch.testing.assert_close(branching(torch.arange(8.0), limit), rows_above_or_none(torch.arange(8.0), limit),
                                   rtol=0, atol=0)
    assert "and branches on data" in trident.explain(branching), trident.explain(branching)


def test_without_graphs_explain_says_nothing_of_them():
    fast = trident.compile(accumulate, graphs=False)
    fast(torch.ones(2), torch.zeros(2))
    assert "CUDA graph" not in "\n".join(l for l in trident.explain(fast).splitlines() if not l.startswith("      "))


GRAPHS_DEFAULT_CHECK = """
import torch, trident
print(trident.controller(trident.compile(lambda x: x + 1)).options.graphs,
      trident.controller(trident.compile(lambda x: x + 1, graphs=False)).options.graphs,
      trident.controller(trident.compile(lambda x: x + 1, graphs=True)).options.graphs,
      trident.Options().graphs)
"""


@pytest.mark.parametrize("env, expected", [(None, "True False True True"), ("0", "False False True False"),
                                           ("1", "True False True True")])
def test_trident_graphs_sets_the_default_and_an_explicit_graphs_wins(env, expected):
    """Graph mode is the default of trident.compile and of the backend's options (trident.Options);
    TRIDENT_GRAPHS=0 (read once, at import) turns it off; an explicit graphs= wins."""
    environ = {k: v for k, v in os.environ.items() if k != "TRIDENT_GRAPHS"}
    if env is not None:
        environ["TRIDENT_GRAPHS"] = env
    r = subprocess.run([sys.executable, "-c", GRAPHS_DEFAULT_CHECK], capture_output=True, text=True, timeout=300,
                       env=environ)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[-2] == expected


@pytest.mark.parametrize("name, value, message", [
    ("TRIDENT_GRAPHS", "yes", "TRIDENT_GRAPHS must be 0 or 1, got 'yes'"),
    ("TRIDENT_GRAPH_BYTES", "1G", "TRIDENT_GRAPH_BYTES must be a number of bytes (0 or more), got '1G'")])
def test_a_malformed_graph_setting_fails_at_import(name, value, message):
    r = subprocess.run([sys.executable, "-c", "import trident"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, name: value})
    assert r.returncode != 0
    assert message in r.stderr


def _graph_scalars(fn, *calls):
    """Lowers fn for each call in turn (the second with the int that varies symbolic) and says, for
    the last spec, why its CUDA graphs must be keyed by its scalars' values ("" when patched)."""
    ctl = trident.controller(trident.compile(fn))
    with torch.no_grad():
        for args in calls:
            low = ctl.lower_call(*args)
    text = trident._C.ir_pass("graph_scalars", low.text)
    return text.split(": ", 1)[1].strip()


def test_an_int_that_reaches_an_aten_call_keys_graphs_by_value():
    def int_position_step(x, cache, pos: int):
        cache[pos] = x[0]
        return cache[: pos + 1].sum(0)

    x, cache = torch.randn(1, 8), torch.zeros(64, 8)
    assert _graph_scalars(int_position_step, (x, cache, 3), (x, cache, 4)) == \
        "aten::select.int takes a number computed from scalar argument leaf 2"


def test_the_benchmark_decode_step_takes_its_int_position_only_in_triton_launches(monkeypatch):
    """The position reaches the rotary and attention kernels' parameters and the cache writes'
    pointer offsets (a builtin launch), never an ATen call: one graph serves every position."""
    from dataclasses import replace
    from fake_cuda import capture_as_sm90
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
    import models
    monkeypatch.setenv("TRIDENT_BUILTIN_KERNELS", "all")
    with capture_as_sm90(monkeypatch):
        model = models.Decoder(replace(models.TINY, n_layers=1), use_triton=True, device="cpu").eval()
        caches, x = model.new_caches(1), model.new_input(1)
        assert _graph_scalars(model.decode_step, (x, caches, 7), (x, caches, 8)) == ""


def test_a_float_argument_is_no_host_tensor_of_the_program():
    """A run-time float reaches export as a CPU 0-dim tensor that only its `.item()` reads; the program
    reads the leaf itself, so it does not stop graphs (it had: "an input on the cpu")."""
    def scaled(alpha: float, beta: float):
        return alpha * beta + 1.0

    text = trident.controller(trident.compile(scaled)).lower_call(0.5, 3.0).text
    assert "$f0 = float 0" in text and "graph off" not in text, text
