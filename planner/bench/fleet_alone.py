"""One model of ``planner bench fleet`` alone over several trace draws (``--alone NAME --seeds N``).

Its planner is replayed as the fleet report's ``comparisons.unshared`` replays it (no shared budget, the same
trace, warm-up and promised window), without the fleet and without the static pools' searches, so a policy
change is judged on ten draws of a day in minutes where ten fleet runs take an hour. A one-model fleet makes
the same decisions tick by tick (``tests/test_fleet_replay_budget.py``), so these figures are the fleet's for
a model the budget never clamps (the priority-10 models).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.bench.fleet import IDLE_S, MODELS, bench_fleet, fleet_warmup
from planner.errors import UserError
from planner.policy_variant import PolicySource, parse_assignments, set_dotted


@dataclass(frozen=True)
class AloneDraw:
    name: str
    seed: int
    quick: bool = False
    day: bool = False
    compress: float = 1.0
    traces_dir: Path | None = None
    zero: bool = True
    idle_s: float = IDLE_S
    assignments: tuple[tuple[tuple[str, ...], Any], ...] = ()  # ``--vary``: fields set on the model's policy
    policy_path: Path | None = None  # ``--policy``: the policy the fleet's models run (default: the example)


def check_model(name: str) -> None:
    names = [m.name for m in MODELS]
    if name not in names:
        raise UserError(f"{name!r} is not a model of the fleet; one of {', '.join(names)}", key="alone")


def check_vary(text: str | None, policy_path: Path | None = None) -> tuple[tuple[tuple[str, ...], Any], ...]:
    """``--vary``'s fields, checked on the fleet's policy (default: the example) first: a bad key or value is one
    line, before any run."""
    if text is None:
        return ()
    from planner.bench.fleet import EXAMPLE_POLICY

    try:
        assignments = parse_assignments(text)
        PolicySource(None, assignments).load(policy_path or EXAMPLE_POLICY, "the fleet's policy")
    except UserError as exc:
        raise UserError(str(exc), key="vary") from None
    return assignments


def alone_draw(draw: AloneDraw) -> dict:
    """The model's planner alone over one draw: attainment, GPU-hours and whether it met its percentile."""
    from planner.sim.evaluate.backtest import planner_run, score_run, sim_setup

    fleet, traces = bench_fleet(draw.quick, draw.traces_dir, None, draw.seed, draw.zero, draw.idle_s, day=draw.day,
                                compress=draw.compress, policy_path=draw.policy_path)
    m = fleet.member(draw.name)
    policy = m.policy
    if draw.assignments:
        data = policy.model_dump(by_alias=True)
        for keys, value in draw.assignments:
            set_dotted(data, keys, value)
        policy = type(policy).model_validate(data)
    warmup_s = fleet_warmup(draw.quick)
    ctx, config = sim_setup(traces[draw.name], m.profile, policy, warmup_s=warmup_s)
    scores, _ = score_run(planner_run(ctx, None, policy), ctx, config)
    attained = scores["attainment_joint"]
    return {"seed": draw.seed, "attainment_joint": attained, "gpu_hours": round(float(scores["gpu_hours"]), 3),
            "met": attained is not None and attained * 100.0 >= policy.sla.percentile,
            "percentile": policy.sla.percentile, "window_s": policy.sla.window_s}


def alone_draws(draws: Sequence[AloneDraw], workers: int) -> list[dict]:
    """Every draw, ``workers`` at a time (1: in this process), in seed order."""
    if workers <= 1 or len(draws) <= 1:
        return [alone_draw(d) for d in draws]
    with ProcessPoolExecutor(min(workers, len(draws))) as pool:
        return list(pool.map(alone_draw, draws))


def alone_summary(runs: Sequence[dict]) -> dict:
    """Worst draw, draws below the percentile and mean GPU-hours."""
    attained = [r["attainment_joint"] for r in runs if r["attainment_joint"] is not None]
    return {"draws": len(runs), "worst": min(attained, default=None), "below": sum(not r["met"] for r in runs),
            "gpu_hours_mean": round(sum(r["gpu_hours"] for r in runs) / len(runs), 3) if runs else None}
