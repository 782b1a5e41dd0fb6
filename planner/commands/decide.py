"""`planner plan` (what-if sizing for a given load) and `planner bench decide` (decide() latency)."""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from planner.config import Behavior, Policy, ScalingRules, load_policy
from planner.errors import InfeasibleError, UserError
from planner.profile import Profile, load_profile
from planner.types import QUANTILES, Decision, Forecast, LoadForecast, Observation, PoolObservation, Reason


def _what_if_policy(policy: Policy) -> Policy:
    """A what-if has no history: no stabilisation or rate limits, only floors, ceilings and the budget."""
    free = ScalingRules(stabilization_window_s=0, policies=[])
    return policy.model_copy(update={"behavior": Behavior(tolerance=0.0, scale_up=free, scale_down=free)})


def _flat(value: float, horizon_s: float) -> Forecast:
    return Forecast(value, {q: value for q in QUANTILES}, horizon_s, "given")


def plan(policy: Policy, profile: Profile, rate_rps: float, isl: float, osl: float) -> Decision:
    from planner.decide import DeciderSpec, decide

    policy = _what_if_policy(policy)
    horizon = policy.startup_s + policy.interval_s
    window = policy.interval_s
    pool = PoolObservation(requests=rate_rps * window, rate_rps=rate_rps, isl_mean=isl, osl_mean=osl)
    obs = Observation(at_s=0.0, window_s=window, pools={n: pool for n in policy.pool_names()})
    forecast = LoadForecast(_flat(rate_rps, horizon), _flat(isl, horizon), _flat(osl, horizon))
    decision, _ = decide(DeciderSpec.build(policy, profile), obs, forecast, None, 0.0)
    return decision


def _check(flag: str, value: float, allow_zero: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise UserError(f"{flag}: {value:g} must be a finite number {'>= 0' if allow_zero else '> 0'}")


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def render(decision: Decision, policy: Policy, console: Console) -> None:
    table = Table(title=f"plan for {policy.name} ({policy.mode})")
    for col in ("pool", "replicas", "GPUs/replica", "GPUs", "SLA asks", "pred. TTFT ms", "pred. ITL ms", "reasons"):
        table.add_column(col)
    for name, p in decision.pools.items():
        table.add_row(name, str(p.replicas), str(p.gpus_per_replica), str(p.gpus), f"{p.desired_unclamped:.2f}",
                      _ms(p.predicted_ttft_ms), _ms(p.predicted_itl_ms), ", ".join(r.value for r in p.reasons))
    console.print(table)
    d = decision.detail
    console.print(f"total {decision.gpus} GPUs; predicted TTFT p{policy.sla.percentile:g} "
                  f"{_ms(decision.predicted_ttft_ms)} ms (target {policy.sla.ttft_ms:g}), ITL "
                  f"{_ms(decision.predicted_itl_ms)} ms (target {policy.sla.itl_ms:g}); load {d.get('rate_rps', 0):g} "
                  f"req/s, ISL {d.get('isl_tokens', 0):g}, OSL {d.get('osl_tokens', 0):g}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        policy: Annotated[Path, typer.Option(help="policy YAML (policies/example.yaml documents every field)")],
        rate_rps: Annotated[float, typer.Option("--rate-rps", help="request rate (req/s)")],
        isl: Annotated[float, typer.Option(help="mean input length (tokens)")],
        osl: Annotated[float, typer.Option(help="mean output length (tokens)")],
        json_out: Annotated[bool, typer.Option("--json", help="print the Decision as JSON")] = False,
    ) -> None:
        """What-if: the Decision for a given load (no state, no side effects)."""
        from planner.decide.serialize import decision_dict

        _check("--rate-rps", rate_rps, allow_zero=True)
        _check("--isl", isl)
        _check("--osl", osl)
        pol = load_policy(policy)
        prof = load_profile(pol.profile)
        decision = plan(pol, prof, rate_rps, isl, osl)
        if json_out:
            print(json.dumps(decision_dict(decision), indent=1))
        else:
            render(decision, pol, Console())
        if Reason.SLA_INFEASIBLE in decision.reasons:
            pools = [n for n, p in decision.pools.items() if Reason.SLA_INFEASIBLE in p.reasons]
            raise InfeasibleError(f"the SLA cannot be met for {', '.join(pools)} at this load with this profile "
                                  f"(TTFT {pol.sla.ttft_ms:g} ms, ITL {pol.sla.itl_ms:g} ms)")

    @bench_app.command("decide")
    def bench_decide(
        policy: Annotated[Path, typer.Option(help="policy YAML")] = Path("policies/example.yaml"),
        ticks: Annotated[int, typer.Option(help="decide() calls per scenario")] = 5000,
    ) -> None:
        """decide() latency over a day of varying load (goal: p99 <= 1 ms)."""
        from planner.controller import sample_of
        from planner.decide import DeciderSpec, decide

        if ticks < 10:
            raise UserError(f"--ticks: {ticks} must be >= 10")
        console = Console()
        pol = load_policy(policy)
        prof = load_profile(pol.profile)
        roomy = pol.model_copy(update={"pools": pol.pools.model_copy(update={
            n: pol.pool(n).model_copy(update={"max_replicas": 1000}) for n in pol.pool_names()})})
        scenarios = {
            "policy as written": pol,
            "large pools (<= 1000 replicas)": roomy,
            "GPU budget binding": roomy.model_copy(update={"budget": roomy.budget.model_copy(update={"max_gpus": 40})}),
        }
        for label, p in scenarios.items():
            times_us: list[float] = []
            raw_us: list[float] = []
            state = None
            peak = 400.0 if p is not pol else 40.0
            spec = DeciderSpec.build(p, prof)  # once, as the controller does
            for i in range(ticks):
                now = i * p.interval_s
                rate = peak * (0.55 + 0.45 * math.sin(2 * math.pi * now / 86400.0))
                pool = PoolObservation(requests=rate * p.interval_s, rate_rps=rate, isl_mean=1155, osl_mean=211,
                                       ttft_ms_p95=400.0, itl_ms_p95=30.0, running=rate * 6, ready_replicas=10)
                obs = Observation(now, p.interval_s, {n: pool for n in p.pool_names()})
                s = sample_of(p, obs)
                assert s is not None
                f = LoadForecast(_flat(rate, 150), _flat(s.isl_tokens, 150), _flat(s.osl_tokens, 150))
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
            times_us.sort()
            raw_us.sort()
            p99 = times_us[int(0.99 * (len(times_us) - 1))]
            raw99 = raw_us[int(0.99 * (len(raw_us) - 1))]
            console.print(f"decide() \\[{label}]: p50 {statistics.median(times_us):.0f} us, p99 {p99:.0f} us, "
                          f"max {times_us[-1]:.0f} us over {len(times_us)} ticks, best of 3 "
                          f"({'meets' if p99 <= 1000 else 'misses'} the 1 ms p99 goal); single call p99 {raw99:.0f} us")
