"""Data-dependent sizes and values computed natively (python/trident/lowering/data_values.py): `.item()`,
`.tolist()`, and the sizes of `nonzero`, `masked_select`, `unique` and friends drive later sizes,
views, allocations and arithmetic. Each function runs on data that changes the sizes from call to
call; one specialization serves them all, every call native, results equal eager's."""
import pytest
import torch

import trident


def nonzero_then_index(x):
    return x[x.nonzero()[:, 0]] * 2


def masked_select_then_reduce(x):
    kept = torch.masked_select(x, x > 0)
    return kept.sum(), kept.numel()


def item_as_a_size(x, n):
    return torch.zeros(int(n.max().item()) + 1, device=x.device) + x.sum()


def item_as_a_slice_end(x, n):
    return x[: n.item()] * 2


def item_slice_then_flatten(x, n):
    return x[: n.item()].flatten() + 1  # the flatten's size is 2*u1: u1 read from the slice itself


def item_slice_then_matmul(x, w, n):
    return x[: n.item()] @ w


def tolist_split_sizes(x, counts):
    return [p.sum(0) for p in torch.split(x, counts.tolist())]


def bincount_then_view(x):
    counts = torch.bincount(x)
    return counts.view(-1, 1).float() + 1


def unique_then_arange(x):
    u = torch.unique(x)
    return u + torch.arange(u.numel(), device=u.device)


def boolean_mask_rows(x):
    return x[x.sum(1) > 0].mean(0)


def repeat_interleave_tensor(x, r):
    return torch.repeat_interleave(x, r, dim=0) * 3


def float_item_as_a_scalar(x):
    return x * x.abs().max().item()


def moe_top_k_routing(x, w_gate, w_experts):
    """A top-2 router and a loop over the experts, each computing only the tokens routed to it."""
    weights, experts = torch.topk(torch.softmax(x @ w_gate, -1), 2, dim=-1)
    out = torch.zeros_like(x)
    for e in range(w_experts.shape[0]):
        token, slot = torch.where(experts == e)
        out.index_add_(0, token, (x[token] @ w_experts[e]) * weights[token, slot, None])
    return out


def tolist_expert_counts(x, experts):
    """vLLM/Megablocks-style: per-expert token counts as Python ints, then a split of sorted tokens."""
    order = torch.argsort(experts)
    counts = torch.nn.functional.one_hot(experts, 4).sum(0).tolist()  # a list of 4 data-dependent ints
    return [chunk.sum(0) for chunk in torch.split(x[order], counts)]


def checked_item(x, n):
    k = n.item()
    torch._check(k <= x.shape[0])
    return x[:k].sum()


CASES = [
    (nonzero_then_index, lambda g: (torch.randn(12, generator=g),)),
    (masked_select_then_reduce, lambda g: (torch.randn(12, generator=g),)),
    (item_as_a_size, lambda g: (torch.randn(3, generator=g), torch.randint(0, 9, (4,), generator=g))),
    (item_as_a_slice_end, lambda g: (torch.randn(10, generator=g), torch.randint(0, 10, (), generator=g))),
    (item_slice_then_flatten, lambda g: (torch.randn(8, 2, generator=g), torch.randint(0, 9, (), generator=g))),
    (item_slice_then_matmul, lambda g: (torch.randn(8, 4, generator=g), torch.randn(4, 3, generator=g),
                                        torch.randint(0, 9, (), generator=g))),
    (tolist_split_sizes, lambda g: _split_args(g)),
    (bincount_then_view, lambda g: (torch.randint(0, 7, (9,), generator=g),)),
    (unique_then_arange, lambda g: (torch.randint(0, 9, (10,), generator=g),)),
    (boolean_mask_rows, lambda g: (torch.randn(8, 3, generator=g),)),
    (repeat_interleave_tensor, lambda g: (torch.randn(4, 2, generator=g), torch.randint(0, 3, (4,), generator=g))),
    (float_item_as_a_scalar, lambda g: (torch.randn(5, generator=g),)),
    (moe_top_k_routing, lambda g: (torch.randn(6, 8, generator=g), torch.randn(8, 4, generator=g),
                                   torch.randn(4, 8, 8, generator=g))),
    (tolist_expert_counts, lambda g: (torch.randn(10, 4, generator=g), torch.randint(0, 4, (10,), generator=g))),
    (checked_item, lambda g: (torch.randn(6, generator=g), torch.randint(0, 7, (), generator=g))),
]


