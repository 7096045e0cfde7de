"""Arguments that share memory (aliasing.py): a program captured from `f(x, x)` must still be right
for `f(x, y)`, and a call whose written tensor overlaps another argument runs eagerly, with a
warning that names the arguments, instead of running code captured for distinct memory."""
import warnings

import pytest
import torch

import trident


def scaled_sum(a, b):
    return a + 2 * b


def add_to_first(a, b):
    a.add_(1)
    return b * 2


def test_a_program_captured_from_one_tensor_passed_twice_is_right_for_two_tensors():
    fast = trident.compile(scaled_sum)
    x, y = torch.ones(4), torch.full((4,), 10.0)
    assert torch.equal(fast(x, x), scaled_sum(x, x))
    assert torch.equal(fast(x, y), scaled_sum(x, y))
    assert torch.equal(fast(x, x), scaled_sum(x, x))
    c = trident.counters(fast)
    assert (c["compiles"], c["fallbacks"]) == (1, 0), c  # reading shared memory needs no second spec


def test_a_written_argument_that_overlaps_another_runs_eagerly_with_a_warning():
    fast = trident.compile(add_to_first)
    x, y = torch.zeros(4), torch.zeros(4)
    assert torch.equal(fast(x, y), torch.zeros(4)) and torch.equal(x, torch.ones(4))
    z, z_eager = torch.zeros(4), torch.zeros(4)
    with pytest.warns(RuntimeWarning, match="arguments a and b share memory and the function writes a"):
        got = fast(z, z)
    assert torch.equal(got, add_to_first(z_eager, z_eager)) and torch.equal(z, z_eager)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once; the decision is remembered, nothing is recaptured
        fast(z, z)
    assert torch.equal(z, torch.full((4,), 2.0))
    c = trident.counters(fast)
    assert (c["compiles"], c["fallbacks"]) == (1, 2), c
    x2 = torch.zeros(4)
    fast(x2, y)  # distinct memory again: the compiled spec
    assert torch.equal(x2, torch.ones(4)) and trident.counters(fast)["hits"] >= 1


def test_partially_overlapping_views_count_as_shared_memory():
    fast = trident.compile(add_to_first)
    fast(torch.zeros(3), torch.zeros(3))
    buf, buf_eager = torch.zeros(5), torch.zeros(5)
    with pytest.warns(RuntimeWarning, match="share memory"):
        got = fast(buf[0:3], buf[2:5])
    want = add_to_first(buf_eager[0:3], buf_eager[2:5])
    assert torch.equal(got, want) and torch.equal(buf, buf_eager)


def write_caches(caches, k, v, pos: int):
    k_cache, v_cache = caches
    k_cache[:, pos] = k
    v_cache[:, pos] = v
    return k_cache.sum(1) + v_cache.sum(1)


def test_disjoint_slices_of_one_buffer_are_compiled_and_guarded():
    """A K and a V cache cut from one allocation do not overlap: compiled, no fallback; the spec
    guards each written cache against overlapping the other arguments."""
    kv, kv_eager = torch.zeros(2, 3, 8), torch.zeros(2, 3, 8)
    fast = trident.compile(write_caches)
    for pos in (1, 2):
        k, v = torch.randn(3), torch.randn(3)
        got = fast((kv[0], kv[1]), k, v, pos)
        want = write_caches((kv_eager[0], kv_eager[1]), k, v, pos)
        assert torch.equal(got, want) and torch.equal(kv, kv_eager)
    assert trident.counters(fast)["fallbacks"] == 0
    text = trident.explain(fast, (kv[0], kv[1]), k, v, 2)
    # one guard over every argument's extent: the two written caches (class 0), k and v (read, 1)
    assert ('guard expr "no_overlap(0, L0.data_ptr, (4 * ((1 + ((L0.size[0] - 1) * L0.stride[0])) + ((L0.size[1] - 1) * '
            'L0.stride[1]))), 0, L1.data_ptr, (4 * ((1 + ((L1.size[0] - 1) * L1.stride[0])) + ((L1.size[1] - 1) * '
            'L1.stride[1]))), 1, L2.data_ptr, ') in text, text
    assert text.count("no_overlap(") == 2 and "disjoint(" not in text, text  # one per spec (pos 1, then symbolic)
    assert "all guards hold" in text
    overlapping = trident.explain(fast, (kv[0], kv[0]), k, v, 2)  # the native explainer names the pair
    assert "fails no_overlap: argument L0 (written) overlaps argument L1 (written)" in overlapping, overlapping
    with pytest.warns(RuntimeWarning, match=r"arguments caches\[0\] and caches\[1\] share memory"):
        fast((kv[0], kv[0]), k, v, 2)
