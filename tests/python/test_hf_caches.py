"""Hugging Face models called the way their users call them, with transformers' own cache objects:
a decode step over a StaticCache and over a DynamicCache, generate() with both caches (greedy,
sampling, a left-padded batch, two prompt lengths), the whole model with its defaults. Tiny models
from configs with random weights (Llama, Qwen3, and the MoE models DeepSeek-V2, Qwen3-MoE and
Mixtral), on the CPU, each against eager with the counters asserted: the cache is an argument like
any other, written in place (StaticCache) or left holding the new tensors (DynamicCache), and one
specialization serves a whole decode."""
import contextlib
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")   # installed, pinned, by scripts/test.sh (CI)

import trident  # noqa: E402
from transformers import DynamicCache, StaticCache  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

_COMMON = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)


def _config(name: str):
    if name == "llama":
        return transformers.LlamaConfig(**_COMMON), transformers.LlamaForCausalLM
    if name == "qwen3":
        return transformers.Qwen3Config(**_COMMON, head_dim=8), transformers.Qwen3ForCausalLM
    if name == "mistral":  # sliding-window attention: its StaticCache layers are sliding-window layers
        return transformers.MistralConfig(**_COMMON, sliding_window=16), transformers.MistralForCausalLM
    if name == "qwen3_moe":
        return transformers.Qwen3MoeConfig(**_COMMON, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                           moe_intermediate_size=16, decoder_sparse_step=1), \
            transformers.Qwen3MoeForCausalLM
    if name == "mixtral":
        return transformers.MixtralConfig(**_COMMON, num_local_experts=4, num_experts_per_tok=2), \
            transformers.MixtralForCausalLM
    if name == "deepseek_v2":
        cfg = transformers.DeepseekV2Config(
            **{**_COMMON, "num_key_value_heads": 4}, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=1,
            num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=4,
            qk_nope_head_dim=8, v_head_dim=8, n_group=1, topk_group=1)
        return cfg, transformers.DeepseekV2ForCausalLM
    raise KeyError(name)


_MODELS: dict = {}


def _model(name: str):
    if name not in _MODELS:
        cfg, cls = _config(name)
        torch.manual_seed(0)
        _MODELS[name] = cls(cfg).eval()
    return _MODELS[name]


def _new_cache(kind: str, cfg):
    return StaticCache(config=cfg, max_cache_len=32) if kind == "static" else DynamicCache(config=cfg)


@contextlib.contextmanager
def _forward_compiled(model):
    """model.forward = trident.compile(model.forward), as users write it, for the block; yields
    the compiled forward (its counters) and puts the eager forward back after."""
    eager_forward = model.forward
    model.forward = trident.compile(eager_forward)
    try:
        yield model.forward
    finally:
        model.forward = eager_forward


