"""A real model on the CPU: a Hugging Face transformers Llama (benchmarks/hf_llama.py, the TINY config,
fp32, seeded random weights, HF's own RMSNorm/SiLU since Triton does not run on the CPU), its greedy
decode step (the HF forward over a static KV cache held as buffers) compiled with trident.compile:
the same tokens as eager, logits and caches close, no fallback, one capture for every position."""
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch

pytest.importorskip("transformers")   # installed, pinned, by scripts/test.sh (CI)

import trident  # noqa: E402

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import hf_llama  # noqa: E402

CFG = replace(hf_llama.TINY, new_tokens=8)


@pytest.fixture(scope="module")
def model():
    return hf_llama.build_model(CFG, "cpu")


def _cache_copy(step):
    return [t.clone() for t in step.cache_tensors()]


def test_model_is_a_transformers_llama_with_gqa(model):
    import transformers
    assert isinstance(model, transformers.LlamaForCausalLM)
    assert model.dtype == torch.float32
    attn = model.model.layers[0].self_attn
    assert attn.k_proj.out_features * 2 == attn.q_proj.out_features      # 4 heads, 2 kv heads


@torch.no_grad()
def test_eager_step_generates_what_hf_generate_does(model):
    """The step (static cache, one token at a time) is HF's own greedy generation."""
    gen = hf_llama.Generation(CFG, 2, "cpu")
    step = hf_llama.DecodeStep(model, 2, CFG.max_cache)
    tokens, _ = gen.run(step, step.reset)
    prompt = torch.cat(gen.prompt_steps, 1)
    saved = model.generation_config
    try:
        from transformers import GenerationConfig
        model.generation_config = GenerationConfig(do_sample=False, pad_token_id=-1, eos_token_id=None)
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=CFG.new_tokens + 1,
                             min_new_tokens=CFG.new_tokens + 1)
    finally:
        model.generation_config = saved
    assert torch.equal(out[:, CFG.prompt_len:], tokens)


def test_kernel_swap_replaces_every_norm_and_activation_and_undoes(model):
    n_norms = 2 * CFG.layers + 1
    try:
        assert hf_llama.use_kernels(model, triton=True) == n_norms + CFG.layers
        assert hf_llama.uses_triton(model)
        norm = model.model.norm
        assert isinstance(norm, hf_llama.TritonRMSNorm) and norm.weight is norm.hf_module.weight
    finally:
        assert hf_llama.use_kernels(model, triton=False) == n_norms + CFG.layers
    assert not hf_llama.uses_triton(model)
    assert type(model.model.norm).__name__ == "LlamaRMSNorm"


@pytest.mark.parametrize("impl", ["hf", "own"])
@torch.no_grad()
def test_trident_greedy_generation_matches_eager(model, impl):
    """impl "hf": transformers' TorchExportableModuleWithStaticCache; "own": the equivalent built in
    hf_llama (what runs where transformers lacks it)."""
    batch = 2
    gen = hf_llama.Generation(CFG, batch, "cpu")
    ref = hf_llama.DecodeStep(model, batch, CFG.max_cache, impl=impl, with_logits=True)
    want, want_logits = gen.run(ref, ref.reset)
    want_caches = _cache_copy(ref)

    step = hf_llama.DecodeStep(model, batch, CFG.max_cache, impl=impl, with_logits=True)
    assert step.impl == impl
    fast = trident.compile(step, max_specializations=8)
    got, got_logits = gen.run(fast, step.reset)

    assert torch.equal(got, want), hf_llama.compare_tokens(got, want)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-5, rtol=1e-5)
    for g, w in zip(step.cache_tensors(), want_caches):   # the KV cache buffers, written in place
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    c = trident.counters(fast)
    calls = CFG.prompt_len + CFG.new_tokens
    assert c["fallbacks"] == 0, c
    assert c["hits"] == calls - c["misses"], c
    assert c["specializations"] <= 2 and c["misses"] <= 2, c


@torch.no_grad()
def test_trident_benchmark_step_tokens_and_second_generation(model):
    """The benchmark's shape: a tokens-only step, batch 1, generated twice from a reset cache (the
    timed repeats): both generations equal eager's, all hits after the first capture."""
    gen = hf_llama.Generation(CFG, 1, "cpu")
    ref = hf_llama.DecodeStep(model, 1, CFG.max_cache)
    want, _ = gen.run(ref, ref.reset)

    step = hf_llama.DecodeStep(model, 1, CFG.max_cache)
    fast = trident.compile(step, max_specializations=8)
    first, _ = gen.run(fast, step.reset)
    _, _, timed = gen.time_decode(fast, step.reset, repeats=1, sync=lambda: None)
    assert torch.equal(first, want) and torch.equal(timed, want)
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["hits"] == 2 * (CFG.prompt_len + CFG.new_tokens) - c["misses"], c
    assert c["specializations"] <= 2, c


@torch.no_grad()
def test_triton_swapped_step_captures_and_lowers_for_sm90(monkeypatch):
    """The GPU benchmark's step (HF forward with the Triton RMSNorm and SiLU) through trident's capture
    and lowering without a GPU: kernels compiled for sm_90 (as in test_triton_capture_cpu.py), one
    launch per norm and per activation, the rest ATen; not run (CPU tensors)."""
    from fake_cuda import capture_as_sm90
    model = hf_llama.build_model(CFG, "cpu", dtype=torch.bfloat16)
    with capture_as_sm90(monkeypatch):
        step = hf_llama.DecodeStep(model, 2, CFG.max_cache)       # its probe step runs HF's ops
        assert hf_llama.use_kernels(model, triton=True) == 3 * CFG.layers + 1
        gen = hf_llama.Generation(CFG, 2, "cpu")
        fast = trident.compile(step)
        text = trident.controller(fast).lower_call(gen.prompt_steps[0], gen.positions[0]).text
    kernels = [line.split()[2] for line in text.splitlines() if line.strip().startswith("kernel ")]
    assert kernels.count('"rmsnorm_kernel"') == 2 * CFG.layers + 1 and kernels.count('"silu_kernel"') == CFG.layers
    assert "aten::index_copy_" in text                     # the KV cache, written in place


def test_triton_swap_matches_hf_ops_under_the_triton_interpreter():
    """The Triton RMSNorm (3-D reshaped to rows) and SiLU wrappers in the HF model give HF's logits
    and tokens. Eager only, in a subprocess with TRITON_INTERPRET=1 (the kernels run on the CPU)."""
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {BENCHMARKS!r})
        from dataclasses import replace
        import hf_llama
        cfg = replace(hf_llama.TINY, new_tokens=4)
        model = hf_llama.build_model(cfg, "cpu")
        gen = hf_llama.Generation(cfg, 2, "cpu")
        with torch.no_grad():
            ref = hf_llama.DecodeStep(model, 2, cfg.max_cache, with_logits=True)
            want, want_logits = gen.run(ref, ref.reset)
            assert hf_llama.use_kernels(model, triton=True) == 2 * cfg.layers + 1 + cfg.layers
            step = hf_llama.DecodeStep(model, 2, cfg.max_cache, with_logits=True)
            got, got_logits = gen.run(step, step.reset)
        assert torch.equal(got, want), (got, want)
        torch.testing.assert_close(got_logits, want_logits, atol=1e-5, rtol=1e-5)
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-3000:] + run.stderr[-3000:]
