"""Calls that an earlier specialization must not serve: each once gave a wrong result or none of
eager's errors. A spurious miss is fine; a false hit never is."""
import warnings

import pytest
import torch

import trident


def _quiet(fast, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fast(*args)


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(-1) * x.shape[1],
    lambda x: x[:, :1].expand(x.shape[0], x.shape[1]) + 0,
    lambda x: x.narrow(1, 0, x.shape[1]) * 2,
    lambda x: x.reshape(-1)[: x.shape[1]] + 1,
], ids=["size_as_scalar", "expand", "narrow", "slice"])
def test_a_reused_capture_that_specialized_a_size_to_one_is_not_reused_for_other_sizes(fn):
    """The capture made at (4, 1) held size 1 as a constant (export specializes 0 and 1); reusing it
    for (5, 7) with a guard at the call's own size computed with 1."""
    fast = trident.compile(fn)
    for shape in [(2, 3), (4, 1), (5, 7), (3, 1), (6, 2)]:
        x = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape)
        assert torch.equal(_quiet(fast, x), fn(x)), shape


@pytest.mark.parametrize("dynamic, compiles", [(None, 1), (False, 2)])
def test_negative_zero_does_not_hit_a_specialization_made_for_zero(dynamic, compiles):
    # A run-time float (the default) takes each call's sign; a float guarded by value (dynamic=False)
    # is guarded by its bits, so 0.0 and -0.0 are two specializations.
    fn = lambda x, s: x / s  # noqa: E731
    fast = trident.compile(fn, dynamic=dynamic)
    x = torch.ones(2)
    for s in [0.0, -0.0, 0.0, -0.0]:
        assert torch.equal(fast(x, s), fn(x, s)), s
    assert trident.counters(fast)["compiles"] == compiles
    assert trident.counters(fast)["hits"] == 4 - compiles


def test_nan_floats_still_hit_their_specialization():
    fast = trident.compile(lambda x, s: x + s)
    x = torch.ones(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.isnan(fast(x, float("nan"))).all()
    c = trident.counters(fast)
    if c["compiles"] == 0:
        # torch 2.11's export cannot capture a NaN argument (NameError: name 'nan' is not defined in
        # the code Dynamo generates): every call runs eagerly, the capture tried once, said once.
        assert c["fallbacks"] == 3 and c["misses"] == 3, c
        assert sum("name 'nan' is not defined" in str(w.message) for w in caught) == 1
    else:
        assert (c["compiles"], c["hits"]) == (1, 2), c


class _AddsItsBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.ones(3))

    def forward(self, x):
        return x.add_(self.w) * self.w


def test_a_written_argument_that_is_the_modules_own_buffer_runs_as_eager():
    ref, m = _AddsItsBuffer(), _AddsItsBuffer()
    fast = trident.compile(m)
    assert torch.equal(fast(torch.zeros(3)), ref(torch.zeros(3)))  # compiled for a distinct argument
    with pytest.warns(RuntimeWarning, match="shares memory with w"):
        got = fast(m.w)
    assert torch.equal(got, ref(ref.w)) and torch.equal(m.w, ref.w)
    assert torch.equal(fast(torch.zeros(3)), ref(torch.zeros(3)))  # and the spec still serves
    assert trident.counters(fast)["hits"] == 1


def test_a_written_argument_overlapping_a_parameter_after_the_parameter_moved():
    """A spec's overlap guards hold the state's addresses: `.data = ...` recompiles them."""
    ref, m = _AddsItsBuffer(), _AddsItsBuffer()
    fast = trident.compile(m)
    fast(torch.zeros(3))
    new = torch.full((6,), 2.0)
    m.w.data = new[:3]
    ref.w.data = torch.full((6,), 2.0)[:3]
    x = new[:3]  # the buffer's new memory, passed as the argument
    with pytest.warns(RuntimeWarning, match="shares memory with w"):
        got = fast(x)
    ref_x = ref.w
    assert torch.equal(got, ref(ref_x))