def _layer_tensors(cache) -> list:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("kind", ["static", "dynamic"])
@pytest.mark.parametrize("name", ["llama", "qwen3", "mistral", "deepseek_v2", "qwen3_moe", "mixtral"])
def test_a_decode_step_over_transformers_cache_runs_natively(name, kind):
    model = _model(name)
    cfg = model.config

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    mine, theirs = _new_cache(kind, cfg), _new_cache(kind, cfg)
    ids = torch.randint(1, cfg.vocab_size, (1, 5), generator=torch.Generator().manual_seed(1))
    steps = 10
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback said
        for i in range(steps):
            want, got = step(ids, theirs), fast(ids, mine)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
            ids = want[:, -1:].argmax(-1)
    # the caller's cache holds what eager's holds: written in place, or the new tensors
    for a, b in zip(_layer_tensors(mine), _layer_tensors(theirs)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    if kind == "static":  # max_cache_len, or a sliding-window layer's window
        assert mine.layers[0].keys.shape[2] == (16 if name == "mistral" else 32)
    else:
        assert mine.layers[0].keys.shape[2] == 5 + steps - 1
    c = trident.counters(fast)
    # prefill, then decode (a DynamicCache's first decode step, then its growing length symbolic; so
    # does a sliding-window StaticCache layer, which counts its length in a Python int)
    assert c["fallbacks"] == 0
    assert c["specializations"] == (2 if kind == "static" and name != "mistral" else 3), c
    assert c["hits"] == steps - c["specializations"]


def test_a_sliding_window_static_cache_decodes_past_its_window():
    """A sliding-window StaticCache layer holds its length as a tensor `cumulative_length` and an
    int `cumulative_length_int`: export's guard code confused the two paths (a SyntaxError, so every
    call ran eagerly) until _compat._install_guard_paths_fix. Past the window the layer rolls its
    keys: another branch of its update, another specialization."""
    model = _model("mistral")
    cfg = model.config

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    mine, theirs = _new_cache("static", cfg), _new_cache("static", cfg)
    ids = torch.randint(1, cfg.vocab_size, (1, 5), generator=torch.Generator().manual_seed(2))
    steps = 30  # 5 prompt tokens and 29 more: past the window of 16
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for i in range(steps):
            want, got = step(ids, theirs), fast(ids, mine)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=f"step {i}")
            ids = want[:, -1:].argmax(-1)
    for a, b in zip(_layer_tensors(mine), _layer_tensors(theirs)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0, c
    assert c["specializations"] <= 5 and c["hits"] == steps - c["specializations"], c


@pytest.mark.parametrize("impl", [None, "static"])
@pytest.mark.parametrize("name", ["llama", "qwen3_moe"])
def test_generate_runs_natively_with_the_same_tokens(name, impl):
    model = _model(name)
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    if impl:
        kw["cache_implementation"] = impl
    prompts = [torch.randint(1, 96, (1, n), generator=torch.Generator().manual_seed(n)) for n in (5, 7)]
    want = [model.generate(p, **kw) for p in prompts]
    with _forward_compiled(model) as fast:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for _ in range(2):
                for p, w in zip(prompts, want):
                    assert torch.equal(model.generate(p, **kw), w)
        c = trident.counters(fast)
    assert c["fallbacks"] == 0
    # prefill and decode; a new prompt length is a symbolic size after the first
    assert c["specializations"] <= 5, c
    assert c["hits"] >= 4 * 8 - c["specializations"] - 2


def _encoder_decoder(name: str):
    torch.manual_seed(0)
    if name == "t5":
        cfg = transformers.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        return transformers.T5ForConditionalGeneration(cfg).eval()
    cfg = transformers.BartConfig(vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, max_position_embeddings=64, forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_encoder_decoder_generate_runs_natively_with_the_same_tokens(name):
    """generate() of an encoder-decoder model passes its forward the encoder's output (a
    ModelOutput, flattened by its items) and an EncoderDecoderCache, whose is_updated dict is keyed
    by layer index and set as each layer writes its cross-attention keys (written back)."""
    model = _encoder_decoder(name)
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    ids = torch.randint(2, 96, (1, 7), generator=torch.Generator().manual_seed(7))
    want = model.generate(ids, **kw)
    with _forward_compiled(model) as fast:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for _ in range(2):
                assert torch.equal(model.generate(ids, **kw), want)
        c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0, c
    # the first step (the cross-attention cache written), then decode, its length symbolic
    assert c["specializations"] <= 3 and c["hits"] >= 2 * 8 - c["specializations"] - 1, c


def test_generate_sampling_and_a_left_padded_batch():
    model = _model("llama")
    ids = torch.randint(1, 96, (2, 6), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    ids[0, :2] = 0
    mask[0, :2] = 0
    kw = dict(max_new_tokens=8, do_sample=True, top_k=20, pad_token_id=0, attention_mask=mask)
    torch.manual_seed(5)
    want = model.generate(ids, **kw)
    with _forward_compiled(model) as fast:
        torch.manual_seed(5)
        got = model.generate(ids, **kw)
        torch.manual_seed(5)
        again = model.generate(ids, **kw)
        c = trident.counters(fast)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert c["fallbacks"] == 0 and c["hits"] > 8


def test_the_whole_model_with_its_defaults_returns_its_output_and_the_same_cache():
    model = _model("llama")
    fast = trident.compile(model)
    ids = torch.randint(1, 96, (1, 4), generator=torch.Generator().manual_seed(4))
    mine, theirs = DynamicCache(config=model.config), DynamicCache(config=model.config)
    with torch.no_grad():
        for _ in range(4):
            out, ref = fast(ids, past_key_values=mine), model(ids, past_key_values=theirs)
            assert type(out) is type(ref)
            assert out.past_key_values is mine
            torch.testing.assert_close(out.logits, ref.logits, rtol=1e-4, atol=1e-5)
            ids = ref.logits[:, -1:].argmax(-1)
    assert trident.counters(fast)["fallbacks"] == 0 and trident.counters(fast)["hits"] >= 1


def test_caches_are_never_confused():
    """Two caches alternating, a cache reused after reset(), a cache of another length or dtype:
    each call reads and writes its own cache, a new specialization where the cache differs."""
    model = _model("llama")
    cfg = model.config

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    ids = torch.randint(1, 96, (1, 3), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        pairs = [(StaticCache(config=cfg, max_cache_len=32), StaticCache(config=cfg, max_cache_len=32))
                 for _ in range(2)]
        toks = [ids, ids.flip(1)]
        for _ in range(4):
            for k, (mine, theirs) in enumerate(pairs):
                want, got = step(toks[k], theirs), fast(toks[k], mine)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
                toks[k] = want[:, -1:].argmax(-1)
        assert trident.counters(fast)["specializations"] == 2  # prefill (allocating the cache), decode
        for mine, theirs in pairs:
            mine.reset()
            theirs.reset()
        # a prefill into an allocated cache is another program; the second cache's is the same one
        torch.testing.assert_close(fast(ids, pairs[0][0]), step(ids, pairs[0][1]), rtol=1e-4, atol=1e-5)
        n = trident.counters(fast)["specializations"]
        torch.testing.assert_close(fast(ids, pairs[1][0]), step(ids, pairs[1][1]), rtol=1e-4, atol=1e-5)
        assert trident.counters(fast)["specializations"] == n == 3
        longer = (StaticCache(config=cfg, max_cache_len=40), StaticCache(config=cfg, max_cache_len=40))
        torch.testing.assert_close(fast(ids, longer[0]), step(ids, longer[1]), rtol=1e-4, atol=1e-5)
        tok = step(ids.new_tensor([[7]]), longer[1])
        torch.testing.assert_close(fast(ids.new_tensor([[7]]), longer[0]), tok, rtol=1e-4, atol=1e-5)
        assert longer[0].layers[0].keys.shape[2] == 40
        assert trident.counters(fast)["fallbacks"] == 0


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_a_bf16_decode_over_transformers_cache_is_bit_exact(kind):
    """Where transformers decides from sizes alone whether to build an attention mask (no padding
    mask given), trident's trace takes eager's decision: a prefill into a fresh StaticCache runs
    SDPA with `is_causal` over the prompt as eager does, not the explicit mask transformers builds
    when traced, so a bf16 model's logits and cache equal eager's bit for bit."""
    cfg = transformers.Qwen3Config(**{**_COMMON, "hidden_size": 64, "intermediate_size": 128}, head_dim=16)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    mine, theirs = _new_cache(kind, cfg), _new_cache(kind, cfg)
    ids = torch.randint(1, cfg.vocab_size, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for _ in range(4):
            want, got = step(ids, theirs), fast(ids, mine)
            assert torch.equal(got, want)
            ids = want[:, -1:].argmax(-1)
    for a, b in zip(_layer_tensors(mine), _layer_tensors(theirs)):
        assert torch.equal(a, b)
    assert trident.counters(fast)["fallbacks"] == 0


@pytest.mark.parametrize("impl", [None, "static"])
def test_bf16_generate_with_a_padding_mask_gives_eagers_logits_bit_for_bit(impl):
    """generate() passes an attention mask: whether transformers skips the mask then depends on the
    mask's values (all ones?) and, for a StaticCache prefill, on its offset. trident's program checks
    what eager checked and runs the specialization of the branch the data takes
    (data_values.py), so a bf16 model's logits equal eager's at every step, padded or not."""
    cfg = transformers.Qwen3Config(**{**_COMMON, "hidden_size": 64, "intermediate_size": 128}, head_dim=16)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(1, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    ids[0, :2] = 0
    mask[0, :2] = 0
    kw = dict(max_new_tokens=10, do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    if impl:
        kw["cache_implementation"] = impl
    calls = [(ids[1:], torch.ones_like(ids[1:])), (ids, mask)]
    want = [model.generate(i, attention_mask=m, **kw) for i, m in calls]
    with _forward_compiled(model) as fast:
        got = [model.generate(i, attention_mask=m, **kw) for i, m in calls]
        c = trident.counters(fast)
    for w, g in zip(want, got):
        assert torch.equal(w.sequences, g.sequences)
        assert all(torch.equal(a, b) for a, b in zip(w.logits, g.logits))
    assert c["fallbacks"] == 0 and c["hits"] >= 2 * 9 - c["specializations"]


def _generate_cache_kwargs(cache) -> dict:
    """generate()'s model kwargs holding `cache`: transformers 5.24 names it `cache`, earlier 5.x
    `past_key_values` (the GPU machine's 5.17)."""
    return {"cache": cache, "past_key_values": cache}


def test_generate_skips_transformers_own_compile_for_a_forward_trident_compiled():
    """generate() with a compileable cache wraps the model's call in torch.compile on a GPU; with a
    forward trident compiled it does not (transformers_generate.py), and other models keep it."""
    model, other = _model("llama"), transformers.LlamaForCausalLM(_model("llama").config).eval()
    config = transformers.GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0)
    config.compile_config = transformers.CompileConfig()
    config.compile_config._compile_all_devices = True  # as a CUDA model would: the CPU one qualifies too
    kwargs = _generate_cache_kwargs(StaticCache(config=model.config, max_cache_len=16))
    assert model._valid_auto_compile_criteria(kwargs, config)
    with _forward_compiled(model) as fast:
        assert not model._valid_auto_compile_criteria(kwargs, config)
        assert other._valid_auto_compile_criteria(kwargs, config)
        ids = torch.randint(1, 96, (1, 5), generator=torch.Generator().manual_seed(2))
        torch._dynamo.reset()
        out = model.generate(ids, generation_config=config, cache_implementation="static")
        c = trident.counters(fast)
    assert torch.equal(out, model.generate(ids, generation_config=config, cache_implementation="static",
                                           disable_compile=True))
    assert c["fallbacks"] == 0 and c["hits"] >= 2


def test_generate_skips_its_compile_also_for_a_forward_of_another_name(monkeypatch):
    """Liger's apply_liger_kernel_to_* replaces a model class's forward with its `lce_forward`: that
    forward, compiled by trident, also turns transformers' automatic compile off (its install is
    undone first, so this test sees trident.compile install it)."""
    from transformers.generation.utils import GenerationMixin
    current = GenerationMixin.__dict__["_valid_auto_compile_criteria"]
    if getattr(current, "_trident_skips_auto_compile", False):
        monkeypatch.setattr(GenerationMixin, "_valid_auto_compile_criteria", current.__defaults__[-1])

    def lce_forward(self, *args, **kwargs):
        return transformers.LlamaForCausalLM.forward(self, *args, **kwargs)

    cls = type("LigerLikeLlama", (transformers.LlamaForCausalLM,), {"forward": lce_forward})
    model = cls(_model("llama").config).eval()
    config = transformers.GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0)
    config.compile_config = transformers.CompileConfig()
    config.compile_config._compile_all_devices = True
    kwargs = _generate_cache_kwargs(StaticCache(config=model.config, max_cache_len=16))
    assert model._valid_auto_compile_criteria(kwargs, config)
    model.forward = trident.compile(model.forward)
    assert not model._valid_auto_compile_criteria(kwargs, config)


def test_generate_builds_its_masks_through_trident_once_the_forward_is_tridents():
    """With a compileable cache, generate() builds each step's attention mask before calling the
    model (transformers' create_masks_for_generate, eager ATen calls while the device waits): a
    model whose forward trident compiled gets that function compiled too (transformers_generate.py:
    GenerateMasks), with eager's tokens, padded or not; once the forward is eager again, so are the
    masks; another model is untouched."""
    cfg, cls = _config("llama")
    torch.manual_seed(0)
    model, other = cls(cfg).eval(), cls(cfg).eval()
    ids = torch.randint(1, 96, (2, 6), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = 0, 0
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0, cache_implementation="static")
    calls = [dict(input_ids=ids[1:]), dict(input_ids=ids, attention_mask=mask)]
    want = [model.generate(**c, **kw) for c in calls]
    with _forward_compiled(model):
        masks = model.create_masks_for_generate
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no fallback said
            for _ in range(2):
                for c, w in zip(calls, want):
                    assert torch.equal(model.generate(**c, **kw), w)
        c = trident.counters(masks.compiled)
    # each generate() makes its prefill mask and 7 decode masks; two mask decisions (padded or not)
    assert c["fallbacks"] == 0 and c["misses"] + c["hits"] == 4 * 8, c
    assert c["hits"] >= 4 * 8 - 2 * c["specializations"], c
    assert torch.equal(model.generate(**calls[1], **kw), want[1])
    assert trident.counters(masks.compiled)["hits"] == c["hits"]  # the eager forward's masks are eager's
    assert "create_masks_for_generate" not in other.__dict__
    # a copy gets transformers' own mask function (its forward is not the compiled one), and runs
    import copy
    from transformers import masking_utils
    twin = copy.deepcopy(model)
    assert twin.__dict__["create_masks_for_generate"] is masking_utils.create_masks_for_generate
    assert torch.equal(twin.generate(**calls[1], **kw), want[1])
