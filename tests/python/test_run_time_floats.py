"""Python floats are run-time values of a specialization (float_symbols.py): an eps, a softmax scale
or a temperature that changes per call compiles once, takes each call's value natively (an ATen
Scalar, a Tensor-typed number, arithmetic on it, a returned float) and gives eager's numbers bit
for bit. A float that decides a branch is a condition checked natively where export traces it,
else a specialization per value, said once and in explain, without costing the other arguments
their symbols."""
import math
import warnings

import pytest
import torch
import torch.nn as nn

import trident


def _rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _scaled_softmax(scores, temperature, scale=1.0):
    s = 1.0 / math.sqrt(temperature) * scale
    return torch.softmax(scores * s, dim=-1), torch.full((2,), temperature), -temperature * -2 - scale


def _counters_ok(fast, compiles, calls):
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (compiles, calls - compiles, 0), c


def test_a_float_argument_over_20_values_compiles_once():
    fast = trident.compile(_rms_norm)
    x, w = torch.randn(4, 64), torch.randn(64)
    for k in range(20):
        eps = 1e-6 * (k + 1) + 1e-3 * k
        assert torch.equal(fast(x, w, eps), _rms_norm(x, w, eps)), k
    _counters_ok(fast, 1, 20)
    text = trident.explain(fast)
    assert "fval" not in text and "$f0 = float 2" in text, text


def test_float_keywords_arithmetic_and_returned_floats_match_eager_exactly():
    fast = trident.compile(_scaled_softmax)
    scores = torch.randn(3, 10)
    for k in range(8):
        t, sc = 0.5 + 0.37 * k, 1.0 / (k + 1)
        got, want = fast(scores, t, scale=sc), _scaled_softmax(scores, t, scale=sc)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), k
        assert type(got[2]) is float and got[2] == want[2], (got[2], want[2])
    _counters_ok(fast, 1, 8)


def test_a_float_power_and_a_tensor_to_a_float_power_compile_once():
    """A float to a power (`t ** 2.0`: a runtime assert on t) and a tensor to a float power (pow's
    shortcut exponents 1, 2 and 0.5 among the values) take each call's value natively; torch 2.11
    failed both captures and compiled one specialization per value (_compat's pow and solver fixes)."""
    def f(x, t, e):
        return x * t ** 0.5, t ** 2.0, x.abs().pow(e)

    fast = trident.compile(f)
    x = torch.randn(4)
    values = [(0.5, 1.0), (1.5, 2.0), (2.5, 0.5), (3.5, 3.0), (0.25, 2.0), (4.0, -1.5)]
    for t, e in values:
        got, want = fast(x, t, e), f(x, t, e)
        assert torch.equal(got[0], want[0]) and got[1] == want[1] and torch.equal(got[2], want[2]), (t, e)
    _counters_ok(fast, 1, len(values))


def test_ints_and_sizes_mixed_into_float_arithmetic():
    def f(x, n, alpha):
        return x * (n / 2) + float(n) * alpha + x.size(0) * alpha - alpha, n / 3 * alpha

    fast = trident.compile(f, dynamic=True)
    for k in range(1, 7):
        x = torch.randn(k + 1, 3)
        got, want = fast(x, k, 0.1 * k), f(x, k, 0.1 * k)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], k
    _counters_ok(fast, 1, 6)


def test_special_values_and_promotion_with_an_int_tensor():
    def f(x, a):
        return x.to(torch.int32) * a, -0.0 * a, x.clamp(min=a)

    fast = trident.compile(f)
    x = torch.randn(8) * 4
    values = [0.5, -1.0, 0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3.25]
    for a in values:
        got, want = fast(x, a), f(x, a)
        assert got[0].dtype == want[0].dtype == torch.float32
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(got[2], want[2], rtol=0, atol=0, equal_nan=True)
        assert math.copysign(1, got[1]) == math.copysign(1, want[1]) or math.isnan(want[1]), a
    _counters_ok(fast, 1, len(values))


def test_python_errors_of_float_arithmetic_raise_as_in_eager_and_the_function_stays_usable():
    def f(x, t):
        return x / t + 1.0 / t + math.sqrt(t)

    fast = trident.compile(f)
    x = torch.randn(5)
    assert torch.equal(fast(x, 2.0), f(x, 2.0))
    with pytest.raises(ZeroDivisionError, match="float division by zero"):
        fast(x, 0.0)
    with pytest.raises(ValueError, match="math domain error"):
        fast(x, -4.0)
    assert torch.equal(fast(x, 3.0), f(x, 3.0))
    c = trident.counters(fast)
    assert (c["compiles"], c["fallbacks"]) == (1, 0), c


def test_floats_of_a_module_forward_and_inside_a_tuple():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(6))

        def forward(self, x, coeffs, *, bias=0.0):
            return x * self.w * coeffs[0] + coeffs[1] + bias

    m = Scale()
    fast = trident.compile(m)
    x = torch.randn(2, 6)
    for k in range(6):
        coeffs = (0.5 * k, 1.0 - k)
        assert torch.equal(fast(x, coeffs, bias=k / 7), m(x, coeffs, bias=k / 7)), k
    _counters_ok(fast, 1, 6)