# Cases whose sizes come from an ATen op that computes its own result's size on the host (nonzero and
# the ops built on it, composites such as `torch.where(cond)` included): such an op waits for the device,
# which stream capture refuses, so in graph mode the lowering keeps the spec out of graphs (`graph
# off`, naming the call). The others read with `.item()`/`.tolist()` in the program itself: their
# graphs are split at each read (graphs in segments).
SYNCING_OPS = {"nonzero_then_index", "masked_select_then_reduce", "bincount_then_view", "unique_then_arange",
               "boolean_mask_rows", "repeat_interleave_tensor", "moe_top_k_routing"}


def _split_args(g):
    a = int(torch.randint(0, 6, (), generator=g))
    return torch.randn(6, 2, generator=g), torch.tensor([a, 6 - a])


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_data_dependent_sizes_run_natively_with_eager_results(fn, make):
    fast = trident.compile(fn)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        args = make(g)
        torch.testing.assert_close(fast(*args), fn(*args), rtol=1e-6, atol=1e-6)
    c = trident.counters(fast)
    assert (c["specializations"], c["fallbacks"], c["hits"]) == (1, 0, 5), c


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_graph_mode_says_which_call_sizes_on_the_host(fn, make, monkeypatch):
    """In graph mode, as if every tensor were a CUDA one: an op that sizes its result from device data
    makes the spec `graph off`, naming the op and the user's line (test_data_dependent_gpu.py runs the
    same corpus on a GPU, where the capture would fail); a program whose only host reads are its own
    `.item()`/`.tolist()` is not `graph off` (its graph splits at the reads). Session 40's H100 run
    found `torch.where(cond)` and `repeat_interleave` (composites) missed and a `mul` blamed."""
    from trident.lowering import lower as lower_mod
    monkeypatch.setattr(lower_mod, "_host_tensor", lambda ep, env: "")
    ir = trident.controller(trident.compile(fn, graphs=True)).lower_call(*make(torch.Generator().manual_seed(0))).text
    if fn.__name__ in SYNCING_OPS:
        assert 'graph off "aten::' in ir and "computes its result's size on the host at test_data_dependent.py:" in ir, ir
    else:
        assert "graph off" not in ir, ir


def test_sizes_of_zero_run_natively():
    fast = trident.compile(nonzero_then_index)
    for x in (torch.zeros(5), torch.ones(5), torch.zeros(5)):
        torch.testing.assert_close(fast(x), nonzero_then_index(x))
    assert trident.counters(fast)["fallbacks"] == 0


def test_a_failed_runtime_check_raises_and_the_function_stays_usable():
    fast = trident.compile(checked_item)
    x = torch.randn(6)
    torch.testing.assert_close(fast(x, torch.tensor(3)), checked_item(x, torch.tensor(3)))
    with pytest.raises(RuntimeError, match="assertion"):
        fast(x, torch.tensor(9))
    torch.testing.assert_close(fast(x, torch.tensor(5)), checked_item(x, torch.tensor(5)))
    assert trident.counters(fast)["specializations"] == 1


def test_the_program_reads_items_natively():
    ir = trident.controller(trident.compile(item_as_a_size)).lower_call(torch.randn(3), torch.tensor([2, 5])).text
    assert " = item %" in ir


def branch_on_a_sum(x, m):
    y = x * 3
    if m.sum() > 0:
        return y + 1
    return y * 2


