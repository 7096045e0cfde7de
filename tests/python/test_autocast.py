"""Calls under torch.autocast run natively, each autocast setting (on or off, the dtype it casts to)
with specializations of its own: a capture traced under autocast holds its casts as ops, and its
program runs with autocast's keys excluded, so a region the function runs with autocast disabled
keeps its precision. Autocast regions inside the function are entered while export traces them
(_compat._install_autocast_regions). On the CPU (CPU autocast), against eager under the same
autocast."""
import warnings

import pytest
import torch

import trident
from tiny_models import tiny_cpu_llama


def mm(a, b):
    return torch.mm(a, b)


def _equal(got, want):
    return got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("autocast_first", [True, False])
def test_calls_under_autocast_run_natively_beside_plain_calls(autocast_first):
    fast = trident.compile(mm)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    order = (True, False, True, False) if autocast_first else (False, True, False, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # nothing runs eagerly, nothing said
        for under in order:
            if under:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    got, want = fast(a, b), mm(a, b)
                assert want.dtype == torch.bfloat16
            else:
                got, want = fast(a, b), mm(a, b)
            assert _equal(got, want), under
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (2, 2, 0), c


def test_each_autocast_dtype_has_its_own_specialization():
    fast = trident.compile(mm)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    for _ in range(2):
        for dtype in (torch.bfloat16, torch.float16):
            with torch.autocast("cpu", dtype=dtype):
                got, want = fast(a, b), mm(a, b)
            assert want.dtype == dtype and _equal(got, want), dtype
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (2, 2, 0), c


def mixed(a, b):
    low = torch.mm(a, b)
    with torch.autocast("cpu", enabled=False):  # as transformers' rotary embedding forces float32
        full = torch.mm(a.float(), b.float())
    return low.float() + full, low, full


def test_a_region_with_autocast_disabled_keeps_float32():
    """The capture holds the region's float32 matmul as a float32 mm; run with autocast's keys
    left on, the dispatcher would cast it to bfloat16 again."""
    fast = trident.compile(mixed)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = fast(a, b), mixed(a, b)
        assert [w.dtype for w in want] == [torch.float32, torch.bfloat16, torch.float32]
        assert all(_equal(g, w) for g, w in zip(got, want))
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"], c["split_calls"]) == (1, 2, 0, 0), c


def rotary(x, inv_freq, pos):
    """transformers' rotary embedding: float32 inside `autocast(enabled=False)`, then cast to the
    dtype of x, which under autocast export had taken for bfloat16 (its check then failed)."""
    with torch.autocast("cpu", enabled=False):
        freqs = (inv_freq.float() @ pos.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * 1.0
    return cos.to(dtype=x.dtype), x * 2


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
def test_a_float32_region_cast_to_an_arguments_dtype_under_autocast(x_dtype):
    fast = trident.compile(rotary)
    x, inv_freq, pos = torch.randn(2, 3, dtype=x_dtype), torch.randn(1, 4, 1), torch.arange(5.0).view(1, 1, 5)
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = fast(x, inv_freq, pos), rotary(x, inv_freq, pos)
        assert want[0].dtype == x_dtype and all(_equal(g, w) for g, w in zip(got, want))
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"], c["split_calls"]) == (1, 2, 0, 0), c


def bf16_inside(a, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = a @ b
    return y, y.float(), y.float() * 2


def test_an_autocast_region_inside_the_function_compiles_as_one_program():
    """Without autocast around the call, a region the function enters itself: export had taken
    its bfloat16 result for float32 (and its `.float()` for the same tensor), so the call split."""
    fast = trident.compile(bf16_inside)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    for _ in range(3):
        got, want = fast(a, b), bf16_inside(a, b)
        assert [w.dtype for w in want] == [torch.bfloat16, torch.float32, torch.float32]
        assert all(_equal(g, w) for g, w in zip(got, want))
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"], c["split_calls"]) == (1, 2, 0, 0), c


def test_backend_trident_under_autocast_keeps_the_disabled_region():
    """torch.compile(backend="trident"): AOTAutograd's graph is traced under the caller's autocast
    and Dynamo guards on it; the native program it lowers to runs with autocast's keys excluded."""
    fast = torch.compile(mixed, backend="trident")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    for under in (True, True, False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=under):
            got, want = fast(a, b), mixed(a, b)
        assert all(_equal(g, w) for g, w in zip(got, want)), under


def test_autocast_state_inside_a_call_is_as_the_caller_left_it():
    """The exclusion is for the native run alone: after a hit, autocast is on again for the caller."""
    fast = trident.compile(mm)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            fast(a, b)
            assert torch.is_autocast_enabled("cpu") and torch.mm(a, b).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    assert trident.counters(fast)["hits"] == 1


def test_a_float32_model_under_autocast_generates_eagers_tokens():
    """A float32 Llama called the way mixed-precision users call it: generate() under
    torch.autocast(bfloat16), with transformers' own rotary embedding (its float32 region) and
    cache, against eager generate() under the same autocast."""
    pytest.importorskip("transformers")
    cfg, model = tiny_cpu_llama()
    ids = torch.randint(1, 96, (1, 6), generator=torch.Generator().manual_seed(5))
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, output_logits=True, return_dict_in_generate=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = model.generate(ids, **kw)
    from test_hf_caches import _forward_compiled
    with _forward_compiled(model) as fast, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = model.generate(ids, **kw)
            assert torch.equal(got.sequences, want.sequences)
            assert all(_equal(g, w) for g, w in zip(got.logits, want.logits))
    # nothing ran eagerly; said once: the 15 weight matrices (7 per layer and the head) cast every call
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "casts 15 parameters to bfloat16 on every call" in said[0], said
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0, c
    assert c["specializations"] <= 3 and c["hits"] >= 2 * 8 - c["specializations"] - 1, c


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_parameters_cast_on_every_call_are_said_once(dtype):
    """Eager autocast casts a float32 weight once per autocast region (its weight cache); the
    captured program casts it on every call, which trident says once. A model already in the
    autocast dtype casts nothing and is told nothing."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32).to(dtype)
    fast = trident.compile(lin)
    x = torch.randn(4, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got, want = fast(x), lin(x)
            assert _equal(got, want)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if dtype == torch.float32:  # the weight and the bias: 64*32*6 + 32*6 bytes
        assert said == ["trident: Linear: under torch.autocast, this program casts 2 parameters to bfloat16 on "
                        "every call (12.2 KiB read and written), where eager's autocast casts each once per "
                        "autocast region; a model converted to that dtype (model.to(torch.bfloat16)) skips the "
                        "casts"], said
        assert any("casts 2 parameters" in line for line in trident.explain(fast).splitlines()
                   if line.strip().startswith("said once"))
    else:
        assert said == [], said
