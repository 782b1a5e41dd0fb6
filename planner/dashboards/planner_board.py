"""The controller's dashboard: per policy and pool, what it saw, forecast, asked for and why.

Every name comes from the metric objects (names.py); ``$policy`` and ``$pool`` filter every metric that
has those labels. Rows for the process actuator and the router have data only where those run.
"""

from __future__ import annotations

from planner.dashboards.grafana import (
    Board,
    Panel,
    Query,
    Row,
    board_link,
    datasource_variable,
    query_variable,
)
from planner.dashboards.names import PLANNER as M
from planner.dashboards.names import ROUTER as R
from planner.dashboards.names import sel, series
from planner.dashboards.slo import burn_rate, sla_target

UID = "planner-overview"
RATE = "$__rate_interval"
POLICY = ',policy=~"$policy"'
POOL = ',pool=~"$pool"'


def _load() -> Row:
    return Row("Load", (
        Panel("Offered load vs forecast", (
            Query(sel(M.observed_rate), "observed {{pool}}"),
            Query(sel(M.forecast_mean, signal="rate_rps"), "forecast mean {{policy}}"),
            Query(sel(M.forecast_quantile, signal="rate_rps"), "forecast q{{quantile}} {{policy}}"),
        ), width=16, unit="reqps", description="Requests started per second (observed, per pool) and the "
                                               "forecast at the decision horizon (start-up + interval)."),
        Panel("Sequence lengths (forecast)", (
            Query(sel(M.forecast_mean, signal=("=~", "isl_tokens|osl_tokens")), "{{signal}} mean"),
        ), description="Mean input / output tokens the decision sized for."),
    ))


def _replicas() -> Row:
    return Row("Replicas and GPUs", (
        Panel("Desired vs ready replicas", (
            Query(sel(M.desired_replicas), "desired {{pool}}"),
            Query(sel(M.ready_replicas), "ready {{pool}}"),
            Query(sel(M.desired_unclamped_replicas), "SLA model {{pool}} (before limits)"),
        ), width=12, description="What the planner asks for, what is serving, and what the SLA model wanted "
                                 "before stabilisation, rate limits, floors, ceilings and the GPU budget."),
        Panel("GPUs", (
            Query(sel(M.gpus_in_use), "in use {{policy}}"),
            Query(sel(M.gpus_desired), "desired {{policy}}"),
        ), width=6),
        Panel("GPU-hours in the time range", (
            Query(f"sum by (policy) (avg_over_time({sel(M.gpus_in_use)}[$__range])) * $__range_s / 3600",
                  "used {{policy}}"),
            Query(f"sum by (policy) (avg_over_time({sel(M.gpus_desired)}[$__range])) * $__range_s / 3600",
                  "desired {{policy}}"),
        ), width=6, kind="stat", instant=True, thresholds=((None, "blue"),),
            description="GPUs of the ready (and of the desired) replicas, averaged over the dashboard's time "
                        "range, times its hours."),
    ))


def _latency() -> Row:
    return Row("Latency vs SLA", (
        Panel("TTFT: observed vs predicted vs SLA", (
            Query(sel(M.observed_ttft, stat="p95"), "observed p95 {{pool}}"),
            Query(sel(M.predicted_ttft, pool="all"), "predicted {{policy}}"),
            Query(sla_target("ttft", POLICY), "SLA {{policy}}"),
        ), unit="s"),
        Panel("ITL: observed vs predicted vs SLA", (
            Query(sel(M.observed_itl, stat="p95"), "observed p95 {{pool}}"),
            Query(sel(M.predicted_itl), "predicted {{pool}}"),
            Query(sla_target("itl", POLICY), "SLA {{policy}}"),
        ), unit="s"),
        Panel("SLA error-budget burn (1 h)", (
            Query(burn_rate("1h", "$__interval", 0.99, POLICY + POOL), "{{signal}} {{pool}}"),
        ), width=5, unit="short", thresholds=((None, "green"), (1, "orange"), (6, "red")),
            description="Share of the last hour whose observed p95 was above the SLA, over a 1% budget "
                        "(objective 99% of the time within): 1 spends the budget exactly; the alerts page "
                        "at 14.4 (fast) and 6 (slow)."),
        Panel("Policy SLA", (
            Query(sel(M.sla_seconds), "{{signal}}"),
            Query(sel(M.sla_percentile), "percentile"),
        ), width=3, kind="stat", instant=True, unit="none", thresholds=((None, "blue"),),
            description="The policy's SLA targets (seconds) and the percentile they are written against."),
    ))


