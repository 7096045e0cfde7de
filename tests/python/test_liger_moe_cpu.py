"""Liger-Kernel's MoE experts (`LigerExperts`, 0.7.0) in Hugging Face's Qwen3-MoE and Mixtral, as
`apply_liger_kernel_to_qwen3_moe()` / `apply_liger_kernel_to_mixtral()` put them there: a loop over
the experts the routing hit (`for expert_idx in expert_hit`, the rows of a `nonzero`), whose trip
count is data. Strict export stops at such a loop; during trident's capture the loop runs over every
expert (library_traces.py), so a decode step over a StaticCache or a DynamicCache is one native
program with eager's logits bit for bit.

On a CPU Liger's Triton kernels cannot run: the experts' SwiGLU kernel (inside Liger's own
autograd Function) is computed by torch here, and Liger's RMSNorm and rotary are not applied; the
GPU test (test_liger_moe_gpu.py) runs them all. Each model runs in a process of its own: Liger's
patches replace transformers' classes for the rest of the process."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("liger_kernel")
pytest.importorskip("transformers")

_CHILD = textwrap.dedent("""
    import json, sys, warnings
    import torch, transformers, trident
    from transformers import DynamicCache, StaticCache
    import liger_kernel.ops.swiglu as liger_swiglu
    from liger_kernel.transformers import monkey_patch
    warnings.filterwarnings("ignore")
    liger_swiglu.swiglu_forward = lambda a, b: (a, b, torch.nn.functional.silu(a) * b)  # no Triton on a CPU
    only_experts = dict(rope=False, rms_norm=False, fused_linear_cross_entropy=False, swiglu=True)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)
    if sys.argv[1] == "qwen3_moe":
        monkey_patch.apply_liger_kernel_to_qwen3_moe(**only_experts)
        cfg = transformers.Qwen3MoeConfig(**common, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                          moe_intermediate_size=32, decoder_sparse_step=1)
        cls = transformers.Qwen3MoeForCausalLM
    else:
        monkey_patch.apply_liger_kernel_to_mixtral(**only_experts)
        cfg = transformers.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2)
        cls = transformers.MixtralForCausalLM
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = cls(cfg).to(torch.bfloat16).eval().requires_grad_(False)
    liger = sorted({type(m).__name__ for m in model.modules() if "Liger" in type(m).__name__})

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    prompt = torch.randint(1, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    rows = {"liger": liger}
    with torch.no_grad():
        for kind in ("static", "dynamic"):
            def new():
                return StaticCache(config=cfg, max_cache_len=32) if kind == "static" else DynamicCache(config=cfg)
            mine, ref, ids = new(), new(), prompt
            before = trident.counters(fast)
            exact = 0
            for _ in range(8):  # the prefill, then 7 decode steps fed eager's tokens
                got, want = fast(ids, mine), step(ids, ref)
                exact += int(torch.equal(got, want))
                ids = want[:, -1:].argmax(-1)
            after = trident.counters(fast)
            rows[kind] = dict({k: after[k] - before[k] for k in
                               ("hits", "misses", "captures", "fallbacks", "split_calls")}, exact=exact)
    print("ROWS " + json.dumps(rows))
""")


@pytest.mark.parametrize("name", ["qwen3_moe", "mixtral"])
def test_liger_experts_decode_is_one_native_program_with_eagers_logits(name, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRIDENT_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", _CHILD, name], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("ROWS ")]
    rows = json.loads(line[5:])
    assert rows["liger"] == ["LigerExperts"], rows["liger"]
    for kind in ("static", "dynamic"):
        r = rows[kind]
        assert r["exact"] == 8, (kind, r)
        assert (r["fallbacks"], r["split_calls"]) == (0, 0), (kind, r, run.stderr[-3000:])
        # the prefill and the first decode step are captured, and for a DynamicCache the second step
        # with the cache's length symbolic; every later step is a hit
        assert r["captures"] <= 3 and r["hits"] >= 5 and r["hits"] + r["misses"] == 8, (kind, r)


def test_only_the_forward_the_stand_in_restates_is_replaced(monkeypatch):
    from liger_kernel.transformers.swiglu import LigerExperts

    from trident import library_traces
    assert any(scope is LigerExperts and name == "forward" for scope, name, _ in library_traces._swaps())

    def forward(self, hidden_states, top_k_index, top_k_weights):  # another version's experts
        return hidden_states

    monkeypatch.setattr(LigerExperts, "forward", forward)
    assert not any(scope is LigerExperts for scope, _, _ in library_traces._swaps())
