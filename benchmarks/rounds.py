"""Best of several rounds of the mode workers.

The lent GPU machines change host speed by up to ~1.5x within minutes (benchmarks/NOTES.md, runs 5
and 6: the same trident decode step measured 0.83 ms and 1.32 ms in one call). Workers run one
after another, so a slow spell lands on whichever modes run during it and skews same-run ratios.
With `--rounds N` every mode runs N times, in forward then reverse order, and each timed entry
keeps its fastest round; every round's figure stays in the entry (`round_values`). A round whose
entry failed its check or errored wins over any time: a fast wrong answer still fails the run. A
round skipped for lack of time loses to any round that ran.
"""
from __future__ import annotations

import copy

OK, SKIPPED = "ok", "skipped"  # modes.py's statuses
# (suite, time field) of every timed entry; lower is better for all of them.
TIME_FIELD = {"percall": "us", "decode": "ms", "extras": "ms", "hf": "ms_per_step"}
# First-call figures are cold only in the first round (later rounds find warm disk caches).
COLD_FIELDS = ("first_call_s", "first_pass_s")


def order(modes: list[str], round_index: int) -> list[str]:
    return list(modes) if round_index % 2 == 0 else list(reversed(modes))


def _best(entries: list, field: str):
    present = [e for e in entries if isinstance(e, dict)]
    ran = [e for e in present if e.get("status") != SKIPPED]
    if not ran:
        return entries[0]
    bad = [e for e in ran if e.get("status") != OK or field not in e]
    best = copy.deepcopy(bad[0] if bad else min(ran, key=lambda e: e[field]))
    best["round_values"] = [e.get(field) if isinstance(e, dict) else None for e in entries]
    for cold in COLD_FIELDS:
        if cold in present[0]:
            best[cold] = present[0][cold]
    return best


def merge(per_round: list[dict]) -> dict:
    """One mode's result from its rounds' results (as run.run_worker returns them)."""
    if len(per_round) == 1:
        return per_round[0]
    merged = copy.deepcopy(per_round[0])
    merged["rounds"] = [r.get("worker") for r in per_round]
    for name in merged.get("percall", {}):
        merged["percall"][name] = _best([r.get("percall", {}).get(name) for r in per_round], TIME_FIELD["percall"])
    for batch, slot in merged.get("decode", {}).items():
        for scenario in slot:
            entries = [r.get("decode", {}).get(batch, {}).get(scenario) for r in per_round]
            if scenario == "extras":  # the device floors, by name
                slot[scenario] = {key: _best([(e or {}).get(key) for e in entries], TIME_FIELD["extras"])
                                  for key in (entries[0] or {})}
            else:
                slot[scenario] = _best(entries, TIME_FIELD["decode"])
    for batch in merged.get("hf", {}):  # tok_s comes with the chosen round's ms_per_step
        merged["hf"][batch] = _best([r.get("hf", {}).get(batch) for r in per_round], TIME_FIELD["hf"])
    return merged
