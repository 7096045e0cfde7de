"""Dict arguments (identifier string keys or int keys, nested freely) are described natively:
guarded by their keys in insertion order and by their leaves, as tuples and lists are
(python/bindings/flatten.h). Other dicts run the original function eagerly with a warning, as any
undescribable argument does."""
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


@pytest.mark.parametrize("bad", [{1.5: torch.ones(4)}, {"not an identifier": torch.ones(4)}, {"1st": torch.ones(4)},
                                 {"": torch.ones(4)}, {"a-b": torch.ones(4)}, {True: torch.ones(4)},
                                 {"\u00b7a": torch.ones(4)}, {1 << 70: torch.ones(4)}],
                         ids=["float", "spaces", "digit_first", "empty", "dash", "bool", "middle_dot_first", "huge_int"])
def test_other_dicts_run_eagerly_with_a_warning(bad):
    fast = trident.compile(lambda x, d: x + next(iter(d.values())))
    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(fast(x, bad), x + 1)
    assert any("keys are not all identifier strings or ints" in str(w.message) or "beyond 64 bits" in str(w.message)
               for w in caught), caught
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


def test_int_keys_are_described_natively_and_returned_as_ints():
    """A dict keyed by layer index (transformers' EncoderDecoderCache.is_updated) as an argument and
    as a result: guarded by its keys as `#0`, `#-1`, returned with int keys."""
    def per_layer(x, layers):
        return {k: x * v for k, v in layers.items()}, {0: x.sum()}

    fast = trident.compile(per_layer)
    x = torch.randn(4)
    layers = {0: torch.randn(4), 1: torch.randn(4), -1: torch.randn(4)}
    for _ in range(3):
        got, want = fast(x, layers), per_layer(x, layers)
        assert [list(d) for d in got] == [list(d) for d in want] == [[0, 1, -1], [0]]
        for g, w in zip(got, want):
            for k in w:
                torch.testing.assert_close(g[k], w[k])
    torch.testing.assert_close(fast(x, {1: x, 0: x})[0][1], x * x)  # another key order: another spec
    c = trident.counters(fast)
    assert (c["specializations"], c["hits"], c["fallbacks"]) == (2, 2, 0), c


def test_flags_set_in_an_int_keyed_dict_it_was_given_are_written_back():
    """As the cross-attention cache sets is_updated[layer] = True once a layer's keys are written."""
    def update(x, cache, flags, layer: int):
        if not flags[layer]:
            cache[layer] = x * 2
            flags[layer] = True
        return cache[layer] + x

    fast = trident.compile(update)
    x = torch.randn(4)
    mine, theirs = ({0: torch.zeros(4), 1: torch.zeros(4)}, {0: False, 1: False}), \
        ({0: torch.zeros(4), 1: torch.zeros(4)}, {0: False, 1: False})
    for layer in (0, 1, 0, 1, 0):
        torch.testing.assert_close(fast(x, *mine, layer), update(x, *theirs, layer))
        assert mine[1] == theirs[1] and all(torch.equal(mine[0][k], theirs[0][k]) for k in (0, 1))
    assert trident.counters(fast)["fallbacks"] == 0


def test_items_set_in_plain_dict_and_list_arguments_are_written_back():
    """A dict or list argument the function changes (not inside an object) is left as eager leaves
    it: the flag set and the tensor replaced in the dict, the list's item replaced and appended."""
    def step(x, state, history):
        state["seen"] = True
        state["t"] = state["t"] + x
        history[0] = x * 3
        history.append(x.sum())
        return x + 1

    fast = trident.compile(step)
    mine, theirs = ({"seen": False, "t": torch.zeros(2)}, [torch.zeros(2)]), \
        ({"seen": False, "t": torch.zeros(2)}, [torch.zeros(2)])
    d, lst = mine
    for k in range(3):
        x = torch.randn(2)
        torch.testing.assert_close(fast(x, *mine), step(x, *theirs))
        assert mine[0]["seen"] is True and torch.equal(mine[0]["t"], theirs[0]["t"])
        assert len(mine[1]) == len(theirs[1]) == 2 and all(torch.equal(a, b) for a, b in zip(*[m[1] for m in (mine, theirs)]))
        del lst[1], theirs[1][1]
        d["seen"] = theirs[0]["seen"] = False
    assert mine[0] is d and mine[1] is lst
    c = trident.counters(fast)
    assert (c["fallbacks"], c["hits"]) == (0, 2), c
