"""graphs=True on CUDA (csrc/runtime/graphs/spec_graphs.h): a specialization called three times with one key is
captured as a CUDA graph and replayed; results equal eager's bit for bit, in-place writes land in the
caller's tensors, a changed address is never replayed, and memory stays flat over many replays."""
import pytest
import torch
import triton

import trident
from tiny_models import tiny_cuda_llama
from tutorial_kernels import add_kernel, scaled_copy_kernel

pytestmark = pytest.mark.gpu


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out


def three_kernels(x, y):
    return add(add(add(x, y), y), x)


def test_three_chained_kernels_replay_as_one_graph_with_eager_results():
    require_cuda()
    fast = trident.compile(three_kernels, graphs=True)
    y = torch.randn(1000, device="cuda")
    for k in range(10):
        x = torch.randn(1000, device="cuda")  # a new small tensor each call: copied into the graph
        torch.testing.assert_close(fast(x, y), three_kernels(x, y), rtol=0, atol=0)
    c = trident.counters(fast)
    assert c["graph_captures"] == 1 and c["graphs"] == 1
    assert c["graph_replays"] == 10 - 2, c  # calls 1-2 run, call 3 captures and replays, 4-10 replay


def five_reads_of_y(x, y):
    out = add(x, y)
    for _ in range(4):
        out = add(out, y)
    return out


def test_a_small_argument_is_read_where_the_caller_has_it_and_each_result_is_its_own():
    """New small read-only tensors per call: x, read by one node, is read where the caller has it
    (the node is patched, nothing copied); y, read by five (more than SpecGraphs::kPatchNodes), is
    copied into the graph's buffer. Every replay's result is a fresh tensor that later replays leave
    alone (the graph's own copy node writes it)."""
    require_cuda()
    fast = trident.compile(five_reads_of_y, graphs=True)
    kept = []
    for k in range(10):
        x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
        kept.append((x, y, fast(x, y)))
    for x, y, got in kept:
        torch.testing.assert_close(got, five_reads_of_y(x, y), rtol=0, atol=0)
    assert len({got.data_ptr() for _, _, got in kept}) == len(kept)
    c = trident.counters(fast)
    assert c["graph_captures"] == 1 and c["graph_replays"] == 10 - 2, c
    assert c["graph_patches"] == 10 - 2, c  # x at a new address at every replay; y never patched


def decode_step(x, cache, pos_t, w):
    """An in-place KV-cache write at a tensor position, then attention-like reads of the cache."""
    cache.index_copy_(0, pos_t, x @ w)
    return torch.softmax(cache @ x.t(), dim=0).t() @ cache


def decode_both(fast, x, mine, theirs, w, steps):
    """`steps` decode steps of eager over `theirs` and `fast` over `mine` from position 0, results
    equal bit for bit at every step; returns the last step's input for the next."""
    for step in range(steps):
        pos = torch.tensor([step], device="cuda")
        want, got = decode_step(x, theirs, pos, w), fast(x, mine, pos, w)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        x = want.tanh()
    return x


def test_an_in_place_cache_decode_over_200_steps_matches_eager_and_writes_the_callers_cache():
    require_cuda()
    torch.manual_seed(0)
    w = torch.randn(64, 64, device="cuda") / 8
    mine, theirs = torch.zeros(256, 64, device="cuda"), torch.zeros(256, 64, device="cuda")
    fast = trident.compile(decode_step, graphs=True)
    decode_both(fast, torch.randn(1, 64, device="cuda"), mine, theirs, w, 200)
    assert torch.equal(mine, theirs)
    c = trident.counters(fast)
    assert c["graph_replays"] >= 195, c


def test_two_functions_sharing_a_cache_both_replay_and_see_each_others_writes():
    require_cuda()

    def write(cache, x):
        cache.mul_(0.5).add_(x)
        return cache.sum()

    def read(cache, y):
        return (cache * y).sum(0)

    fw, fr = trident.compile(write, graphs=True), trident.compile(read, graphs=True)
    mine, theirs = torch.zeros(32, 16, device="cuda"), torch.zeros(32, 16, device="cuda")
    y = torch.randn(32, 16, device="cuda")
    for _ in range(12):
        x = torch.randn(32, 16, device="cuda")
        torch.testing.assert_close(fw(mine, x), write(theirs, x), rtol=0, atol=0)
        torch.testing.assert_close(fr(mine, y), read(theirs, y), rtol=0, atol=0)
    assert torch.equal(mine, theirs)
    assert trident.counters(fw)["graph_replays"] > 0 and trident.counters(fr)["graph_replays"] > 0


