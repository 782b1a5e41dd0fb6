"""Against a real Prometheus (Debian binary, started here on loopback): the Observation matches what the
emulator served, planner telemetry is scrapeable, and every fault is NoData with the right reason."""

from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from planner.cli import run
from planner.emulator.app import create_app, engine_model_for
from planner.emulator.vllm_metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S
from planner.profile import load_profile
from planner.service.background import BackgroundServer
from planner.sources.prometheus import PrometheusSource
from planner.testing.local_prometheus import LocalPrometheus
from planner.types import Decision, NoData, NoDataReason, Observation, PoolDecision, Reason, buckets_1_2_5
from tests.support.prom_fixtures import PromEnv, fake_http, prom_env, require_prometheus, vllm_exposition  # noqa: F401

pytestmark = pytest.mark.prometheus
REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-0.6b.json"


def emulator(port: int, role: str = "aggregated", time_scale: float = 1.0) -> tuple[BackgroundServer, object]:
    app = create_app(engine_model_for(load_profile(PROFILE), role), "qwen3-0.6b", time_scale)
    return BackgroundServer(app, port=port).start(), app


def bucket_of(values_s: list[float], q: float, bounds: tuple[float, ...]) -> tuple[float, float]:
    """Bounds (ms) of the bucket histogram_quantile interpolates in: first cumulative count >= q * n."""
    rank, lower = q * len(values_s), 0.0
    for b in bounds:
        if sum(1 for v in values_s if v <= b) >= rank:
            return lower * 1e3, b * 1e3
        lower = b
    return bounds[-1] * 1e3, bounds[-1] * 1e3  # +Inf bucket: Prometheus answers the highest finite bound


def success_total(env: PromEnv, selector: str, n: int) -> None:
    env.wait_for(f"sum(vllm:request_success_total{selector})",
                 lambda r: bool(r) and float(r[0]["value"][1]) == n)


def send(url: str, i: int, max_tokens: int, chat: bool = False) -> None:
    words = " ".join(f"w{k}" for k in range(5 + 7 * i))
    with httpx.Client(timeout=60) as client:
        if chat:
            body = {"messages": [{"role": "user", "content": words}], "max_tokens": max_tokens, "stream": True}
            with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                for _ in r.iter_lines():
                    pass
        else:
            r = client.post(f"{url}/v1/completions", json={"prompt": words, "max_tokens": max_tokens})
            assert r.status_code == 200


def test_observation_matches_what_the_emulators_served(prom_env: PromEnv) -> None:  # noqa: F811
    pre_slot, dec_slot = prom_env.take(2)
    pre, pre_app = emulator(pre_slot.port, "prefill")
    dec, dec_app = emulator(dec_slot.port, "decode")
    n_pre, n_dec = 10, 8
    try:
        with ThreadPoolExecutor(8) as pool:
            jobs = [pool.submit(send, pre.url, i, 1, chat=i % 2 == 0) for i in range(n_pre)]
            jobs += [pool.submit(send, dec.url, i, 5 + 3 * i, chat=i % 3 == 0) for i in range(n_dec)]
            for job in jobs:
                job.result()
        success_total(prom_env, pre_slot.selector, n_pre)
        success_total(prom_env, dec_slot.selector, n_dec)
        source = PrometheusSource(prom_env.url, "vllm", {"prefill": pre_slot.selector, "decode": dec_slot.selector})
        obs = source.read(30.0, time.time())
    finally:
        pre.stop()
        dec.stop()
    assert isinstance(obs, Observation), obs
    for name, app, n in (("prefill", pre_app, n_pre), ("decode", dec_app, n_dec)):
        engine = app.state.engine
        served = engine.served
        p = obs.pools[name]
        assert p.requests == n and len(served) == n  # exact: no extrapolation, started == completed here
        assert p.rate_rps == pytest.approx(n / 30.0)
        assert p.isl_mean == pytest.approx(sum(s.prompt_tokens for s in served) / n, rel=1e-12)
        assert p.osl_mean == pytest.approx(sum(s.generation_tokens for s in served) / n, rel=1e-12)
        # The prompt-length histogram, bucket by bucket: every request in the bucket its length falls in.
        counts: dict[float, float] = {}
        for srv in served:
            le = next(b for b in (*buckets_1_2_5(1 << 20), math.inf) if srv.prompt_tokens <= b)
            counts[le] = counts.get(le, 0.0) + 1
        assert dict(p.isl_buckets) == counts
        assert (p.queue, p.running, p.kv_usage, p.ready_replicas) == (0, 0, 0, 1)
        assert p.ttft_ms_mean == pytest.approx(1e3 * sum(engine.ttft_s) / len(engine.ttft_s), rel=1e-9)
        for q, got in ((0.5, p.ttft_ms_p50), (0.95, p.ttft_ms_p95)):
            lo, hi = bucket_of(engine.ttft_s, q, TTFT_BUCKETS_S)
            assert got is not None and lo <= got <= hi, (name, q, got, lo, hi)
        if engine.itl_s:
            assert p.itl_ms_mean == pytest.approx(1e3 * sum(engine.itl_s) / len(engine.itl_s), rel=1e-9)
            for q, got in ((0.5, p.itl_ms_p50), (0.95, p.itl_ms_p95)):
                lo, hi = bucket_of(engine.itl_s, q, ITL_BUCKETS_S)
                assert got is not None and lo <= got <= hi, (name, q, got, lo, hi)
        else:  # max_tokens=1: no token gaps, nothing to measure
            assert (p.itl_ms_p50, p.itl_ms_p95, p.itl_ms_mean) == (None, None, None)


