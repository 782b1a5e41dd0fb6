"""Every dashboard query and alert returns data from a real Prometheus that scrapes a running controller and
engines, and the alerts go pending and fire when their condition is made true.

The stack: two `planner emulate` engines (prefill, decode; vLLM names), the decode engine's metrics also
under each other dialect's names (planner/testing/dialect_exporter.py), `planner route` in front of the
decode engine, and `planner run` in-process with the kubernetes actuator and leader election on the fake
API server (the process actuator's panels are only parsed and run: it would start engine processes). The policy is made to trip alerts: an
SLA no engine meets (burn rate), decode capped at 1 replica while its Deployment holds 2 and the SLA model
wants more (pinned), and every write to the decode Deployment's scale answered 500 (actuation failing).
A tick that never returns makes the controller stale, a Lease it cannot renew leaves no leader, stopping
the decode engine makes the controller not ready and stopping the controller makes it down. The rules
are the generated ones with seconds for minutes (AlertParams).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from planner.dashboards import engines, planner_board
from planner.dashboards.alerts import AlertParams, alerts, rule_groups
from planner.dashboards.grafana import Board, Query
from planner.service.runner import RunOptions, Service
from planner.sources.dialects import DIALECTS, VLLM
from planner.testing.dialect_exporter import parse_samples, translate, translate_samples
from planner.testing.local_prometheus import LocalPrometheus, Target
from planner.testing.ports import free_port
from tests.support.fake_kube import FakeKube
from tests.support.prom_fixtures import FakeHTTP, require_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
NS = "llm"
POLICY = "live"
MACROS = {"$__rate_interval": "10s", "$__range_s": "30", "$__range": "30s", "$__interval": "2s",
          "$policy": POLICY, "$pool": ".*"}
# What the stack does not run (the process actuator, a fleet), does not provoke (a 409 on a scale write), or provokes
# only later (a missing signal; a replica failing behind the router); its router holds nothing (scale to zero).
ABSENT = {"process", "conflict", "degraded", "router-failure", "fleet", "scale-to-zero"}
PARAMS = AlertParams(controller_job='component="controller"', evaluation_interval="1s",
                     fast_windows=("5s", "10s"), fast_for="1s", slow_windows=("5s", "15s"), slow_for="1s",
                     down_for="1s", stale_window="10s", pinned_for="2s", actuate_window="10s", actuate_for="1s",
                     not_ready_for="1s", leader_for="1s")


def substitute(expr: str) -> str:
    for macro, value in sorted(MACROS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(macro, value)
    return expr


def board_queries(board: Board) -> list[Query]:
    return [q for row in board.rows for panel in row.panels for q in panel.queries]


def all_boards() -> dict[str, Board]:
    return {"planner": planner_board.board(), **{d: engines.board(DIALECTS[d]) for d in DIALECTS}}


@dataclass
class Stack:
    prom: LocalPrometheus
    service: Service
    runner: threading.Thread
    engines: dict[str, object]  # prefill, decode, router -> BackgroundServer
    exporters: list[FakeHTTP]
    stop: threading.Event
    kube: FakeKube

    def query(self, promql: str) -> dict:
        r = httpx.get(f"{self.prom.url}/api/v1/query", params={"query": promql}, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", f"{promql}: {body}"
        return body["data"]

    def alerts(self) -> dict[str, set[str]]:
        """Alert name -> states (pending, firing) of its instances."""
        body = httpx.get(f"{self.prom.url}/api/v1/alerts", timeout=10).json()
        out: dict[str, set[str]] = {}
        for a in body["data"]["alerts"]:
            out.setdefault(a["labels"]["alertname"], set()).add(a["state"])
        return out


def wait_until(predicate, timeout_s: float, what) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what() if callable(what) else what}")
        time.sleep(0.5)


def _policy(tmp_path: Path, prom_url: str) -> Path:
    policy = {
        "name": POLICY, "profile": str(REPO / "profiles/h200/qwen3-8b.json"), "interval_s": 1, "startup_s": 5,
        # No engine meets it: the burn-rate alerts fire. The error budget is measured (its panels have data)
        # and always burning, so the decision sizes at forecast.quantile as without it.
        "sla": {"ttft_ms": 1, "itl_ms": 1, "budget_control": True},
        "pools": {"prefill": {"target": {"name": "pre", "namespace": NS}, "max_replicas": 8},
                  "decode": {"target": {"name": "dec", "namespace": NS}, "max_replicas": 1}},
        "forecast": {"model": "last-value", "history_s": 60},
        "behavior": {"scale_up": {"policies": [{"type": "pods", "value": 100, "period_s": 1}]},
                     "scale_down": {"stabilization_window_s": 0,
                                    "policies": [{"type": "pods", "value": 100, "period_s": 1}]}},
        "metrics": {"url": prom_url, "window_s": 5, "stale_after_intervals": 3,
                    "selectors": {"prefill": '{slot="pre"}', "decode": '{slot="dec"}'}},
        "actuator": {"kind": "kubernetes"},
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def _router(port: int, decode_url: str, tmp: Path) -> object:
    """`planner route` in front of the decode engine (one aggregated pool)."""
    from planner.actuators.file_sd import Target as Replica
    from planner.actuators.file_sd import write_targets
    from planner.router.app import create_router_app
    from planner.service.background import BackgroundServer
    from planner.types import Mode

    path = tmp / "targets.json"
    write_targets(path, [Replica(decode_url.removeprefix("http://"), "aggregated")])
    return BackgroundServer(create_router_app(path, Mode.AGGREGATED, read_timeout_s=30), port=port).start()


def _engines(ports: dict[str, int]) -> dict[str, object]:
    from planner.emulator.app import create_app, engine_model_for
    from planner.profile import load_profile
    from planner.service.background import BackgroundServer

    prof = load_profile(REPO / "profiles/h200/qwen3-0.6b.json")
    return {role: BackgroundServer(create_app(engine_model_for(prof, role), "qwen3-0.6b", 1.0),
                                   port=ports[role]).start() for role in ("prefill", "decode")}


def _traffic(url: str, stop: threading.Event) -> None:
    """One client per engine, one request at a time. 48 output tokens: the decode pool's SLA-model need (its
    ITL target is below the profile's batch-1 step, so it sizes for one stream per replica at Little's
    concurrency, rate x OSL x ITL) stays above its ceiling of 1 on a slow machine too (8 tokens gave a need
    of 1 to 2, and 1 on a loaded CI machine: PlannerPoolPinned never fired)."""
    with httpx.Client(timeout=30) as client:
        i = 0
        while not stop.is_set():
            try:
                client.post(f"{url}/v1/completions", json={"prompt": "word " * (50 + i % 50), "max_tokens": 48})
            except httpx.HTTPError:
                pass
            i += 1
            stop.wait(0.1)


def _mirror(source_url: str, exporters: dict[str, FakeHTTP], stop: threading.Event) -> None:
    """The decode engine's /metrics under each other dialect's names, refreshed faster than scrapes."""
    with httpx.Client(timeout=5) as client:
        while not stop.is_set():
            try:
                text = client.get(f"{source_url}/metrics").text
            except httpx.HTTPError:
                text = None
            for name, exporter in exporters.items():
                exporter.text = "" if text is None else translate(text, DIALECTS[name])
            stop.wait(0.3)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_prometheus()
    tmp = tmp_path_factory.mktemp("live")
    others = [d for d in DIALECTS if d != VLLM.name]
    ports = {name: free_port() for name in ("prefill", "decode", "controller", "router", *others)}
    rules = tmp / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule_groups(PARAMS)))
    targets = [Target(ports["prefill"], {"slot": "pre", "pool": "prefill"}),
               Target(ports["decode"], {"slot": "dec", "pool": "decode"}),
               Target(ports["controller"], {"component": "controller"}),
               Target(ports["router"], {"component": "router"}),
               *[Target(ports[d], {"slot": d, "pool": "decode"}) for d in others]]
    prom = LocalPrometheus(targets, scrape_interval_s=1.0, rule_files=[rules]).start(timeout_s=60)
    kube = FakeKube().start()
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 2)  # above decode's ceiling of 1: the planner keeps trying to write 1
    for method in ("PUT", "PATCH"):
        kube.inject(method, "/dec/scale$", status=500)
    stop = threading.Event()
    servers = _engines(ports)
    servers["router"] = _router(ports["router"], servers["decode"].url, tmp)
    exporters = {d: FakeHTTP(ports[d]) for d in others}
    threads = [*[threading.Thread(target=_traffic, args=(s.url, stop), daemon=True) for s in servers.values()],
               threading.Thread(target=_mirror, args=(servers["decode"].url, exporters, stop), daemon=True)]
    opts = RunOptions(_policy(tmp, prom.url), host="127.0.0.1", port=ports["controller"], grpc_port=0,
                      leader_elect=True, lease_namespace=NS, identity="live-a", lease_duration_s=15)
    service = Service(opts, api_client=kube.api_client()).start()
    runner = threading.Thread(target=service.run, daemon=True)
    for t in (*threads, runner):
        t.start()
    try:
        yield Stack(prom, service, runner, servers, list(exporters.values()), stop, kube)
    finally:
        stop.set()
        service.stop_event.set()
        runner.join(15)
        for t in threads:
            t.join(10)
        for s in servers.values():
            s.stop()  # type: ignore[attr-defined]
        for e in exporters.values():
            e.stop()
        kube.stop()
        prom.stop()


def test_dialect_translation_keeps_the_values() -> None:
    from prometheus_client import generate_latest

    from planner.emulator.vllm_metrics import VllmMetrics

    m = VllmMetrics("m", 4096)
    m.num_requests_running.set(2)
    m.num_requests_waiting.set(3)
    m.kv_cache_usage_perc.set(0.5)
    m.request_success["stop"].inc(7)
    source = parse_samples(generate_latest(m.registry).decode())
    for d in DIALECTS.values():
        out = translate_samples(source, d)
        assert sum(v for _, v in out[d.completed_counter]) == 7, d.name
        assert sum(v for _, v in out[d.queue_gauge]) == 3, d.name
        assert sum(v for _, v in out[d.running_gauge]) == (5 if len(d.in_system_gauges) == 1 else 2), d.name
        assert {f"{d.ttft_histogram}_bucket", f"{d.itl_histogram}_count", d.isl.numerator, d.osl.denominator} <= set(out)
        if d.kv_usage_gauge:
            assert out[d.kv_usage_gauge][0][1] * d.kv_usage_scale == pytest.approx(0.5), d.name


def _empty(stack: Stack, exprs: list[str]) -> list[str]:
    return [e for e in exprs if not stack.query(substitute(e))["result"]]


def test_every_dashboard_query_returns_data(stack: Stack) -> None:
    queries = {name: board_queries(b) for name, b in all_boards().items()}
    wanted = [q.expr for qs in queries.values() for q in qs if q.needs not in ABSENT]
    variables = [re.sub(r"label_values\((.*), (\w+)\)$", r"count by (\2) (\1)", v["query"]["query"])
                 for b in all_boards().values() for v in b.variables if v["type"] == "query"]
    assert len(wanted) > 40 and len(variables) == 2 + len(DIALECTS)
    wait_until(lambda: not _empty(stack, wanted + variables), 120,
               lambda: f"data for every query; none yet for {_empty(stack, wanted + variables)}")
    for qs in queries.values():  # those whose component is absent still parse and run
        for q in qs:
            if q.needs in ABSENT:
                stack.query(substitute(q.expr))


def _probe_values(stack: Stack, names: set[str]) -> dict[str, list]:
    """What each probe of these alerts reads now: why a condition is false says itself in the failure."""
    return {p: [(r["metric"], r["value"][1]) for r in stack.query(substitute(p))["result"]]
            for a in alerts(PARAMS) if a.name in names for p in a.probes}


def test_every_alert_probe_returns_data_and_the_tripped_alerts_fire(stack: Stack) -> None:
    probes = [p for a in alerts(PARAMS) for p in a.probes]
    wait_until(lambda: not _empty(stack, probes), 60, lambda: f"data for {_empty(stack, probes)}")
    tripped = {"PlannerSLABurnFast", "PlannerSLABurnSlow", "PlannerPoolPinned", "PlannerActuationFailing"}
    wait_until(lambda: all("firing" in stack.alerts().get(n, set()) for n in tripped), 90,
               lambda: f"{sorted(tripped)} firing; alerts now {stack.alerts()}; probes of those not firing: "
                       f"{_probe_values(stack, tripped - {n for n, s in stack.alerts().items() if 'firing' in s})}")
    quiet = {"PlannerControllerDown", "PlannerControllerStale", "PlannerNotReady", "PlannerLeaderMissing",
             "PlannerLeaderDuplicated"}
    assert not quiet & set(stack.alerts()), "an alert whose condition is false is active"


def firing(stack: Stack, name: str, timeout_s: float) -> None:
    wait_until(lambda: "firing" in stack.alerts().get(name, set()), timeout_s,
               lambda: f"{name} firing; alerts now {stack.alerts()}")


def test_a_stuck_loop_fires_stale(stack: Stack) -> None:
    """The loop hangs inside a tick (a call that never returns) while /metrics still answers."""
    loop = stack.service.loop
    release = threading.Event()
    tick = loop.controller.tick

    def stuck(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        release.wait(60)
        return tick(*args, **kwargs)

    loop.controller.tick = stuck  # type: ignore[method-assign]
    try:
        firing(stack, "PlannerControllerStale", 40)
    finally:
        loop.controller.tick = tick  # type: ignore[method-assign]
        release.set()


def test_a_missing_engine_fires_not_ready(stack: Stack) -> None:
    stack.engines["decode"].stop()  # type: ignore[attr-defined]
    firing(stack, "PlannerNotReady", 60)
    degraded = [q.expr for b in all_boards().values() for q in board_queries(b) if q.needs == "degraded"]
    assert degraded
    wait_until(lambda: not _empty(stack, degraded), 30, "the degraded-only panels to show the missing signal")
    failures = [q.expr for b in all_boards().values() for q in board_queries(b) if q.needs == "router-failure"]
    assert failures
    wait_until(lambda: not _empty(stack, failures), 30, "the router's failure panels to show the lost replica")


def test_a_lost_lease_fires_leader_missing(stack: Stack) -> None:
    """The Lease cannot be renewed (403): once it runs out the controller stands by and nobody leads."""
    stack.kube.forbidden.update({("leases", "get"), ("leases", "update"), ("leases", "create")})
    firing(stack, "PlannerLeaderMissing", 40)
    assert "PlannerLeaderDuplicated" not in stack.alerts()


def test_a_stopped_controller_fires_down(stack: Stack) -> None:
    """Last in the module: it takes the controller down."""
    stack.service.stop_event.set()
    stack.runner.join(15)
    assert not stack.runner.is_alive()
    firing(stack, "PlannerControllerDown", 30)
