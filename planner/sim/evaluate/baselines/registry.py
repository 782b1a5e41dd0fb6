"""The backtest's baselines by name: what ``--baselines`` accepts, its help, and how each is built.

Adding a baseline: write its Controller in its own file under planner/sim/evaluate/baselines/ and add one
``Baseline`` line to ``REGISTRY`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from planner.controller import initial_state
from planner.errors import UserError
from planner.policy_file import PolicyFile
from planner.profile import Profile
from planner.sim.evaluate.baselines.dynamo_load import DynamoLoadController
from planner.sim.evaluate.baselines.dynamo_throughput import DynamoThroughputController
from planner.sim.evaluate.baselines.reactive import ReactiveController
from planner.sim.evaluate.baselines.static import StaticController
from planner.sim.evaluate.baselines.static_yesterday import yesterday_targets
from planner.sim.evaluate.clairvoyant import clairvoyant_planner
from planner.sim.evaluate.offline import OfflineSchedule
from planner.sim.traces.records import RequestTrace
from planner.types import Controller


@dataclass(frozen=True)
class BaselineContext:
    """What a baseline may be built from: the run's policy, profile and trace, and what is running at the start."""

    policy: PolicyFile
    profile: Profile
    trace: RequestTrace
    initial: dict[str, int]  # replicas per pool when the replay starts
    schedule: OfflineSchedule | None  # the offline schedule, for baselines built from it (after it)
    warmup_s: float
    startup_s: float
    dynamo_predictor: str
    yesterday: RequestTrace | None = None  # the previous day's requests (static-yesterday sizes from its peak)
    peak_window_s: float = 600.0  # the averaging window of yesterday's peak

    @property
    def window_s(self) -> float:
        return self.policy.metrics.window_s


@dataclass(frozen=True)
class Baseline:
    name: str
    help: str
    build: Callable[[BaselineContext], Controller]
    needs_schedule: bool = False  # built from the offline schedule, so run after it
    # The metrics window it reads: the policy's, or (Dynamo) one as long as its own adjustment interval.
    window_is_interval: bool = False

    # Starts from its own sizes instead of what the others start from (static: its fixed sizes).
    starts_at_own_targets: bool = False

    def window_s(self, controller: Controller, ctx: BaselineContext) -> float:
        return float(controller.interval_s) if self.window_is_interval else ctx.window_s

    def starting_replicas(self, controller: Controller, ctx: BaselineContext) -> dict[str, int]:
        if self.starts_at_own_targets:
            assert isinstance(controller, StaticController)
            return controller.targets_at(0.0)
        return dict(ctx.initial)


def static_controller(ctx: BaselineContext, sizes: Mapping[str, int], name: str = "static") -> StaticController:
    """Fixed ``sizes`` over the scored window, led through the warm-up by the offline schedule's sizes there."""
    assert ctx.schedule is not None
    return StaticController(ctx.policy, ctx.profile, sizes, name=name, lead=ctx.schedule.plan.held,
                            lead_until_s=ctx.warmup_s)


def _static(ctx: BaselineContext) -> Controller:
    assert ctx.schedule is not None
    return static_controller(ctx, ctx.schedule.peak(ctx.warmup_s))


def _static_yesterday(ctx: BaselineContext) -> Controller:
    if ctx.yesterday is None:
        raise UserError("yesterday: static-yesterday needs the previous day's trace", key="yesterday")
    targets = yesterday_targets(ctx.policy, ctx.profile, ctx.yesterday, ctx.peak_window_s)
    return StaticController(ctx.policy, ctx.profile, targets, name="static-yesterday")


def _dynamo_throughput(ctx: BaselineContext) -> Controller:
    return DynamoThroughputController(ctx.policy, ctx.profile, ctx.initial, predictor=ctx.dynamo_predictor)


REGISTRY: dict[str, Baseline] = {b.name: b for b in (
    Baseline("static", "the offline schedule's peak, held all along", _static, needs_schedule=True,
             starts_at_own_targets=True),
    Baseline("static-yesterday", "yesterday's peak need (the what-if sizing of its busiest 10 minutes) + 20 % "
             "headroom, held all along (needs --yesterday)", _static_yesterday, starts_at_own_targets=True),
    Baseline("reactive", "HPA/KEDA-style thresholds with HPA's default behaviour",
             lambda c: ReactiveController(c.policy, c.profile, c.initial)),
    Baseline("dynamo-throughput", "NVIDIA Dynamo's SLA planner, throughput-based mode (completed requests, "
             "Little's-law decode concurrency, --dynamo-predictor)", _dynamo_throughput, window_is_interval=True),
    Baseline("dynamo-load", "NVIDIA Dynamo's SLA planner, load-based mode (+-1 replica from online TTFT/ITL "
             "regressions every 5 s)", lambda c: DynamoLoadController(c.policy, c.profile, c.initial),
             window_is_interval=True),
    # Deprecated for one release: the same controller as dynamo-throughput, reported under that name.
    Baseline("dynamo-sla", "deprecated alias of dynamo-throughput (reported as dynamo-throughput)",
             _dynamo_throughput, window_is_interval=True),
    Baseline("clairvoyant", "planner+perfect-forecast: the planner's decide() fed the true future load",
             lambda c: clairvoyant_planner(c.policy, c.profile, c.trace, c.window_s, initial_state(c.initial))),
)}


# What `planner backtest` runs when --baselines is not given.
DEFAULT_BASELINES = ("static", "reactive", "dynamo-throughput", "dynamo-load", "clairvoyant")
# Accepted by --baselines for one release: the references (lower bound, offline schedule) are in every report.
REFERENCE_ALIASES = ("oracle", "offline")


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)
