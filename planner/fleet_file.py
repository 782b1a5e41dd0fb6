"""A fleet file (contract): ``fleet.yaml``, many policies on one GPU budget, read and checked with one-line errors.

    budget:
      max_gpus: 64                      # every policy's GPUs together, at most
      gpu_cost_per_hour: {h200: 3.5}    # optional: per GPU type (the profiles' hardware.gpu), for reports
      wake_first: true                  # a sleeping policy with traffic gets its smallest size before any
                                        # priority grows (false: its wake waits for its priority, as any step)
      wake_after_s: 120                 # ... once its traffic has waited this long for its priority
    policies:
      - {policy: policies/chat.yaml, priority: 10}   # relative to this file's folder, else the working dir
      - {policy: policies/batch.yaml, priority: 0}   # higher priority keeps its SLA-sized replicas first

Checked at load, beside each policy file's own checks: policy names unique (they label every metric), one
``interval_s`` for all (the fleet decides in one tick), every policy's GPU type priced when prices are given,
and the floors (every pool's ``min_replicas`` x its GPUs per replica) within ``budget.max_gpus``: a budget
below them could only be met by breaking a floor, so it is a configuration error, not a runtime clamp.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator

from planner.decide.spec import DeciderSpec
from planner.errors import UserError, not_utf8
from planner.policy_file import PolicyFile, _format_error, load_policy
from planner.profile import Profile, load_profile
from planner.schema import StrictModel
from planner.yaml_unique import duplicate, load_unique


class FleetBudget(StrictModel):
    max_gpus: int = Field(ge=1, le=1_000_000)
    gpu_cost_per_hour: dict[str, float] = Field(default_factory=dict)
    # decide/fleet.py rule 1b. Off, a low priority's first request can wait past the router's timeout while
    # higher priorities hold the budget (planner bench fleet: 272 failed); on, those priorities may lose the
    # wake's GPUs (reason fleet_wake).
    wake_first: bool = True
    # How long a sleeping policy's traffic may wait for its priority before rule 1b wakes it ahead (0: at once).
    # 120 s: a wake granted then has its replicas up (start-up ~120 s) before the router's hold timeout (300 s)
    # with a tick to spare; a shorter wait takes GPUs from higher priorities for bursts that end sooner
    # (planner bench fleet over seeds 0-4: at 0 s the priority-10 code model fell to 92.1 % on one seed, 95.4 %
    # at 120 s; strict priority failed 0-1,303 requests a seed, every wait here none).
    wake_after_s: float = Field(120.0, ge=0.0, le=3600.0)

    @property
    def wake_after(self) -> float | None:
        """Rule 1b's wait, None when it is off (``wake_first: false``: strict priority)."""
        return self.wake_after_s if self.wake_first else None

    @field_validator("gpu_cost_per_hour")
    @classmethod
    def _prices(cls, prices: dict[str, float]) -> dict[str, float]:
        bad = next(((k, v) for k, v in prices.items() if not (v >= 0 and v < 1e6)), None)
        if bad is not None:
            raise ValueError(f"{bad[0]}: price {bad[1]!r} must be >= 0 and < 1e6 (per GPU per hour)")
        return prices


class FleetEntry(StrictModel):
    policy: str = Field(min_length=1)
    priority: int = Field(0, ge=-1_000_000, le=1_000_000)


class FleetSpec(StrictModel):
    budget: FleetBudget
    policies: list[FleetEntry] = Field(min_length=1)


@dataclass(frozen=True)
class FleetMember:
    policy: PolicyFile
    profile: Profile
    priority: int
    path: Path

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def floor_gpus(self) -> int:
        spec = DeciderSpec.build(self.policy, self.profile, self.policy.stale_after_s)
        return sum(self.policy.pool(p).min_replicas * spec.gpus(p) for p in self.policy.pool_names())

    @property
    def gpu(self) -> str:
        return self.profile.hardware.gpu


@dataclass(frozen=True)
class Fleet:
    source: str
    budget: FleetBudget
    members: tuple[FleetMember, ...]

    @property
    def max_gpus(self) -> int:
        return self.budget.max_gpus

    @property
    def interval_s(self) -> float:
        return float(self.members[0].policy.interval_s)

    def member(self, name: str) -> FleetMember:
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(name)

    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    def cost_per_gpu_hour(self, name: str) -> float | None:
        return self.budget.gpu_cost_per_hour.get(self.member(name).gpu)


def parse_fleet(data: Any, source: str = "<fleet>", base_dir: Path | None = None) -> Fleet:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a fleet must be a YAML mapping with keys budget and policies")
    try:
        spec = FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(_format_error(source, exc)) from None
    members = []
    for i, entry in enumerate(spec.policies):
        path = Path(entry.policy)
        if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
            path = base_dir / path  # relative to the fleet file's folder, else to the working directory
        try:
            policy = load_policy(path)
            profile = load_profile(policy.profile)
        except UserError as exc:
            raise UserError(f"{source}: key 'policies.{i}.policy' = {entry.policy!r}: {exc}") from None
        members.append(FleetMember(policy, profile, entry.priority, path))
    fleet = Fleet(source, spec.budget, tuple(members))
    _check(fleet)
    return fleet


def _check(fleet: Fleet) -> None:
    src = fleet.source
    seen: dict[str, int] = {}
    for i, m in enumerate(fleet.members):
        if m.name in seen:
            raise UserError(f"{src}: key 'policies.{i}.policy': policy name {m.name!r} is also policies.{seen[m.name]}"
                            "'s; names label every metric and must differ")
        seen[m.name] = i
    intervals = {float(m.policy.interval_s) for m in fleet.members}
    if len(intervals) > 1:
        shown = ", ".join(f"{m.name} {m.policy.interval_s:g}" for m in fleet.members)
        raise UserError(f"{src}: key 'policies': every policy of a fleet must have the same interval_s (the fleet "
                        f"decides in one tick); got {shown}")
    prices = fleet.budget.gpu_cost_per_hour
    if prices:
        unpriced = next((m for m in fleet.members if m.gpu not in prices), None)
        if unpriced is not None:
            raise UserError(f"{src}: key 'budget.gpu_cost_per_hour': no price for GPU {unpriced.gpu!r} (policy "
                            f"{unpriced.name}'s profile); allowed keys are GPU types: {', '.join(sorted(prices))} "
                            "given")
    floors = {m.name: m.floor_gpus for m in fleet.members}
    if sum(floors.values()) > fleet.max_gpus:
        shown = ", ".join(f"{n} {g}" for n, g in floors.items())
        raise UserError(f"{src}: key 'budget.max_gpus' = {fleet.max_gpus}: below the policies' floors "
                        f"({sum(floors.values())} GPUs at min_replicas: {shown}); raise it or lower min_replicas")


def load_fleet(path: str | Path) -> Fleet:
    p = Path(path)
    try:
        data = load_unique(p.read_text())
    except FileNotFoundError:
        raise UserError(f"{p}: fleet file not found") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(p, exc) from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read fleet file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{p}: not valid YAML{where}{duplicate(exc)}") from None
    return parse_fleet(data, str(p), p.resolve().parent)
