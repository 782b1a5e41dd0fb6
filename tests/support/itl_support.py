"""What a fixed decode pool realises in the simulator: the ITL model's tests compare their predictions with it."""

from __future__ import annotations

import numpy as np

from planner.policy_file import PolicyFile
from planner.profile import Profile
from planner.sim.evaluate.backtest import sim_setup
from planner.sim.evaluate.baselines.static import StaticController
from planner.sim.evaluate.replay import replay
from planner.sim.traces.records import RequestTrace


def realised_itl_ms(trace: RequestTrace, profile: Profile, policy: PolicyFile, prefill: int, decode: int) -> float:
    """The token-weighted ITL at the SLA percentile over 60 s windows, median over the trace after a 300 s
    warm-up, of static pools of ``prefill`` and ``decode`` replicas."""
    _, config = sim_setup(trace, profile, policy, warmup_s=300.0)
    targets = {"prefill": prefill, "decode": decode}
    rep = replay(trace, profile, StaticController(policy, profile, targets), config, targets, window_s=60.0,
                 score_from_s=300.0)
    return float(np.nanmedian([r["itl_ms_at_sla"] for r in rep.timeline if r["t_s"] >= 360.0]))