@pytest.mark.parametrize("setting", ["default_dtype", "deterministic", "matmul_precision"])
def test_a_global_setting_a_trace_depends_on_selects_its_own_specialization(setting):
    fn = lambda x: (x + torch.ones(3)) @ torch.eye(3)  # noqa: E731
    fast = trident.compile(fn)
    x = torch.zeros(3, dtype=torch.float32)
    assert fast(x).dtype == torch.float32
    before = (torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
              torch.get_float32_matmul_precision())
    try:
        if setting == "default_dtype":
            torch.set_default_dtype(torch.float64)
        elif setting == "deterministic":
            torch.use_deterministic_algorithms(True)
        else:
            torch.set_float32_matmul_precision("high")
        expected = fn(x)
        got = fast(x)
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    finally:
        torch.set_default_dtype(before[0])
        torch.use_deterministic_algorithms(before[1])
        torch.set_float32_matmul_precision(before[2])
    # matmul precision is read by ATen as the program runs (no new specialization needed)
    compiles = 1 if setting == "matmul_precision" else 2
    assert trident.counters(fast)["compiles"] == compiles
    assert fast(x).dtype == torch.float32
    assert trident.counters(fast)["compiles"] == compiles and trident.counters(fast)["hits"] == 3 - compiles


def test_a_torch_function_mode_such_as_a_default_device_runs_eagerly_and_says_so():
    fast = trident.compile(lambda x: x + torch.ones(2))
    assert torch.equal(fast(torch.zeros(2)), torch.ones(2))
    with torch.device("meta"):
        with pytest.warns(RuntimeWarning, match="TorchFunctionMode is active"):
            got = fast(torch.zeros(2, device="cpu").to("meta"))
    assert got.device.type == "meta"


@pytest.mark.parametrize("fn", [
    lambda x: x.mul_(1.5),
    lambda x: x.add_(torch.full((3,), 0.5)),
    lambda x: x.clamp_(min=0.5),
    lambda x: x.div_(2),
], ids=["mul_", "add_", "clamp_", "div_"])
def test_an_in_place_op_whose_result_its_input_cannot_hold_raises_as_eager(fn):
    with pytest.raises(RuntimeError) as eager:
        fn(torch.ones(3, dtype=torch.int64))
    fast = trident.compile(fn)
    x = torch.ones(3, dtype=torch.int64)
    with pytest.raises(RuntimeError) as ours:
        fast(x)
    assert str(ours.value) == str(eager.value)
    assert torch.equal(x, torch.ones(3, dtype=torch.int64))  # nothing written
    assert torch.equal(fast(torch.ones(3)), fn(torch.ones(3)))  # and the function stays usable


@pytest.mark.parametrize("fn", [
    lambda x, y: x.copy_(y * 1.5),
    lambda x, y: x.add_(y.to(torch.int64)),
    lambda x, y: x.masked_fill_(y > 0, 2.5),
], ids=["copy_casts", "explicit_to", "masked_fill_scalar"])
def test_in_place_writes_that_eager_casts_still_compile(fn):
    x, y = torch.ones(3, dtype=torch.int64), torch.ones(3)
    fast = trident.compile(fn)
    expected = fn(x.clone(), y)
    assert torch.equal(fast(x, y), expected) and torch.equal(x, expected)


def _scale_then_reduce(x):
    x.mul_(1.1)
    return x.sum(0), x.sum()


def test_a_reduction_after_an_in_place_write_is_eagers_bits_for_dense_inputs_and_close_for_gapped_views():
    """The documented limit (docs/features.md): the program reduces the new values where the
    functional graph holds them, a dense tensor; eager reduces the written input itself, so a view
    with gaps (a step slice) is summed in another order and may differ in the last bits."""
    fast = trident.compile(_scale_then_reduce)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        base = torch.randn(64, 128, generator=gen)
        dense_e, dense_t = base.clone(), base.clone()
        for p, q in zip(_scale_then_reduce(dense_e), fast(dense_t)):
            assert torch.equal(p, q)
        assert torch.equal(dense_e, dense_t)
        gapped_e, gapped_t = base.clone()[:, ::2], base.clone()[:, ::2]
        for p, q in zip(_scale_then_reduce(gapped_e), fast(gapped_t)):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-4)
        assert torch.equal(gapped_e, gapped_t)  # the write itself is exact
