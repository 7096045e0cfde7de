"""The no_overlap guard (ir/expr.h), one per device in place of a pairwise guard per argument and
state tensor: the generated C sorts the arguments' byte ranges and binary-searches the state's; the
native explainer checks every pair. Both must agree with a pairwise reference written here, on
random ranges of every class, including empty, adjacent and unsorted ones, and explain must name
the pair."""
import random

import pytest
import torch

from trident import _C

WRITTEN, READ, STATE_ONLY, WRITTEN_STATE, READ_STATE = range(5)
_CONFLICTS = {(0, 0), (0, 1), (0, 3), (0, 4), (1, 3), (2, 3)}


def _conflict(a, b) -> bool:
    return (min(a, b), max(a, b)) in _CONFLICTS


def _reference(ranges) -> bool:
    """ranges: (class, start, bytes). True when no two conflicting non-empty ranges overlap."""
    for i, (ca, sa, na) in enumerate(ranges):
        for cb, sb, nb in ranges[i + 1:]:
            if na > 0 and nb > 0 and _conflict(ca, cb) and sa < sb + nb and sb < sa + na \
                    and not (ca >= 3 and cb >= 3):
                return False
    return True


def _scm(text):
    scm = _C.SCM(lambda *a, **k: None)
    scm.add_spec(text)
    scm.counters()  # waits for the selector still compiling: select() then runs the compiled one
    return scm


def _spec(classes, state):
    """A spec over 1-D float32 arguments whose one guard is no_overlap of their extents and `state`."""
    items = [f"{c}, L{k}.data_ptr, 4 * L{k}.size[0]" for k, c in enumerate(classes)]
    items += [f"{c}, {p}, {n}" for c, p, n in state]
    return "spec 0 structure \"" + "T" * len(classes) + "\" {\n  guard expr \"no_overlap(" + ", ".join(items) + \
        ")\"\n  return none\n}\n"


@pytest.mark.parametrize("seed", range(6))
def test_the_sorted_sweep_and_the_explainer_agree_with_every_pair(seed):
    rng = random.Random(seed)
    buf = torch.zeros(256)
    base = buf.data_ptr()
    n_args = rng.randint(2, 7)
    classes = [rng.choice([WRITTEN, READ, STATE_ONLY]) for _ in range(n_args)]
    state = [(rng.choice([WRITTEN_STATE, READ_STATE]), base + 4 * rng.randrange(0, 256), 4 * rng.randrange(0, 12))
             for _ in range(rng.randint(0, 5))]
    scm = _scm(_spec(classes, state))
    agreed = {True: 0, False: 0}
    for _ in range(60):
        views, ranges = [], []
        for k in range(n_args):
            start, n = rng.randrange(0, 256), rng.choice([0, 1, 2, 3, 5, 8, 13])
            n = min(n, 256 - start)
            views.append(buf[start:start + n])
            ranges.append((classes[k], base + 4 * start, 4 * n))
        want = _reference(ranges + state)
        assert (scm.select(*views) == 0) == want, (ranges, state)
        (_, why), = scm.explain_call(*views)
        assert (why == "") == want, (why, ranges, state)
        if not want:
            assert why.startswith("no_overlap: ") and " overlaps " in why, why
        agreed[want] += 1
    assert agreed[True] and agreed[False], agreed  # both outcomes exercised


def test_adjacent_empty_and_read_only_ranges_never_conflict():
    buf = torch.zeros(64)
    scm = _scm(_spec([WRITTEN, READ, READ], []))
    assert scm.select(buf[0:8], buf[8:16], buf[8:16]) == 0        # adjacent; two reads may share
    assert scm.select(buf[4:4], buf[0:8], buf[0:8]) == 0          # an empty written range
    assert scm.select(buf[0:8], buf[7:9], buf[20:30]) == -1       # one element shared with a write
    (_, why), = scm.explain_call(buf[0:8], buf[7:9], buf[20:30])
    assert why == "no_overlap: argument L0 (written) overlaps argument L1", why


def test_module_state_extents_are_tables_the_module_hands_to_its_selector():
    buf = torch.zeros(64)
    p = buf.data_ptr()
    state = [(READ_STATE, p + 128, 16), (WRITTEN_STATE, p + 32, 8), (READ_STATE, p, 8)]
    scm = _scm(_spec([WRITTEN, STATE_ONLY], state))
    src = open(scm.selector_paths()[0]).read()
    # The addresses are data, not code: the same guards over state elsewhere compile to the same object.
    assert "c->tables[0], 3, c->tables[1], 1)" in src and str(p) not in src, src[-800:]
    assert "trd_no_overlap((int64_t[]){" in src and "disjoint" not in src.split("trd_select")[1]
    assert scm.select(buf[4:6], buf[20:30]) == 0         # nothing touches the state
    assert scm.select(buf[33:34], buf[20:30]) == -1      # a written argument inside read state
    assert scm.select(buf[4:6], buf[8:9]) == -1          # a state-only argument inside written state
    assert scm.select(buf[4:6], buf[0:2]) == 0           # ... but it may overlap read state
    (_, why), = scm.explain_call(buf[4:6], buf[8:9])
    assert why == f"no_overlap: argument L1 overlaps module state at {p + 32} (written)", why


def test_one_selector_object_serves_modules_whose_state_lives_at_different_addresses():
    a, b = torch.zeros(64), torch.zeros(64)
    scms = [_scm(_spec([WRITTEN], [(WRITTEN_STATE, t.data_ptr(), 64)])) for t in (a, b)]
    assert scms[0].selector_paths() == scms[1].selector_paths()   # one cache entry, one loaded object
    assert scms[1].counters()["compiles"] == 1
    for mine, other, scm in ((a, b, scms[0]), (b, a, scms[1])):
        assert scm.select(mine[0:4]) == -1        # inside its own state's first 64 bytes
        assert scm.select(mine[16:20]) == 0       # past them
        assert scm.select(other[0:4]) == 0        # the other module's state is not its own
