"""`planner run --fleet`: every policy decides, the fleet stage fits them into one budget, then each applies;
telemetry and GET /v1/fleet show granted vs wanted. Against a real Prometheus."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from planner.cli import run
from planner.service.runner import RunOptions, Service, build_loops, create_service_app
from tests.support.fleet_support import member, write_fleet
from tests.support.prom_fixtures import PromEnv, prom_env  # noqa: F401
from tests.test_service_e2e import Exporter, wait_until

REPO = Path(__file__).resolve().parent.parent
SELECTORS = {"metrics": {"selectors": {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}}}


def test_once_prints_the_fleet_and_holds_without_data(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = write_fleet(tmp_path, [member("hi", 10, **SELECTORS), member("lo", 0, **SELECTORS)], max_gpus=32)
    rc = run(["run", "--fleet", str(path), "--once", "--dry-run", "--metrics-url", "http://127.0.0.1:9"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3  # no data, as `planner observe` exits
    assert out["fleet"]["budget_gpus"] == 32 and out["fleet"]["priorities"] == {"hi": 10, "lo": 0}
    assert [p["decision"]["reasons"] for p in out["policies"]] == [["no_data_hold"], ["no_data_hold"]]


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "x.yaml"], "--fleet and --policy: give one"),
    ([], None),
])
def test_run_fleet_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str],
                                       message: str | None) -> None:
    path = write_fleet(tmp_path, [member("a", **SELECTORS), member("b", **SELECTORS)], max_gpus=1)
    rc = run(["run", "--fleet", str(path), "--once", "--metrics-url", "http://127.0.0.1:9", *args])
    err = capsys.readouterr().err
    assert rc == 2 and (message or "key 'budget.max_gpus' = 1: below the policies' floors") in err
    assert "Traceback" not in err


def test_run_without_policy_or_fleet(capsys: pytest.CaptureFixture) -> None:
    rc = run(["run", "--once", "--metrics-url", "http://127.0.0.1:9"])
    assert rc == 2 and "--policy: required (or --fleet)" in capsys.readouterr().err


def test_v1_fleet_is_404_without_a_fleet(tmp_path: Path) -> None:
    path = write_fleet(tmp_path, [member("a", **SELECTORS)])
    loops = build_loops(RunOptions(tmp_path / "policies" / "a.yaml", dry_run=True, metrics_url="http://127.0.0.1:9"))
    assert path.exists()
    r = TestClient(create_service_app(loops)).get("/v1/fleet")
    assert r.status_code == 404 and "runs no fleet" in r.json()["detail"]


def _policy(name: str, prom: PromEnv, pre: object, dec: object) -> dict:
    return {"name": name, "profile": str(REPO / "profiles/h200/qwen3-8b.json"), "interval_s": 1, "startup_s": 5,
            "pools": {"prefill": {"target": {"name": f"{name}-pre", "namespace": "llm"}, "max_replicas": 16},
                      "decode": {"target": {"name": f"{name}-dec", "namespace": "llm"}, "max_replicas": 16}},
            "forecast": {"model": "last-value", "history_s": 120},
            "behavior": {"scale_up": {"policies": [{"type": "pods", "value": 100, "period_s": 1}]},
                         "scale_down": {"stabilization_window_s": 0,
                                        "policies": [{"type": "pods", "value": 100, "period_s": 1}]}},
            "metrics": {"url": prom.url, "window_s": 5, "stale_after_intervals": 4,
                        "selectors": {"prefill": pre.selector, "decode": dec.selector}}}  # type: ignore[attr-defined]


@pytest.mark.prometheus
@pytest.mark.slow
def test_run_fleet_grants_the_higher_priority_first(prom_env: PromEnv, tmp_path: Path) -> None:  # noqa: F811
    slots = prom_env.take(4)
    exporters = [Exporter(s.port) for s in slots]
    for e in exporters:
        e.rate_rps = 2.0
    (tmp_path / "policies").mkdir()
    for name, (pre, dec) in (("hi", slots[:2]), ("lo", slots[2:])):
        (tmp_path / "policies" / f"{name}.yaml").write_text(yaml.safe_dump(_policy(name, prom_env, pre, dec)))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"budget": {"max_gpus": 8, "gpu_cost_per_hour": {"h200": 3.0}},
                                     "policies": [{"policy": "policies/hi.yaml", "priority": 10},
                                                  {"policy": "policies/lo.yaml", "priority": 0}]}))
    paths = [tmp_path / "policies" / "hi.yaml", tmp_path / "policies" / "lo.yaml"]
    opts = RunOptions(paths[0], more_policies=(paths[1],), fleet_path=fleet, dry_run=True, host="127.0.0.1", port=0,
                      grpc_port=0)
    service = Service(opts).start()
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    base = service.http.url
    try:
        def state() -> dict:
            return httpx.get(f"{base}/v1/fleet", timeout=5).json()

        wait_until(lambda: state()["at_s"] is not None and not state()["binds"], 30, "a first fleet tick within budget")
        for e in exporters:
            e.rate_rps = 40.0
        wait_until(lambda: state()["binds"] is True, 60, "the budget to bind")
        s = state()
        hi, lo = s["policies"]["hi"], s["policies"]["lo"]
        assert s["used_gpus"] <= 8 < s["wanted_gpus"] and s["budget_gpus"] == 8
        assert hi["granted"] == hi["wanted"] and hi["reason"] is None
        assert lo["granted_gpus"] < lo["wanted_gpus"] and lo["reason"] == "fleet_priority"
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        assert "planner_fleet_budget_gpus 8.0" in metrics
        assert 'planner_fleet_clamp{policy="lo",reason="fleet_priority"} 1.0' in metrics
        assert 'planner_fleet_clamp{policy="hi"' not in metrics
        gauges = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                  if line.startswith("planner_fleet_")}
        lo_gpus = {s: gauges[f'planner_fleet_policy_gpus{{policy="lo",state="{s}"}}'] for s in ("wanted", "granted")}
        assert lo_gpus["granted"] < lo_gpus["wanted"]
        assert gauges['planner_fleet_gpus{state="granted"}'] <= 8 < gauges['planner_fleet_gpus{state="wanted"}']
        decisions = httpx.get(f"{base}/v1/decisions", params={"policy": "lo"}, timeout=5).json()["decisions"]
        assert any("fleet_priority" in d["decision"]["reasons"] for d in decisions if d.get("decision"))
    finally:
        service.stop_event.set()
        runner.join(15)
        for e in exporters:
            e.stop()
    assert not runner.is_alive()
