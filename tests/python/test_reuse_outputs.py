"""trident.compile(reuse_outputs=True): a returned tensor's memory serves a later call once the
caller holds nothing over it, and never while it does (csrc/runtime/memory/buffer_reuse.h). Checked on CPU
tensors against eager, data pointers and the exact recycled_outputs counter."""
import gc
import weakref

import pytest
import torch

import trident
from test_hot_path_reuse import stacked, stacked_tail  # a returned buffer, and a view of one


def pair(seed, cols=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, cols, generator=g), torch.randn(2, cols, generator=g)


def has_memory(t):
    try:
        return t.data_ptr() != 0
    except RuntimeError:  # a fake or functional tensor
        return False


def recycled(fast):
    return trident.counters(fast)["recycled_outputs"]


def test_a_dropped_result_s_memory_serves_the_next_call():
    fast = trident.compile(stacked, reuse_outputs=True)
    out = fast(*pair(0))
    ptr = out.data_ptr()
    del out
    for seed in (1, 2, 3):
        x, y = pair(seed)
        out = fast(x, y)
        torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)
        assert out.data_ptr() == ptr
        del out
    assert recycled(fast) == 3
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"]) == (1, 0)


def test_results_the_caller_holds_are_never_written_again():
    fast = trident.compile(stacked, reuse_outputs=True)
    args = [pair(seed) for seed in range(5)]
    outs = [fast(*a) for a in args]
    for a, out in zip(args, outs):
        torch.testing.assert_close(out, stacked(*a), rtol=0, atol=0)
    assert len({o.data_ptr() for o in outs}) == 5
    assert recycled(fast) == 0
    del outs[:4]  # the last result is still held: only memory of the dropped ones could serve
    out = fast(*pair(9))
    assert out.data_ptr() != outs[-1].data_ptr()
    torch.testing.assert_close(outs[-1], stacked(*args[-1]), rtol=0, atol=0)


def test_a_returned_view_keeps_its_base_s_memory_until_dropped():
    fast = trident.compile(stacked_tail, reuse_outputs=True)
    v1 = fast(*pair(0))  # (untyped_storage() would make a Python storage object that holds the memory)
    v2 = fast(*pair(1))
    assert v2.data_ptr() != v1.data_ptr()
    torch.testing.assert_close(v1, stacked_tail(*pair(0)), rtol=0, atol=0)
    del v1, v2
    x, y = pair(2)
    v3 = fast(x, y)
    torch.testing.assert_close(v3, stacked_tail(x, y), rtol=0, atol=0)
    assert recycled(fast) == 1
    assert (v3.shape, v3.stride(), v3.storage_offset()) == ((3, 8), (8, 1), 8)


def test_a_dropped_result_comes_back_as_the_same_python_object():
    """PyObject preservation keeps a dropped result's object alive with its TensorImpl in the pool:
    the next call returns that very object, with nothing allocated."""
    fast = trident.compile(stacked, reuse_outputs=True)
    out = fast(*pair(0))
    first = id(out)
    del out
    for seed in (1, 2):
        x, y = pair(seed)
        out = fast(x, y)
        assert id(out) == first
        torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)
        assert not out.requires_grad and out.grad_fn is None
        del out
    assert recycled(fast) == 2


def test_autograd_state_the_caller_gave_a_result_does_not_carry_over():
    fast = trident.compile(stacked, reuse_outputs=True)
    out = fast(*pair(0))
    ptr = out.data_ptr()
    out.requires_grad_()
    out.grad = torch.ones_like(out)
    del out
    x, y = pair(1)
    out = fast(x, y)
    assert recycled(fast) == 1 and out.data_ptr() == ptr  # the memory, under a new tensor object
    assert not out.requires_grad and out.grad is None and out.grad_fn is None
    torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)


def test_attributes_and_weak_references_do_not_carry_over():
    fast = trident.compile(stacked, reuse_outputs=True)
    out = fast(*pair(0))
    ptr = out.data_ptr()
    out.tag = "first"
    del out
    x, y = pair(1)
    out = fast(x, y)
    assert not hasattr(out, "tag")
    assert recycled(fast) == 1 and out.data_ptr() == ptr
    ref = weakref.ref(out)
    del out
    assert ref() is not None  # the pool keeps the object alive with its tensor ...
    x, y = pair(2)
    out = fast(x, y)
    assert ref() is None  # ... but a weakly referenced one does not go out again: it is released
    assert recycled(fast) == 2 and out.data_ptr() == ptr
    torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)


