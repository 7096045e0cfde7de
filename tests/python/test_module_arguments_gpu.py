"""Module, str and dtype arguments on CUDA in graph mode (the default): the flattener's identity and
value guards sit in front of the same graph replays as any other argument, so each module and each
value gets its own specialization and graph, a replay never serves another module's weights, and a
decode step that takes the model as an argument replays over transformers' StaticCache with eager's
logits bit for bit (the CPU file, test_module_arguments.py, checks the selection itself)."""
import subprocess
import sys
import warnings

import pytest
import torch

import trident
from tiny_models import tiny_cuda_llama

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::FutureWarning")]


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def twice(x, lin):
    return lin(x) * 2


def test_two_module_arguments_replay_their_own_graphs_and_follow_their_weights():
    require_cuda()
    torch.manual_seed(0)
    a, b = torch.nn.Linear(64, 32).cuda(), torch.nn.Linear(64, 32).cuda()
    fast = trident.compile(twice)
    x = torch.randn(4, 64, device="cuda")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, nothing said
        for k in range(12):
            m = (a, b)[k % 2]
            assert torch.equal(fast(x, m), twice(x, m)), k
            if k == 7:
                a.weight.mul_(0.5)  # in place: the replay reads the parameter where it lives
    c = trident.counters(fast)
    assert (c["specializations"], c["fallbacks"], c["split_calls"]) == (2, 0, 0), c
    assert c["graph_captures"] == 2 and c["graph_replays"] >= 12 - 2 * 3, c


def scaled(x, mode: str, dtype=torch.float32):
    y = x.to(dtype)
    return y * 2 if mode == "double" else y + 1


def test_str_and_dtype_arguments_replay_one_graph_per_value():
    require_cuda()
    fast = trident.compile(scaled)
    x = torch.randn(256, device="cuda")
    calls = [("double", torch.float32), ("plus", torch.float32), ("double", torch.bfloat16)] * 4
    for mode, dtype in calls:
        assert torch.equal(fast(x, mode, dtype), scaled(x, mode, dtype)), (mode, dtype)
    c = trident.counters(fast)
    assert (c["specializations"], c["fallbacks"]) == (3, 0), c
    assert c["graph_replays"] >= 3, c


def test_train_mode_of_a_module_argument_drops_its_graph_and_dropout_runs():
    require_cuda()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)).cuda().eval()
    fast = trident.compile(twice)
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        for _ in range(4):
            assert torch.equal(fast(x, model), twice(x, model))
        model.train()
        got = fast(x, model)
    assert (got == 0).float().mean() > 0.3, "dropout did not run after model.train()"


def test_a_decode_step_taking_the_model_as_an_argument_replays_with_eager_logits():
    """`step(model, ids, cache)` over transformers' StaticCache, bf16, graph mode: eager's logits and
    cache bit for bit over 20 steps, the decode replayed as one graph patched for each position."""
    require_cuda()
    transformers = pytest.importorskip("transformers")
    cfg, model = tiny_cuda_llama()

    def step(model, ids, cache):
        return model(input_ids=ids, past_key_values=cache, use_cache=True).logits

    fast = trident.compile(step)
    mine = transformers.StaticCache(config=cfg, max_cache_len=48)
    theirs = transformers.StaticCache(config=cfg, max_cache_len=48)
    ids = torch.randint(1, 128, (1, 6), device="cuda")
    with torch.no_grad():
        for k in range(20):
            want, got = step(model, ids, theirs), fast(model, ids, mine)
            assert torch.equal(got, want), k
            ids = want[:, -1:].argmax(-1)
    for a, b in zip(mine.layers, theirs.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0 and c["graph_replays"] >= 15, c


_FIRST_CAPTURE_UNDER_ERRORS = """
import warnings, torch, trident
warnings.simplefilter("error")  # as `pytest -W error` runs a user's tests
lin = torch.nn.Linear(64, 32).cuda()
fast = trident.compile(lambda x, m: m(x) * 2)
x = torch.randn(4, 64, device="cuda")
with torch.no_grad():
    for _ in range(3):
        assert torch.equal(fast(x, lin), lin(x) * 2)
c = trident.counters(fast)
assert c["fallbacks"] == 0 and c["hits"] == 2, c
"""


def test_the_first_capture_of_a_process_under_warnings_as_errors_compiles():
    """The first CUDA capture of a process imports torch modules (2.11's inductor graph trees, then
    torch.utils.mkldnn) that warn of their own deprecations; a caller's warnings-as-errors turned
    that into a failed capture and an eager call. A fresh process, so the imports are first."""
    require_cuda()
    out = subprocess.run([sys.executable, "-c", _FIRST_CAPTURE_UNDER_ERRORS], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
