"""FlagGems (installed from its wheel), called as its users call it, compiled by trident.compile:
each operator of the paper's suite at decode shapes is captured by the traced-Python route down to
its JITFunctions (LibEntry, LibTuner, heuristics and generated pointwise code included) and hits
natively with eager's result. Also mini_gems (tests/python/mini_gems.py) run for real: its
LibEntry hit path and StridedBuffers on the GPU against trident's capture of them."""
import sys
from pathlib import Path

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
flag_gems = pytest.importorskip("flag_gems")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import flaggems_cases  # noqa: E402

CASES = flaggems_cases.make_cases()


def _same(got, want, kind):
    if isinstance(want, (tuple, list)) or hasattr(want, "_fields"):
        assert type(got) is type(want) or len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, kind)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    if kind in ("pointwise", "data") or not want.is_floating_point():
        assert torch.equal(got, want)  # the same kernel on the same inputs
    else:  # a config chosen by benchmarking at capture may block the reduction differently
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("tokens,hidden", [(1, 4096), (8, 4096)])
@pytest.mark.parametrize("name,kind,make", CASES, ids=[c[0] for c in CASES])
def test_flaggems_op_hits_natively_with_eagers_result(name, kind, make, tokens, hidden):
    fn, args = make(tokens, hidden, "cuda")
    want = fn(*args)
    fast = trident.compile(fn)
    for _ in range(3):
        _same(fast(*args), want, kind)
    n = trident.counters(fast)
    assert (n["captures"], n["specializations"], n["fallbacks"], n["hits"]) == (1, 1, 0, 2), n
    assert n.get("split_calls", 0) == 0, n
    # Dynamo traces a few operators whole (cat, cumsum, sort); the rest stop it in the library
    route = "Dynamo (strict export)" if name in ("cat", "cumsum", "sort") else "Python traced by non-strict export"
    assert f"captured by: {route}" in trident.explain(fast)


def test_mini_gems_library_runs_and_hits_natively():
    import mini_gems

    def block(x, y, w):
        out = mini_gems.rms_norm(mini_gems.mul(mini_gems.add(x, y), y) * 2, w) + mini_gems.add_halves(x.flatten())[:128]
        return out, mini_gems.row_sum(out)

    x, y, w = torch.randn(4, 128, device="cuda"), torch.randn(4, 128, device="cuda"), torch.randn(128, device="cuda")
    for _ in range(2):  # the second eager call takes LibEntry's hit path
        want = block(x, y, w)
    fast = trident.compile(block)
    for _ in range(3):
        got = fast(x, y, w)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    n = trident.counters(fast)
    assert (n["captures"], n["fallbacks"], n["hits"]) == (1, 0, 2), n


TORCH_CASES = {c[0]: c for c in flaggems_cases.make_cases(through_torch=True)}


# FlagGems' Hopper mm (what enable() registers on an H200; flag_gems.ops.mm is the generic one)
# launches through host-side TMA descriptors made with a dummy block that its autotune configs'
# pre_hook sets per config: captured as descriptors of the chosen config's blocks
# (library_launches.hooked_block_shapes).
@pytest.mark.parametrize("name", ["add", "silu", "rms_norm", "embedding", "sum", "where", "index_select",
                                  "topk", "softmax", "layer_norm", "argmax", "addmm", "mm"])
def test_ops_flag_gems_enables_run_its_kernels_natively(name):
    """Code written for PyTorch (`x + y`, `torch.mm`), with FlagGems enabled the way its users
    enable it: the ATen ops' Python kernels FlagGems registered are inlined at capture, so a hit
    launches its Triton kernels natively and enters none of its Python, with eager's result."""
    _, kind, make = TORCH_CASES[name]
    fn, args = make(8, 4096, "cuda")
    with flag_gems.use_gems():
        want = fn(*args)
        assert flaggems_cases.python_calls_into("flag_gems", fn, args) > 0  # eager goes through FlagGems' Python
        fast = trident.compile(fn)
        _same(fast(*args), want, kind)
        assert flaggems_cases.python_calls_into("flag_gems", fast, args) == 0
        _same(fast(*args), want, kind)
        text = trident.explain(fast)
    n = trident.counters(fast)
    assert (n["captures"], n["fallbacks"], n["hits"]) == (1, 0, 2), n
    assert "ATen ops' Python kernels inlined: aten::" in text and "flag_gems" in text, text


def test_a_decoder_block_with_flag_gems_enabled():
    """Several enabled ops in one function, beside ops FlagGems does not serve."""
    def block(x, w_norm, table, ids):
        h = torch.nn.functional.rms_norm(x + torch.nn.functional.embedding(ids, table), (x.shape[-1],), w_norm, 1e-6)
        y = x + torch.nn.functional.silu(h) * h
        return y, y.float().sum(-1)

    g = torch.Generator(device="cuda").manual_seed(0)
    d = 1024
    x = torch.randn(4, d, device="cuda", dtype=torch.bfloat16, generator=g)
    ws = [torch.randn(d, device="cuda", dtype=torch.bfloat16, generator=g),
          torch.randn(64, d, device="cuda", dtype=torch.bfloat16, generator=g),
          torch.randint(0, 64, (4,), device="cuda", generator=g)]
    with flag_gems.use_gems():
        want = block(x, *ws)
        fast = trident.compile(block)
        for _ in range(3):
            got = fast(x, *ws)
            # eager may run FlagGems' fused rms_norm where the capture holds its decomposition
            torch.testing.assert_close(got[0], want[0], rtol=2e-2, atol=2e-2)
            torch.testing.assert_close(got[1], want[1], rtol=2e-2, atol=0.5)
        assert flaggems_cases.python_calls_into("flag_gems", fast, (x, *ws)) == 0
    n = trident.counters(fast)
    assert (n["captures"], n["fallbacks"], n["hits"]) == (1, 0, 3), n
