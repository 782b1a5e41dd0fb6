"""`planner bench observe`: time Observation reads for one policy against a real Prometheus.

Without a Prometheus URL it brings up the whole read path on loopback: a local Prometheus (Debian
binary) scraping two emulated vLLM engines (prefill and decode) under light traffic.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from planner.errors import UserError
from planner.sources.prometheus import PrometheusSource

# The pool label the local Prometheus sets on its emulated engines (as deploy/engines' PodMonitors do).
DEFAULT_SELECTORS = {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}


def _traffic(urls: list[str], stop: threading.Event, period_s: float = 0.05) -> None:
    import httpx

    with httpx.Client(timeout=30) as client:
        i = 0
        while not stop.is_set():
            for url in urls:
                try:
                    client.post(f"{url}/v1/completions",
                                json={"prompt": "word " * (20 + i % 50), "max_tokens": 4 + i % 8})
                except httpx.HTTPError:
                    pass
            i += 1
            stop.wait(period_s)


def _time_reads(console: Console, source: PrometheusSource, reads: int, window_s: float) -> None:
    times_ms: list[float] = []
    outcomes: Counter[str] = Counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("reading observations", total=reads)
        for _ in range(reads):
            start = time.perf_counter()
            result = source.read(window_s, time.time())
            times_ms.append((time.perf_counter() - start) * 1e3)
            outcomes[getattr(result, "reason", "ok")] += 1
            progress.advance(task)
    times_ms.sort()
    p99 = times_ms[min(len(times_ms) - 1, int(0.99 * len(times_ms)))]
    console.print(f"observe read ({len(source.selectors)} pools, dialect {source.dialect.name}, window "
                  f"{window_s:g}s, 1 query of {len(source.query(window_s, time.time()))} chars): "
                  f"p50 {statistics.median(times_ms):.1f} ms, p99 {p99:.1f} ms, max {times_ms[-1]:.1f} ms "
                  f"over {len(times_ms)} reads; outcomes {dict(outcomes)}")


def _source(url: str, policy: Path | None, local: bool = False) -> PrometheusSource:
    """``local``: the bench's own Prometheus, whose engines carry DEFAULT_SELECTORS' labels; a policy that
    names no selectors reads them there."""
    if policy is None:
        return PrometheusSource(url, "vllm", DEFAULT_SELECTORS)
    from planner.policy_file import load_policy

    pol = load_policy(policy)
    if local and not pol.metrics.selectors:
        metrics = pol.metrics.model_copy(update={"selectors": {p: DEFAULT_SELECTORS.get(p, "")
                                                               for p in pol.pool_names()}})
        pol = pol.model_copy(update={"metrics": metrics})
    return PrometheusSource.from_policy(pol, pol.metrics, url=url)


def run(console: Console, prometheus: str | None, policy: Path | None, reads: int, window_s: float) -> None:
    """Time ``reads`` reads against ``prometheus`` (a URL), or against a local one with two emulated pools."""
    if prometheus is not None:
        with _source(prometheus, policy) as source:
            _time_reads(console, source, reads, window_s)
        return

    from planner.emulator.app import create_app, engine_model_for
    from planner.profile import load_profile
    from planner.service.background import BackgroundServer
    from planner.testing.local_prometheus import LocalPrometheus, Target, prometheus_binary
    from planner.testing.ports import free_port

    if prometheus_binary() is None:
        raise UserError("prometheus: no URL given and no prometheus binary to start a local one "
                        "(apt-get install -y prometheus)", key="prometheus")
    profile = load_profile(Path(__file__).resolve().parents[2] / "profiles" / "h200" / "qwen3-0.6b.json")
    ports = {"prefill": free_port(), "decode": free_port()}
    servers = [BackgroundServer(create_app(engine_model_for(profile, role), "qwen3-0.6b", time_scale=0.2),
                                port=port) for role, port in ports.items()]
    prom = LocalPrometheus([Target(port, {"pool": role}) for role, port in ports.items()])
    stop = threading.Event()
    try:
        for s in servers:
            s.start()
        console.print("starting a local Prometheus (first scrape takes ~5 s)...")
        prom.start()
        worker = threading.Thread(target=_traffic, args=([s.url for s in servers], stop), daemon=True)
        worker.start()
        time.sleep(4.0)  # a few scrapes with traffic in them
        with _source(prom.url, policy, local=True) as source:
            _time_reads(console, source, reads, window_s)
    finally:
        stop.set()
        prom.stop()
        for s in servers:
            s.stop()
