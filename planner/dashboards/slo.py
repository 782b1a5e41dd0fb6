"""PromQL for the SLA as the planner sees it, shared by the dashboard and the alerts.

The SLA is a series (``planner_sla_seconds{signal}``, from the policy), so a comparison never copies the
policy's numbers. A *violation* is a tick's observed p95 (``planner_observed_{ttft,itl}_seconds{stat="p95"}``)
above the policy's SLA; the error budget is the share of time allowed in violation (1 - objective), and
the burn rate is the share observed over a window divided by that budget (1 = spending it exactly on time).
"""

from __future__ import annotations

from planner.dashboards.names import PLANNER, series

SIGNALS = {"ttft": PLANNER.observed_ttft, "itl": PLANNER.observed_itl}
P95 = "p95"


def sla_target(signal: str, extra: str = "") -> str:
    # max: several controller replicas (leader election) export the same policy's SLA; one value per policy.
    return f'max by (policy) ({series(PLANNER.sla_seconds)}{{signal="{signal}"{extra}}})'


def violation(signal: str, extra: str = "") -> str:
    """1 while the observed p95 of ``signal`` is above the SLA, 0 while within (per policy and pool)."""
    observed = f'{series(SIGNALS[signal])}{{stat="{P95}"{extra}}}'
    return (f'label_replace({observed} > bool on (policy) group_left {sla_target(signal)}, '
            f'"signal", "{signal}", "", "")')


def violations(extra: str = "") -> str:
    """Both signals' violation series (``signal`` label ttft or itl)."""
    return " or ".join(violation(s, extra) for s in SIGNALS)


def budget(objective: float) -> str:
    """The error budget ``1 - objective`` as PromQL text."""
    if not 0 < objective < 1:
        raise ValueError(f"objective {objective}: must be in (0, 1)")
    return f"{round(1.0 - objective, 6):g}"


def burn_rate(window: str, step: str, objective: float, extra: str = "") -> str:
    """Share of ``window`` spent in violation over the error budget (a subquery: needs no recording rule)."""
    return f"avg_over_time(({violations(extra)})[{window}:{step}]) / {budget(objective)}"
