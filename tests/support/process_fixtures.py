"""Helpers for tests of the process actuator, the router and the closed loop on local engines.

``from tests.support.process_fixtures import ...``. Stand-in engines are `planner emulate` processes (OpenAI
API + vLLM metrics, ready in a few seconds); the closed-loop engine tests use real vLLM instead.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
EMULATED_PROFILE = REPO / "profiles" / "h200" / "qwen3-0.6b.json"


def emulator_command(role: str = "aggregated", time_scale: float = 10.0) -> list[str]:
    """`planner emulate` as an engine command (time_scale 10: the 0.6B model's ~2.6 ms ITL becomes ~26 ms)."""
    return [sys.executable, "-m", "planner.cli", "emulate", "--profile", str(EMULATED_PROFILE), "--role", role,
            "--port", "{port}", "--time-scale", f"{time_scale:g}", "--model-name", "emu"]


def port_range(n: int = 8) -> tuple[int, int]:
    """``n`` consecutive ports that are free now, below the kernel's ephemeral range: ports the kernel hands
    out for bind(0) and outgoing connections (vLLM's internal sockets, other tests' servers) never land there
    while an engine is starting, so a free port stays free (other test runs may still share the machine)."""
    low, _ = _ephemeral()
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(15000, low - n)
        if all(_free(p) for p in range(first, first + n)):
            return first, first + n - 1
    raise RuntimeError(f"no {n} consecutive free ports below {low}")


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str, every_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


def targets(path: Path) -> dict[str, list[int]]:
    """targets.json as ports per pool ({} when it does not exist)."""
    try:
        groups = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, list[int]] = {}
    for g in groups:
        out.setdefault(g["labels"]["pool"], []).extend(int(t.rsplit(":", 1)[1]) for t in g["targets"])
    return {p: sorted(v) for p, v in out.items()}


def sample(url: str, name: str, **labels: str) -> float | None:
    """One sample from a /metrics page (None when absent)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def sample_sum(url: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` (0 when none)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(s.value) for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def registry_value(registry, name: str, **labels: str) -> float:  # noqa: ANN001 - CollectorRegistry
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = proc_stat(int(entry))
            if info is not None:
                parents.setdefault(info[1], []).append(int(entry))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    info = proc_stat(pid)
    return info is not None and info[0] != "Z"


@dataclass
class Stream:
    """One streamed completion through the router, as the client saw it."""

    status: int = 0
    chunks: list[dict] = field(default_factory=list)
    done: bool = False  # ended with data: [DONE]
    error: dict | None = None  # an error event the router sent instead of [DONE]
    text: str = ""

    @property
    def completion_tokens(self) -> int | None:
        usage = [c["usage"] for c in self.chunks if c.get("usage")]
        return usage[-1]["completion_tokens"] if usage else None


def stream(url: str, prompt: str, max_tokens: int, timeout_s: float = 120.0,
           on_chunk: Callable[[Stream], None] | None = None, chat: bool = False) -> Stream:
    # No "model": vLLM and the emulator then serve their own; ignore_eos makes the length exactly max_tokens.
    body: dict = {"max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                  "stream_options": {"include_usage": True}}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if chat else "/v1/completions"
    out = Stream()
    with httpx.stream("POST", url + path, json=body, timeout=timeout_s) as r:
        out.status = r.status_code
        if r.status_code != 200:
            out.text = r.read().decode()
            return out
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                out.done = True
                continue
            chunk = json.loads(data)
            if "error" in chunk:
                out.error = chunk["error"]
                continue
            out.chunks.append(chunk)
            if on_chunk is not None:
                on_chunk(out)
    return out


class Load:
    """Open-loop load through the router: one streamed request every ``1/rate_rps`` s, each on its own thread,
    every outcome recorded (a test asserts that none failed). ``concurrency`` > 0: closed-loop instead, that many
    clients each sending its next request as its last one ends, so that many are in flight whatever the
    engines' speed (an open loop paced slower than a request lasts never has two at once)."""

    def __init__(self, url: str, rate_rps: float, prompt: str, max_tokens: int, chat_every: int = 0,
                 concurrency: int = 0) -> None:
        self.url, self.rate_rps, self.prompt, self.max_tokens = url, rate_rps, prompt, max_tokens
        self.chat_every, self.concurrency = chat_every, concurrency
        self.results: list[Stream] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._pacer = threading.Thread(target=self._pace, daemon=True)

    def start(self) -> Load:
        if self.concurrency > 0:
            self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                             for i in range(self.concurrency)]
            for t in self._threads:
                t.start()
        else:
            self._pacer.start()
        return self

    def _client(self, i: int) -> None:
        k = 0
        while not self._stop.is_set():
            self._one(self.chat_every > 0 and (k * self.concurrency + i) % self.chat_every == 0)
            k += 1

    def _pace(self) -> None:
        k = 0
        start = time.monotonic()
        while not self._stop.is_set():
            chat = self.chat_every > 0 and k % self.chat_every == 0
            t = threading.Thread(target=self._one, args=(chat,), daemon=True)
            t.start()
            self._threads.append(t)
            k += 1
            self._stop.wait(max(0.0, start + k / self.rate_rps - time.monotonic()))

    def _one(self, chat: bool) -> None:
        try:
            s = stream(self.url, self.prompt, self.max_tokens, timeout_s=300.0, chat=chat)
            ok = s.status == 200 and s.done and s.error is None and s.completion_tokens == self.max_tokens
            problem = None if ok else f"status {s.status} done {s.done} error {s.error} tokens " \
                                      f"{s.completion_tokens} {s.text[:200]}"
        except httpx.HTTPError as exc:
            s, problem = Stream(), f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.results.append(s)
            if problem is not None:
                self.failures.append(problem)

    def stop(self, timeout_s: float = 300.0) -> None:
        self._stop.set()
        if self._pacer.is_alive():
            self._pacer.join(10)
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


@pytest.fixture
def servers() -> Iterator[list]:
    """In-process servers a test starts (BackgroundServer), stopped in reverse order at its end."""
    made: list = []
    yield made
    for s in reversed(made):
        s.stop()


def emulator(made: list, role: str = "aggregated", time_scale: float = 10.0):
    """An in-process emulator engine of EMULATED_PROFILE on a free port, stopped with ``made``."""
    from planner.emulator.app import create_app, engine_model_for
    from planner.profile import load_profile
    from planner.service.background import BackgroundServer

    s = BackgroundServer(create_app(engine_model_for(load_profile(EMULATED_PROFILE), role), "emu", time_scale),
                         port=0).start()
    made.append(s)
    return s
