"""The benchmark's decode step (benchmarks/models.py, user Triton kernels) lowered for sm_90 without
a GPU: the host program the GPU runs, op by op, so CI notices when a lowering optimization stops
applying. Per layer: the k and v cache writes are one builtin launch reading and writing through
pointers (no view calls), the two residual adds are builtin launches, and the only view made is
the attention output reshaped for the o projection (an ATen GEMM reads it)."""
import collections
import os
import re
import sys
from dataclasses import replace

import pytest
import torch
from fake_cuda import capture_as_sm90

import trident

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import models  # noqa: E402


@pytest.fixture(autouse=True)
def sm90(monkeypatch):
    monkeypatch.setenv("TRIDENT_BUILTIN_KERNELS", "all")
    with capture_as_sm90(monkeypatch):
        yield


@pytest.mark.parametrize("pos", [7, 100])
def test_decode_step_host_program(pos):
    layers = 3
    model = models.Decoder(replace(models.TINY, n_layers=layers), use_triton=True, device="cpu").eval()
    caches, x = model.new_caches(1), model.new_input(1)
    with torch.no_grad():
        low = trident.controller(trident.compile(model.decode_step)).lower_call(x, caches, pos)
    ops = collections.Counter(low.ops)
    assert ops["builtin:strided_copy_pair"] == layers and ops["builtin:strided_copy"] == 0, ops
    assert ops["builtin:add_contiguous"] == 2 * layers, ops
    assert ops["aten::view"] == layers, ops
    for name in ("aten::slice.Tensor", "aten::unsqueeze", "aten::copy_", "aten::clone", "aten::add.Tensor"):
        assert ops[name] == 0, (name, ops)
    assert ops["aten::linear"] == 4 * layers, ops
    kernels = collections.Counter(k.split()[2] for k in low.kernels)
    assert kernels['"rmsnorm_kernel"'] == 2 * layers + 1, kernels
    # batch 1 x 4 heads: the attention is split over the context and merged (kernels.decode_attention)
    assert kernels['"decode_attention_split_kernel"'] == kernels['"decode_attention_merge_kernel"'] == layers, kernels
    # each pair writes the layer's k and v caches at pos * head_dim(64) * 2 bytes, reading k from the
    # rotary output and v from its slice of the fused qkv row
    off = pos * 64 * 2
    pairs = [ln for ln in low.text.splitlines() if "grid(1, 2, 1)" in ln]
    assert len(pairs) == layers, pairs
    for ln in pairs:
        assert re.search(rf"\(ptr\(%\d+, {off}\), %\d+, ptr\(%\d+, {off}\), ptr\(%\d+, 1024\), ", ln), ln
