"""The controller's API over real HTTP (httpx against the served app) and schemathesis against its OpenAPI.

Two policies in one process, as `planner run --policy A --policy B` builds them: one loop each, one app.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from planner.actuators.desired import DesiredStore, PublishActuator
from planner.actuators.dry_run import DryRunActuator
from planner.controller import make_planner_controller
from planner.decide.whatif import plan
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.api import create_service_app
from planner.service.background import BackgroundServer
from planner.service.decisions import DecisionLog, decision_json
from planner.service.loop import ControlLoop
from planner.telemetry import PlannerMetrics
from planner.testing.clock import FakeClock
from planner.types import Observation, PoolObservation

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-8b.json"
TOKEN = "s3cret-token"
T0 = 1_700_000_000.0
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Steady:
    def __init__(self, rate_rps: float) -> None:
        self.rate_rps = rate_rps

    def read(self, window_s: float, now_s: float) -> Observation:
        pool = PoolObservation(requests=self.rate_rps * window_s, rate_rps=self.rate_rps, isl_mean=1200,
                               osl_mean=220, ttft_ms_p95=300, itl_ms_p95=20, ready_replicas=2)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


def make_loops(clock: FakeClock, keep: int = 100) -> list[ControlLoop]:
    metrics = PlannerMetrics()
    loops = []
    for name, kind, rate in (("chat", "keda", 20.0), ("code", "dry-run", 5.0)):
        pol = parse_policy({"name": name, "profile": str(PROFILE), "pools": {"prefill": {}, "decode": {}},
                            "actuator": {"kind": kind}, "forecast": {"model": "last-value"}})
        store = DesiredStore(pol.name, pol.pool_names())
        act = PublishActuator(store, "keda") if kind == "keda" else DryRunActuator()
        loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Steady(rate), act, metrics,
                           clock, store=store, decisions=DecisionLog(keep), profile=load_profile(PROFILE))
        loops.append(loop)
    return loops


def tick_all(loops: list[ControlLoop], clock: FakeClock, n: int) -> None:
    for _ in range(n):
        for loop in loops:
            loop.tick()
        clock.advance(30)


@pytest.fixture
def served() -> Iterator[tuple[httpx.Client, list[ControlLoop]]]:
    clock = FakeClock(T0)
    loops = make_loops(clock)
    tick_all(loops, clock, 4)
    with BackgroundServer(create_service_app(loops, TOKEN)) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            yield client, loops


def test_policies_lists_every_policy_with_its_bounds(served: tuple[httpx.Client, list[ControlLoop]]) -> None:
    client, loops = served
    body = client.get("/v1/policies").json()
    assert [p["name"] for p in body] == ["chat", "code"]
    chat = body[0]
    assert chat["actuator"] == "keda" and chat["leader"] is None and chat["mode"] == "disaggregated"
    assert chat["pools"]["decode"]["desired"] == loops[0].store.get("decode")
    assert chat["pools"]["decode"]["max_replicas"] == loops[0].policy.pool("decode").max_replicas


def test_decisions_with_reasons_inputs_and_forecasts(served: tuple[httpx.Client, list[ControlLoop]]) -> None:
    client, loops = served
    records = client.get("/v1/decisions", params={"policy": "chat"}).json()["decisions"]
    assert len(records) == 4 and [r["at_s"] for r in records] == [T0 + 30 * k for k in range(4)]
    last = records[-1]
    assert last["decision"] == decision_json(loops[0].last.decision)  # type: ignore[union-attr,arg-type]
    assert last["observation"]["pools"]["prefill"]["rate_rps"] == 20.0
    assert last["forecast"]["rate_rps"]["ok"] in (True, False) and "quantiles" in last["forecast"]["rate_rps"]
    assert last["applied"]["after"] == {p: d["replicas"] for p, d in last["decision"]["pools"].items()}
    since = client.get("/v1/decisions", params={"policy": "chat", "since": T0 + 60}).json()["decisions"]
    assert [r["at_s"] for r in since] == [T0 + 60, T0 + 90]
    both = client.get("/v1/decisions", params={"limit": 3}).json()["decisions"]
    assert len(both) == 3 and {r["policy"] for r in both} == {"chat", "code"}
    missing = client.get("/v1/decisions", params={"policy": "nope"})
    assert missing.status_code == 404 and "allowed: chat, code" in missing.json()["detail"]


def test_decision_log_is_a_bounded_ring() -> None:
    clock = FakeClock(T0)
    loops = make_loops(clock, keep=3)
    tick_all(loops, clock, 5)
    assert [r["at_s"] for r in loops[0].decisions.since()] == [T0 + 60, T0 + 90, T0 + 120]


def test_plan_needs_the_token(served: tuple[httpx.Client, list[ControlLoop]]) -> None:
    client, _ = served
    body = {"policy": "chat", "rate_rps": 10, "isl_tokens": 1000, "osl_tokens": 200}
    assert client.post("/v1/plan", json=body).status_code == 401
    wrong = client.post("/v1/plan", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert client.post("/v1/plan", json=body, headers=AUTH).status_code == 200


def test_plan_is_the_what_if_and_has_no_side_effects(served: tuple[httpx.Client, list[ControlLoop]]) -> None:
    client, loops = served
    before = ([loop.store.snapshot() for loop in loops], [len(loop.decisions) for loop in loops],
              client.get("/metrics").text)
    r = client.post("/v1/plan", json={"policy": "code", "rate_rps": 50, "isl_tokens": 3000, "osl_tokens": 300},
                    headers=AUTH)
    assert r.status_code == 200
    expected = plan(loops[1].policy, load_profile(PROFILE), 50, 3000, 300)
    assert r.json()["decision"] == decision_json(expected) and r.json()["policy"] == "code"
    assert r.json()["feasible"] is True
    after = ([loop.store.snapshot() for loop in loops], [len(loop.decisions) for loop in loops],
             client.get("/metrics").text)
    assert after == before


@pytest.mark.parametrize("body,field,status", [
    ({"policy": "chat", "rate_rps": -1, "isl_tokens": 1000, "osl_tokens": 200}, "rate_rps", 422),
    ({"policy": "chat", "rate_rps": 1, "osl_tokens": 200}, "isl_tokens", 422),
    ({"policy": "chat", "rate_rps": 1, "isl_tokens": 0, "osl_tokens": 200}, "isl_tokens", 422),
    ({"policy": "chat", "rate_rps": 1, "isl_tokens": 10, "osl_tokens": 2, "qps": 3}, "qps", 422),
    ({"rate_rps": 1, "isl_tokens": 10, "osl_tokens": 2}, None, 404),  # two policies run here: name one
    ({"policy": "nope", "rate_rps": 1, "isl_tokens": 10, "osl_tokens": 2}, None, 404),
], ids=["negative-rate", "missing-isl", "zero-isl", "unknown-field", "no-policy", "unknown-policy"])
def test_plan_bad_input_names_the_field(served: tuple[httpx.Client, list[ControlLoop]], body: dict,
                                        field: str | None, status: int) -> None:
    client, _ = served
    r = client.post("/v1/plan", json=body, headers=AUTH)
    assert r.status_code == status
    if field is not None:
        assert any(e["loc"][-1] == field and e["msg"] for e in r.json()["detail"])
    else:
        assert "chat, code" in r.json()["detail"]


@pytest.mark.parametrize("path,raw,field", [
    ("/v1/plan", '{"policy": "chat", "rate_rps": NaN, "isl_tokens": 1000, "osl_tokens": 200}', "rate_rps"),
    ("/v1/plan", '{"policy": "chat", "rate_rps": Infinity, "isl_tokens": 1000, "osl_tokens": 200}', "rate_rps"),
    ("/v1/plan", '{"policy": "chat", "rate_rps": 1e400, "isl_tokens": 1000, "osl_tokens": 200}', "rate_rps"),
    ("/v1/wake", '{"policy": "chat", "waiting": NaN}', "waiting"),
], ids=["nan", "infinity", "overflow", "wake-nan"])
def test_a_non_finite_number_is_a_422_naming_the_field_not_a_500(served: tuple[httpx.Client, list[ControlLoop]],
                                                                path: str, raw: str, field: str) -> None:
    """Python's JSON reads NaN, Infinity and 1e400 as floats; FastAPI's own 422 echoed them back and could not
    be rendered, so the client got a 500 for its own bad input."""
    client, _ = served
    r = client.post(path, content=raw, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert any(e["loc"][-1] == field and "finite" in e["msg"] for e in r.json()["detail"]), r.json()


@pytest.mark.parametrize("since", ["nan", "inf"])
def test_decisions_since_a_non_finite_time_is_a_422(served: tuple[httpx.Client, list[ControlLoop]],
                                                   since: str) -> None:
    client, _ = served
    r = client.get("/v1/decisions", params={"since": since})
    assert r.status_code == 422, r.text  # it returned every decision, as if no time had been given
    assert r.json()["detail"][0]["loc"][-1] == "since" and "finite" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize("raw,msg", [
    (b'{"policy": "chat", "rate_rps": 1,', "not valid JSON at character 33"),  # FastAPI: field "33"
    (b'{"policy": "ch\xffat", "rate_rps": 1, "isl_tokens": 10, "osl_tokens": 2}', "the body is not UTF-8 JSON"),  # 400
], ids=["truncated", "not-utf8"])
def test_a_body_that_is_not_json_is_the_bodys_422(served: tuple[httpx.Client, list[ControlLoop]], raw: bytes,
                                                 msg: str) -> None:
    client, _ = served
    r = client.post("/v1/plan", content=raw, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [{"loc": ["body"], "msg": msg, "type": "json_invalid", "field": "body"}]
    assert client.get("/v1/plan").status_code == 405  # other HTTP errors keep their own status and shape


def test_desired_by_policy_and_openapi(served: tuple[httpx.Client, list[ControlLoop]]) -> None:
    client, loops = served
    ok = client.get("/v1/desired", params={"pool": "decode", "policy": "chat"})
    assert ok.json() == {"desired": loops[0].store.get("decode"), "pool": "decode", "policy": "chat",
                         "published": True}
    assert client.get("/v1/desired", params={"pool": "decode"}).status_code == 404  # which policy?
    # dry-run (docs/deploy.md's advisory step): what it would publish, said to be unpublished
    advice = client.get("/v1/desired", params={"pool": "decode", "policy": "code"})
    decided = loops[1].last.decision.targets()["decode"]  # type: ignore[union-attr]
    assert advice.json() == {"desired": decided, "pool": "decode", "policy": "code", "published": False}
    assert loops[1].store.get("decode") is None  # nothing reaches KEDA's gRPC from a dry run
    spec = client.get("/openapi.json").json()
    assert {"/v1/policies", "/v1/decisions", "/v1/plan", "/v1/desired", "/readyz"} <= set(spec["paths"])
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


OPERATIONS = ["GET /metrics", "GET /healthz", "GET /readyz", "GET /v1/desired", "GET /v1/policies",
              "GET /v1/decisions", "POST /v1/plan", "GET /v1/fleet", "POST /v1/wake"]


@pytest.fixture(scope="module")
def api_schema():  # noqa: ANN201
    clock = FakeClock(T0)
    loops = make_loops(clock)
    tick_all(loops, clock, 2)
    return schemathesis.openapi.from_asgi("/openapi.json", create_service_app(loops, TOKEN))


def test_the_schema_lists_every_operation(api_schema) -> None:  # noqa: ANN001
    assert sorted(op.ok().label for op in api_schema.get_all_operations()) == sorted(OPERATIONS)


# schemathesis' pytest plugin does not load under this pytest; its strategies run under hypothesis directly.
@pytest.mark.parametrize("label", OPERATIONS)
def test_api_conforms_to_its_openapi(api_schema, label: str) -> None:  # noqa: ANN001
    (operation,) = [op.ok() for op in api_schema.get_all_operations() if op.ok().label == label]

    @given(operation.as_strategy())
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case) -> None:  # noqa: ANN001
        case.call_and_validate(headers=AUTH)

    check()


class Partial:
    """Rates and lengths but, until ``full`` is set, no latencies: the TTFT/ITL signals not yet seen."""

    def __init__(self) -> None:
        self.full = False

    def read(self, window_s: float, now_s: float) -> Observation:
        latency = {"ttft_ms_p95": 300.0, "itl_ms_p95": 20.0} if self.full else {}
        pool = PoolObservation(requests=10 * window_s, rate_rps=10.0, isl_mean=1200, osl_mean=220, ready_replicas=2,
                               **latency)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


@pytest.mark.parametrize("kind", ["keda", "dry-run"])
def test_readyz_and_policies_agree_on_readiness(kind: str) -> None:
    """Issue 29: /v1/policies said ready while /readyz said starting (a signal not yet seen). Each state:
    before any read, some signals never seen, every one seen, then gone past staleness."""
    clock = FakeClock(T0)
    pol = parse_policy({"name": "one", "profile": str(PROFILE), "pools": {"prefill": {}, "decode": {}},
                        "actuator": {"kind": kind}, "forecast": {"model": "last-value"}})
    store = DesiredStore(pol.name, pol.pool_names())
    source = Partial()
    act = PublishActuator(store, "keda") if kind == "keda" else DryRunActuator()
    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), source, act, PlannerMetrics(), clock,
                       store=store)
    seen = []
    with BackgroundServer(create_service_app([loop])) as server, httpx.Client(base_url=server.url) as client:
        def state() -> tuple[int, str, bool, float | None]:
            r = client.get("/readyz")
            gauge = loop.metrics.registry.get_sample_value("planner_ready", {"policy": "one"})
            seen.append((r.status_code, r.json()["status"], client.get("/v1/policies").json()[0]["ready"], gauge))
            return seen[-1]

        state()
        loop.tick()
        state()
        source.full = True
        clock.advance(30)
        loop.tick()
        state()
        source.full = False
        for _ in range(4):  # stale after 3 intervals without the latencies
            clock.advance(30)
            loop.tick()
        state()
    assert [s[:3] for s in seen] == [(503, "starting", False), (503, "starting", False), (200, "ready", True),
                                     (503, "degraded", False)]
    assert [s[3] for s in seen[1:]] == [0.0, 1.0, 0.0]  # planner_ready says the same
