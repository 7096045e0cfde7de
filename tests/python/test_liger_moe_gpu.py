"""Liger-Kernel (pinned 0.7.0, installed from its wheel) applied to Hugging Face's MoE models as its
users apply it, `apply_liger_kernel_to_qwen3_moe()` / `apply_liger_kernel_to_mixtral()` before the
model is built: RMSNorm, rotary and the experts' SwiGLU run as Liger's Triton kernels, the experts
as Liger's `LigerExperts`, a loop over the experts the routing hit (`nonzero`, then `torch.where`
per expert: data-dependent sizes and trip counts). A decode step over a StaticCache and over a
DynamicCache, compiled with trident.compile, must run without a fallback with eager's logits and
tokens, and as one native program (no split into pieces: during capture the experts' loop runs over
every expert, library_traces.py). (Liger 0.7.0 has no DeepSeek-V2 entry point; 0.8.5, where the
machine has it, runs too: below.)

Each model runs in a process of its own: Liger's patches replace transformers' classes for the rest
of the process."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("liger_kernel")
pytest.importorskip("transformers")

_CHILD = textwrap.dedent("""
    import json, sys, warnings
    import torch, transformers, trident
    from transformers import DynamicCache, StaticCache
    from liger_kernel.transformers import monkey_patch
    warnings.filterwarnings("ignore")
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)
    model_name = sys.argv[1].split("@")[0]
    if model_name == "qwen3_moe":
        monkey_patch.apply_liger_kernel_to_qwen3_moe()
        cfg = transformers.Qwen3MoeConfig(**common, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                          moe_intermediate_size=32, decoder_sparse_step=1)
        cls = transformers.Qwen3MoeForCausalLM
    elif model_name == "deepseek_v2":  # Liger 0.8.5 only; its first layer dense
        monkey_patch.apply_liger_kernel_to_deepseek_v2()
        cfg = transformers.DeepseekV2Config(
            **{**common, "num_key_value_heads": 4}, moe_intermediate_size=32, n_routed_experts=4,
            n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=16,
            q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1)
        cls = transformers.DeepseekV2ForCausalLM
    else:
        monkey_patch.apply_liger_kernel_to_mixtral()
        cfg = transformers.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2)
        cls = transformers.MixtralForCausalLM
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = cls(cfg).to(torch.bfloat16).eval().requires_grad_(False)
    liger = sorted({type(m).__name__ for m in model.modules() if "Liger" in type(m).__name__})

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    prompt = torch.randint(1, 128, (1, 8), generator=torch.Generator().manual_seed(1)).cuda()
    rows = {"liger": liger}
    with torch.no_grad():
        for kind in ("static", "dynamic"):
            def new():
                return StaticCache(config=cfg, max_cache_len=32) if kind == "static" else DynamicCache(config=cfg)
            mine, ref, ids = new(), new(), prompt
            before = trident.counters(fast)
            worst, same = 0.0, 0
            for _ in range(10):  # the prefill, then 9 decode steps fed eager's tokens
                got, want = fast(ids, mine), step(ids, ref)
                worst = max(worst, float((got.float() - want.float()).abs().max()))
                ids = want[:, -1:].argmax(-1)
                same += int(torch.equal(got[:, -1:].argmax(-1), ids))
            after = trident.counters(fast)
            rows[kind] = dict({k: after[k] - before[k] for k in
                               ("hits", "misses", "captures", "fallbacks", "split_calls")},
                              worst=worst, same=same)
    print("ROWS " + json.dumps(rows))
""")


# Liger 0.8.5 (where the GPU machine has it: scripts/device_wheels.sh) replaces the experts' loop by
# its fused MoE (an `.item()` per layer for the tile count) and dispatches rotary through its
# torch.compiler.disable'd dispatcher (library_traces.py): Qwen3-MoE and DeepSeek-V2 as well.
LIGER_08 = os.environ.get("TRIDENT_TEST_LIGER_08")
_MODELS = ["qwen3_moe", "mixtral"] + (["qwen3_moe@0.8.5", "deepseek_v2@0.8.5"] if LIGER_08 else [])
_RUNS: dict = {}


def _rows(name, tmp_path_factory):
    """The child's per-cache-kind counters and agreement with eager, one process per model; the
    models' processes run at once (each spends most of its time capturing on the host)."""
    if name not in _RUNS:
        cache = tmp_path_factory.mktemp("cache")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRIDENT_CACHE_DIR": str(cache)}
        env_08 = {**env, "PYTHONPATH": os.pathsep.join([LIGER_08 or "", os.environ.get("PYTHONPATH", "")])}
        runs = {m: subprocess.Popen([sys.executable, "-c", _CHILD, m], env=env_08 if "@0.8.5" in m else env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for m in _MODELS if m not in _RUNS}
        for m, run in runs.items():
            out, err = run.communicate(timeout=600)
            assert run.returncode == 0, (m, err[-4000:])
            (line,) = [x for x in out.splitlines() if x.startswith("ROWS ")]
            _RUNS[m] = (json.loads(line[5:]), err[-3000:])
    return _RUNS[name]


@pytest.mark.parametrize("name", _MODELS)
def test_liger_moe_decode_compiles_without_fallback_and_gives_eagers_logits(name, tmp_path_factory):
    rows, log = _rows(name, tmp_path_factory)
    assert {"LigerExperts", "LigerRMSNorm"} <= set(rows["liger"]), rows["liger"]
    for kind in ("static", "dynamic"):
        r = rows[kind]
        assert r["fallbacks"] == 0 and r["hits"] + r["misses"] + r["split_calls"] >= 10, (kind, r, log)
        assert r["same"] == 10 and r["worst"] <= 2e-2, (kind, r)


@pytest.mark.parametrize("name", _MODELS)
def test_liger_moe_decode_is_one_native_program(name, tmp_path_factory):
    rows, log = _rows(name, tmp_path_factory)
    for kind in ("static", "dynamic"):
        r = rows[kind]
        # the prefill and the first decode step capture (a DynamicCache's second step too, its
        # length then symbolic); every later step is a hit
        assert r["split_calls"] == 0 and r["hits"] + r["misses"] == 10 and r["hits"] >= 5, (kind, r, log)