def test_requests_in_flight_count_as_started(prom_env: PromEnv) -> None:  # noqa: F811
    (slot,) = prom_env.take(1)
    server, app = emulator(slot.port, "aggregated")
    stop = threading.Event()

    def stream_long(i: int) -> None:
        body = {"prompt": "a b c d " * (i + 1), "max_tokens": 20_000, "stream": True}
        try:
            with httpx.Client(timeout=60) as client, client.stream("POST", f"{server.url}/v1/completions",
                                                                   json=body) as r:
                for _ in r.iter_lines():
                    if stop.is_set():
                        return
        except httpx.HTTPError:
            pass

    threads = [threading.Thread(target=stream_long, args=(i,), daemon=True) for i in range(5)]
    try:
        for t in threads:
            t.start()
        prom_env.wait_for(f"sum(vllm:num_requests_running{slot.selector})",
                          lambda r: bool(r) and float(r[0]["value"][1]) == 5)
        obs = PrometheusSource(prom_env.url, "vllm", {"aggregated": slot.selector}).read(30.0, time.time())
    finally:
        stop.set()
        server.stop()
    assert isinstance(obs, Observation), obs
    p = obs.pools["aggregated"]
    assert app.state.engine.served == [] or all(s.finished_reason == "abort" for s in app.state.engine.served)
    assert (p.requests, p.running, p.queue) == (5, 5, 0)  # none completed, all started
    assert p.ttft_ms_p95 is not None and p.osl_mean is None  # first tokens came; no request finished
    assert 0 < p.kv_usage < 1


def test_measured_zero_traffic_is_zero(prom_env: PromEnv) -> None:  # noqa: F811
    (slot,) = prom_env.take(1)
    server, _ = emulator(slot.port)
    try:
        prom_env.wait_for(f"vllm:num_requests_running{slot.selector}", bool)
        prom_env.wait_scrapes(1)
        obs = PrometheusSource(prom_env.url, "vllm", {"aggregated": slot.selector}).read(30.0, time.time())
    finally:
        server.stop()
    assert isinstance(obs, Observation), obs
    p = obs.pools["aggregated"]
    assert (p.requests, p.rate_rps, p.ready_replicas) == (0, 0, 1)
    assert (p.isl_mean, p.osl_mean, p.ttft_ms_p95, p.ttft_ms_mean, p.itl_ms_p50) == (None,) * 5


def test_ready_replicas_count_scrape_targets_not_engine_series(prom_env: PromEnv, fake_http) -> None:  # noqa: F811
    dp, single = prom_env.take(2)
    fake_http(dp.port, vllm_exposition(engines=("0", "1")))  # one server with data parallelism 2
    fake_http(single.port, vllm_exposition())
    both = f'{{slot=~"{dp.name}|{single.name}"}}'
    prom_env.wait_for(f"count(vllm:num_requests_running{both})", lambda r: bool(r) and float(r[0]["value"][1]) == 3)
    obs = PrometheusSource(prom_env.url, "vllm", {"dp": dp.selector, "both": both}).read(30.0, time.time())
    assert isinstance(obs, Observation), obs
    assert (obs.pools["dp"].ready_replicas, obs.pools["both"].ready_replicas) == (1, 2)  # 2 and 3 engine series


