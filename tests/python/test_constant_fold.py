"""Values computed from no input are computed once, at lowering, and read as module constants on a
hit (constant_fold.py); values the caller or a write could reach are computed every call."""
import torch

import trident


def lowered_text(fast, *args):
    return trident.controller(fast).lower_call(*args).text


def positions(x, start):
    # HF's write position: arange over the new tokens plus the cache's length
    return x + torch.arange(4) * 2 + start


def test_an_input_free_arange_and_its_arithmetic_become_one_constant():
    fast = trident.compile(positions)
    for k in range(3):
        x, start = torch.randn(4), torch.tensor(k)
        torch.testing.assert_close(fast(x, start), positions(x, start), rtol=0, atol=0)
    text = lowered_text(fast, x, start)
    assert "aten::arange" not in text and "aten::mul" not in text, text  # arange(4) * 2 is folded
    assert text.count("= state ") == 1 and text.count('call "aten::add.Tensor"') == 2, text
    assert trident.counters(fast)["compiles"] == 1


def returns_a_fresh_arange(x):
    return torch.arange(4) + 1, x + 1


def returns_a_view_of_one(x):
    return (torch.arange(8) * 1)[2:], x * 2


def writes_into_one(x):
    a = torch.arange(4.0)
    a.add_(x)          # functionalized to an add: a stays input-free up to here
    return a


def test_a_constant_the_caller_can_reach_is_computed_every_call():
    for fn in (returns_a_fresh_arange, returns_a_view_of_one):
        fast = trident.compile(fn)
        x = torch.randn(4)
        first, second = fast(x)[0], fast(x)[0]
        assert torch.equal(first, fn(x)[0]) and first.data_ptr() != second.data_ptr(), fn.__name__
        first.fill_(7)   # the caller owns it: the next call's value is not disturbed
        assert torch.equal(fast(x)[0], fn(x)[0]), fn.__name__
    fast = trident.compile(writes_into_one)
    for k in range(3):
        x = torch.full((4,), float(k))
        assert torch.equal(fast(x), writes_into_one(x))


def test_random_values_and_large_values_are_not_folded():
    fast = trident.compile(lambda x: x + torch.rand(3))
    x = torch.zeros(3)
    assert not torch.equal(fast(x), fast(x))
    big = trident.compile(lambda x: x.sum() + torch.arange(1 << 17).sum())
    assert torch.equal(big(torch.ones(2)), torch.ones(2).sum() + torch.arange(1 << 17).sum())
    assert "aten::arange" in lowered_text(big, torch.ones(2))


def test_the_hf_llama_step_launches_no_arange():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hf_llama
    cfg = hf_llama.TINY
    model = hf_llama.build_model(cfg, "cpu")
    fast_step = hf_llama.DecodeStep(model, 1, cfg.max_cache, with_logits=True)
    ref = hf_llama.DecodeStep(model, 1, cfg.max_cache, with_logits=True)
    fast = trident.compile(fast_step)
    ids = torch.tensor([[3]])
    with torch.no_grad():
        for pos in range(6):
            p = torch.tensor([pos])
            (got_ids, got), (want_ids, want) = fast(ids, p), ref(ids, p)
            # on the CPU the GEMMs' paths round differently (test_hf_llama_cpu.py's tolerance)
            assert torch.equal(got_ids, want_ids), pos
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            ids = want_ids[:, None]
        assert "aten::arange" not in lowered_text(fast, ids, p)
