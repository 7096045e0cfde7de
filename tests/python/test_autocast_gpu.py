"""CUDA autocast on the GPU: a float32 Llama's generate() under torch.autocast("cuda", bfloat16),
as mixed-precision users call it, runs specializations traced under autocast (its casts ops of
the program, the typed bf16 gemms they feed, the rotary embedding's float32 region) with eager's
tokens and logits; the same model called without autocast keeps its own float32
specializations (the CPU file, test_autocast.py, checks selection and the excluded keys)."""
import warnings

import pytest
import torch

import trident
from test_hf_caches import _forward_compiled
from tiny_models import tiny_cuda_llama

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::FutureWarning")]


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def _generate(model, ids, autocast: bool):
    kw = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0, output_logits=True,
              return_dict_in_generate=True)  # a StaticCache holds the model's float32: eager's own
    # index_copy_ of autocast's bfloat16 keys into it fails
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        return model.generate(ids, **kw)


def test_a_float32_llama_generates_under_cuda_autocast_natively():
    require_cuda()
    cfg, model = tiny_cuda_llama(torch.float32)
    ids = torch.randint(1, cfg.vocab_size, (1, 7), device="cuda", generator=torch.Generator("cuda").manual_seed(3))
    want = {a: _generate(model, ids, a) for a in (True, False)}
    with _forward_compiled(model) as fast, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for autocast in (True, False, True, False):
            got = _generate(model, ids, autocast)
            assert torch.equal(got.sequences, want[autocast].sequences), autocast
            for g, w in zip(got.logits, want[autocast].logits):
                assert g.dtype == w.dtype and torch.equal(g, w), autocast
    # nothing ran eagerly; said once: the 15 weight matrices (7 per layer and the head) cast every call
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "casts 15 parameters to bfloat16 on every call" in said[0], said
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0, c
    # prefill, decode and decode with its length symbolic, with autocast and without
    assert c["specializations"] <= 6 and c["hits"] >= 4 * 10 - c["specializations"] - 4, c


def mixed(a, b):
    low = a @ b
    with torch.autocast("cuda", enabled=False):
        full = a.float() @ b.float()
    return low.float() + full, low, full


@pytest.mark.parametrize("graphs", [True, False])
def test_an_autocast_disabled_region_keeps_float32_on_cuda(graphs):
    require_cuda()
    fast = trident.compile(mixed, graphs=graphs)
    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    for _ in range(4):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            got, want = fast(a, b), mixed(a, b)
        assert [w.dtype for w in want] == [torch.float32, torch.bfloat16, torch.float32]
        assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (1, 3, 0), c
