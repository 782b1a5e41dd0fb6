"""Alerting rules for the planner, as a PrometheusRule and as a plain Prometheus rules file.

Durations, the SLA objective and the controller's scrape job are parameters (``AlertParams``): the
committed files use the defaults; tests build the same rules with seconds instead of minutes. Each alert
lists ``probes``: the quantities it compares, which return data whenever a controller runs (a test
checks them), whereas the alert's own expression returns data only while it fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.dashboards.names import PLANNER as M
from planner.dashboards.names import series
from planner.dashboards.slo import budget, violations

GROUP = "planner"
# Recorded each evaluation: 1 while a pool's observed p95 is above its policy's SLA, 0 within (slo.py).
VIOLATION = "planner:sla_violation:bool"


@dataclass(frozen=True)
class AlertParams:
    controller_job: str = 'job="planner"'  # the ServiceMonitor's job (the Service's name)
    runbook_base: str = "docs/deploy.md#"  # + the alert's name in lower case: its section of the guide
    evaluation_interval: str = "30s"
    sla_objective: float = 0.99  # share of time the observed p95 must be within the SLA
    fast_windows: tuple[str, str] = ("5m", "1h")  # Google SRE workbook: 2% of a 30-day budget in an hour
    fast_burn: float = 14.4
    fast_for: str = "2m"
    slow_windows: tuple[str, str] = ("30m", "6h")  # 5% of the budget in six hours
    slow_burn: float = 6.0
    slow_for: str = "15m"
    down_for: str = "2m"
    stale_window: str = "5m"  # no tick for this long while /metrics still answers
    pinned_for: str = "15m"
    actuate_window: str = "5m"
    actuate_for: str = "5m"
    not_ready_for: str = "5m"
    leader_for: str = "2m"
    budget_fast_burn: float = 2.0  # the controller's short-window burn rate (decide/error_budget.FAST_BURN)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    probes: tuple[str, ...]

    def rule(self, runbook_base: str) -> dict[str, Any]:
        return {"alert": self.name, "expr": self.expr, "for": self.for_,
                "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "description": self.description,
                                "runbook_url": f"{runbook_base}{self.name.lower()}"}}


def _burn(p: AlertParams, speed: str) -> Alert:
    short, long_ = p.fast_windows if speed == "fast" else p.slow_windows
    factor = p.fast_burn if speed == "fast" else p.slow_burn
    short_q = f"avg_over_time({VIOLATION}[{short}]) / {budget(p.sla_objective)}"
    long_q = f"avg_over_time({VIOLATION}[{long_}]) / {budget(p.sla_objective)}"
    return Alert(
        f"PlannerSLABurn{speed.capitalize()}", f"({short_q} > {factor:g}) and ({long_q} > {factor:g})",
        p.fast_for if speed == "fast" else p.slow_for, "critical" if speed == "fast" else "warning",
        "{{ $labels.policy }}/{{ $labels.pool }}: {{ $labels.signal }} p95 is burning the SLA budget "
        f"{factor:g}x too fast",
        f"Over both {short} and {long_} the observed {{{{ $labels.signal }}}} p95 was above the policy's SLA "
        f"for more than {factor:g} times the {1 - p.sla_objective:.2%} of the time the objective allows. "
        "Check the planner's decision reasons (ceiling, budget, sla_infeasible, no_data_hold) and whether "
        "ready replicas lag desired ones (pods pending, models loading).",
        (short_q, long_q))


def _error_budget(p: AlertParams) -> Alert:
    """The controller's own measure of the SLA's error budget (sla.budget_control): burning fast means it
    has already gone back to conservative sizing; the alert says so to a person."""
    short = f'{series(M.sla_burn_rate)}{{window="short"}}'
    long_ = f'{series(M.sla_burn_rate)}{{window="long"}}'
    return Alert(
        "PlannerErrorBudgetBurningFast", f"({short} > {p.budget_fast_burn:g}) and on (policy) ({long_} > 1)",
        p.fast_for, "warning",
        "{{ $labels.policy }} is spending its SLA error budget fast",
        f"The share of requests missing the SLA over the last 5 min is more than {p.budget_fast_burn:g} times "
        "what the policy's percentile allows, and over the last hour more than the allowance: the planner "
        "sizes at forecast.quantile again (reason budget_burning). If it persists, look for what limits the "
        "pools (reasons ceiling, budget, sla_infeasible) or a profile that is optimistic (planner_model_bias).",
        (f"max by (policy) ({series(M.sla_burn_rate)})",))


def _controller(p: AlertParams) -> list[Alert]:
    up = f"up{{{p.controller_job}}}"
    ticks = f"increase({series(M.tick_duration, 'count')}[{p.stale_window}])"
    return [
        Alert("PlannerControllerDown", f"{up} == 0 or absent({up})", p.down_for, "critical",
              "The planner controller {{ $labels.instance }} is not scraped",
              "Prometheus cannot scrape the planner (crashed, not running, or its ServiceMonitor lost it): "
              "nothing is being scaled by it and KEDA/HPA see no new N. kubectl get pods -l "
              "app.kubernetes.io/name=planner; kubectl logs.", (up,)),
        Alert("PlannerControllerStale", f"{ticks} == 0", "0s", "critical",
              "Planner policy {{ $labels.policy }} has not ticked for " + p.stale_window,
              "The process answers scrapes but its control loop has not completed a tick (a call hangs, "
              "or the loop died). Its last decision stands. Check the logs; restart the pod.", (ticks,)),
    ]


def _scaling(p: AlertParams) -> list[Alert]:
    unclamped = f"ceil(max by (policy, pool) ({series(M.desired_unclamped_replicas)}))"
    desired = f"max by (policy, pool) ({series(M.desired_replicas)})"
    limited = f'max by (policy) ({series(M.last_decision_reason)}{{reason=~"ceiling|budget"}})'
    actuate = f'rate({series(M.errors)}{{kind="actuate"}}[{p.actuate_window}])'
    return [
        Alert("PlannerPoolPinned", f"({unclamped} > {desired}) and on (policy) ({limited} == 1)", p.pinned_for,
              "warning", "{{ $labels.policy }}/{{ $labels.pool }} is held at its ceiling or GPU budget",
              "The SLA model asks for more replicas than the pool's max_replicas or the policy's GPU budget "
              "allow, for " + p.pinned_for + ": the SLA is at risk. Raise the ceiling or budget, or accept "
              "the miss (planner plan shows the predicted latency at the capped size).",
              (unclamped, desired, f"max by (policy) ({series(M.last_decision_reason)})")),
        Alert("PlannerActuationFailing", f"{actuate} > 0", p.actuate_for, "critical",
              "Planner policy {{ $labels.policy }} cannot apply its decisions",
              "Scale writes fail (RBAC, a missing target, API server errors): the pools stay where they are. "
              "The logs say why; kubectl auth can-i update deployments/scale --as "
              "system:serviceaccount:<ns>:planner.", (f"rate({series(M.errors)}[{p.actuate_window}])",)),
    ]


def _health(p: AlertParams) -> list[Alert]:
    ready = series(M.ready)
    leader = series(M.leader)
    return [
        Alert("PlannerNotReady", f"{ready} == 0", p.not_ready_for, "warning",
              "Planner policy {{ $labels.policy }} is degraded: a needed signal is missing",
              "A signal the policy sizes with (rate, TTFT, ITL, ...) has been absent or stale: the planner "
              "holds its last decision and never scales down on missing data. /readyz names the signal; "
              "check the engines' scrape and the policy's metrics.selectors.", (ready,)),
        Alert("PlannerLeaderMissing", f"max by (policy) ({leader}) == 0", p.leader_for, "critical",
              "No planner replica leads policy {{ $labels.policy }}",
              "Every replica stands by: the Lease cannot be taken or renewed (RBAC on leases, API server "
              "unreachable). Nothing is scaled. planner_errors_total{kind=\"leader\"} counts the failures.",
              (f"max by (policy) ({leader})",)),
        Alert("PlannerLeaderDuplicated", f"sum by (policy) ({leader}) > 1", p.leader_for, "critical",
              "More than one planner replica leads policy {{ $labels.policy }}",
              "Two replicas believe they hold the Lease: their writes may fight. Check the Lease object and "
              "the replicas' clocks.", (f"sum by (policy) ({leader})",)),
    ]


def alerts(p: AlertParams | None = None) -> list[Alert]:
    p = p or AlertParams()
    return [_burn(p, "fast"), _burn(p, "slow"), _error_budget(p), *_controller(p), *_scaling(p), *_health(p)]


def rule_groups(p: AlertParams | None = None) -> dict[str, Any]:
    """The plain Prometheus rules file (rule_files: in prometheus.yml)."""
    p = p or AlertParams()
    record = {"record": VIOLATION, "expr": violations()}
    return {"groups": [{"name": f"{GROUP}.records", "interval": p.evaluation_interval, "rules": [record]},
                       {"name": GROUP, "interval": p.evaluation_interval,
                        "rules": [a.rule(p.runbook_base) for a in alerts(p)]}]}


def prometheus_rule(p: AlertParams | None = None) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule (kube-prometheus-stack's ruleSelector label)."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "planner", "labels": {"release": "kube-prometheus-stack"}},
            "spec": rule_groups(p)}