def test_an_argument_freed_and_reallocated_elsewhere_is_rebound_never_replayed_stale():
    require_cuda()

    def scale_into(src, dst):
        scaled_copy_kernel[(triton.cdiv(src.numel(), 128),)](src, dst, src.numel(), 2.0, BLOCK=128)
        return dst.sum()

    fast = trident.compile(scale_into, graphs=True)
    src = torch.randn(4096 * 8, device="cuda")  # above the copied-argument size: its address is in the graph
    dst = torch.zeros_like(src)
    for _ in range(5):
        fast(src, dst)
    assert trident.counters(fast)["graph_captures"] == 1
    dst2 = torch.full((4096 * 8,), 7.0, device="cuda")  # made while dst lives: another address
    del dst
    dst2_ptr = dst2.data_ptr()
    for _ in range(5):
        out = fast(src, dst2)
    assert dst2.data_ptr() == dst2_ptr
    torch.testing.assert_close(dst2, src * 2.0, rtol=0, atol=0)
    torch.testing.assert_close(out, (src * 2.0).sum(), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["graph_captures"], c["graph_rebinds"], c["graph_replays"]) == (1, 1, 3 + 5), c
    assert "keyed by their arguments' addresses" not in trident.explain(fast)


def test_a_new_cache_per_generation_rebinds_one_graph_and_writes_each_new_cache():
    """generate() makes a new KV cache per call: the decode graph is rewritten for its address (no
    new capture), the writes land in the new cache, and the old cache is never touched again."""
    require_cuda()
    torch.manual_seed(0)
    w = torch.randn(64, 64, device="cuda") / 8
    fast = trident.compile(decode_step, graphs=True)
    kept = []
    for generation in range(4):
        mine, theirs = torch.zeros(256, 64, device="cuda"), torch.zeros(256, 64, device="cuda")
        decode_both(fast, torch.randn(1, 64, device="cuda"), mine, theirs, w, 8)
        assert torch.equal(mine, theirs)
        kept.append((mine.clone(), mine))
    for snapshot, cache in kept:  # a later generation never wrote an earlier cache
        assert torch.equal(snapshot, cache)
    c = trident.counters(fast)
    assert (c["graph_captures"], c["graph_rebinds"]) == (1, 3), c
    assert c["graph_replays"] == 4 * 8 - 2, c


def test_two_caches_used_in_turn_rebind_at_each_switch_with_eager_results():
    require_cuda()
    torch.manual_seed(0)
    w = torch.randn(64, 64, device="cuda") / 8
    fast = trident.compile(decode_step, graphs=True)
    mine = [torch.zeros(128, 64, device="cuda") for _ in range(2)]
    theirs = [torch.zeros(128, 64, device="cuda") for _ in range(2)]
    x = torch.randn(1, 64, device="cuda")
    for step in range(20):
        k, pos = step % 2, torch.tensor([step // 2], device="cuda")
        want, got = decode_step(x, theirs[k], pos, w), fast(x, mine[k], pos, w)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs))
    c = trident.counters(fast)
    assert c["graph_captures"] == 1 and c["graph_rebinds"] >= 15, c


def test_interleaved_batch_sizes_each_get_a_graph():
    require_cuda()

    def mlp(x, w1, w2):
        return torch.relu(x @ w1) @ w2

    w1, w2 = torch.randn(64, 128, device="cuda"), torch.randn(128, 64, device="cuda")
    fast = trident.compile(mlp, graphs=True, dynamic=False)
    for _ in range(6):
        for b in (1, 8):
            x = torch.randn(b, 64, device="cuda")
            torch.testing.assert_close(fast(x, w1, w2), mlp(x, w1, w2), rtol=0, atol=0)
    c = trident.counters(fast)
    # Each size is its own specialization (adding the second keeps the first one's loaded object and
    # its count): each is captured at its third call (round 2) and replayed from then on.
    assert c["graph_captures"] == 2 and c["graph_replays"] == 2 * 4, c


