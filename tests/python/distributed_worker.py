"""One rank of tests/python/test_distributed_cpu.py: `python distributed_worker.py CASE RANK WORLD
STORE OUT` joins a Gloo world through the file STORE, runs CASE and writes what it saw as JSON to
OUT/rank<RANK>.json (an exception's text under "error")."""
import datetime
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import trident
from tp_decoder import Decoder, full_weights, shard

COUNTED = ("captures", "specializations", "hits", "fallbacks", "split_calls")


def _counters(fast):
    n = trident.counters(fast)
    return {k: n[k] for k in COUNTED}


def _check(fast, fn, *args, calls=3):
    want = fn(*args)
    errs = []
    for _ in range(calls):
        got = fast(*args)
        errs.append(float((got - want).abs().max()))
    return {"max_err": max(errs), **_counters(fast)}


def collectives(rank, world):
    group = dist.group.WORLD
    x = torch.randn(4, 8) + rank

    def all_reduce(x):
        return fc.all_reduce(x * 2, "sum", group) + 1

    def all_gather(x):
        return fc.all_gather_tensor(x.relu(), 0, group) * 3

    def reduce_scatter(x):
        return fc.reduce_scatter_tensor(x.repeat(world, 1), "sum", 0, group) - 1

    def inplace(x):
        y = x * 2
        dist.all_reduce(y)
        return y + 1

    def by_rank(x):  # the traced Python reads the rank: baked into the program
        return fc.all_reduce(x * (dist.get_rank() + 1), "sum", group)

    out = {}
    for fn in (all_reduce, all_gather, reduce_scatter, inplace, by_rank):
        fast = trident.compile(fn)
        out[fn.__name__] = _check(fast, fn, x)
        if fn is by_rank:
            out["explain_groups"] = [line.strip() for line in trident.explain(fast).splitlines() if "process group" in line]
    backend = torch.compile(all_reduce, backend="trident")
    with torch.no_grad():
        out["backend_err"] = float((backend(x) - all_reduce(x)).abs().max())
    return out


def tp_decoder(rank, world, inplace=False):
    layers, d, heads, ffn = 2, 64, 8, 128
    full = full_weights(layers, d, heads, ffn)
    ref = Decoder(full, heads)
    tp = Decoder(shard(full, heads, rank, world), heads // world, group=dist.group.WORLD, inplace=inplace)
    out = {}
    with torch.no_grad():
        for batch in (1, 4):
            x = torch.randn(batch, 5, d, generator=torch.Generator().manual_seed(batch))
            fast = trident.compile(tp)
            want = ref(x)
            got = [fast(x) for _ in range(3)]
            out[f"batch{batch}"] = {"max_err": max(float((g - want).abs().max()) for g in got), **_counters(fast)}
        backend = torch.compile(tp, backend="trident")
        x = torch.randn(2, 5, d, generator=torch.Generator().manual_seed(7))  # the same on every rank
        out["backend_err"] = max(float((backend(x) - ref(x)).abs().max()) for _ in range(2))
    return out


def tp_decoder_inplace(rank, world):
    return tp_decoder(rank, world, inplace=True)


def dtensor(rank, world):
    """An MLP sharded by parallelize_module over a DeviceMesh (ColwiseParallel, RowwiseParallel):
    the parameters are DTensors, which torch.export cannot capture; the call runs as Dynamo's
    graph, natively, its all-reduce included."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from trident.backend import live_graphs
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    x = torch.randn(4, 16)
    out = {}
    with torch.no_grad():
        want = m(x)
        parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fast = trident.compile(m)
        out["max_err"] = max(float((fast(x) - want).abs().max()) for _ in range(3))
        n = trident.counters(fast)
        out.update({k: n[k] for k in ("fallbacks", "split_calls", "split_piece_hits", "split_piece_fallbacks")})
        out["collectives"] = sum("_c10d_functional::all_reduce" in line
                                 for g in live_graphs() for line in g.scm.ir().splitlines())
    return out


def regroup(rank, world):
    """The default group is destroyed and made again with the ranks swapped: a program that baked
    the rank must not be reused."""
    def by_rank(x):
        return fc.all_reduce(x * (dist.get_rank() + 1), "sum", dist.group.WORLD)

    fast = trident.compile(by_rank)
    x = torch.ones(3)
    first = fast(x).tolist()
    store = os.environ["TRIDENT_TEST_STORE"] + ".2"
    dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=world - 1 - rank, world_size=world)
    n = trident.counters(fast)
    second = fast(x).tolist()
    return {"first": first, "second": second, "want_second": by_rank(x).tolist(),
            "specs_after_destroy": n["specializations"], **_counters(fast)}


def dead_peer(rank, world):
    """Rank 1 leaves; rank 0's compiled collective must raise within the group's timeout."""
    def all_reduce(x):
        return fc.all_reduce(x + 1, "sum", dist.group.WORLD)

    fast = trident.compile(all_reduce)
    fast(torch.ones(2))
    dist.barrier()
    if rank == 1:
        os._exit(0)
    import time
    t0 = time.monotonic()
    try:
        fast(torch.ones(2))
        return {"raised": None}
    except Exception as e:  # noqa: BLE001  (what the caller sees is the point)
        return {"raised": type(e).__name__, "message": str(e)[:300], "seconds": time.monotonic() - t0,
                "usable_after": trident.counters(fast)["hits"]}


def main():
    import faulthandler
    faulthandler.dump_traceback_later(200, exit=True)  # a hang shows where, before the harness gives up
    case, rank, world, store, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    os.environ["TRIDENT_TEST_STORE"] = store
    timeout = datetime.timedelta(seconds=float(os.environ.get("TRIDENT_TEST_PG_TIMEOUT", "60")))
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
    torch.manual_seed(rank)
    try:
        result = globals()[case](rank, world)
    except Exception:  # noqa: BLE001
        result = {"error": traceback.format_exc()}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