def test_a_branch_on_data_runs_each_way_natively():
    """The first call's branch is traced and checked first thing; a call whose data goes the other
    way runs the specialization captured for that way (data_values.py: `expect`)."""
    fast = trident.compile(branch_on_a_sum)
    x = torch.randn(4)
    for m in (torch.ones(3), -torch.ones(3), torch.ones(3), -torch.ones(3), torch.zeros(3), torch.ones(3)):
        torch.testing.assert_close(fast(x, m), branch_on_a_sum(x, m), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (2, 4, 0), c
    assert "expect " in trident.explain(fast)


def count_down(x):
    while x.max() > 0:
        x = x - 1
    return x


def test_a_loop_on_data_is_a_specialization_per_trip_count():
    fast = trident.compile(count_down)
    for v in (2.0, 1.0, 2.0, 0.5, 1.0):
        x = torch.full((3,), v)
        torch.testing.assert_close(fast(x), count_down(x), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"]) == (2, 3), c  # two trip counts: 2 (for 2.0) and 1 (1.0, 0.5)


def branch_after_an_in_place_write(x):
    x.add_(1)
    if x.sum() > 0:
        return x * 2
    return x


def test_a_branch_on_a_tensor_written_before_it_says_so():
    fast = trident.compile(branch_after_an_in_place_write, fullgraph=True)
    with pytest.raises(trident.UnsupportedError, match="Data-dependent branching"):
        fast(torch.ones(3))


def test_a_branch_on_a_tensor_written_before_it_runs_split_each_way():
    fast = trident.compile(branch_after_an_in_place_write)
    for v in (1.0, -5.0, 2.0, -3.0):
        x, y = torch.full((3,), v), torch.full((3,), v)
        torch.testing.assert_close(fast(x), branch_after_an_in_place_write(y), rtol=0, atol=0)
        torch.testing.assert_close(x, y, rtol=0, atol=0)  # the in-place write landed
    c = trident.counters(fast)
    assert (c["split_calls"], c["fallbacks"], c["split_piece_fallbacks"]) == (4, 0, 0), c
    assert c["split_piece_hits"] > 0, c


def branch_on_an_item(x):
    if x.sum().item() > 0:
        return x * 2.0
    return x - 1.0


def test_a_branch_on_an_item_compared_with_a_number_runs_each_way():
    fast = trident.compile(branch_on_an_item)
    pos = torch.rand(3, 4) + 0.1
    for x in (pos, -pos, pos, -pos):
        torch.testing.assert_close(fast(x), branch_on_an_item(x), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (2, 2, 0), c


def count_then_branch(x, y):
    """Liger-Kernel's fused MoE (0.8.x) reads its tile count so: `n = int(t.item())`, then sizes an
    allocation by it and launches only `if n > 0:`."""
    n = int((x > 0).sum().item())
    slots = torch.zeros(n)
    if n > 0:
        y = y * 2.0
    return y + slots.sum(), slots.shape[0]


def test_a_branch_on_the_int_of_an_item_runs_each_way_without_splitting():
    fast = trident.compile(count_then_branch)
    x, y = torch.randn(16), torch.randn(4)
    for a in (x.abs() + 0.1, -x.abs(), x, -x.abs() - 1.0):
        want, got = count_then_branch(a, y), fast(a, y)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        assert got[1] == want[1]
    c = trident.counters(fast)
    assert (c["specializations"], c["split_calls"], c["fallbacks"]) == (2, 0, 0), c
    assert c["hits"] == 2, c


def int_of_a_float_item(x):
    if int(x.sum().item()) > 2:  # int() truncates: not the same comparison on the tensor
        return x * 2.0
    return x - 1.0


def test_a_branch_on_the_int_of_a_float_item_is_not_taken_as_a_comparison_of_the_tensor():
    fast = trident.compile(int_of_a_float_item)
    with pytest.warns(RuntimeWarning, match="cannot be captured as one program"):
        for v in (0.7, 0.8):  # sums 2.8 and 3.2: int() 2 and 3
            x = torch.full((4,), v)
            torch.testing.assert_close(fast(x), int_of_a_float_item(x), rtol=0, atol=0)
    assert trident.counters(fast)["split_calls"] == 2


def assigns_under_a_size_condition(x, counts):
    rows = torch.zeros(int(counts.sum().item()))
    y = x
    if rows.shape[0] > 0:
        y = x * 2.0  # a value the code after the `if` reads: not a launch region
    return y + rows.sum()


def writes_under_a_size_condition(x, counts):
    rows = torch.zeros(int(counts.sum().item()))
    if rows.shape[0] > 0:
        x.mul_(2.0)  # an ATen write: not a launch region
    return x + rows.sum()


def else_under_a_size_condition(x, counts):
    rows = torch.zeros(int(counts.sum().item()))
    if rows.shape[0] > 0:
        x = x * 2.0
    else:
        x = x - 1.0
    return x + rows.sum()


@pytest.mark.parametrize("fn", [assigns_under_a_size_condition, writes_under_a_size_condition,
                                else_under_a_size_condition])
def test_a_branch_on_data_dependent_sizes_that_is_no_launch_region_runs_split_each_way(fn):
    """An `if` on sizes only data decides is one program when its body only launches kernels
    (test_triton_capture_cpu.py); a body that assigns what later code reads, writes through ATen, or
    has an `else` runs split there, as torch.compile splits it, with eager's results both ways."""
    fast = trident.compile(fn)
    with pytest.warns(RuntimeWarning, match="cannot be captured as one program"):
        for counts in ([1, 2], [0, 0], [3, 0], [0, 0]):
            c = torch.tensor(counts)
            x, y = torch.arange(4.0), torch.arange(4.0)
            torch.testing.assert_close(fast(x, c), fn(y, c), rtol=0, atol=0)
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["split_calls"], c["fallbacks"], c["split_piece_fallbacks"]) == (4, 0, 0), c
