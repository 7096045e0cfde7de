"""The private pools ATen replay recordings share (python/trident/recording_pools.py), over a model
of PyTorch's pool bookkeeping that fails where PyTorch would: routing to a pool whose use count
reached zero (an internal assertion there), two routings to one pool at once."""
import random

import pytest

from trident.recording_pools import RecordingPools


class FakePyTorch:
    def __init__(self):
        self.uses, self.freeable, self.routed = {}, set(), set()
        self.freed_blocks = 0
        self.made = 0

    def new_pool(self):
        self.made += 1
        return (0, self.made)

    def begin_routing(self, device, pool):
        assert (device, pool) not in self.routed, "beginAllocateToPool: already recording to mempool_id"
        if (device, pool) in self.uses:
            assert self.uses[(device, pool)] > 0, "routing to a pool PyTorch may have freed"
            self.uses[(device, pool)] += 1
        else:
            assert (device, pool) not in self.freeable
            self.uses[(device, pool)] = 1
        self.routed.add((device, pool))

    def end_routing(self, device, pool):
        self.routed.remove((device, pool))

    def release_pool(self, device, pool):
        self.uses[(device, pool)] -= 1
        if self.uses[(device, pool)] == 0:
            del self.uses[(device, pool)]
            self.freeable.add((device, pool))

    def frees(self, device):
        return self.freed_blocks


def registry(torch_):
    return RecordingPools(torch_.begin_routing, torch_.end_routing, torch_.release_pool, torch_.new_pool,
                          torch_.frees)


def record(pools, torch_, device=0, stream=7, frees=0):
    pool = pools.begin(device, stream)
    torch_.freed_blocks += frees
    pools.end(device, pool)
    return pool


def test_recordings_without_frees_share_one_pool_until_its_last_use_is_released():
    t = FakePyTorch()
    pools = registry(t)
    recorded = [record(pools, t) for _ in range(8)]
    assert len(set(recorded)) == 1 and t.uses == {(0, recorded[0]): 8} and pools.pools() == 1
    for pool in recorded:
        pools.release(0, pool)
    assert t.uses == {} and t.freeable == {(0, recorded[0])} and pools.pools() == 0
    assert record(pools, t) != recorded[0]  # never routed to again once PyTorch may free it


def test_a_recording_that_freed_memory_keeps_its_pool_to_itself():
    t = FakePyTorch()
    pools = registry(t)
    first = record(pools, t)
    with_workspace = record(pools, t, frees=1)
    assert with_workspace == first  # it was shared when it began
    after = record(pools, t)
    assert after != first  # the pool holding a freed workspace is retired
    assert record(pools, t) == after
    assert t.uses == {(0, first): 2, (0, after): 2}
    for pool in (first, first, after, after):
        pools.release(0, pool)
    assert t.uses == {} and pools.pools() == 0


def test_streams_and_devices_get_pools_of_their_own():
    t = FakePyTorch()
    pools = registry(t)
    a, b, c = record(pools, t, stream=1), record(pools, t, stream=2), record(pools, t, device=1, stream=1)
    assert len({a, b, c}) == 3
    assert record(pools, t, stream=1) == a and record(pools, t, stream=2) == b


def test_a_recording_while_another_routes_the_shared_pool_gets_its_own():
    t = FakePyTorch()
    pools = registry(t)
    shared = pools.begin(0, 7)
    own = pools.begin(0, 7)
    assert own != shared
    pools.end(0, own)
    pools.end(0, shared)
    assert record(pools, t) == shared


def test_a_refused_routing_counts_no_use_and_the_next_recording_works():
    t = FakePyTorch()
    pools = registry(t)
    first = record(pools, t)
    t.routed.add((0, first))  # PyTorch refuses it, as when something else routes to that pool
    with pytest.raises(AssertionError, match="already recording"):
        pools.begin(0, 7)
    t.routed.remove((0, first))
    assert t.uses == {(0, first): 1}
    again = record(pools, t)
    assert again != first and t.uses == {(0, first): 1, (0, again): 1}


def test_random_recordings_and_releases_keep_the_counts_equal_to_pytorchs():
    rng = random.Random(0)
    t = FakePyTorch()
    pools = registry(t)
    live = []
    for _ in range(2000):
        if live and rng.random() < 0.45:
            pools.release(*live.pop(rng.randrange(len(live))))
        else:
            device, stream = rng.choice([(0, 1), (0, 2), (1, 1)])
            live.append((device, record(pools, t, device, stream, frees=int(rng.random() < 0.1))))
        assert pools.pools() == len(t.uses)
        assert sum(t.uses.values()) == len(live)
    for device, pool in live:
        pools.release(device, pool)
    assert t.uses == {} and pools.pools() == 0
