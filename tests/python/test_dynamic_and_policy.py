"""Dynamic shapes, miss policies, explain and thread safety of one compiled function."""
import logging
import threading
import warnings

import pytest
import torch

import trident


def decode(q, k_cache, v_cache, new_k, new_v, length: int):
    """A decode step: write the new key/value at `length`, attend over the first length+1."""
    k_cache[:, :, length] = new_k
    v_cache[:, :, length] = new_v
    k = k_cache[:, :, : length + 1]
    v = v_cache[:, :, : length + 1]
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    return torch.softmax(s, -1) @ v


def attend(q, k, v):
    """Attention over a KV of growing length, given as tensors whose length varies."""
    s = (q @ k.transpose(-1, -2)) / k.shape[-1] ** 0.5
    return torch.softmax(s, -1) @ v


def test_growing_kv_length_compiles_at_most_twice_and_matches_eager():
    fast = trident.compile(attend)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for length in range(1, 301):
            q = torch.randn(1, 4, 1, 16, generator=g)
            k = torch.randn(1, 4, length, 16, generator=g)
            v = torch.randn(1, 4, length, 16, generator=g)
            torch.testing.assert_close(fast(q, k, v), attend(q, k, v))
    c = trident.counters(fast)
    assert c["compiles"] <= 2 and c["hits"] >= 298, c


def test_python_int_position_becomes_symbolic():
    def window_sum(x, cache, pos: int):
        return cache[:, :pos].sum(1) + x * pos

    fast = trident.compile(window_sum)
    cache = torch.randn(2, 64, 8)
    with torch.no_grad():
        for pos in range(1, 60):
            x = torch.randn(2, 8)
            torch.testing.assert_close(fast(x, cache, pos), window_sum(x, cache, pos))
    c = trident.counters(fast)
    assert c["compiles"] <= 3, c  # pos=1, then a symbolic pos (0/1 specialization may add one)


def test_in_place_kv_cache_decode_matches_eager_for_every_length():
    fast = trident.compile(decode)
    g = torch.Generator().manual_seed(1)
    kc, vc = torch.zeros(1, 2, 64, 8), torch.zeros(1, 2, 64, 8)
    kc2, vc2 = kc.clone(), vc.clone()
    with torch.no_grad():
        for length in range(0, 64):
            q, nk, nv = (torch.randn(1, 2, 1, 8, generator=g) for _ in range(3))
            want = decode(q, kc, vc, nk[:, :, 0], nv[:, :, 0], length)
            got = fast(q, kc2, vc2, nk[:, :, 0], nv[:, :, 0], length)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(kc2, kc)
    assert trident.counters(fast)["specializations"] <= 64


def test_dynamic_true_compiles_once_for_many_sizes():
    def f(x):
        return torch.relu(x) * 2 + x.sum(0)

    fast = trident.compile(f, dynamic=True)
    with torch.no_grad():
        for n in range(2, 40):
            x = torch.randn(n, 3)
            torch.testing.assert_close(fast(x), f(x))
    assert trident.counters(fast)["compiles"] == 1


def test_dynamic_false_specializes_every_size():
    fast = trident.compile(lambda x: x + 1, dynamic=False)
    with torch.no_grad():
        for n in range(2, 6):
            fast(torch.randn(n))
    assert trident.counters(fast)["specializations"] == 4


def test_on_miss_error_names_the_failed_guard():
    fast = trident.compile(lambda x: x * 2, on_miss="error")
    with pytest.raises(trident.MissPolicyError, match="no specialization yet"):
        fast(torch.randn(3))


