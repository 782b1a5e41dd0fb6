"""``static``: fixed sizes all along (the backtest passes the offline schedule's peak).

Through an unscored warm-up it holds at least what the offline schedule held there (``lead``): the peak is
the scored window's, and a warm-up busier than that window would otherwise leave a backlog the fixed pool
carries into the scored window for minutes (ServeGen hour 30 at x1.0 on Qwen3-8B: 48.6 % attainment, its
TTFT p95 264 s, where the offline schedule with a third fewer GPUs attained 98.0 %). A pool sized for this
hour was, in practice, sized for the minutes before it too; the warm-up is not billed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from planner.config import Policy
from planner.profile import Profile
from planner.sim.evaluate.baselines.common import gpus_per_replica, make_decision
from planner.types import Decision, NoData, Observation

# The sizes another schedule holds over [from_s, to_s): the floor static keeps before ``lead_until_s``.
Lead = Callable[[float, float], Mapping[str, int]]


class StaticController:
    def __init__(self, policy: Policy, profile: Profile, targets: Mapping[str, int], name: str = "static",
                 lead: Lead | None = None, lead_until_s: float = 0.0) -> None:
        self.name = name
        self.interval_s = float(policy.interval_s)
        self.targets = dict(targets)
        self.gpus = gpus_per_replica(policy, profile)
        self._lead = lead
        self._lead_until_s = float(lead_until_s)

    def targets_at(self, now_s: float) -> dict[str, int]:
        """Its fixed sizes, or, before ``lead_until_s``, the larger of them and what ``lead`` holds until the
        next tick."""
        if self._lead is None or now_s >= self._lead_until_s:
            return dict(self.targets)
        held = self._lead(now_s, min(now_s + self.interval_s, self._lead_until_s))
        return {p: max(n, int(held.get(p, 0))) for p, n in self.targets.items()}

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        return make_decision(now_s, self.targets_at(now_s), self.gpus)
