"""`planner bench decide`: decide() latency over a day of varying load (goal: p99 <= 1 ms)."""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

from rich.console import Console

from planner.controller import sample_of
from planner.decide import DeciderSpec, decide
from planner.decide.whatif import flat_forecast
from planner.policy_file import PolicyFile, load_policy
from planner.profile import Profile, load_profile
from planner.types import LoadForecast, Observation, PoolObservation


def scenarios(pol: PolicyFile) -> dict[str, PolicyFile]:
    """The policy as written, with pools of up to 1000 replicas, and with a binding GPU budget."""
    roomy = pol.model_copy(update={"pools": pol.pools.model_copy(update={
        n: pol.pool(n).model_copy(update={"max_replicas": 1000}) for n in pol.pool_names()})})
    return {
        "policy as written": pol,
        "large pools (<= 1000 replicas)": roomy,
        "GPU budget binding": roomy.model_copy(update={"budget": roomy.budget.model_copy(update={"max_gpus": 40})}),
    }


def time_ticks(p: PolicyFile, prof: Profile, ticks: int, peak: float) -> tuple[list[float], list[float]]:
    """(best-of-3 microseconds per tick, first-call microseconds per tick), both sorted."""
    times_us: list[float] = []
    raw_us: list[float] = []
    state = None
    spec = DeciderSpec.build(p, prof, p.stale_after_s)  # once, as the controller does
    for i in range(ticks):
        now = i * p.interval_s
        rate = peak * (0.55 + 0.45 * math.sin(2 * math.pi * now / 86400.0))
        pool = PoolObservation(requests=rate * p.interval_s, rate_rps=rate, isl_mean=1155, osl_mean=211,
                               ttft_ms_p95=400.0, itl_ms_p95=30.0, running=rate * 6, ready_replicas=10)
        obs = Observation(now, p.interval_s, {n: pool for n in p.pool_names()})
        s = sample_of(p, obs)
        assert s is not None
        f = LoadForecast(flat_forecast(rate, 150), flat_forecast(s.isl_tokens, 150),
                         flat_forecast(s.osl_tokens, 150))
        # Best of 3 identical calls: decide() is deterministic, so the repeats only remove the time
        # this process spent preempted on a shared machine (the raw first call is reported too).
        best = math.inf
        for k in range(3):
            start = time.perf_counter()
            _, new_state = decide(spec, obs, f, state, now)
            elapsed = (time.perf_counter() - start) * 1e6
            best = min(best, elapsed)
            if k == 0:
                raw_us.append(elapsed)
        state = new_state
        times_us.append(best)
    return sorted(times_us), sorted(raw_us)


def run(console: Console, policy: Path, ticks: int) -> None:
    pol = load_policy(policy)
    prof = load_profile(pol.profile)
    for label, p in scenarios(pol).items():
        times_us, raw_us = time_ticks(p, prof, ticks, 400.0 if p is not pol else 40.0)
        p99 = times_us[int(0.99 * (len(times_us) - 1))]
        raw99 = raw_us[int(0.99 * (len(raw_us) - 1))]
        console.print(f"decide() \\[{label}]: p50 {statistics.median(times_us):.0f} us, p99 {p99:.0f} us, "
                      f"max {times_us[-1]:.0f} us over {len(times_us)} ticks, best of 3 "
                      f"({'meets' if p99 <= 1000 else 'misses'} the 1 ms p99 goal); single call p99 {raw99:.0f} us")
