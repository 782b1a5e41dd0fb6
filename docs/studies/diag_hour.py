"""Per-minute misses and pool sizes of the planner over one held-out ServeGen hour, replayed as `planner bench
hours` replays it (the studies' "scratch replays", about 5 s an hour on one core).

    PYTHONPATH=. .venv/bin/python docs/studies/diag_hour.py HOUR ['key=value;key=value'] [FROM-TO]

HOUR: the hour of the ServeGen trace (as `planner bench hours` numbers them); the second argument varies the
example policy as `--vary` does; FROM-TO (minutes of the replay, warm-up included) also prints each decision's
rate, quantiles, ITL factor and decode's reasons in that range. A `*` marks the scored minutes; columns: minute,
requests arrived, TTFT misses, ITL misses, the targets in force, the reasons of that minute's decisions.
"""

from __future__ import annotations

import sys

from planner.bench import hours, scenarios
from planner.policy_file import load_policy
from planner.policy_variant import PolicySource, parse_assignments
from planner.sim.evaluate.backtest import planner_run, score_run, sim_setup
from planner.sim.traces.loaders import load_requests

DETAIL = ("rate_rps", "headroom_quantile", "decode_quantile", "itl_factor")


def _replay(hour: int, vary: str):  # noqa: ANN202 (a study script: the backtest's own types)
    policy = (PolicySource(None, parse_assignments(vary)).load(scenarios.EXAMPLE_POLICY, "vary") if vary
              else load_policy(scenarios.EXAMPLE_POLICY))
    scn = scenarios.pick([hours.SCENARIO])[0]
    trace = load_requests(scenarios.default_traces_dir() / scn.trace_file, scn.fmt, rate_scale=0.09,
                          start_s=hour * 3600.0 - hours.WARMUP_S, duration_s=hours.WARMUP_S + hours.SCORED_S, seed=0)
    ctx, config = sim_setup(trace, scenarios.scenario_profile(scn, policy), policy, warmup_s=hours.WARMUP_S)
    summary, rep = score_run(planner_run(ctx, None, policy), ctx, config)
    return policy, summary, rep


def main(argv: list[str]) -> None:
    hour, vary = int(argv[1]), argv[2] if len(argv) > 2 else ""
    policy, summary, rep = _replay(hour, vary)
    print(f"hour {hour} {vary}: attainment {summary['attainment_joint'] * 100:.2f} % on {summary['gpu_hours']:.2f}"
          f" GPU-h", {k: round(v, 2) for k, v in rep.gpu_hours_by_pool.items()})
    r = rep.results
    ok = ~r["failed"]
    ttft_miss = ~ok | (r["ttft_s"] * 1e3 > policy.sla.ttft_ms)
    itl_miss = ~ok | (r["itl_mean_s"] * 1e3 > policy.sla.itl_ms)
    minute = (r["arrival_s"] // 60).astype(int)
    decisions: dict[int, list] = {}
    for d in rep.decisions:
        decisions.setdefault(int(d.at_s // 60), []).append(d)
    targets = {int(t // 60): g for t, g in rep.targets}
    current: dict = {}
    for m in range(int(minute.min()), int(minute.max()) + 1):
        sel = minute == m
        current = targets.get(m, current)
        why = " | ".join(",".join(x.value for x in d.reasons) for d in decisions.get(m, []))
        mark = "*" if m * 60 >= rep.score_from_s else " "
        print(f"{mark}{m:4d} {sel.sum():5d} {int((ttft_miss & sel).sum()):5d} {int((itl_miss & sel).sum()):5d}  "
              f"{current}  {why[:150]}")
    scored = r["arrival_s"] >= rep.score_from_s
    print("scored: TTFT misses", int((ttft_miss & scored).sum()), "ITL misses", int((itl_miss & scored).sum()),
          "requests", int(scored.sum()))
    if len(argv) > 3:
        lo, hi = map(int, argv[3].split("-"))
        for d in rep.decisions:
            if lo <= d.at_s // 60 <= hi:
                detail = {k: round(v, 3) if isinstance(v, float) else v for k, v in d.detail.items() if k in DETAIL}
                print(int(d.at_s), detail, [x.value for x in d.pools["decode"].reasons],
                      {p: (pd.replicas, round(pd.desired_unclamped, 2)) for p, pd in d.pools.items()})


if __name__ == "__main__":
    main(sys.argv)
