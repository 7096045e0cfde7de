"""Ops that return numbers beside tensors (the attention kernels' max sequence lengths, read only by
a backward) run when nothing reads the numbers, and fail to compile clearly when something does."""
import pytest
import torch

import trident


@torch.library.custom_op("trident_test::scaled_with_count", mutates_args=())
def scaled_with_count(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    return x * 3, x.shape[0]


@scaled_with_count.register_fake
def _(x):
    # A number the trace cannot know (as a data-dependent length would be).
    return torch.empty_like(x), torch.library.get_ctx().new_dynamic_size()


def uses_tensor_only(x):
    y, _ = torch.ops.trident_test.scaled_with_count(x)
    return y + 1


def uses_the_count(x):
    y, n = torch.ops.trident_test.scaled_with_count(x)
    return y * n


def test_unread_number_result_is_dropped_and_the_tensor_result_is_used():
    fast = trident.compile(uses_tensor_only)
    for _ in range(2):
        x = torch.randn(5, 3)
        torch.testing.assert_close(fast(x), uses_tensor_only(x))
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (1, 1, 0)


def test_read_number_result_is_refused_at_compile_time():
    fast = trident.compile(uses_the_count, fullgraph=True)
    with pytest.raises(trident.UnsupportedError, match="returns a non-tensor value"):
        fast(torch.randn(5, 3))


def test_read_number_result_runs_split_without_fullgraph():
    fast = trident.compile(uses_the_count)
    x = torch.randn(5, 3)
    with pytest.warns(RuntimeWarning, match="returns a non-tensor value.*run split there"):
        torch.testing.assert_close(fast(x), uses_the_count(x))
    torch.testing.assert_close(fast(x), uses_the_count(x))
    c = trident.counters(fast)
    assert (c["split_calls"], c["specializations"]) == (2, 0), c