def test_resolution_on_vllm_buckets_through_prometheus(prom_env: PromEnv, fake_http) -> None:  # noqa: F811
    low, high = prom_env.take(2)
    # Every token gap at 26 ms, or every one at 49 ms: both inside vLLM's (25, 50] ms ITL bucket.
    for slot, itl_s in ((low, 0.026), (high, 0.049)):
        fake_http(slot.port, vllm_exposition(success=20, ttft=(0.12,) * 20, itl=(itl_s,) * 200,
                                             ttft_bounds=TTFT_BUCKETS_S, itl_bounds=ITL_BUCKETS_S))
        success_total(prom_env, slot.selector, 20)
    pools = {"low": low.selector, "high": high.selector}
    tight = PrometheusSource(prom_env.url, "vllm", pools, targets_ms={"ttft": 200.0, "itl": 40.0}).read(30.0, time.time())
    loose = PrometheusSource(prom_env.url, "vllm", pools, targets_ms={"ttft": 1000.0, "itl": 100.0}).read(30.0,
                                                                                                          time.time())
    assert isinstance(tight, Observation) and isinstance(loose, Observation), (tight, loose)
    lo, hi = tight.pools["low"], tight.pools["high"]
    # The p95 cannot tell 26 ms from 49 ms (both read the same interpolated value); the means are exact.
    assert lo.itl_ms_p95 == pytest.approx(hi.itl_ms_p95) and 25 < lo.itl_ms_p95 <= 50
    assert (lo.itl_ms_mean, hi.itl_ms_mean) == pytest.approx((26, 49))
    for p in (lo, hi):
        assert (p.itl_p95_bracket_ms, p.itl_p95_resolved) == ((25, 50), False)
        assert p.itl_p95_resolution == pytest.approx(0.625)
        assert (p.ttft_p95_bracket_ms, p.ttft_p95_resolved) == ((100, 250), False)
    for p in loose.pools.values():
        assert (p.itl_p95_bracket_ms, p.itl_p95_resolved, p.ttft_p95_bracket_ms, p.ttft_p95_resolved) == (
            (75, 100), True, (750, 1000), True)


def counts_around(values_s: list[float], bounds: tuple[float, ...], target_ms: float) -> tuple[int, int, int]:
    """(at the bound below the target, at the bound above it, at the target): the interpolated met lies
    between the first two, within the bucket's count of the true one (the last: what the engine saw)."""
    t = target_ms / 1e3
    lower = max((b for b in bounds if b < t), default=0.0)
    upper = min((b for b in bounds if b >= t), default=lower)  # past the last bound: the +Inf bucket is missed
    return (sum(1 for v in values_s if 0 < lower and v <= lower), sum(1 for v in values_s if v <= upper),
            sum(1 for v in values_s if v <= t))


def test_attainment_from_known_latencies(prom_env: PromEnv, fake_http) -> None:  # noqa: F811
    busy, idle, coarse = prom_env.take(3)
    # 20 requests: TTFT 12 x 50 ms, 6 x 200 ms, 2 x 600 ms; 200 token gaps: 150 x 20 ms, 40 x 45 ms, 10 x 300 ms.
    ttft = (0.05,) * 12 + (0.2,) * 6 + (0.6,) * 2
    itl = (0.02,) * 150 + (0.045,) * 40 + (0.3,) * 10
    fake_http(busy.port, vllm_exposition(success=20, ttft=ttft, itl=itl, ttft_bounds=TTFT_BUCKETS_S,
                                         itl_bounds=ITL_BUCKETS_S))
    fake_http(idle.port, vllm_exposition(ttft_bounds=TTFT_BUCKETS_S, itl_bounds=ITL_BUCKETS_S))
    # Bounds 0.1, 0.5, 1 s: a 1.5 s target is past the last finite bound, where the 1.2 s request is unknown.
    fake_http(coarse.port, vllm_exposition(success=5, ttft=(0.05,) * 3 + (1.2, 2.0)))
    success_total(prom_env, busy.selector, 20)
    success_total(prom_env, coarse.selector, 5)
    prom_env.wait_for(f"vllm:num_requests_running{idle.selector}", bool)
    pools = {"busy": busy.selector, "idle": idle.selector, "coarse": coarse.selector}

    def read(targets: dict[str, float] | None) -> dict:
        obs = PrometheusSource(prom_env.url, "vllm", pools, targets_ms=targets).read(30.0, time.time())
        assert isinstance(obs, Observation), obs
        return {name: (p.ttft_counted, p.ttft_met, p.itl_counted, p.itl_met) for name, p in obs.pools.items()}

    between = read({"ttft": 200.0, "itl": 40.0})  # (100, 250] ms and (25, 50] ms: interpolated
    # 12 + 6 * (200 - 100) / (250 - 100) = 16 met (18 did: the 200 ms ones sit at the bucket's top);
    # 150 + 40 * (40 - 25) / (50 - 25) = 174 gaps met (150 did: the 45 ms ones are past 40 ms).
    assert between["busy"] == pytest.approx((20, 16, 200, 174))
    for signal, values, bounds, target, (counted, met) in (
            ("ttft", ttft, TTFT_BUCKETS_S, 200.0, between["busy"][:2]),
            ("itl", itl, ITL_BUCKETS_S, 40.0, between["busy"][2:])):
        lo, hi, true_met = counts_around(list(values), bounds, target)
        assert counted == len(values) and lo <= met <= hi and abs(met - true_met) <= hi - lo, signal
    assert between["idle"] == (0, 0, 0, 0)  # the histograms exist and counted nothing: measured zero
    on_bounds = read({"ttft": 250.0, "itl": 50.0})  # exact on a bound (le is inclusive)
    assert on_bounds["busy"] == (20, 18, 200, 190)
    assert read({"ttft": 1500.0})["coarse"] == (5, 3, None, None)  # 1.2 s and 2 s in +Inf: counted as missed
    assert read(None)["busy"] == (None,) * 4  # no target: not measured