def _error_budget() -> Row:
    return Row("Error budget (sla.budget_control)", (
        Panel("Budget left", (Query(sel(M.sla_budget_remaining), "{{policy}}"),), width=4, unit="percentunit",
              min_value=None, thresholds=((None, "red"), (0.25, "orange"), (0.5, "green")),
              description="Share of the SLA window's allowed misses left, as the controller measures it "
                          "(under 0.25 it stops leaning)."),
        Panel("Burn rate", (Query(sel(M.sla_burn_rate), "{{window}} {{policy}}"),), width=5, unit="short",
              thresholds=((None, "green"), (1, "orange"), (2, "red")),
              description="Miss share over the window / the share the SLA allows: 1 spends the budget exactly "
                          "over sla.window_s; short above 2 (or long above 1) sends the planner back to "
                          "forecast.quantile."),
        Panel("Measured attainment", (Query(sel(M.sla_attainment), "{{policy}}"),), width=5, unit="percentunit",
              min_value=None, description="Share of requests within both targets over sla.window_s (from the "
                                          "engines' histograms; an estimate, see docs/deploy.md)."),
        Panel("Headroom in force", (Query(sel(M.headroom_quantile), "forecast quantile {{policy}}"),
                                    Query(sel(M.decode_quantile), "decode's forecast quantile {{policy}}"),
                                    Query(sel(M.sizing_percentile), "latency percentile {{policy}}")),
              width=4, unit="short",
              description="The forecast quantile the pools are sized at (decode's: forecast.quantile where its "
                          "KV guard binds), and the latency percentile they are sized for (the SLA's; stricter "
                          "while its error budget is spent)."),
        Panel("Sizing model bias", (Query(sel(M.model_bias), "{{signal}} {{policy}} at the forecast's load"),
                                    Query(sel(M.model_bias_at_load), "{{signal}} {{policy}} at the load that came")),
              width=6, unit="short",
              description="Realised latency at the SLA percentile / the latency the model predicted for the "
                          "sizes in force at the load it forecast (1 spends what it sizes for; below 1: headroom "
                          "or a pessimistic model), and / what it predicts for the ready replicas at the load "
                          "the window measured (below 1: the model itself is pessimistic)."),
    ))


def _decisions() -> Row:
    return Row("Decisions", (
        Panel("Last decision reasons", (Query(f"{sel(M.last_decision_reason)} == 1", "{{reason}}"),),
              kind="stat", instant=True, thresholds=((None, "blue"),),
              description="Reason codes of the last decision (closed set: planner.types.Reason)."),
        Panel("Decisions by reason", (
            Query(f"sum by (reason) (increase({sel(M.decisions)}[{RATE}]))", "{{reason}}"),
        )),
        Panel("Calibration factors", (Query(sel(M.calibration_factor), "{{factor}}"),), min_value=None,
              description="Observed/predicted correction applied to the profile (bounded; 1 = trust the "
                          "profile)."),
    ))


def _signals() -> Row:
    return Row("Signals", (
        Panel("Readiness", (Query(sel(M.ready), "{{policy}}"),), width=4, kind="stat", instant=True,
              thresholds=((None, "red"), (1, "green")),
              description="0 = degraded: a needed signal has been missing for the configured intervals."),
        Panel("Signal freshness", (
            Query(sel(M.signal_seconds_since_good), "{{signal}}"),
            Query(f"{sel(M.signal_missing)} == 1", "missing {{signal}}", needs="degraded"),
        ), width=10, unit="s", description="Seconds since each signal was last good; 'missing' while it "
                                           "has been absent or stale for the configured intervals."),
        Panel("Signal resolution (p95 at the SLA)", (Query(sel(M.signal_resolution_ratio), "{{pool}} {{signal}}"),),
              width=10, unit="percentunit", thresholds=((None, "green"), (0.25, "red")),
              description="Width of the engines' histogram bucket holding the SLA, over the SLA: above 0.25 "
                          "the p95 is unresolved (add buckets near the target)."),
    ))


def _controller() -> Row:
    return Row("Controller", (
        Panel("Leader", (Query(sel(M.leader), "{{instance}}", needs="leader"),), width=4, kind="stat",
              instant=True, thresholds=((None, "orange"), (1, "green")),
              description="1 on the replica that holds the Lease and acts (only with --leader-elect)."),
        Panel("Ticks per second", (Query(f"rate({sel(M.tick_duration, 'count')}[{RATE}])", "{{policy}}"),),
              width=4, unit="ops", description="0 while the loop is stuck: the alert PlannerControllerStale."),
        Panel("Tick and read duration p95", (
            Query(f"histogram_quantile(0.95, sum by (le) (rate({sel(M.tick_duration, 'bucket')}[{RATE}])))",
                  "tick"),
            Query(f"histogram_quantile(0.95, sum by (le) (rate({sel(M.read_duration, 'bucket')}[{RATE}])))",
                  "metrics read"),
        ), unit="s"),
        Panel("Errors and conflicts", (
            Query(f"sum by (kind) (rate({sel(M.errors)}[{RATE}]))", "{{kind}}"),
            Query(f"sum by (pool) (rate({sel(M.actuation_conflicts)}[{RATE}]))", "409 conflicts {{pool}}",
                  needs="conflict"),
        ), unit="ops"),
    ))


