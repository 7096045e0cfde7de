"""Liger-Kernel 0.8's fused MoE in Hugging Face's DeepSeek-V2 and Qwen3-MoE, as
`apply_liger_kernel_to_deepseek_v2()` and `apply_liger_kernel_to_qwen3_moe()` put it there (`LigerExperts` over `LigerFusedMoEFunction`): its tile count is an `.item()`, and its
two GEMM launches stand under `if num_m_tiles > 0:`, after the layer's cache write. Each model's decode step
over a StaticCache is one program: the two launches in a launch region (python/trident/_compat.py:
WHEN_MARK), their grids the tile count times the condition. Compiled for sm_90 on a CPU (no kernel
runs here; autotuning pinned to one config by Liger's own switch). Liger 0.8.5 lives beside CI's
pinned 0.7.0 (scripts/test.sh installs it into its own folder, TRIDENT_TEST_LIGER_08), in a process
of its own: Liger's patches replace transformers' classes."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers")
LIGER_08 = os.environ.get("TRIDENT_TEST_LIGER_08")

_CHILD = textwrap.dedent("""
    import json, sys, warnings
    import pytest, torch, transformers, trident
    from transformers import StaticCache
    sys.path.insert(0, sys.argv[1])
    from fake_cuda import capture_as_sm90
    from liger_kernel.transformers import monkey_patch
    warnings.filterwarnings("ignore")
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=64, pad_token_id=0)
    if sys.argv[2] == "deepseek_v2":  # its first layer dense: one MoE layer
        monkey_patch.apply_liger_kernel_to_deepseek_v2(fused_linear_cross_entropy=False)
        cfg = transformers.DeepseekV2Config(
            **common, num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1,
            num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None,
            qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1)
        cls = transformers.DeepseekV2ForCausalLM
    else:  # qwen3_moe: both layers MoE
        monkey_patch.apply_liger_kernel_to_qwen3_moe(fused_linear_cross_entropy=False)
        cfg = transformers.Qwen3MoeConfig(**common, num_key_value_heads=2, head_dim=16, num_experts=4,
                                          num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)
        cls = transformers.Qwen3MoeForCausalLM
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = cls(cfg).to(torch.bfloat16).eval()

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    from trident.lowering import lower as lower_mod
    with pytest.MonkeyPatch.context() as mp, capture_as_sm90(mp), torch.no_grad():
        # as if every tensor were a CUDA one, as on the GPU: the program's graph line is its reads'
        mp.setattr(lower_mod, "_host_tensor", lambda ep, env: "")
        text = trident.controller(trident.compile(step)).lower_call(
            torch.tensor([[5]]), StaticCache(config=cfg, max_cache_len=16)).text
    print("RESULT " + json.dumps({"liger": sorted({type(m).__name__ for m in model.modules() if "Liger" in type(m).__name__}),
                                  "text": text}))
""")


@pytest.mark.skipif(not LIGER_08, reason="scripts/test.sh installs Liger-Kernel 0.8.5 for this test (TRIDENT_TEST_LIGER_08)")
@pytest.mark.parametrize("name,moe_layers", [("deepseek_v2", 1), ("qwen3_moe", 2)])
def test_liger_fused_moe_is_one_program_with_its_gemms_under_each_layers_tile_condition(name, moe_layers, tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRIDENT_CACHE_DIR": str(tmp_path / "cache"),
           "LIGER_FUSED_MOE_AUTOTUNE": "0", "PYTHONPATH": os.pathsep.join([LIGER_08, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", _CHILD, here, name], env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[7:])
    assert "LigerExperts" in result["liger"] and "LigerRMSNorm" in result["liger"], result["liger"]
    text = result["text"]
    items = re.findall(r"(\$\d+) = item %\d+", text)  # each MoE layer's tile count
    assert len(items) == moe_layers, text
    for item in items:
        (cond,) = re.findall(rf"(\$\d+) = gt {re.escape(item)}, 0", text)
        grids = re.findall(rf"(\$\d+) = mul {re.escape(item)}, {re.escape(cond)}", text)
        under = [ln for ln in text.splitlines() if re.match(r"\s*launch \d+ grid\((\$\d+),", ln)
                 and re.match(r"\s*launch \d+ grid\((\$\d+),", ln).group(1) in grids]
        assert len(under) == 2, text  # the up-projection with SwiGLU and the down-projection
    assert "expect" not in text  # one program for both ways, not a branch per specialization
    # graph mode splits its graphs at the first tile count's read (graphs in segments), Liger's line
    assert re.search(r'graph reads "it reads a device value on the host at \S*fused_moe\S*\.py:\d+', text), text
    assert "graph off" not in text
