"""Helpers for the decide tests (no tests here): policies, observations, forecasts, one whole-Decision check."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from planner.decide import DeciderSpec
from planner.policy_file import PolicyFile, parse_policy
from planner.profile import load_profile
from planner.types import QUANTILES, Decision, Forecast, LoadForecast, Observation, PoolObservation, Reason

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "policies" / "example.yaml"
# The decide tables are written against the hedge (no error budget, no steady rules, quantile 0.8): each stage is
# tested alone there, and the tests of the budget and the steady rules turn them on where they test them.
HEDGE = REPO / "policies" / "hedge.yaml"
PROFILE = load_profile(REPO / "profiles" / "h200" / "qwen3-32b.json")
ISL, OSL = 1155.0, 211.0


def example_data() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def policy(**over: Any) -> PolicyFile:
    """policies/hedge.yaml with overrides (nested dicts merge); the profile is the shipped Qwen3-32B one."""
    data = merge(yaml.safe_load(HEDGE.read_text()), over)
    data["profile"] = str(REPO / "profiles" / "h200" / "qwen3-32b.json")
    return parse_policy(data, "test-policy")


FREE = {"tolerance": 0.0, "scale_up": {"stabilization_window_s": 0, "policies": []},
        "scale_down": {"stabilization_window_s": 0, "policies": []}}


def spec(pol: PolicyFile) -> DeciderSpec:
    """What decide() takes: the policy with its sizing model, built once per policy (as the controller does)."""
    return DeciderSpec.build(pol, PROFILE, pol.stale_after_s)


def free_policy(**over: Any) -> PolicyFile:
    """No stabilisation or rate limits: the decision is the SLA sizing within floors, ceilings and budget."""
    big = {"pools": {"prefill": {"max_replicas": 1000}, "decode": {"max_replicas": 1000}}, "behavior": FREE}
    return policy(**merge(big, over))


def flat(value: float, ok: bool = True) -> Forecast:
    return Forecast(value, {q: value for q in QUANTILES}, 150.0, "test", ok, "" if ok else "broken")


def load_forecast(rate: float, isl: float = ISL, osl: float = OSL, ok: bool = True) -> LoadForecast:
    return LoadForecast(flat(rate, ok), flat(isl), flat(osl))


def pool_obs(rate: float, ready: int | None = None, isl: float | None = ISL, osl: float | None = OSL,
             window_s: float = 30.0, **extra: Any) -> PoolObservation:
    return PoolObservation(requests=rate * window_s, rate_rps=rate, isl_mean=isl if rate > 0 else None,
                           osl_mean=osl if rate > 0 else None, ready_replicas=ready, **extra)


def observation(at_s: float, rate: float, ready: Mapping[str, int] | None = None,
                pools: tuple[str, ...] = ("prefill", "decode"), **extra: Any) -> Observation:
    ready = ready or {}
    return Observation(at_s, 30.0, {p: pool_obs(rate, ready.get(p), **extra) for p in pools})


def assert_decision(decision: Decision, expected: Mapping[str, tuple[int, set[Reason]]],
                    gpus: int | None = None) -> None:
    """The whole decision at once: every pool's replicas and exact reason set, and the GPU total."""
    got = {name: (p.replicas, set(p.reasons)) for name, p in decision.pools.items()}
    assert got == dict(expected), f"decision {got} != expected {dict(expected)}"
    assert set(decision.reasons) == set().union(*(r for _, r in expected.values()))
    if gpus is not None:
        assert decision.gpus == gpus




class Plant:
    """A toy serving system for scenario tests: replicas become ready ``startup_s`` after being asked for,
    leave at once when removed; observations report the offered load and the ready replicas (no latency
    fields, so calibration stays neutral). Time comes from a FakeClock."""

    def __init__(self, pol: PolicyFile, clock: Any, initial: Mapping[str, int]) -> None:
        self.policy = pol
        self.clock = clock
        self.pools = pol.pool_names()
        self.starting: dict[str, list[float]] = {p: [] for p in self.pools}  # ready-at times
        self.ready = {p: int(initial.get(p, 1)) for p in self.pools}

    def apply(self, targets: Mapping[str, int]) -> None:
        now = self.clock.now_s()
        for p, n in targets.items():
            have = self.ready[p] + len(self.starting[p])
            if n > have:
                self.starting[p] += [now + self.policy.startup_s] * (n - have)
            elif n < have:
                drop = have - n
                cut = min(drop, len(self.starting[p]))
                self.starting[p] = self.starting[p][: len(self.starting[p]) - cut]
                self.ready[p] -= drop - cut

    def advance(self) -> None:
        now = self.clock.now_s()
        for p in self.pools:
            done = [t for t in self.starting[p] if t <= now]
            self.starting[p] = [t for t in self.starting[p] if t > now]
            self.ready[p] += len(done)

    def observe(self, rate: float, pools: tuple[str, ...] | None = None) -> Observation:
        now = self.clock.now_s()
        names = pools if pools is not None else self.pools
        return Observation(now, 30.0, {p: pool_obs(rate, self.ready[p]) for p in names})


def drive(pol: PolicyFile, rates: Any, hours: float, forecaster: str = "last-value",
          observe: Any = None, initial: Mapping[str, int] | None = None, on_tick: Any = None) -> list[Decision]:
    """Run the planner controller against the Plant for ``hours``; ``rates(t_s)`` gives the load."""
    from planner.controller import make_planner_controller
    from planner.testing.clock import FakeClock

    clock = FakeClock(0.0)
    plant = Plant(pol, clock, initial or {p: pol.pool(p).min_replicas for p in pol.pool_names()})
    ctl = make_planner_controller(pol, PROFILE, forecaster)
    out = []
    steps = int(hours * 3600 / pol.interval_s)
    for _ in range(steps):
        clock.advance(pol.interval_s)
        plant.advance()
        t = clock.now_s()
        obs = observe(plant, t) if observe is not None else plant.observe(rates(t))
        d = ctl.tick(obs, t)
        plant.apply(d.targets())
        if on_tick is not None:
            on_tick(plant, t, d)
        out.append(d)
    return out


def direction_changes_per_hour(decisions: list[Decision], pool: str) -> int:
    """Most reversals of the pool's target direction within any one-hour span."""
    moves = []
    prev = None
    for d in decisions:
        n = d.pools[pool].replicas
        if prev is not None and n != prev:
            moves.append((d.at_s, 1 if n > prev else -1))
        prev = n
    reversals = [t for (t, s), (_, s0) in zip(moves[1:], moves[:-1], strict=True) if s != s0]
    return max((sum(1 for u in reversals if t <= u < t + 3600) for t in reversals), default=0)
