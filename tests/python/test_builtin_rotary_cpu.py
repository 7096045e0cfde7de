"""HF's rotary embedding lowered to one builtin launch per tensor (builtin_rotary.py), checked in
the host IR without a GPU (kernels compiled for sm_90 with Triton's driver faked,
TRIDENT_BUILTIN_KERNELS=all), the cases it must leave to ATen, and the kernel's values under Triton's
interpreter."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from fake_cuda import capture_as_sm90, keep_ptx
from rotary_cases import decode_inputs, rope, rotate_half

import trident


@pytest.fixture
def builtins_on_cpu(monkeypatch):
    monkeypatch.setenv("TRIDENT_BUILTIN_KERNELS", "all")
    with capture_as_sm90(monkeypatch):
        yield


def lowered(fn, *args):
    return trident.controller(trident.compile(fn)).lower_call(*args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_hf_rotary_of_q_and_k_is_two_launches_and_no_aten_op(builtins_on_cpu, dtype):
    q, k, cos, sin = decode_inputs(2, 16, 8, 128, dtype)
    low = lowered(rope, q, k, cos, sin)
    assert low.ops.count("builtin:rotate_half_rotary") == 2, low.ops
    for op in ("aten::mul", "aten::neg", "aten::cat", "aten::add", "aten::slice"):
        assert op not in low.text, low.text
    # q is [2, 16, 1, 128] with strides (2048, 128, 2048, 1), the result as eager lays it out
    # (2048, 128, 128, 1); cos is read through the unsqueeze, broadcast over the heads (stride 0)
    assert 'call "aten::empty_strided" ([2, 16, 1, 128], [2048, 128, 128, 1]' in low.text, low.text
    launch = [ln.strip() for ln in low.text.splitlines() if ln.strip().startswith("launch 0 ")]
    assert len(launch) == 1 and launch[0].endswith(
        "(%0, %2, %3, %4, 4096, 16, 128, 2048, 128, 2048, 128, 0, 128, 128, 0, 128, 2048, 128, 128, 64)"), launch


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_rotary_kernel_is_compiled_without_fp_contraction(builtins_on_cpu, monkeypatch, dtype):
    """With Triton's default fp fusion, LLVM turns a rounded product and the sum into one
    bf16x2/f16x2 fma, skipping that product's rounding: 1 ulp off eager in about a quarter of the
    elements on an H200. The lowering compiles the kernel with enable_fp_fusion=False; its PTX
    (compiled here for sm_90) has no fma and rounds each product and the sum."""
    ptx = keep_ptx(monkeypatch)
    low = lowered(rope, *decode_inputs(1, 16, 8, 128, dtype))
    assert low.ops.count("builtin:rotate_half_rotary") == 2, low.ops
    text = next(t for name, t in ptx.items() if name.startswith("rotate_half_rotary"))
    assert "fma." not in text, [ln for ln in text.splitlines() if "fma." in ln]
    to_dtype = "cvt.rn.bf16" if dtype == torch.bfloat16 else "cvt.rn.f16"
    assert text.count(to_dtype) >= 3, text  # two products and the sum, each rounded


def rope_keeping_rotated(q, cos, sin):
    r = rotate_half(q)
    return q * cos + r * sin, r


def rope_half_split_wrong(q, cos, sin):
    return q * cos + torch.cat((-q[..., 3:], q[..., :3]), dim=-1) * sin


def rope_other_dim(q, cos, sin):
    return q * cos + torch.cat((-q[:, 4:], q[:, :4]), dim=1) * sin


def rope_no_neg(q, cos, sin):
    return q * cos + torch.cat((q[..., 4:], q[..., :4]), dim=-1) * sin


def rope_other_tensor(q, p, cos, sin):
    return q * cos + rotate_half(p) * sin


def rope_plain(q, cos, sin):
    return q * cos + rotate_half(q) * sin


@pytest.mark.parametrize("fn, args", [
    (rope_plain, (torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 8))),                   # fp32
    (rope_keeping_rotated, tuple(torch.randn(2, 8, dtype=torch.bfloat16) for _ in range(3))),  # inner result read
    (rope_half_split_wrong, tuple(torch.randn(2, 8, dtype=torch.bfloat16) for _ in range(3))),
    (rope_other_dim, tuple(torch.randn(2, 8, 8, dtype=torch.bfloat16) for _ in range(3))),   # not the last dim
    (rope_no_neg, tuple(torch.randn(2, 8, dtype=torch.bfloat16) for _ in range(3))),
    (rope_other_tensor, tuple(torch.randn(2, 8, dtype=torch.bfloat16) for _ in range(4))),
    (rope_plain, (torch.randn(2, 8, dtype=torch.bfloat16), torch.randn(2, 8),                 # cos fp32
                  torch.randn(2, 8, dtype=torch.bfloat16))),
    (rope_plain, (torch.randn(2, 6, dtype=torch.bfloat16), torch.randn(3, 2, 6, dtype=torch.bfloat16),
                  torch.randn(2, 6, dtype=torch.bfloat16))),                                   # cos widens the result
    (rope_plain, tuple(torch.randn(2, 2, 2, 2, 8, dtype=torch.bfloat16) for _ in range(3))),  # 5 dimensions
])
def test_what_is_not_exactly_the_pattern_stays_aten(builtins_on_cpu, fn, args):
    low = lowered(fn, *args)
    assert "builtin:rotate_half_rotary" not in low.ops and "aten::cat" in low.text, low.text


def test_on_cpu_tensors_by_default_the_rotary_runs_atens_ops_and_equals_eager():
    q, k, cos, sin = decode_inputs(2, 4, 2, 16, torch.bfloat16, generator=torch.Generator().manual_seed(0))
    fast = trident.compile(rope)
    got, want = fast(q, k, cos, sin), rope(q, k, cos, sin)
    assert all(torch.equal(a, b) and a.stride() == b.stride() for a, b in zip(got, want))
    assert "rotate_half_rotary" not in trident.explain(fast)


def test_the_hf_llama_step_lowers_each_layers_q_and_k_rotary_to_one_launch(builtins_on_cpu):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hf_llama
    model = hf_llama.build_model(hf_llama.TINY, "cpu", dtype=torch.bfloat16)
    step = hf_llama.DecodeStep(model, 1, hf_llama.TINY.max_cache)
    ids, pos = torch.zeros((1, 1), dtype=torch.long), torch.tensor([3])
    with torch.no_grad():
        low = lowered(step, ids, pos)
    assert low.ops.count("builtin:rotate_half_rotary") == 2 * hf_llama.TINY.layers, low.ops
    # the one cat left builds cos and sin (HF's rotary embedding: cat((freqs, freqs), -1))
    assert "aten::neg" not in low.text and low.text.count('call "aten::cat"') == 1, low.text


def test_the_kernel_under_the_triton_interpreter_gives_atens_fp16_bits():
    """The kernel's index mapping, negation and rounding order against ATen's ops on the CPU, special
    values included, run by Triton's interpreter in a subprocess. fp16 only: the interpreter rounds
    fp32 to bf16 differently from the GPU (the add kernel, bit-exact on the GPU, is not under it)."""
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from rotary_cases import decode_inputs, rope
        from trident.lowering import builtin_kernels as bk
        from trident.lowering.builtin_rotary import _strides4
        dtype = torch.float16
        q, k, cos, sin = decode_inputs(3, 4, 2, 16, dtype, generator=torch.Generator().manual_seed(0))
        q.mul_(30)
        special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 65504.0, -65504.0, 1e-7])
        q.view(-1)[:16] = special.repeat(2).to(dtype)     # in both halves: the negated one too
        cos.view(-1)[:16] = special.flip(0).repeat(2).to(dtype)
        sin.view(-1)[:8] = special.to(dtype)
        # -0.0 * 1 + neg(0.0) * 1 is -0.0 only if neg(0.0) is -0.0 (0 - 0.0 would give +0.0)
        q[0, 0, 0, 0], q[0, 0, 0, 8], cos[0, 0, 0], sin[0, 0, 0] = -0.0, 0.0, 1.0, 1.0
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        for x, want in zip((q, k), rope(q, k, cos, sin)):
            out = torch.empty_strided(want.shape, want.stride(), dtype=dtype)
            n, shape4 = x.numel(), list(x.shape)
            bk.rotate_half_rotary[((n + 1023) // 1024,)](
                x, c, s, out, n, *shape4[1:], *_strides4(x, shape4), *_strides4(c, shape4),
                *_strides4(s, shape4), *_strides4(out, shape4), shape4[3] // 2, BLOCK=1024)
            # NaN's sign and payload: the CPU's and numpy's NaN propagation differ (on the GPU both
            # sides give the canonical NaN; test_builtin_rotary_gpu.py compares all bits there)
            nan = want.isnan()
            assert torch.equal(out.isnan(), nan), (out, want)
            assert torch.equal(out.view(torch.int16)[~nan], want.view(torch.int16)[~nan]), (out, want)
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-3000:] + run.stderr[-3000:]
