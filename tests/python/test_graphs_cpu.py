"""graphs=True where CUDA graphs cannot serve (csrc/runtime/graphs/spec_graphs.h): the option is validated,
a program that computes on the CPU is marked `graph off` with the tensor and the user's line, runs
as without graphs with eager's results, and trident.explain says why; the spec's `writes` lists
exactly the arguments the program writes in place (what graph mode may not copy)."""
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


def test_without_graphs_explain_says_nothing_of_them():
    fast = trident.compile(accumulate)
    fast(torch.ones(2), torch.zeros(2))
    assert "CUDA graph" not in "\n".join(l for l in trident.explain(fast).splitlines() if not l.startswith("      "))
