"""DeciderSpec: everything ``decide`` needs that does not change from tick to tick, built once.

As Knative's autoscaler takes a DeciderSpec, ``decide`` takes this: the decision policy (no adapter's
settings), the sizing model built from the policy and the profile, and how old an observation may be. The live controller, the simulator and the what-if planner build it once
(``DeciderSpec.build``) and pass it to every call.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.config import Policy
from planner.decide.sizing_model import SizingModel
from planner.profile import Profile
from planner.types import Mode, Pool

DEFAULT_ISL_TOKENS, DEFAULT_OSL_TOKENS = 1024.0, 256.0  # lengths when neither forecast, data nor profile has one


@dataclass(frozen=True)
class DeciderSpec:
    policy: Policy  # the decision's part only (Policy.decision())
    model: SizingModel
    stale_after_s: float  # an observation older than this holds every pool (the metrics source's setting)
    fallback_isl_tokens: float  # lengths to size with when neither the forecast nor the window has them:
    fallback_osl_tokens: float  # the workload the profile was selected for

    @classmethod
    def build(cls, policy: Policy, profile: Profile, stale_after_s: float) -> DeciderSpec:
        isl, osl = DEFAULT_ISL_TOKENS, DEFAULT_OSL_TOKENS
        if profile.selection is not None:
            isl, osl = float(profile.selection.workload.isl), float(profile.selection.workload.osl)
        decision = policy.decision()
        return cls(decision, SizingModel.build(decision, profile), stale_after_s, isl, osl)

    @property
    def mode(self) -> Mode:
        return self.policy.mode

    @property
    def pools(self) -> tuple[Pool, ...]:
        return self.policy.pool_names()

    @property
    def horizon_s(self) -> float:
        """How far ahead capacity decided now must hold: a new replica's start-up plus one interval."""
        return self.policy.startup_s + self.policy.interval_s

    def gpus(self, pool: Pool) -> int:
        return self.model.gpus[pool]