@pytest.mark.parametrize("policy", ["error", "eager"])
def test_warmup_compiles_what_a_strict_policy_then_serves(policy):
    """on_miss="error" or "eager" alone could never compile anything: trident.warmup does."""
    fast = trident.compile(lambda x: x * 2, on_miss=policy, dynamic=False)
    assert torch.equal(trident.warmup(fast, torch.ones(3)), torch.full((3,), 2.0))
    assert torch.equal(fast(torch.ones(3)), torch.full((3,), 2.0))
    c = trident.counters(fast)
    assert c["compiles"] == 1 and c["hits"] == 1
    if policy == "error":
        with pytest.raises(trident.MissPolicyError, match="L0.size"):
            fast(torch.ones(4))
    else:
        assert torch.equal(fast(torch.ones(4)), torch.full((4,), 2.0))
        assert trident.counters(fast)["fallbacks"] == 1
    assert torch.equal(trident.warmup(fast, torch.ones(3)), torch.full((3,), 2.0))  # a hit: nothing compiled
    assert trident.counters(fast)["compiles"] == 1


def test_cap_falls_back_to_eager_and_logs_once(caplog):
    fast = trident.compile(lambda x, n: x * n, max_specializations=2, dynamic=False)
    x = torch.randn(4)
    with caplog.at_level(logging.WARNING, logger="trident"), torch.no_grad():
        for n in range(1, 8):
            torch.testing.assert_close(fast(x, n), x * n)
    c = trident.counters(fast)
    assert c["specializations"] == 2 and c["fallbacks"] == 5
    cap = [r for r in caplog.records if "max_specializations=2" in r.getMessage()]
    assert len(cap) == 1 and "ival" in cap[0].getMessage()


def test_recompile_reason_is_logged(caplog):
    fast = trident.compile(lambda x: x - 1, dynamic=False)
    with caplog.at_level(logging.INFO, logger="trident"), torch.no_grad():
        fast(torch.randn(3))
        fast(torch.randn(3, dtype=torch.float64))
    assert any("recompiling" in r.getMessage() and "dtype == 6" in r.getMessage() for r in caplog.records)


def test_explain_for_arguments_names_the_selected_spec_or_failing_guard():
    fast = trident.compile(lambda x: x.cos(), dynamic=False)
    with torch.no_grad():
        fast(torch.randn(5))
    with torch.no_grad():  # grad mode is guarded too
        hit = trident.explain(fast, torch.randn(5))
        miss = trident.explain(fast, torch.randn(5, dtype=torch.float64))
    assert "these arguments select: spec 0" in hit
    assert "nothing (miss)" in miss and "L0.dtype == 6 (actual 7)" in miss


def test_two_threads_one_missing_compile_once_and_agree():
    def f(x):
        return torch.tanh(x) + 1

    fast = trident.compile(f, dynamic=False)
    x = torch.randn(16)
    errors, results = [], []
    start = threading.Barrier(4)

    def worker():
        try:
            start.wait()
            with torch.no_grad():
                for _ in range(50):
                    results.append(torch.equal(fast(x), f(x)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(results) and len(results) == 200
    c = trident.counters(fast)
    assert c["compiles"] == 1 and c["specializations"] == 1


def test_an_int_that_cannot_stay_symbolic_is_said_once_and_not_captured_symbolically_again():
    """`int(n / 2)` truncates a symbolic float, which the lowering cannot compute: every new n
    compiles its own specialization. That costs a capture per value, so it is said once (naming
    the argument), and the symbolic capture that failed is not tried again for each new value."""
    fn = lambda x, n: x * int(n / 2)  # noqa: E731
    fast = trident.compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in [2, 3, 4, 5, 3]:
            assert torch.equal(fast(torch.ones(2), n), fn(torch.ones(2), n))
    said = [str(w.message) for w in caught if "could not be captured symbolically" in str(w.message)]
    assert len(said) == 1 and "(n)" in said[0], said
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"]) == (4, 1), c


def test_an_int_divided_into_a_float_stays_symbolic():
    """`n / 2` is a run-time float computed from the symbolic n (itof, fdiv): one specialization
    after the first value."""
    fn = lambda x, n: x * (n / 2)  # noqa: E731
    fast = trident.compile(fn)
    for n in [2, 3, 4, 5, 3, 7]:
        assert torch.equal(fast(torch.ones(2), n), fn(torch.ones(2), n))
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"]) == (2, 4), c