def test_memory_is_flat_over_10000_replays():
    require_cuda()
    fast = trident.compile(three_kernels, graphs=True)
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    for _ in range(10):
        fast(x, y)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(10000):
        out = fast(x, y)
    torch.cuda.synchronize()
    del out
    assert torch.cuda.memory_allocated() <= before + 4096
    assert trident.counters(fast)["graph_replays"] >= 10000


def test_a_program_that_synchronizes_runs_as_without_graphs_and_says_why():
    require_cuda()

    def nonzero_rows(x):
        return x[x.sum(1) > 0] * 2

    fast = trident.compile(nonzero_rows, graphs=True)
    for _ in range(5):
        x = torch.randn(16, 4, device="cuda")
        torch.testing.assert_close(fast(x), nonzero_rows(x), rtol=0, atol=0)
    assert trident.counters(fast)["graph_replays"] == trident.counters(fast)["graph_captures"] == 0
    # known from the lowering (the boolean index sizes its result on the host): no capture tried
    assert "does not replay as a CUDA graph: aten::index.Tensor computes its result's size on the host" \
        in trident.explain(fast), trident.explain(fast)


def test_a_transformers_static_cache_decode_replays_with_eager_tokens():
    require_cuda()
    transformers = pytest.importorskip("transformers")
    cfg, model = tiny_cuda_llama()

    def step(ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step, graphs=True)
    mine = transformers.StaticCache(config=cfg, max_cache_len=48)
    theirs = transformers.StaticCache(config=cfg, max_cache_len=48)
    ids = torch.randint(1, 128, (1, 6), device="cuda")
    with torch.no_grad():
        for _ in range(20):
            want, got = step(ids, theirs), fast(ids, mine)
            assert torch.equal(got, want)
            ids = want[:, -1:].argmax(-1)
    for a, b in zip(mine.layers, theirs.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["graph_replays"] >= 15, c


def test_generate_with_a_new_static_cache_per_call_rebinds_the_decode_graph_with_eager_tokens():
    """model.forward compiled with graphs=True, then generate() as users call it: each call makes a
    new StaticCache; after the first call the decode graph is rebound, never captured again."""
    require_cuda()
    transformers = pytest.importorskip("transformers")
    cfg, model = tiny_cuda_llama()
    ids = torch.randint(1, 128, (1, 6), device="cuda")
    kw = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, cache_implementation="static", pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, disable_compile=True, **kw)
        model.forward = trident.compile(model.forward, graphs=True)
        got = [model.generate(ids, **kw) for _ in range(3)]
    for g in got:
        assert torch.equal(g, want)
    c = trident.counters(model.forward)
    assert c["fallbacks"] == 0 and c["graph_captures"] == 1 and c["graph_rebinds"] == 2, c
    assert c["graph_replays"] >= 3 * 11 - 2 - 2, c  # every decode step but the first call's first two


GRAPH_BYTES_CHECK = """
import torch, triton, trident
from test_graphs_gpu import three_kernels
fast = trident.compile(three_kernels)  # graph mode: the default
x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
for _ in range(5):
    assert torch.equal(fast(x, y), three_kernels(x, y))
c = trident.counters(fast)
print(c["graphs"], c["graph_replays"])
print(trident.explain(fast))
"""


@pytest.mark.parametrize("limit, held", [("1048576", False), ("", True)])
def test_a_graph_over_the_byte_limit_is_not_kept_and_explain_says_why(limit, held):
    """TRIDENT_GRAPH_BYTES (read once, by the native runtime): a capture whose private pool holds more
    (here 4 MiB of intermediates against 1 MiB) is dropped and the spec runs without graphs, with
    eager's results and the reason in explain; under the default limit the same program replays."""
    require_cuda()
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("TRIDENT_GRAPH_BYTES", "TRIDENT_GRAPHS")}
    if limit:
        env["TRIDENT_GRAPH_BYTES"] = limit
    env["PYTHONPATH"] = os.path.dirname(__file__) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", GRAPH_BYTES_CHECK], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    graphs, replays = map(int, r.stdout.splitlines()[0].split())
    if held:
        assert (graphs, replays) == (1, 3), r.stdout
    else:
        assert (graphs, replays) == (0, 0), r.stdout
        assert "does not replay as a CUDA graph: a graph of it would hold" in r.stdout
        assert "over TRIDENT_GRAPH_BYTES (1 MiB)" in r.stdout