def test_attainment_of_requests_served_by_the_emulator(prom_env: PromEnv) -> None:  # noqa: F811
    (slot,) = prom_env.take(1)
    server, app = emulator(slot.port, "aggregated")
    n = 12
    try:
        with ThreadPoolExecutor(6) as pool:
            for job in [pool.submit(send, server.url, i, 4 + 2 * i, chat=i % 2 == 0) for i in range(n)]:
                job.result()
        success_total(prom_env, slot.selector, n)
        engine = app.state.engine
        ttft_s, itl_s = sorted(engine.ttft_s), sorted(engine.itl_s)
        targets = {"ttft": max(1e-3, 1e3 * ttft_s[n // 2]), "itl": max(1e-3, 1e3 * itl_s[len(itl_s) // 2])}
        obs = PrometheusSource(prom_env.url, "vllm", {"aggregated": slot.selector}, targets_ms=targets).read(
            30.0, time.time())
    finally:
        server.stop()
    assert isinstance(obs, Observation), obs
    p = obs.pools["aggregated"]
    # ITL counts token gaps, not requests: every generated token after the first is one observation.
    assert len(itl_s) == sum(s.generation_tokens - 1 for s in engine.served)
    assert (p.ttft_counted, p.itl_counted) == (n, len(itl_s))
    for signal, values, bounds, met in (("ttft", ttft_s, TTFT_BUCKETS_S, p.ttft_met),
                                        ("itl", itl_s, ITL_BUCKETS_S, p.itl_met)):
        lo, hi, true_met = counts_around(values, bounds, targets[signal])
        assert met is not None and lo - 1e-9 <= met <= hi + 1e-9, (signal, met, lo, hi)
        assert abs(met - true_met) <= hi - lo + 1e-9, (signal, met, true_met, lo, hi)


def test_one_pool_missing(prom_env: PromEnv, fake_http) -> None:  # noqa: F811
    pre, dec = prom_env.take(2)
    fake_http(pre.port, vllm_exposition(success=3))
    prom_env.wait_for(f"vllm:num_requests_running{pre.selector}", bool)
    got = PrometheusSource(prom_env.url, "vllm", {"prefill": pre.selector, "decode": dec.selector}).read(
        30.0, time.time())
    assert isinstance(got, NoData) and got.reason == NoDataReason.MISSING_POOL and "decode" in got.detail


def test_selector_matching_nothing_is_empty(prom_env: PromEnv) -> None:  # noqa: F811
    got = PrometheusSource(prom_env.url, "vllm", {"aggregated": '{slot="nowhere"}'}).read(30.0, time.time())
    assert isinstance(got, NoData) and got.reason == NoDataReason.EMPTY


@pytest.mark.parametrize("field", ["running", "kv", "success"])
def test_nan_is_no_data(prom_env: PromEnv, fake_http, field: str) -> None:  # noqa: F811
    (slot,) = prom_env.take(1)
    fake_http(slot.port, vllm_exposition(**{field: float("nan")}))
    prom_env.wait_for(f"vllm:num_requests_running{slot.selector}", bool)
    prom_env.wait_scrapes(1)
    got = PrometheusSource(prom_env.url, "vllm", {"aggregated": slot.selector}).read(30.0, time.time())
    assert isinstance(got, NoData) and got.reason == NoDataReason.NAN, got


def test_series_going_stale(prom_env: PromEnv, fake_http) -> None:  # noqa: F811
    (slot,) = prom_env.take(1)
    exporter = fake_http(slot.port, vllm_exposition(success=2))
    source = PrometheusSource(prom_env.url, "vllm", {"aggregated": slot.selector})
    prom_env.wait_for(f"vllm:num_requests_running{slot.selector}", bool)
    prom_env.wait_scrapes(1)
    assert isinstance(source.read(30.0, time.time()), Observation)
    exporter.stop()  # the engine goes away: the next failed scrape writes staleness markers
    prom_env.wait_for(f"up{slot.selector}", lambda r: bool(r) and r[0]["value"][1] == "0")
    prom_env.wait_scrapes(1)
    got = source.read(30.0, time.time())
    assert isinstance(got, NoData) and got.reason == NoDataReason.STALE, got


def test_prometheus_hung_then_stopped() -> None:
    require_prometheus()
    prom = LocalPrometheus([]).start()
    source = PrometheusSource(prom.url, "vllm", {"aggregated": ""}, timeout_s=0.5)
    try:
        assert source.read(30.0, time.time()).reason == NoDataReason.EMPTY  # up, but nothing scraped
        prom.pause()  # SIGSTOP: the socket accepts, nothing answers - slower than any timeout
        assert source.read(30.0, time.time()).reason == NoDataReason.TIMEOUT
        prom.resume()
    finally:
        prom.stop()
    assert source.read(30.0, time.time()).reason == NoDataReason.UNREACHABLE


def test_planner_telemetry_is_scraped(prom_env: PromEnv) -> None:  # noqa: F811
    from planner.service.app import create_app as planner_app
    from planner.signals import SignalTracker
    from planner.telemetry import PlannerMetrics, record_decision, record_signals

    (slot,) = prom_env.take(1)
    metrics = PlannerMetrics()
    tracker = SignalTracker(["prefill/rate"], interval_s=1.0, stale_after_intervals=2)
    tracker.update({"prefill/rate": False}, 100.0)
    tracker.update({"prefill/rate": False}, 102.0)
    record_signals(metrics, "p", tracker.status(102.0))
    decision = Decision(at_s=0.0, pools={"prefill": PoolDecision(3, 2, 2.4, (Reason.SLA_CAPACITY,), 250.0)},
                        reasons=(Reason.SLA_CAPACITY,))
    record_decision(metrics, "p", decision)
    server = BackgroundServer(planner_app(metrics.registry, lambda: tracker.status(102.0)), port=slot.port).start()
    try:
        assert httpx.get(f"{server.url}/readyz").status_code == 503
        got = prom_env.wait_for(f'planner_desired_replicas{{slot="{slot.name}",policy="p",pool="prefill"}}', bool)
        ready = prom_env.query(f"planner_ready{slot.selector}")
        reason = prom_env.query(f'planner_last_decision_reason{{slot="{slot.name}",reason="sla_capacity"}}')
    finally:
        server.stop()
    assert float(got[0]["value"][1]) == 3
    assert float(ready[0]["value"][1]) == 0 and float(reason[0]["value"][1]) == 1


def test_cli_observe_contract(prom_env: PromEnv, capsys, fake_http) -> None:  # noqa: F811
    (slot,) = prom_env.take(1)
    fake_http(slot.port, vllm_exposition(success=0))
    prom_env.wait_for(f"vllm:num_requests_running{slot.selector}", bool)
    rc = run(["observe", "--prometheus", prom_env.url, "--dialect", "vllm", "--selector", slot.selector,
              "--window-s", "30", "--itl-ms", "40", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert list(body) == ["status", "reason", "window_s", "pools"]
    assert (body["status"], body["reason"], body["window_s"]) == ("ok", None, 30.0)
    p = body["pools"]["aggregated"]
    assert {"requests", "rate_rps", "isl_mean", "osl_mean", "ttft_ms_p50", "ttft_ms_p95", "itl_ms_p50",
            "itl_ms_p95", "queue", "running", "kv_usage"} <= set(p)
    assert (p["requests"], p["rate_rps"], p["ttft_ms_p95"]) == (0, 0, None)
    # The exposition's ITL buckets are 10, 50, 100 ms: a 40 ms target sits in (10, 50], unresolved.
    assert (p["itl_p95_bracket_ms"], p["itl_p95_resolution"], p["itl_p95_resolved"]) == ([10, 50], 1.0, False)
    assert (p["ttft_p95_bracket_ms"], p["ttft_p95_resolved"]) == (None, None)  # no TTFT target given

    assert run(["observe", "--prometheus", prom_env.url, "--selector", slot.selector, "--window-s", "30",
                "--ttft-ms", "2000"]) == 0
    human = capsys.readouterr().out
    assert "aggregated" in human and "rate_rps" in human and "ttft_p95_resolution" in human
    assert "ttft p95 is unresolved near its target: bucket (1000, inf] ms (no bucket above it" in human

    rc = run(["observe", "--prometheus", prom_env.url, "--selector", '{slot="nowhere"}', "--json"])
    body = json.loads(capsys.readouterr().out)
    assert rc == 3 and body == {"status": "no_data", "reason": "empty", "window_s": 60.0, "pools": {}}


def test_cli_bench_observe_prints_figures(prom_env: PromEnv, capsys) -> None:  # noqa: F811
    rc = run(["bench", "observe", "--prometheus", prom_env.url, "--reads", "5"])
    out = capsys.readouterr().out
    assert rc == 0 and "p50" in out and "p99" in out and "5 reads" in out
    assert not math.isnan(float(out.split("p50 ")[1].split(" ms")[0]))


@pytest.mark.parametrize("dialect", ["vllm", "sglang", "dynamo", "trtllm"])
def test_every_dialect_query_is_valid_promql(prom_env: PromEnv, dialect: str) -> None:  # noqa: F811
    # Prometheus parses and runs the whole read: a syntax error would come back as bad_response.
    got = PrometheusSource(prom_env.url, dialect, {"prefill": '{slot="nowhere",role="prefill"}',
                                                   "decode": '{slot="nowhere"}'}).read(30.0, time.time())
    assert isinstance(got, NoData) and got.reason == NoDataReason.EMPTY, got


SGLANG_TEXT = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0"} 2
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0"} 1
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",engine_type="unified",tp_rank="0"} 0.5
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",engine_type="unified"} 4
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m",engine_type="unified"} 400
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m",engine_type="unified"} 80
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{model_name="m",engine_type="unified",le="0.1"} 1
sglang:time_to_first_token_seconds_bucket{model_name="m",engine_type="unified",le="0.5"} 4
sglang:time_to_first_token_seconds_bucket{model_name="m",engine_type="unified",le="+Inf"} 4
sglang:time_to_first_token_seconds_sum{model_name="m",engine_type="unified"} 1.0
sglang:time_to_first_token_seconds_count{model_name="m",engine_type="unified"} 4
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{model_name="m",engine_type="unified",le="0.02"} 76
sglang:inter_token_latency_seconds_bucket{model_name="m",engine_type="unified",le="+Inf"} 76
sglang:inter_token_latency_seconds_sum{model_name="m",engine_type="unified"} 0.76
sglang:inter_token_latency_seconds_count{model_name="m",engine_type="unified"} 76
"""


def test_sglang_dialect_reads_an_sglang_exporter(prom_env: PromEnv, fake_http) -> None:  # noqa: F811
    (slot,) = prom_env.take(1)
    fake_http(slot.port, SGLANG_TEXT)  # counters born inside the window count from zero
    prom_env.wait_for(f"sglang:num_running_reqs{slot.selector}", bool)
    obs = PrometheusSource(prom_env.url, "sglang", {"aggregated": slot.selector}).read(30.0, time.time())
    assert isinstance(obs, Observation), obs
    p = obs.pools["aggregated"]
    assert (p.requests, p.isl_mean, p.osl_mean, p.running, p.queue, p.kv_usage) == (4 + 3, 100, 20, 2, 1, 0.5)
    assert p.ttft_ms_mean == pytest.approx(250) and 100 <= p.ttft_ms_p95 <= 500
    assert p.itl_ms_mean == pytest.approx(10) and p.itl_ms_p50 <= 20