def test_a_float_that_decides_a_branch_is_specialized_said_once_and_keeps_the_int_symbolic():
    def step(cache, x, pos, temperature):
        cache[pos] = x
        y = cache.sum(0)
        return y / temperature if temperature > 0.5 else y * temperature

    fast = trident.compile(step)
    ours, theirs = torch.zeros(16, 4), torch.zeros(16, 4)
    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for pos in range(12):
            t = (0.25, 0.75)[pos % 2]
            assert torch.equal(fast(ours, x, pos, t), step(theirs, x, pos, t)) and torch.equal(ours, theirs), pos
    said = [str(w.message) for w in caught if "temperature" in str(w.message)]
    assert len(said) == 1 and "cannot be run-time values" in said[0], said
    assert caught[0].filename == __file__, caught[0].filename
    # the first call fully static; then one per temperature with the position symbolic
    c = trident.counters(fast)
    assert c["compiles"] == 3 and c["hits"] == 9 and c["fallbacks"] == 0, c
    assert "said once: the floats temperature cannot be run-time values" in trident.explain(fast)


def test_dynamic_false_guards_every_float_by_value():
    fast = trident.compile(_rms_norm, dynamic=False)
    x, w = torch.randn(2, 8), torch.randn(8)
    for eps in (1e-5, 2e-5, 1e-5, -0.0, 0.0):
        assert torch.equal(fast(x, w, eps), _rms_norm(x, w, eps))
    c = trident.counters(fast)
    assert c["compiles"] == 4 and c["hits"] == 1, c  # -0.0 and 0.0 are different constants


def test_floats_inside_a_list_a_dict_and_a_frozen_dataclass_compile_once():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Sampling:
        temperature: float
        bias: torch.Tensor

    def f(x, cfg, weights, sampling):
        return x * cfg["alpha"] + cfg["beta"][0] + sum(w * x for w in weights) + sampling.bias / sampling.temperature

    fast = trident.compile(f)
    x = torch.randn(3)
    for k in range(6):
        cfg, weights = {"alpha": 0.5 + k, "beta": [2.0 - k]}, [0.25 * k, 1.5]
        sampling = Sampling(0.7 + 0.1 * k, torch.randn(3))
        assert torch.equal(fast(x, cfg, weights, sampling), f(x, cfg, weights, sampling)), k
        # the caller's containers still hold their floats (the capture turned copies into tensors)
        assert type(cfg["alpha"]) is float and type(weights[0]) is float and type(sampling.temperature) is float
    _counters_ok(fast, 1, 6)
    text = trident.explain(fast)
    assert "fval" not in text and "sampling.temperature: a float (a run-time value)" in text, text


def test_a_float_the_function_replaces_in_a_dict_or_an_object_is_written_back():
    class State:
        def __init__(self, t):
            self.t = t
            self.x = torch.ones(2)

    def decay(state, opts):
        opts["lr"] = opts["lr"] * 0.5
        state.t = state.t + 1.0
        return state.x * opts["lr"]

    fast = trident.compile(decay)
    for k in range(5):
        mine, theirs = (State(0.5 * k), {"lr": 1.0 + k}), (State(0.5 * k), {"lr": 1.0 + k})
        assert torch.equal(fast(*mine), decay(*theirs)), k
        assert (mine[0].t, mine[1]["lr"]) == (theirs[0].t, theirs[1]["lr"]), k
        assert type(mine[0].t) is float and type(mine[1]["lr"]) is float
    _counters_ok(fast, 1, 5)


def test_a_float_in_a_list_that_decides_a_branch_compiles_each_side_once():
    """The branch on a run-time float is checked natively (the data-dependent `if`: each side a
    specialization whose condition the program checks), not a specialization per value; and the
    list it was given is not written back (one `$fN` per leaf, however often the trace reads it)."""
    def f(x, ws):
        return x * ws[1] if ws[0] > 1.0 else x - ws[1]

    fast = trident.compile(f)
    x = torch.randn(3)
    for a in (0.5, 1.5, 0.7, 2.5, 0.9, 1.1):
        ws = [a, 3.0]
        assert torch.equal(fast(x, ws), f(x, ws))
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"], c["split_calls"]) == (2, 4, 0, 0), c
    assert "update(" not in trident.explain(fast)


def test_a_float_in_a_tuple_beside_a_dict_argument_is_a_run_time_value():
    """A dict argument makes the capture return every argument after the call, the tuple holding
    the float's 0-dim tensor among them; that returned placeholder is the float itself (it failed
    the lowering: 'argument of type FloatInput', and each value compiled a specialization)."""
    def f(pair, opts):
        return pair[0] * pair[1] + opts["a"]

    fast = trident.compile(f)
    for k in range(5):
        pair, opts = (torch.randn(3), 0.5 + k), {"a": 1.0 - k}
        assert torch.equal(fast(pair, opts), f(pair, opts)), k
    _counters_ok(fast, 1, 5)
