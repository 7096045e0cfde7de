"""Namedtuples, structseqs and torch.Size as arguments: flattened natively by their items as a
tuple is, guarded on their class (a namedtuple's by identity: arg_objects.tuple_class), ints and
floats inside them run-time values as a plain tuple's are; what does not qualify runs eagerly and
says why."""
import collections
import typing

import pytest
import torch

import trident

State = collections.namedtuple("State", "x pos scale")
Other = collections.namedtuple("Other", "x pos scale")


class Step(typing.NamedTuple):
    hidden: torch.Tensor
    mode: str
    extra: list


def advance(s, w):
    return (s.x[: s.pos] * s.scale) @ w


def test_a_namedtuple_argument_runs_natively_with_run_time_ints_and_floats():
    fast = trident.compile(advance)
    w = torch.randn(8, 3)
    for k in range(6):
        s = State(torch.randn(10, 8), 3 + k, 0.5 + k)
        torch.testing.assert_close(fast(s, w), advance(s, w), rtol=0, atol=0)
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0, c
    # the first value, then the int as a symbol (it varied); the float is run-time from the start
    assert c["compiles"] == 2 and c["hits"] == 4, c
    assert "s.pos" in trident.explain(fast)


def test_two_namedtuple_classes_of_the_same_fields_get_their_own_specializations():
    def f(s):
        return s.x * 2 if type(s) is State else s.x + 1

    fast = trident.compile(f)
    x = torch.randn(4)
    for s in (State(x, 1, 1.0), Other(x, 1, 1.0), State(x, 1, 1.0), Other(x, 1, 1.0)):
        torch.testing.assert_close(fast(s), f(s), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (2, 2, 0), c


def test_a_typed_namedtuple_with_a_str_and_a_list_writes_the_list_back():
    def f(step: Step):
        step.extra.append(step.hidden.sum(0))
        return step.hidden * (2 if step.mode == "double" else 3)

    fast = trident.compile(f)
    for mode in ("double", "triple", "double"):
        h = torch.randn(3, 4)
        mine, theirs = Step(h, mode, [h[0]]), Step(h, mode, [h[0]])
        torch.testing.assert_close(fast(mine), f(theirs), rtol=0, atol=0)
        assert len(mine.extra) == len(theirs.extra) == 2
        torch.testing.assert_close(mine.extra[1], theirs.extra[1], rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (2, 1, 0), c


def test_a_namedtuple_the_function_returns_comes_back_of_its_class_with_this_calls_values():
    def f(s, y):
        return s, s.x + y

    fast = trident.compile(f)
    for k in range(4):
        s = State(torch.randn(4), 2 + k, 0.5 + k)
        got, want = fast(s, torch.ones(4)), f(s, torch.ones(4))
        assert type(got[0]) is State and (got[0].pos, got[0].scale) == (s.pos, s.scale)
        assert got[0].x is s.x or torch.equal(got[0].x, s.x)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    c = trident.counters(fast)
    assert c["hits"] == 2 and c["fallbacks"] == 0, c


def test_namedtuples_inside_a_list_and_as_an_objects_attribute():
    class Holder:
        def __init__(self, s):
            self.s = s

    def f(items, holder):
        return sum(t.x * t.scale for t in items) + holder.s.x

    fast = trident.compile(f)
    for k in range(3):
        items = [State(torch.randn(4), 1, 2.0), State(torch.randn(4), 2, 3.0 + k)]
        holder = Holder(Other(torch.randn(4), 0, 1.0))
        torch.testing.assert_close(fast(items, holder), f(items, holder), rtol=0, atol=0)
    assert trident.counters(fast)["fallbacks"] == 0


def test_a_structseq_argument_runs_natively():
    def f(x, top):
        return x.gather(-1, top.indices) - top.values

    fast = trident.compile(f)
    for _ in range(3):
        x = torch.randn(4, 16)
        top = torch.topk(x, 3)
        torch.testing.assert_close(fast(x, top), f(x, top), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["compiles"], c["hits"], c["fallbacks"]) == (1, 2, 0), c


def test_a_namedtuple_subclass_with_an_instance_dictionary_runs_eagerly_and_says_why():
    class Loose(State):  # no __slots__ = (): instances carry a dictionary the items do not hold
        pass

    def f(s):
        return s.x * s.scale

    fast = trident.compile(f)
    s = Loose(torch.randn(4), 1, 2.0)
    with pytest.warns(RuntimeWarning, match=r"Loose is not supported natively \(Loose is a namedtuple subclass "
                                            r"with an instance dictionary: give it __slots__ = \(\)\)"):
        torch.testing.assert_close(fast(s), f(s), rtol=0, atol=0)
    assert trident.counters(fast)["fallbacks"] == 1


def test_a_torch_size_argument_runs_natively_its_ints_symbolic():
    def restore(flat, shape):
        return flat.view(shape) * shape[0]

    fast = trident.compile(restore)
    for n in range(2, 8):
        shape = torch.Size([n, 8])
        flat = torch.randn(n * 8)
        torch.testing.assert_close(fast(flat, shape), restore(flat, shape), rtol=0, atol=0)
    c = trident.counters(fast)
    # the first shape, then the varying int and size symbolic (export is given a tuple of ints)
    assert (c["compiles"], c["hits"], c["fallbacks"], c["split_calls"]) == (2, 4, 0, 0), c


def test_a_torch_size_in_a_dict_is_a_size_inside_the_call_and_after_it():
    def f(x, opts):
        kind = 2 if isinstance(opts["shape"], torch.Size) else 3
        return x.view(opts["shape"]) * kind, opts["shape"]

    fast = trident.compile(f)
    for n in (2, 3, 4):
        x = torch.randn(n * 4)
        mine, theirs = {"shape": torch.Size([n, 4])}, {"shape": torch.Size([n, 4])}
        size = mine["shape"]
        got, want = fast(x, mine), f(x, theirs)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        assert type(got[1]) is torch.Size and got[1] == want[1]
        assert mine["shape"] is size  # left as it was: nothing written back
    # a plain tuple of the same ints is another structure, and the function sees a tuple
    x = torch.randn(8)
    torch.testing.assert_close(fast(x, {"shape": (2, 4)})[0], f(x, {"shape": (2, 4)})[0], rtol=0, atol=0)
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0 and c["hits"] >= 1, c


def test_a_tuple_the_function_turns_into_a_size_in_a_dict_it_was_given_is_written_back():
    def f(x, opts):
        opts["shape"] = torch.Size(opts["shape"])
        return x.view(opts["shape"])

    fast = trident.compile(f)
    for n in (2, 3, 4):
        x = torch.randn(n * 4)
        mine, theirs = {"shape": (n, 4)}, {"shape": (n, 4)}
        torch.testing.assert_close(fast(x, mine), f(x, theirs), rtol=0, atol=0)
        assert type(mine["shape"]) is torch.Size and mine["shape"] == theirs["shape"]
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["split_calls"] == 0, c