@pytest.mark.parametrize("change", [
    lambda out: out.t_(),  # the tensor object's layout: it cannot go out again as the next result
    lambda out: out.resize_(64, 8),  # the storage moves to a larger allocation
], ids=["t_", "resize_"])
def test_a_result_the_caller_reshaped_or_resized_is_dropped(change):
    fast = trident.compile(stacked, reuse_outputs=True)
    out = fast(*pair(0))
    change(out)
    del out
    x, y = pair(1)
    out = fast(x, y)
    assert recycled(fast) == 0
    assert (out.shape, out.stride()) == ((4, 8), (8, 1))
    torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)
    del out
    out = fast(x, y)  # the fresh one serves again
    assert recycled(fast) == 1
    torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)


def test_a_result_with_autograd_history_keeps_only_its_memory():
    fast = trident.compile(stacked, reuse_outputs=True)
    results = []
    for seed in range(3):
        x, y = pair(seed)
        x.requires_grad_()
        out = fast(x, y)
        expected = stacked(x, y)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        assert out.grad_fn is not None
        out.sum().backward()
        torch.testing.assert_close(x.grad, torch.ones_like(x), rtol=0, atol=0)
        results.append((id(out), out.data_ptr()))
        del out, expected
    assert recycled(fast) == 2
    assert len({ptr for _, ptr in results}) == 1


def test_the_pool_releases_kept_result_objects_with_the_function():
    fast = trident.compile(stacked, reuse_outputs=True)
    x, y = pair(0, cols=13)  # a shape no other live tensor has
    fast(x, y)  # dropped at once: its object stays, held by the pool

    def live_results():  # real tensors only: tracing keeps fake ones of that shape
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.shape == (4, 13) and has_memory(o))

    assert live_results() == 1
    del fast
    assert live_results() == 0


def test_off_by_default():
    fast = trident.compile(stacked)
    for seed in range(3):
        x, y = pair(seed)
        torch.testing.assert_close(fast(x, y), stacked(x, y), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["recycled_outputs"], c["reused_buffers"], c["escaped_buffers"]) == (0, 0, 1)


def test_internal_buffers_are_reused_as_before():
    def stacked_sum(x, y):
        return stacked(x, y).sum(0)

    fast = trident.compile(stacked_sum, reuse_outputs=True)
    for seed in range(3):
        x, y = pair(seed)
        torch.testing.assert_close(fast(x, y), stacked_sum(x, y), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["recycled_outputs"], c["reused_buffers"], c["escaped_buffers"]) == (0, 1, 0)


def test_through_the_torch_compile_backend():
    opt = torch.compile(stacked, backend="trident", options={"reuse_outputs": True})
    results = []
    for seed in range(4):
        x, y = pair(seed)
        out = opt(x, y)
        torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)
        results.append(out.data_ptr())
        del out
    assert len(set(results[1:])) == 1, "dropped results' memory did not serve the next calls"


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_reuse_outputs_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="reuse_outputs must be True or False"):
        trident.compile(stacked, reuse_outputs=bad)


def test_a_loop_that_holds_the_last_result_alternates_two_buffers():
    """`out = fast(...)` keeps the previous result alive while the next call runs: the site keeps the
    memory of its last two results and serves from the one the caller has let go of."""
    fast = trident.compile(stacked, reuse_outputs=True)
    ptrs, out = [], None
    for seed in range(6):
        x, y = pair(seed)
        prev, out = out, fast(x, y)
        torch.testing.assert_close(out, stacked(x, y), rtol=0, atol=0)
        if prev is not None:
            assert out.data_ptr() != prev.data_ptr()
        ptrs.append(out.data_ptr())
        del prev
    assert ptrs[2:] == ptrs[:2] * 2
    assert recycled(fast) == 4
    assert trident.counters(fast)["reused_buffers"] == 2



def chain(x, y):
    """Three stacked buffers in a row, each dead once the next is written: the result's site can
    take the first one's buffer."""
    a = stacked(x, y)
    b = stacked(a[:2], a[2:])
    return stacked(b[:2] * 2, b[2:])


def test_a_recycled_result_used_inside_a_call_still_serves_that_call_s_result():
    """A dropped result's TensorImpl keeps its Python object while an earlier site of the next call
    uses it as an intermediate: the result's site may still take it once that site is done."""
    fast = trident.compile(chain, reuse_outputs=True)
    for seed in range(5):
        x, y = pair(seed)
        out = fast(x, y)
        torch.testing.assert_close(out, chain(x, y), rtol=0, atol=0)
        del out
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["recycled_outputs"], c["escaped_buffers"]) == (2, 4, 0)
