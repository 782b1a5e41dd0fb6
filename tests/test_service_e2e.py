"""`planner run` end to end. First test: a real Prometheus scrapes two vLLM-format exporters (prefill, decode) whose
counters advance at a controllable request rate; the service reads it, decides, scales Deployments on the
fake Kubernetes API server, and serves /v1/desired, /readyz, /metrics and the KEDA external scaler.

Load goes up -> the fake decode Deployment's replicas go up. Metrics vanish -> no scale-down, readiness
degraded. Second test: the same service reads two real engine emulators (`planner emulate`) under traffic.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
import yaml

from planner.actuators import externalscaler_pb2 as pb
from planner.actuators import externalscaler_pb2_grpc as pb_grpc
from planner.service.runner import RunOptions, Service
from planner.testing.ports import free_port
from tests.support.fake_kube import FakeKube
from tests.support.prom_fixtures import FakeHTTP, PromEnv, prom_env  # noqa: F401

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
NS = "llm"


class Exporter:
    """vLLM metrics for one engine whose counters advance at ``rate_rps`` (ISL 2000, OSL 300)."""

    def __init__(self, port: int) -> None:
        self.http = FakeHTTP(port)
        self.rate_rps = 0.0
        self.done = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._advance, daemon=True)
        self._thread.start()

    def _advance(self) -> None:
        while not self._stop.wait(0.1):
            self.done += self.rate_rps * 0.1
            self.http.text = self.text()

    def text(self) -> str:
        n, lab = self.done, 'model_name="m",engine="0"'

        def hist(name: str, bounds: tuple[float, ...], value: float) -> list[str]:
            out = [f"# TYPE {name} histogram"]
            for b in (*bounds, "+Inf"):
                inside = b == "+Inf" or value <= b
                out.append(f'{name}_bucket{{{lab},le="{b}"}} {n if inside else 0}')
            return [*out, f"{name}_sum{{{lab}}} {n * value}", f"{name}_count{{{lab}}} {n}"]

        lines = ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} 1",
                 "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} 0",
                 "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} 0.1",
                 "# TYPE vllm:request_success_total counter",
                 f'vllm:request_success_total{{{lab},finished_reason="length"}} {n}',
                 "# TYPE vllm:request_prompt_tokens histogram",
                 f"vllm:request_prompt_tokens_sum{{{lab}}} {n * 2000}", f"vllm:request_prompt_tokens_count{{{lab}}} {n}",
                 "# TYPE vllm:request_generation_tokens histogram",
                 f"vllm:request_generation_tokens_sum{{{lab}}} {n * 300}",
                 f"vllm:request_generation_tokens_count{{{lab}}} {n}",
                 *hist("vllm:time_to_first_token_seconds", (0.1, 0.5, 1.0), 0.08),
                 *hist("vllm:inter_token_latency_seconds", (0.01, 0.05, 0.1), 0.008)]
        return "\n".join(lines) + "\n"

    def vanish(self) -> None:
        # The scrape target goes first, the counting after: the other way round, a scrape between the two
        # sees flat counters (a real drop in load, which the planner may follow) before the series go stale.
        self.http.stop()  # the scrape target is gone: its series go stale
        self._stop.set()

    def stop(self) -> None:
        if not self._stop.is_set():
            self.vanish()


def wait_until(predicate, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.2)


@pytest.mark.parametrize("kind", ["kubernetes", "keda"])
def test_run_scales_from_real_prometheus(prom_env: PromEnv, tmp_path: Path, kind: str) -> None:  # noqa: F811
    """kubernetes: the planner scales the Deployments itself; keda: it publishes N (HTTP and gRPC) and writes
    nothing. Each output has one writer, so the other channel stays silent."""
    pre_slot, dec_slot = prom_env.take(2)
    exporters = [Exporter(pre_slot.port), Exporter(dec_slot.port)]
    for e in exporters:
        e.rate_rps = 2.0
    kube = FakeKube().start()
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 1)
    policy = {
        "name": "e2e", "profile": str(REPO / "profiles/h200/qwen3-8b.json"), "interval_s": 1, "startup_s": 5,
        "pools": {"prefill": {"target": {"name": "pre", "namespace": NS}},
                  "decode": {"target": {"name": "dec", "namespace": NS}}},
        "forecast": {"model": "last-value", "history_s": 120},
        "behavior": {"scale_up": {"policies": [{"type": "pods", "value": 100, "period_s": 1}]},
                     "scale_down": {"stabilization_window_s": 0,
                                    "policies": [{"type": "pods", "value": 100, "period_s": 1}]}},
        "metrics": {"url": prom_env.url, "window_s": 5, "stale_after_intervals": 4,
                    "selectors": {"prefill": pre_slot.selector, "decode": dec_slot.selector}},
        "actuator": {"kind": kind},
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    opts = RunOptions(path, host="127.0.0.1", port=0, grpc_port=free_port())
    service = Service(opts, api_client=kube.api_client()).start()
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    base = service.http.url
    try:
        def desired(pool: str) -> int | None:
            r = httpx.get(f"{base}/v1/desired", params={"pool": pool}, timeout=5)
            return r.json()["desired"] if r.status_code == 200 else None

        def gauge(pool: str) -> int | None:
            for line in httpx.get(f"{base}/metrics", timeout=5).text.splitlines():
                if line.startswith(f'planner_desired_replicas{{policy="e2e",pool="{pool}"}}'):
                    return int(float(line.split()[-1]))
            return None

        # What the planner asks for: the cluster (kubernetes) or the published N (keda).
        asked = (lambda: kube.replicas("deployments", NS, "dec")) if kind == "kubernetes" else (
            lambda: desired("decode") or 0)
        wait_until(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, 30, "readiness")
        wait_until(lambda: gauge("decode") is not None, 30, "a first decision")
        low = asked()
        assert gauge("decode") == low

        for e in exporters:
            e.rate_rps = 40.0
        wait_until(lambda: asked() > low, 40, "decode to scale up")
        high = asked()
        wait_until(lambda: gauge("decode") == asked(), 10, "gauge == what was asked")
        if kind == "keda":
            with grpc.insecure_channel(f"127.0.0.1:{service.grpc.port}") as channel:
                stub = pb_grpc.ExternalScalerStub(channel)
                ref = pb.ScaledObjectRef(name="so", namespace=NS, scalerMetadata={"pool": "decode"})
                value = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="desired")).metricValues[0]
            assert value.metricValue >= low and value.metricValueFloat == float(value.metricValue)
            assert kube.replicas("deployments", NS, "dec") == 1  # KEDA owns the Deployment, not the planner
        else:
            # /v1/desired says what the planner set, as unpublished; KEDA's gRPC channel is told nothing
            wait_until(lambda: desired("decode") == asked(), 10, "/v1/desired == what was set")
            body = httpx.get(f"{base}/v1/desired", params={"pool": "decode"}, timeout=5).json()
            assert body["published"] is False
            with grpc.insecure_channel(f"127.0.0.1:{service.grpc.port}") as channel:
                stub = pb_grpc.ExternalScalerStub(channel)
                ref = pb.ScaledObjectRef(name="so", namespace=NS, scalerMetadata={"pool": "decode"})
                with pytest.raises(grpc.RpcError):
                    stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="desired"))

        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        assert 'planner_desired_replicas{policy="e2e",pool="decode"}' in metrics

        held = asked()
        for e in exporters:
            e.vanish()  # metrics vanish: the planner must hold, not fall to the floor
        wait_until(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 503, 40, "degraded readiness")
        seen = []
        for _ in range(10):
            seen.append(asked())
            time.sleep(0.3)
        assert min(seen) >= held >= high > low
        body = httpx.get(f"{base}/readyz", timeout=5).json()
        assert body["status"] == "degraded" and "decode/rate" in body["missing"]
    finally:
        service.stop_event.set()
        runner.join(15)
        for e in exporters:
            e.stop()
        kube.stop()
    assert not runner.is_alive()


def test_run_reads_real_emulators(prom_env: PromEnv, tmp_path: Path) -> None:  # noqa: F811
    """Against `planner emulate`'s engines (vLLM metric names, the shared engine timing model) under light
    traffic: the service observes the traffic and publishes a decision sized by the SLA model."""
    from planner.emulator.app import create_app, engine_model_for
    from planner.profile import load_profile
    from planner.service.background import BackgroundServer

    profile_path = REPO / "profiles/h200/qwen3-0.6b.json"
    prof = load_profile(profile_path)
    pre_slot, dec_slot = prom_env.take(2)
    engines = [BackgroundServer(create_app(engine_model_for(prof, role), "qwen3-0.6b", 1.0), port=slot.port).start()
               for role, slot in (("prefill", pre_slot), ("decode", dec_slot))]
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(timeout=30) as client:
            i = 0
            while not stop.is_set():
                for e in engines:
                    try:
                        client.post(f"{e.url}/v1/completions", json={"prompt": "word " * (50 + i % 50),
                                                                     "max_tokens": 8})
                    except httpx.HTTPError:
                        pass
                i += 1
                stop.wait(0.1)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    policy = {"name": "emu", "profile": str(profile_path), "interval_s": 1, "startup_s": 5,
              "pools": {"prefill": {}, "decode": {}}, "forecast": {"model": "last-value", "history_s": 60},
              "metrics": {"url": prom_env.url, "window_s": 5, "stale_after_intervals": 4,
                          "selectors": {"prefill": pre_slot.selector, "decode": dec_slot.selector}},
              "actuator": {"kind": "dry-run"}}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    service = Service(RunOptions(path, host="127.0.0.1", port=0, grpc_port=0)).start()
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        def sized() -> bool:
            last = service.loop.last
            return bool(last and last.decision and last.decision.pools
                        and any(r.value == "sla_capacity" for r in last.decision.reasons)
                        and last.observation.__class__.__name__ == "Observation"
                        and last.observation.pools["prefill"].rate_rps > 0)

        wait_until(sized, 40, "a decision sized from observed emulator traffic")
        r = httpx.get(f"{service.http.url}/v1/desired", params={"pool": "decode"}, timeout=5)
        # dry-run: what it would publish (docs/deploy.md's advisory step reads it), marked unpublished
        assert r.status_code == 200 and r.json()["published"] is False and r.json()["desired"] >= 1
        text = httpx.get(f"{service.http.url}/metrics", timeout=5).text
        assert 'planner_desired_replicas{policy="emu",pool="decode"}' in text
        assert 'planner_observed_rate_rps{policy="emu",pool="prefill"}' in text
    finally:
        stop.set()
        service.stop_event.set()
        runner.join(15)
        sender.join(10)
        for e in engines:
            e.stop()
