"""Shared helpers for tests that need a real Prometheus, fake exporters or a fault-injection server.

A test module uses them with ``from tests.support.prom_fixtures import ...``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from planner.testing.local_prometheus import LocalPrometheus, Target, prometheus_binary
from planner.testing.ports import free_port

SCRAPE_S = 1.0
SLOTS = 40


def require_prometheus() -> str:
    """The binary, or skip - except in CI, where a missing binary is a broken setup, not a reason to skip."""
    binary = prometheus_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but no prometheus binary: .ci/run must `apt-get install -y prometheus`")
        pytest.skip("prometheus binary not installed (apt-get install -y prometheus)")
    return binary


@dataclass(frozen=True)
class Slot:
    """A scrape target reserved for one test: bring a server up on ``port``; select with ``selector``."""

    name: str
    port: int

    @property
    def selector(self) -> str:
        return f'{{slot="{self.name}"}}'


class PromEnv:
    """One Prometheus for a module, with pre-declared targets (slots) that tests take and never share."""

    def __init__(self, prom: LocalPrometheus, slots: list[Slot]) -> None:
        self.prom = prom
        self._free = list(slots)

    @property
    def url(self) -> str:
        return self.prom.url

    def take(self, n: int = 1) -> list[Slot]:
        if len(self._free) < n:
            raise RuntimeError("out of Prometheus slots: raise SLOTS in tests/support/prom_fixtures.py")
        out, self._free = self._free[:n], self._free[n:]
        return out

    def query(self, promql: str) -> list[dict]:
        import httpx

        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def wait_for(self, promql: str, predicate: Callable[[list[dict]], bool], timeout_s: float = 20.0) -> list[dict]:
        """Poll until ``predicate(result)``; the result it returns is what the test then asserts on."""
        deadline = time.monotonic() + timeout_s
        result = self.query(promql)
        while not predicate(result):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting on {promql!r}; last result {result!r:.300}")
            time.sleep(0.2)
            result = self.query(promql)
        return result

    def wait_scrapes(self, n: int = 2) -> None:
        time.sleep(n * SCRAPE_S + 0.3)


@pytest.fixture(scope="module")
def prom_env() -> Iterator[PromEnv]:
    require_prometheus()
    slots = [Slot(f"s{i}", free_port()) for i in range(SLOTS)]
    prom = LocalPrometheus([Target(s.port, {"slot": s.name}) for s in slots], scrape_interval_s=SCRAPE_S)
    prom.start(timeout_s=60)
    try:
        yield PromEnv(prom, slots)
    finally:
        prom.stop()


class FakeHTTP:
    """Tiny threaded HTTP server: ``/metrics`` serves ``text``; anything else runs ``handler``.

    Used as a controllable exporter (Prometheus scrapes it) and as a fault-injecting "Prometheus" (delays,
    5xx, malformed JSON) pointed at by the source.
    """

    def __init__(self, port: int = 0, text: str = "") -> None:
        self.text = text
        self.delay_s = 0.0
        self.status = 200
        self.body: dict | str = {"status": "success", "data": {"resultType": "vector", "result": []}}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _reply(self) -> None:
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                if self.path.startswith("/metrics"):
                    payload, ctype, status = outer.text.encode(), "text/plain; version=0.0.4", 200
                else:
                    body = outer.body
                    payload = (body if isinstance(body, str) else json.dumps(body)).encode()
                    ctype, status = "application/json", outer.status
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:  # noqa: N802
                self._reply()

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self._reply()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_http() -> Iterator[Callable[..., FakeHTTP]]:
    made: list[FakeHTTP] = []

    def make(port: int = 0, text: str = "") -> FakeHTTP:
        server = FakeHTTP(port, text)
        made.append(server)
        return server

    yield make
    for s in made:
        try:
            s.stop()
        except OSError:
            pass


def vllm_exposition(*, running: float = 0, waiting: float = 0, success: float = 0, kv: float = 0.0,
                    prompt_sum: float = 0, prompt_count: float = 0, ttft: tuple[float, ...] = (),
                    itl: tuple[float, ...] = (), engines: tuple[str, ...] = ("0",),
                    ttft_bounds: tuple[float, ...] = (0.1, 0.5, 1.0),
                    itl_bounds: tuple[float, ...] = (0.01, 0.05, 0.1)) -> str:
    """A minimal vLLM /metrics text with every series the vllm dialect reads, once per engine in ``engines``
    (vLLM with data parallelism exports one series per engine on one /metrics)."""
    per = [f'model_name="m",engine="{e}"' for e in engines]

    def series(name: str, value: float, extra: str = "") -> list[str]:
        return [f"{name}{{{labels}{extra}}} {value}" for labels in per]

    def hist(name: str, values: tuple[float, ...], bounds: tuple[float, ...]) -> list[str]:
        lines = [f"# TYPE {name} histogram"]
        for b in (*bounds, float("inf")):
            le = "+Inf" if b == float("inf") else repr(b)
            lines += series(f"{name}_bucket", sum(1 for v in values if v <= b), f',le="{le}"')
        return lines + series(f"{name}_sum", sum(values)) + series(f"{name}_count", len(values))

    lines = [
        "# TYPE vllm:num_requests_running gauge", *series("vllm:num_requests_running", running),
        "# TYPE vllm:num_requests_waiting gauge", *series("vllm:num_requests_waiting", waiting),
        "# TYPE vllm:kv_cache_usage_perc gauge", *series("vllm:kv_cache_usage_perc", kv),
        "# TYPE vllm:request_success_total counter",
        *series("vllm:request_success_total", success, ',finished_reason="length"'),
        "# TYPE vllm:request_prompt_tokens histogram",
        *series("vllm:request_prompt_tokens_sum", prompt_sum), *series("vllm:request_prompt_tokens_count", prompt_count),
        "# TYPE vllm:request_generation_tokens histogram",
        *series("vllm:request_generation_tokens_sum", prompt_sum),
        *series("vllm:request_generation_tokens_count", prompt_count),
        *hist("vllm:time_to_first_token_seconds", ttft, ttft_bounds),
        *hist("vllm:inter_token_latency_seconds", itl, itl_bounds),
    ]
    return "\n".join(lines) + "\n"
