"""``static``: fixed sizes all along (the backtest passes the offline schedule's peak)."""

from __future__ import annotations

from collections.abc import Mapping

from planner.config import Policy
from planner.profile import Profile
from planner.sim.evaluate.baselines.common import gpus_per_replica, make_decision
from planner.types import Decision, NoData, Observation


class StaticController:
    def __init__(self, policy: Policy, profile: Profile, targets: Mapping[str, int], name: str = "static") -> None:
        self.name = name
        self.interval_s = float(policy.interval_s)
        self.targets = dict(targets)
        self.gpus = gpus_per_replica(policy, profile)

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        return make_decision(now_s, self.targets, self.gpus)
