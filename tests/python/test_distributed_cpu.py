"""Collectives and tensor parallelism over torch.distributed on the CPU (Gloo), 2 and 4 processes
on this machine (tests/python/distributed_worker.py is one rank): every rank's compiled function
hits natively with eager's result, a TP decoder equals the unsharded model, a module sharded with
DTensor runs as Dynamo's graphs natively, a program that baked
the rank is dropped when the group is made again, and a collective whose peer left raises."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(case, world, tmp_path, timeout=240, env=None):
    store = str(tmp_path / "store")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_worker.py"), case, str(r), str(world),
                               store, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})})
             for r in range(world)]
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    results = []
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {"error": logs[r][-3000:]})
    for r, res in enumerate(results):
        assert "error" not in res, f"rank {r}: {res['error']}"
    return results


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_hit_natively_on_every_rank(tmp_path, world):
    for rank, res in enumerate(_run("collectives", world, tmp_path)):
        for name in ("all_reduce", "all_gather", "reduce_scatter", "inplace", "by_rank"):
            r = res[name]
            assert r["max_err"] <= 1e-5, (rank, name, r)
            assert (r["captures"], r["specializations"], r["hits"], r["fallbacks"], r["split_calls"]) == (1, 1, 2, 0, 0), \
                (rank, name, r)
        assert res["explain_groups"] == [f"spec 0 runs collectives on process group '0' as rank {rank} of {world} "
                                         "(dropped if a process group is destroyed)"]
        assert res["backend_err"] <= 1e-5


@pytest.mark.parametrize("case", ["tp_decoder", "tp_decoder_inplace"])
def test_tensor_parallel_decoder_equals_the_unsharded_model(tmp_path, case):
    for rank, res in enumerate(_run(case, 2, tmp_path)):
        for batch in ("batch1", "batch4"):
            r = res[batch]
            assert r["max_err"] <= 1e-4, (rank, batch, r)
            assert (r["captures"], r["hits"], r["fallbacks"], r["split_calls"]) == (1, 2, 0, 0), (rank, batch, r)
        assert res["backend_err"] <= 1e-4


def test_a_dtensor_sharded_module_runs_as_native_graphs(tmp_path):
    for rank, res in enumerate(_run("dtensor", 2, tmp_path)):
        assert res["max_err"] <= 1e-5, (rank, res)
        assert (res["fallbacks"], res["split_calls"], res["split_piece_fallbacks"]) == (0, 3, 0), (rank, res)
        assert res["split_piece_hits"] >= 2 and res["collectives"] >= 1, (rank, res)


def test_a_program_that_baked_the_rank_is_not_reused_after_the_group_is_made_again(tmp_path):
    for rank, res in enumerate(_run("regroup", 2, tmp_path)):
        assert res["first"] == [3.0, 3.0, 3.0]  # (0 + 1) + (1 + 1) on every rank
        assert res["specs_after_destroy"] == 0
        assert res["second"] == res["want_second"] == [3.0, 3.0, 3.0]
        assert res["captures"] == 2 and res["fallbacks"] == 0


def test_a_collective_whose_peer_left_raises_instead_of_hanging(tmp_path):
    results = []
    store = str(tmp_path / "store")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_worker.py"), "dead_peer", str(r), "2",
                               store, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "TRIDENT_TEST_PG_TIMEOUT": "5"})
             for r in range(2)]
    logs = [p.communicate(timeout=120)[0] for p in procs]
    res = json.loads((tmp_path / "rank0.json").read_text()) if (tmp_path / "rank0.json").exists() else {"error": logs[0]}
    assert "error" not in res, res
    assert res["raised"] == "RuntimeError" and res["seconds"] < 60, res
