"""``static-yesterday``: what operators run: pools sized once for the previous day's peak need, plus headroom.

The peak need is what ``planner plan`` answers for the busiest ``peak_window_s`` of yesterday (its request rate
and mean lengths): the SLA-sized replicas per pool at that steady load. Operators then add headroom for a day
busier than the last and for what the average hides; HEADROOM is the common 20 % (a utilisation target of
~0.8). Unlike ``static`` (today's offline peak, which needs today's future), it needs only yesterday's trace.
"""

from __future__ import annotations

import math

import numpy as np

from planner.decide.whatif import plan
from planner.errors import UserError
from planner.policy_file import PolicyFile
from planner.profile import Profile
from planner.sim.traces.records import RequestTrace

HEADROOM = 0.2


def busiest_window(trace: RequestTrace, window_s: float) -> tuple[float, float, float]:
    """(rate req/s, mean ISL, mean OSL) of the ``window_s`` window (on a grid from the first arrival) with the
    most requests."""
    if len(trace) == 0:
        raise UserError("yesterday: the trace has no requests", key="yesterday")
    t = trace.arrival_s - float(trace.arrival_s[0])
    cell = np.floor(t / window_s).astype(np.int64)
    counts = np.bincount(cell)
    busiest = int(np.argmax(counts))
    mask = cell == busiest
    return float(counts[busiest]) / window_s, float(trace.isl[mask].mean()), float(trace.osl[mask].mean())


def yesterday_targets(policy: PolicyFile, profile: Profile, yesterday: RequestTrace, window_s: float,
                      headroom: float = HEADROOM) -> dict[str, int]:
    """Replicas per pool: yesterday's peak need (the what-if sizing) times 1 + ``headroom``, rounded up, within
    the policy's floors and ceilings."""
    rate, isl, osl = busiest_window(yesterday, window_s)
    need = plan(policy.decision(), profile, rate, isl, osl)
    out = {}
    for name, pd in need.pools.items():
        bounds = getattr(policy.pools, name)
        want = math.ceil(pd.replicas * (1.0 + headroom) - 1e-9)
        out[name] = max(bounds.min_replicas, min(bounds.max_replicas, want))
    return out
