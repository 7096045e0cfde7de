"""Direct results (csrc/runtime/graphs/direct_results.h): which results of a program a CUDA graph may
write straight into the tensor a replay returns, without a copy node. A result qualifies only when
nothing but Triton launches that a node can be rewritten for touches its memory; every other use (an
ATen read, a view, a fill, returning it twice) keeps the copy, and so does every result of a program
with a cluster launch anywhere. Read from the program as the runtime loads it (codegen's site form),
through `_C.ir_pass("direct_results", text)`."""
import os
import sys

import pytest
import torch

import trident

EMPTY = 'call "aten::empty.memory_format" ([4096], dtype(6), none, device(1:0), false, none)'
KERNEL = 'kernel {k} "add_one_kernel" "/nonexistent.cubin" "ptr,ptr,i32" warps 4 ctas {ctas} shared 0 ' \
         'gscratch 0 1 pscratch 0 1 pdl 0 coop {coop}'


def direct(body: str, ctas: int = 1, coop: int = 0) -> list[str]:
    """The direct results of a one-spec program over a CUDA tensor argument %0 and kernels 0 and 1."""
    text = "\n".join([
        'spec 0 structure "T" {',
        "  " + KERNEL.format(k=0, ctas=1, coop=0),
        "  " + KERNEL.format(k=1, ctas=ctas, coop=coop),
        "  %0 = arg 0",
        *("  " + line.strip() for line in body.strip().splitlines()),
        "}"])
    out = trident._C.ir_pass("direct_results", text).splitlines()
    assert out[0] == "spec 0:", out
    return out[1:]


def test_the_last_result_of_a_chain_is_written_directly():
    assert direct(f"""
        %1 = {EMPTY}
        launch 0 grid(4, 1, 1) (%0, %1, 4096)
        %2 = {EMPTY}
        launch 0 grid(4, 1, 1) (%1, %2, 4096)
        return %2
    """) == ["slot 1 (site 2 aten::empty.memory_format): site 3 param 1"]


def test_a_result_a_later_kernel_reads_is_pointed_at_in_both_launches():
    assert direct(f"""
        %1 = {EMPTY}
        launch 0 grid(4, 1, 1) (%0, %1, 4096)
        %2 = {EMPTY}
        launch 0 grid(4, 1, 1) (%1, %2, 4096)
        return (%1, %2)
    """) == ["slot 0 (site 0 aten::empty.memory_format): site 1 param 1, site 3 param 0",
             "slot 1 (site 2 aten::empty.memory_format): site 3 param 1"]


def test_a_pointer_into_the_result_counts_as_its_use():
    assert direct(f"""
        %1 = {EMPTY}
        launch 0 grid(2, 1, 1) (%0, ptr(%1, 8192), 2048)
        launch 0 grid(2, 1, 1) (%0, %1, 2048)
        return %1
    """) == ["slot 0 (site 0 aten::empty.memory_format): site 1 param 1, site 2 param 1"]


def test_a_result_an_aten_call_reads_keeps_its_copy():
    assert direct(f"""
        %1 = {EMPTY}
        launch 0 grid(4, 1, 1) (%0, %1, 4096)
        %2 = call "aten::sum" (%1, none)
        return (%1, %2)
    """) == []


def test_a_view_of_the_result_keeps_its_copy():
    assert direct(f"""
        %1 = {EMPTY}
        launch 0 grid(4, 1, 1) (%0, %1, 4096)
        %2 = call "aten::view" (%1, [64, 64])
        return %2
    """) == []


def test_an_allocation_that_writes_keeps_its_copy():
    assert direct("""
        %1 = call "aten::zeros" ([4096], dtype(6), none, device(1:0), false)
        launch 0 grid(4, 1, 1) (%0, %1, 4096)
        return %1
    """) == []


def test_a_result_returned_twice_keeps_its_copy():
    assert direct(f"""
        %1 = {EMPTY}
        launch 0 grid(4, 1, 1) (%0, %1, 4096)
        return (%1, [%1])
    """) == []


def test_a_result_no_kernel_writes_is_not_direct():
    assert direct(f"""
        %1 = {EMPTY}
        return %1
    """) == []


# Kernel 1 is the one made unrewritable. It writes the result, or it only reads the argument: a graph
# with direct results follows each rebind with a patch run, which rewrites every launch whose
# arguments moved, and one it cannot rewrite would make the patch refuse and the graph be dropped,
# so no result of that program is direct.
@pytest.mark.parametrize("body", [
    f"""
        %1 = {EMPTY}
        launch 1 grid(4, 1, 1) (%0, %1, 4096)
        return %1
    """,
    f"""
        %1 = {EMPTY}
        launch 0 grid(4, 1, 1) (%0, %1, 4096)
        %2 = {EMPTY}
        launch 1 grid(4, 1, 1) (%0, %2, 4096)
        return %1
    """], ids=["taking_the_result", "reading_only_the_argument"])
def test_a_kernel_a_node_cannot_be_rewritten_for_keeps_every_copy(body):
    assert direct(body, ctas=2) == []
    assert direct(body, coop=1) == []
    assert direct(body) == ["slot 0 (site 0 aten::empty.memory_format): site 1 param 1"]


def test_the_benchmarks_three_chained_kernels_write_their_result_directly(monkeypatch):
    """The per-call case of benchmarks/cases.py as trident lowers it (kernels compiled for sm_90)."""
    from fake_cuda import capture_as_sm90
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
    import cases
    with capture_as_sm90(monkeypatch):
        low = trident.controller(trident.compile(cases.three_kernels)).lower_call(torch.randn(4096))
    assert trident._C.ir_pass("direct_results", low.text).splitlines()[1:] == \
        ["slot 2 (site 4 aten::empty.memory_format): site 5 param 1"]
