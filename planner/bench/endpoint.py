"""`planner bench endpoint`: is the endpoint backend's load generator ever the bottleneck?

It starts `planner emulate` (a separate process, so the CPU this process spends is the client's alone),
opens ``streams`` concurrent streams through the load generator the endpoint backend uses, and reports:
- client CPU per token received, and the share of one core the client used;
- the client's event-loop lag (how late a 5 ms timer fires while the streams run): the delay a
  timestamp taken on the client can carry;
- the mean inter-token gap as the client timed it against the emulator's own (its vLLM
  ``inter_token_latency_seconds`` histogram over the same requests): the client's distortion;
- the steady-window ITL the backend would record against the profile's curve at that batch and context.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from planner.catalog import shipped_profile
from planner.profile import load_profile
from planner.profiler.loadgen import (
    PLAIN_USAGE,
    LoopLag,
    RequestShape,
    StreamResult,
    make_client,
    run_streams,
)
from planner.profiler.prompts import TEXT, PromptMaker
from planner.profiler.steady import steady_window
from planner.testing.ports import free_port

DEFAULT_PROFILE = shipped_profile("h200/qwen3-32b.json")
ITL_SERIES = re.compile(r"^vllm:inter_token_latency_seconds_(sum|count)\{[^}]*\} (\S+)$", re.M)


@dataclass(frozen=True)
class Overhead:
    streams: int
    tokens: int
    wall_s: float
    client_cpu_s: float
    lag_p50_s: float
    lag_p99_s: float
    lag_max_s: float
    client_gap_s: float  # mean inter-token gap the client saw
    server_gap_s: float  # mean inter-token gap the emulator measured itself
    window_itl_s: float
    profile_itl_s: float
    server_cpu_s: float | None = None  # the emulator process's CPU over the same run (Linux /proc)

    @property
    def cpu_per_token_us(self) -> float:
        return self.client_cpu_s / max(self.tokens, 1) * 1e6


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _server_itl(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = {m[0]: float(m[1]) for m in ITL_SERIES.findall(text)}
    return found.get("sum", 0.0), found.get("count", 0.0)


def _client_gap_s(results: list[StreamResult]) -> float:
    spans = sum(r.events_s[-1] - r.events_s[0] for r in results if len(r.events_s) > 1)
    gaps = sum(r.tokens[-1] - r.tokens[0] for r in results if len(r.events_s) > 1)
    return spans / max(gaps, 1)


async def _measure(url: str, model: str, streams: int, prompt_tokens: int, max_tokens: int) -> tuple:
    shape = RequestShape(model, PLAIN_USAGE, {})
    prompts = PromptMaker(TEXT, seed=7)
    async with make_client(url, streams, 600.0) as client:
        await run_streams(client, shape, [prompts.make(prompt_tokens) for _ in range(4)], 4)  # warm-up
        before = _server_itl(url)
        batch = [prompts.make(prompt_tokens) for _ in range(streams)]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with LoopLag() as lag:
            results = await run_streams(client, shape, batch, max_tokens)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        after = _server_itl(url)
    return results, cpu, wall, lag, before, after


def measure(url: str, model: str, streams: int, context: int, decode_tokens: int, profile_itl_ms: float,
            time_scale: float, server_pid: int | None = None) -> Overhead:
    prompt = max(1, context - decode_tokens // 2)
    server_cpu0 = process_cpu_s(server_pid) if server_pid else None
    results, cpu, wall, lag, before, after = asyncio.run(
        _measure(url, model, streams, prompt, decode_tokens + max(8, streams * prompt // 8192 + 4)))
    server_cpu1 = process_cpu_s(server_pid) if server_pid else None
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {streams} streams failed: HTTP {failed[0].status} {failed[0].error}")
    window = steady_window(results, [r.prompt_tokens or prompt for r in results])
    return Overhead(streams=streams, tokens=sum(r.tokens[-1] for r in results), wall_s=wall, client_cpu_s=cpu,
                    lag_p50_s=lag.median_s, lag_p99_s=lag.quantile_s(0.99), lag_max_s=max(lag.lags_s, default=0.0),
                    client_gap_s=_client_gap_s(results),
                    server_gap_s=(after[0] - before[0]) / max(after[1] - before[1], 1.0),
                    window_itl_s=window.itl_s if window else float("nan"),
                    profile_itl_s=profile_itl_ms / 1e3 * time_scale,
                    server_cpu_s=server_cpu1 - server_cpu0 if server_cpu0 is not None and server_cpu1 is not None
                    else None)


def _start_emulator(profile: Path, port: int, time_scale: float) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "emulate", "--profile", str(profile), "--role",
                             "aggregated", "--port", str(port), "--time-scale", str(time_scale)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"planner emulate did not start on port {port}")


def run(console: Console, profile_path: Path | None, streams: int, context: int, decode_tokens: int,
        time_scale: float) -> Overhead:
    path = profile_path or DEFAULT_PROFILE
    prof = load_profile(path)
    tp = prof.selected_tp("decode")
    port = free_port()
    proc = _start_emulator(path, port, time_scale)
    try:
        expected = prof.decode_curve(tp).itl_ms(streams, context).value
        result = measure(f"http://127.0.0.1:{port}", prof.model.name, streams, context, decode_tokens, expected,
                         time_scale, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    render(console, result, path, context, time_scale)
    return result


def render(console: Console, o: Overhead, path: Path, context: int, time_scale: float) -> None:
    table = Table(title=f"endpoint load generator at {o.streams} concurrent streams (planner emulate, "
                        f"{path.name}, context {context}, time scale {time_scale:g})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("tokens received", f"{o.tokens:,} in {o.wall_s:.2f} s ({o.tokens / o.wall_s:,.0f} tok/s)"),
            ("client CPU per token", f"{o.cpu_per_token_us:.1f} us (one core keeps up with "
                                     f"{1e6 / o.cpu_per_token_us:,.0f} tok/s)"),
            ("CPU share of one core: client / emulator", f"{o.client_cpu_s / o.wall_s:.1%} / " + (
                f"{o.server_cpu_s / o.wall_s:.1%}" if o.server_cpu_s is not None else "n/a")),
            ("event-loop lag p50 / p99 / max", f"{o.lag_p50_s * 1e3:.2f} / {o.lag_p99_s * 1e3:.2f} / "
                                               f"{o.lag_max_s * 1e3:.2f} ms"),
            ("mean token gap: client / emulator", f"{o.client_gap_s * 1e3:.3f} / {o.server_gap_s * 1e3:.3f} ms "
                                                  f"({o.client_gap_s / o.server_gap_s - 1:+.2%})"),
            ("steady-window ITL / profile ITL", f"{o.window_itl_s * 1e3:.3f} / {o.profile_itl_s * 1e3:.3f} ms "
                                                f"({o.window_itl_s / o.profile_itl_s - 1:+.2%})")]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
