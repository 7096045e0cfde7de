"""Functions whose host IR the lowering golden tests pin (test_lowering_golden.py): each case is
(name, function, example arguments, trident.compile options). Editing this file moves the source
lines the IR names: regenerate the expected files then (see that test)."""
import torch


def pointwise(x, y):
    return torch.relu(x * 2 + y)


def views(x):
    return x.view(2, -1).transpose(0, 1).contiguous()


def cache_write_at_int_position(cache, k, pos: int):
    cache[:, pos] = k
    return cache[:, : pos + 1].sum()


def run_time_float(x, scale: float):
    return x * scale


def masked_sum(x):
    return x[x > 0].sum()


def branch_on_data(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def cases():
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    return [
        ("pointwise", pointwise, (randn(4, 8), randn(4, 8)), {}),
        ("views", views, (randn(4, 6),), {}),
        ("cache_write_at_int_position", cache_write_at_int_position, (torch.zeros(2, 16, 8), randn(2, 8), 3),
         {"dynamic": True}),
        ("run_time_float", run_time_float, (randn(8), 0.125), {"dynamic": True}),
        ("masked_sum", masked_sum, (randn(16),), {}),
        ("branch_on_data", branch_on_data, (randn(8).abs(),), {}),
    ]
