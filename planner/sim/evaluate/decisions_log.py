"""decisions.csv: every controller tick of a replay, why it chose what it did, and what came after it.

The studies behind README's figures each traced a miss the same way: which tick gave capacity back, what the
forecast said there, which posture and scale-down rules were in force, and how many of the requests that
arrived before the next tick then missed. This writes that record for every policy a backtest replays, so a
capacity planner reads it off a file instead of writing a replay script.

One row per tick and policy: ``t_s``; per pool the replicas asked for, the replicas the SLA model wanted
before behaviour and limits (``desired``) and the pool's reason codes; the decision's reason codes; the
requests that arrived from this tick to the next (``arrived``) and how many of them missed the TTFT target,
the ITL target, and either (a failed request misses both; warm-up rows count too, ``scored`` says which are
in the SLA's window); then the decision's own detail (forecast rate at the quantile sized at, lengths,
calibration factors, posture, scale-down rules, burstiness...), whichever keys the policy's ticks recorded.
Baselines that record no pool decisions leave those cells empty.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from planner.sim.evaluate.replay import Replay
from planner.sim.evaluate.scoring import met_targets

REASON_SEP = "|"  # reason codes within a cell (a comma would split the CSV cell for readers that ignore quotes)


def decision_rows(rep: Replay, ttft_ms: float, itl_ms: float) -> list[dict[str, object]]:
    """The rows of one replay (module doc), in tick order."""
    if not rep.decisions:
        return []
    ticks = np.array([d.at_s for d in rep.decisions])
    arrival = rep.results["arrival_s"]
    met_ttft, met_itl = met_targets(rep.results, ttft_ms, itl_ms)
    ttft, itl = ~met_ttft, ~met_itl
    edges = np.append(ticks, math.inf)
    # Request i belongs to the last tick at or before its arrival; requests before the first tick to none.
    slot = np.searchsorted(edges, arrival, side="right") - 1
    inside = (slot >= 0) & (slot < len(ticks))
    n = len(ticks)

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(slot[inside & mask], minlength=n)

    arrived, late, slow, either = count(np.ones_like(ttft)), count(ttft), count(itl), count(ttft | itl)
    rows: list[dict[str, object]] = []
    for i, d in enumerate(rep.decisions):
        row: dict[str, object] = {"t_s": round(d.at_s, 3), "scored": int(d.at_s >= rep.score_from_s)}
        for pool, pd in sorted(d.pools.items()):
            row[f"{pool}.replicas"] = pd.replicas
            row[f"{pool}.desired"] = round(pd.desired_unclamped, 3) if math.isfinite(pd.desired_unclamped) else ""
            row[f"{pool}.reasons"] = REASON_SEP.join(r.value for r in pd.reasons)
        row["reasons"] = REASON_SEP.join(r.value for r in d.reasons)
        row.update(arrived=int(arrived[i]), ttft_missed=int(late[i]), itl_missed=int(slow[i]), missed=int(either[i]))
        for key, value in d.detail.items():
            row[key] = round(value, 6) if isinstance(value, float) else value
        rows.append(row)
    return rows


def write_decisions(replays: Mapping[str, Replay], ttft_ms: float, itl_ms: float, out: Path) -> Path:
    """``out``/decisions.csv for every replay (module doc); columns in the order they first appear."""
    rows = [(name, row) for name, rep in replays.items() for row in decision_rows(rep, ttft_ms, itl_ms)]
    keys: dict[str, None] = {}
    for _, row in rows:
        keys.update(dict.fromkeys(row))
    path = out / "decisions.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", *keys])
        for name, row in rows:
            w.writerow([name, *(row.get(k, "") for k in keys)])
    return path
