"""generate() as users call it, `model.forward = trident.compile(model.forward)`, across the decoder
families test_hf_caches.py does not build: learned and ALiBi positions (GPT-2, OPT, BLOOM), parallel
attention and MLP (GPT-NeoX, Falcon, Cohere), sliding-window layers with logit soft-capping (Gemma 2,
Gemma 3), fused QKV projections (Phi-3), multi-head latent attention with MoE (DeepSeek-V3), shared
experts (Qwen2-MoE), and beam search. Tiny models from configs with random weights on the CPU; each
against eager's generate() token for token, every forward native (no fallback, no split)."""
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")   # installed, pinned, by scripts/test.sh (CI)

import trident  # noqa: E402
from test_hf_caches import _forward_compiled  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

_DECODER = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)


def _config(name: str):
    t = transformers
    if name == "gpt2":
        return t.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1,
                            eos_token_id=1), t.GPT2LMHeadModel
    if name == "opt":
        return t.OPTConfig(vocab_size=96, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
                           max_position_embeddings=64, word_embed_proj_dim=32, pad_token_id=0, bos_token_id=1,
                           eos_token_id=1), t.OPTForCausalLM
    if name == "bloom":
        return t.BloomConfig(vocab_size=96, hidden_size=32, n_layer=2, n_head=4, pad_token_id=0, bos_token_id=1,
                             eos_token_id=1), t.BloomForCausalLM
    if name == "gpt_neox":
        return t.GPTNeoXConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, max_position_embeddings=64, bos_token_id=1,
                               eos_token_id=1), t.GPTNeoXForCausalLM
    if name == "falcon":
        return t.FalconConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              bos_token_id=1, eos_token_id=1), t.FalconForCausalLM
    if name == "cohere":
        return t.CohereConfig(**_DECODER), t.CohereForCausalLM
    if name == "gemma2":
        return t.Gemma2Config(**_DECODER, head_dim=8, sliding_window=16), t.Gemma2ForCausalLM
    if name == "gemma3":
        return t.Gemma3TextConfig(**_DECODER, head_dim=8, sliding_window=16), t.Gemma3ForCausalLM
    if name == "phi3":
        return t.Phi3Config(**_DECODER, bos_token_id=1, eos_token_id=1), t.Phi3ForCausalLM
    if name == "deepseek_v3":
        return t.DeepseekV3Config(**{**_DECODER, "num_key_value_heads": 4}, moe_intermediate_size=16,
                                  n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                                  first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=4,
                                  qk_nope_head_dim=8, v_head_dim=8, n_group=1, topk_group=1), \
            t.DeepseekV3ForCausalLM
    if name == "qwen2_moe":
        return t.Qwen2MoeConfig(**_DECODER, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                shared_expert_intermediate_size=16), t.Qwen2MoeForCausalLM
    if name == "llama":
        return t.LlamaConfig(**_DECODER), t.LlamaForCausalLM
    raise KeyError(name)


def _model(name: str):
    cfg, cls = _config(name)
    torch.manual_seed(0)
    return cls(cfg).eval()


def _generate_both_ways(model, calls: int, **kw):
    ids = torch.randint(2, 90, (1, 5), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=8, min_new_tokens=8, pad_token_id=0, **kw)
    with torch.no_grad():
        want = model.generate(ids, disable_compile=True, **kw)
        with _forward_compiled(model) as fast, warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no fallback or split said
            got = [model.generate(ids, **kw) for _ in range(calls)]
            c = trident.counters(fast)
    for g in got:
        assert torch.equal(g, want), (g, want)
    assert (c["fallbacks"], c["split_calls"]) == (0, 0), c
    return c


@pytest.mark.parametrize("name", ["gpt2", "opt", "bloom", "gpt_neox", "falcon", "cohere", "gemma2", "gemma3",
                                  "phi3", "deepseek_v3", "qwen2_moe"])
def test_generate_with_a_static_cache_across_decoder_families(name):
    c = _generate_both_ways(_model(name), 2, do_sample=False, cache_implementation="static")
    # a prefill and a decode specialization (a sliding-window layer counts its length in a Python
    # int: its first decode step is one more); every later forward a hit
    assert c["specializations"] <= 3, c
    assert c["hits"] == 2 * 8 - c["specializations"], c


def test_generate_with_gemma3s_sliding_window_dynamic_cache():
    c = _generate_both_ways(_model("gemma3"), 2, do_sample=False)
    assert c["specializations"] <= 3 and c["hits"] == 2 * 8 - c["specializations"], c


@pytest.mark.parametrize("cache", [None, "static"])
def test_beam_search(cache):
    """Two beams: the cache is reordered between steps (a DynamicCache's index_select of every layer,
    a StaticCache's in place), and the batch is the beams."""
    kw = {"cache_implementation": cache} if cache else {}
    c = _generate_both_ways(_model("llama"), 2, do_sample=False, num_beams=2, **kw)
    assert c["hits"] >= 2 * 8 - 4, c


@pytest.mark.parametrize("name", ["gpt2", "gemma2", "phi3", "deepseek_v3"])
def test_generate_of_a_float32_model_under_cpu_autocast(name):
    """Mixed precision as users write it, `with torch.autocast("cpu", dtype=torch.bfloat16):
    model.generate(...)` on a float32 model, across learned positions, soft-capping, fused QKV and
    latent attention with MoE: eager's tokens and logits (bfloat16 where autocast makes them), every
    forward native; the one thing said is that float32 weights are cast on every call."""
    model = _model(name)
    ids = torch.randint(2, 90, (1, 5), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=8, min_new_tokens=8, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = model.generate(ids, disable_compile=True, **kw)
        with _forward_compiled(model) as fast, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [model.generate(ids, **kw) for _ in range(2)]
            c = trident.counters(fast)
    for g in got:
        assert torch.equal(g.sequences, want.sequences)
        assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(g.logits, want.logits))
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "parameters to bfloat16 on every call" in said[0], said
    assert (c["fallbacks"], c["split_calls"]) == (0, 0) and c["hits"] >= 2 * 8 - c["specializations"] - 1, c
