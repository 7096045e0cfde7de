"""Graphs in segments on the GPU (csrc/runtime/graphs/spec_graphs.h, Segments; on unless
TRIDENT_GRAPH_SEGMENTS=0, read as each specialization loads): a program that reads a device value on the host replays as a
graph per stretch between its reads, with eager's results bit for bit; a value other than the one its
graph was captured with goes on as a plain run from that read (nothing before it runs twice: an
in-place write before the read lands once), and after SpecGraphs::kReadMisses such calls graphs stop
with the read's line in explain. Liger-Kernel 0.8.5's fused MoE (an `.item()` per MoE layer) in a
DeepSeek-V2 decode replays in segments with eager's tokens."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


@pytest.fixture(autouse=True)
def segments_by_default(monkeypatch):
    monkeypatch.delenv("TRIDENT_GRAPH_SEGMENTS", raising=False)  # on unless "0"


def rows_above(x, limit):
    n = int((x > limit).sum().item())  # a size read on the host
    return x.new_zeros(n) + x.sum(), x * 2


def test_a_program_reading_a_size_replays_in_segments_with_eagers_results():
    fast = trident.compile(rows_above, graphs=True)
    x, limit = torch.randn(4096, device="cuda"), torch.tensor(0.5, device="cuda")
    for _ in range(20):
        got, want = fast(x, limit), rows_above(x, limit)
        for g, w in zip(got, want):
            assert torch.equal(g, w)
    c = trident.counters(fast)
    assert c["graphs"] == 1 and c["graph_segments"] == 1, c
    assert c["graph_replays"] >= 17 and c["graph_read_misses"] == 0 and c["fallbacks"] == 0, c
    assert "split into segments at each host read" in trident.explain(fast)


def accumulate_then_count(x, acc):
    acc.add_(x)  # written before the read: must land once per call whatever the read gives
    n = int((acc > 0).sum().item())
    return acc.new_ones(n).cumsum(0) + acc.sum()


def test_another_value_goes_on_live_from_the_read_and_nothing_runs_twice():
    fast = trident.compile(accumulate_then_count, graphs=True)
    mine = torch.zeros(1024, device="cuda")
    theirs = mine.clone()
    g = torch.Generator(device="cuda").manual_seed(0)
    for i in range(40):
        # the same count for a while (graphs replay), then a new one every few calls (misses)
        x = torch.randn(1024, device="cuda", generator=g) * (0.0 if i % 9 else 1.0)
        got, want = fast(x, mine), accumulate_then_count(x, theirs)
        assert torch.equal(got, want), i
        assert torch.equal(mine, theirs), i
    c = trident.counters(fast)
    assert c["graph_replays"] > 0 and c["graph_read_misses"] >= 1, c
    assert c["fallbacks"] == 0, c


def test_values_that_keep_changing_stop_graphs_with_the_reads_line():
    fast = trident.compile(rows_above, graphs=True)
    x = torch.randn(4096, device="cuda")
    for i in range(60):
        limit = torch.tensor(-1.0 + 0.5 * (i % 5), device="cuda")  # five counts in turn
        got, want = fast(x, limit), rows_above(x, limit)
        for a, b in zip(got, want):
            assert torch.equal(a, b), i
    c = trident.counters(fast)
    assert c["graph_read_misses"] == 4 and c["graphs"] == 0, c
    line = rows_above.__code__.co_firstlineno + 1
    text = trident.explain(fast)
    assert f"test_graph_segments_gpu.py:{line}" in text and "differed from the one its graph was captured with" in text


_DEEPSEEK = textwrap.dedent("""
    import json, warnings
    import torch, transformers, trident
    from transformers import StaticCache
    from liger_kernel.transformers import monkey_patch
    warnings.filterwarnings("ignore")
    monkey_patch.apply_liger_kernel_to_deepseek_v2()
    cfg = transformers.DeepseekV2Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0, moe_intermediate_size=32,
        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=16,
        q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.DeepseekV2ForCausalLM(cfg).to(torch.bfloat16).eval().requires_grad_(False)

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step, graphs=True)
    ids = torch.randint(1, 128, (1, 8), generator=torch.Generator().manual_seed(1)).cuda()
    mine, ref = StaticCache(config=cfg, max_cache_len=48), StaticCache(config=cfg, max_cache_len=48)
    worst, same = 0.0, 0
    with torch.no_grad():
        for _ in range(24):  # the prefill, then decode steps fed eager's tokens
            got, want = fast(ids, mine), step(ids, ref)
            worst = max(worst, float((got.float() - want.float()).abs().max()))
            ids = want[:, -1:].argmax(-1)
            same += int(torch.equal(got[:, -1:].argmax(-1), ids))
    c = trident.counters(fast)
    print("ROW " + json.dumps(dict(worst=worst, same=same, explain=trident.explain(fast),
                                   **{k: c[k] for k in ("graphs", "graph_segments", "graph_replays",
                                                        "graph_read_misses", "fallbacks", "split_calls")})))
""")


@pytest.mark.skipif(not os.environ.get("TRIDENT_TEST_LIGER_08"), reason="Liger-Kernel 0.8.5 not on this machine "
                    "(TRIDENT_TEST_LIGER_08: scripts/device_wheels.sh)")
def test_liger_fused_moe_decode_replays_in_segments_with_eagers_tokens(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRIDENT_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([os.environ["TRIDENT_TEST_LIGER_08"], os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", _DEEPSEEK], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("ROW ")]
    r = json.loads(line[4:])
    assert r["same"] == 24 and r["worst"] <= 2e-2, r
    assert r["fallbacks"] == 0 and r["split_calls"] == 0, r
    # two MoE layers: two reads per decode step; the decode graph replays every step after its capture
    assert r["graph_segments"] >= 2 and r["graph_replays"] >= 15 and r["graph_read_misses"] == 0, r