def _process_actuator() -> Row:
    return Row("Process actuator (engines it runs)", (
        Panel("Engine replicas by state", (
            Query(f"sum by (pool, state) ({sel(M.engine_replicas)})", "{{pool}} {{state}}", needs="process"),
        ), width=12),
        Panel("Engine events", (
            Query(f"sum by (pool, event) (increase({sel(M.engine_events)}[{RATE}]))", "{{pool}} {{event}}",
                  needs="process"),
        ), width=12),
    ))


def _fleet() -> Row:
    return Row("Fleet (planner run --fleet)", (
        Panel("Fleet GPUs vs budget", (
            Query(sel(M.fleet_budget_gpus), "budget", needs="fleet"),
            Query(sel(M.fleet_gpus), "{{state}}", needs="fleet"),
        ), width=8, description="The fleet's GPU budget; what its policies decided alone (wanted), what the "
                                "fleet stage granted, and the GPUs of the ready replicas."),
        Panel("Granted vs wanted GPUs per policy", (
            Query(sel(M.fleet_policy_gpus), "{{state}} {{policy}}", needs="fleet"),
        ), width=10),
        Panel("Clamped by the fleet", (
            Query(sel(M.fleet_clamp), "{{reason}} {{policy}}", needs="fleet"),
        ), width=6, description="1 while the fleet grants a policy fewer GPUs than it decided: fleet_priority "
                                "(a higher priority took them), fleet_wake (a lower priority woken from zero for "
                                "requests held at the router took them) or fleet_share (its own priority asks "
                                "for more than there is)."),
    ))


def _router() -> Row:
    return Row("Router (planner route)", (
        Panel("Requests by outcome", (
            Query(f"sum by (outcome) (rate({sel(R.requests)}[{RATE}]))", "{{outcome}}", needs="router"),
        ), unit="reqps"),
        Panel("Failed attempts and retries", (
            Query(f"sum by (pool, kind) (rate({sel(R.errors)}[{RATE}]))", "{{pool}} {{kind}}",
                  needs="router-failure"),
            Query(f"sum by (pool) (rate({sel(R.retries)}[{RATE}]))", "retries {{pool}}", needs="router-failure"),
        ), unit="ops"),
        Panel("Replicas in rotation and outstanding", (
            Query(sel(R.replicas), "in rotation {{pool}}", needs="router"),
            Query(f"sum by (pool) ({sel(R.outstanding)})", "outstanding {{pool}}", needs="router"),
        )),
        Panel("Held for want of a replica (scale to zero)", (
            Query(sel(R.held), "held now", needs="scale-to-zero"),
            Query(f"rate({sel(R.held_requests)}[{RATE}])", "held /s", needs="scale-to-zero"),
            Query(f"sum by (why) (rate({sel(R.hold_refused)}[{RATE}]))", "503 {{why}} /s", needs="scale-to-zero"),
            Query(f"sum by (outcome) (rate({sel(R.wake_signals)}[{RATE}]))", "wake signal {{outcome}} /s",
                  needs="scale-to-zero"),
        ), width=24, description="Requests the router holds while no replica is in rotation (a policy at zero "
                                 "waking), those refused with 503 past --hold-queue or --hold-timeout-s, and the "
                                 "wake signals sent to the controller (POST /v1/wake)."),
    ))


def board() -> Board:
    policy = f"label_values({series(M.ready)}, policy)"
    pool = f'label_values({series(M.desired_replicas)}{{policy=~"$policy"}}, pool)'
    return Board(UID, "Planner: SLA autoscaling (prefill / decode)",
                 (_load(), _replicas(), _latency(), _error_budget(), _decisions(), _signals(), _controller(),
                  _process_actuator(), _router(), _fleet()),
                 (datasource_variable(), query_variable("policy", "Policy", policy),
                  query_variable("pool", "Pool", pool)),
                 tags=("planner", "llm", "autoscaling"), links=(board_link("Engines", "planner-engines"),))
