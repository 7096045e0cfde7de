"""Pure ATen calls repeated with equal arguments run once (cse.py), and scaled-dot-product attention
is captured as the backend eager's dispatch picks, with torch's own mask conversion (_compat), so a
mask shared by several attention calls is converted once. Nothing random, uninitialized or
differently-valued is merged."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import trident
from trident.lowering import cse


def lowered_text(fast, *args):
    return trident.controller(fast).lower_call(*args).text


def calls(text: str, op: str) -> int:
    return text.count(f'call "aten::{op}')


def two_layers(q, k, v, mask):
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return F.scaled_dot_product_attention(a * 2, k, v, attn_mask=mask)


def attention_inputs(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, s, 16, generator=g).to(dtype) for s in (1, 8, 8))
    return q, k, v, torch.rand(2, 1, 1, 8, generator=g) > 0.4


def test_a_boolean_mask_shared_by_two_attentions_is_converted_once():
    fast = trident.compile(two_layers)
    for seed in range(3):
        args = attention_inputs(seed)
        got, want = fast(*args), two_layers(*args)
        assert torch.equal(got, want)
    text = lowered_text(fast, *args)
    assert "scaled_dot_product_attention" not in text, text  # the CPU backend's op, called directly
    assert calls(text, "_scaled_dot_product_flash_attention_for_cpu") == 2, text
    assert calls(text, "where") == 1, text


def test_attention_under_another_dtype_and_a_float_mask_equals_eager():
    q, k, v, mask = attention_inputs(1, torch.bfloat16)
    bias = torch.zeros(mask.shape, dtype=torch.bfloat16).masked_fill(~mask, -1e4)
    fast = trident.compile(two_layers)
    assert torch.equal(fast(q, k, v, bias), two_layers(q, k, v, bias))
    assert torch.equal(fast(q, k, v, mask), two_layers(q, k, v, mask))


def repeated_pure_ops(x, y):
    a, b = x * y, x * y                     # merged
    c, d = torch.where(x > 0, 0.0, y), torch.where(x > 0, -0.0, y)  # 0.0 and -0.0: not merged
    e, f = x.clamp(min=0.5), x.clamp(max=0.5)  # one value in two different argument slots
    return a + b, c * 1, d * 1, e * 1, f * 1  # (what the output returns itself is never merged)


def test_equal_calls_merge_and_calls_differing_in_any_constant_do_not():
    fast = trident.compile(repeated_pure_ops)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    x[0, 0], y[0, 0] = 1.0, 0.0             # where picks the scalar there: its sign must survive
    for got, want in zip(fast(x, y), repeated_pure_ops(x, y)):
        assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
    text = lowered_text(fast, x, y)
    assert text.count('call "aten::mul.Tensor" (%0, %1)') == 1, text  # x * y
    assert calls(text, "where") == 2 and calls(text, "clamp") == 2, text


def test_calls_whose_arguments_have_the_same_leaves_in_other_lists_are_not_merged():
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.as_strided.default, (x, [2, 3], [3, 1]))
    b = g.call_function(aten.as_strided.default, (x, [2, 3, 3], [1]))
    g.output((g.call_function(aten.add.Tensor, (a, 1)), g.call_function(aten.add.Tensor, (b, 1))))
    assert cse.eliminate(g) == 0
    c = g.call_function(aten.as_strided.default, (x, [2, 3], [3, 1]))
    g.call_function(aten.mul.Tensor, (c, 2))
    assert cse.eliminate(g) == 1 and len(a.users) == 2


def random_twice(x):
    return F.dropout(x, 0.5, training=True), F.dropout(x, 0.5, training=True), torch.rand_like(x), torch.rand_like(x)


def test_random_ops_with_equal_arguments_are_not_merged():
    fast = trident.compile(random_twice)
    a, b, c, d = fast(torch.ones(4096))
    assert not torch.equal(a, b) and not torch.equal(c, d)


def fresh_buffers(x):
    a = torch.empty(16)
    b = torch.empty(16)
    a.copy_(x)
    b.copy_(x * 2)
    return a, b


def test_uninitialized_buffers_are_not_merged():
    fast = trident.compile(fresh_buffers)
    x = torch.randn(16)
    a, b = fast(x)
    assert torch.equal(a, x) and torch.equal(b, x * 2)


def returns_both(x):
    return x + 1, x + 1


def test_a_duplicate_the_output_returns_is_kept_and_both_results_are_separate_tensors():
    fast = trident.compile(returns_both)
    a, b = fast(torch.zeros(3))
    want_a, want_b = returns_both(torch.zeros(3))
    assert torch.equal(a, want_a) and torch.equal(b, want_b)
    a.add_(5)
    assert torch.equal(b, torch.ones(3))  # eager returns two tensors; so does trident


def test_the_hf_llama_step_converts_its_attention_mask_once_for_all_layers():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hf_llama
    model = hf_llama.build_model(hf_llama.TINY, "cpu", dtype=torch.float32)
    step = hf_llama.DecodeStep(model, 1, hf_llama.TINY.max_cache)
    fast = trident.compile(step)
    ids, pos = torch.zeros((1, 1), dtype=torch.long), torch.tensor([3])
    with torch.no_grad():
        text = lowered_text(fast, ids, pos)
    assert hf_llama.TINY.layers > 1
    assert calls(text, "_scaled_dot_product_flash_attention_for_cpu") == hf_llama.TINY.layers, text
    assert calls(text, "where.ScalarSelf") <= 1, text


def test_a_symbolic_context_length_keeps_one_specialization_and_one_mask_conversion():
    """The decomposed attention under dynamic shapes: the backend choice adds no guard that splits
    the context lengths (CPU backend), and the mask is still converted once."""
    fast = trident.compile(two_layers, dynamic=True)
    g = torch.Generator().manual_seed(0)
    for length in (5, 9, 17, 33):
        q, k, v = (torch.randn(1, 4, s, 16, generator=g) for s in (1, length, length))
        mask = torch.rand(1, 1, 1, length, generator=g) > 0.3
        assert torch.equal(fast(q, k, v, mask), two_layers(q, k, v, mask)), length
    assert trident.counters(fast)["specializations"] == 1
    assert calls(lowered_text(fast, q, k, v, mask), "where") == 1
