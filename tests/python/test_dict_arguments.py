"""Dict arguments (identifier string keys, nested freely) are described natively: guarded by their
keys in insertion order and by their leaves, as tuples and lists are (python/bindings/flatten.h).
Other dicts run the original function eagerly with a warning, as any undescribable argument does."""
import warnings

import pytest
import torch

import trident


def attend(x, state):
    return x @ state["w"] + state["extra"]["b"].sum()


def state_of(n, m, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(n, m, generator=g), "extra": {"b": torch.randn(m, generator=g)}}


def test_a_nested_dict_argument_runs_natively():
    fast = trident.compile(attend)
    x, st = torch.randn(3, 4), state_of(4, 5)
    for _ in range(3):
        torch.testing.assert_close(fast(x, st), attend(x, st))
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (1, 2, 0), c


def test_key_order_is_part_of_the_structure():
    fast = trident.compile(attend)
    x, st = torch.randn(3, 4), state_of(4, 5)
    swapped = {"extra": st["extra"], "w": st["w"]}
    torch.testing.assert_close(fast(x, st), attend(x, st))
    torch.testing.assert_close(fast(x, swapped), attend(x, swapped))
    torch.testing.assert_close(fast(x, swapped), attend(x, swapped))
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"]) == (2, 1), c


def test_a_missing_or_extra_key_is_a_new_specialization_not_a_false_hit():
    fast = trident.compile(lambda x, d: x + d.get("bias", torch.zeros(())) * 2)
    x = torch.randn(4)
    d = {"bias": torch.randn(4)}
    torch.testing.assert_close(fast(x, d), x + d["bias"] * 2)
    torch.testing.assert_close(fast(x, {}), x)
    torch.testing.assert_close(fast(x, {"bias": d["bias"], "other": 1}), x + d["bias"] * 2)
    assert trident.counters(fast)["specializations"] == 3


def test_cache_tensors_in_a_dict_are_written_in_place():
    def step(x, cache, pos: int):
        cache["k"][:, pos] = x
        return cache["k"][:, : pos + 1].sum(1)

    fast = trident.compile(step)
    cache, want_cache = {"k": torch.zeros(3, 8)}, {"k": torch.zeros(3, 8)}
    for pos in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(fast(x, cache, pos), step(x, want_cache, pos))
        assert torch.equal(cache["k"], want_cache["k"])
    assert trident.counters(fast)["fallbacks"] == 0


def test_sizes_inside_a_dict_become_symbolic():
    fast = trident.compile(attend)
    for n in (4, 6, 9, 12):
        x, st = torch.randn(2, n), state_of(n, n + 1, seed=n)
        torch.testing.assert_close(fast(x, st), attend(x, st))
    assert trident.counters(fast)["compiles"] == 2  # the second size seen makes them symbolic


@pytest.mark.parametrize("bad", [{1: torch.ones(4)}, {"not an identifier": torch.ones(4)}, {"1st": torch.ones(4)},
                                 {"": torch.ones(4)}, {"a-b": torch.ones(4)},
                                 {"\u00b7a": torch.ones(4)}],
                         ids=["int", "spaces", "digit_first", "empty", "dash", "middle_dot_first"])
def test_other_dicts_run_eagerly_with_a_warning(bad):
    fast = trident.compile(lambda x, d: x + next(iter(d.values())))
    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(fast(x, bad), x + 1)
    assert any("keys are not all identifier strings" in str(w.message) for w in caught), caught
    assert trident.counters(fast)["fallbacks"] == 1


@pytest.mark.parametrize("key", ["_", "a1", "Z_9", "\u00f1and\u00fa", "\u03c0", "a\u00b7b"])
def test_identifier_keys_ascii_and_not_are_described_natively(key):
    """The structure's names are identifiers as str.isidentifier() says, ASCII or not."""
    assert key.isidentifier()
    fast = trident.compile(lambda x, d: x + d[key])
    x = torch.randn(4)
    for k in range(3):
        d = {key: torch.full((4,), float(k))}
        torch.testing.assert_close(fast(x, d), x + k)
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (1, 2, 0), c
