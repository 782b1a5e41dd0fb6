"""Open-loop load through the router: each request of a schedule sent at its arrival time, whatever the
previous ones are doing, and every outcome recorded.

Requests are not streamed: the engines measure TTFT and ITL themselves (Prometheus has them), and a laptop
then spends nothing per generated token on the client side. The prompt is a list of token ids of the trace's
length, so an emulator and a real engine both count exactly that many prompt tokens.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass

import httpx

from planner.sim.traces.records import RequestTrace

TIMEOUT_S = 600.0
TOKEN_ID_SPAN = 1000  # ids 10..1009: inside every tokenizer's vocabulary


@dataclass(frozen=True)
class Outcome:
    sent_s: float  # wall seconds since the load started
    latency_s: float
    ok: bool
    prompt_tokens: int
    output_tokens: int
    problem: str = ""


class LoadGenerator:
    def __init__(self, url: str, schedule: RequestTrace, max_model_len: int | None = None) -> None:
        self.url = url
        self.schedule = schedule
        self.max_model_len = max_model_len
        self.outcomes: list[Outcome] = []
        self.in_flight = 0
        self.sent = 0
        self._recent: deque[float] = deque()  # monotonic send times of the last 10 s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._abandon = threading.Event()
        self._thread = threading.Thread(target=self._run, name="up-load", daemon=True)
        self.started_s = 0.0
        self.finished = threading.Event()

    def start(self) -> LoadGenerator:
        self.started_s = time.monotonic()
        self._thread.start()
        return self

    def stop_sending(self) -> None:
        self._stop.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Send nothing more; wait up to ``timeout_s`` for the requests in flight, then leave them."""
        self._stop.set()
        self._thread.join(timeout_s)
        self._abandon.set()

    def rate_rps(self, window_s: float = 10.0) -> float:
        now = time.monotonic()
        with self._lock:
            while self._recent and self._recent[0] < now - window_s:
                self._recent.popleft()
            return len(self._recent) / window_s

    def counts(self) -> dict[str, int]:
        with self._lock:
            failed = sum(1 for o in self.outcomes if not o.ok)
            return {"sent": self.sent, "in_flight": self.in_flight, "ok": len(self.outcomes) - failed,
                    "failed": failed}

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=TIMEOUT_S, limits=limits) as client:
            tasks: set[asyncio.Task[None]] = set()
            for at_s, isl, osl in zip(self.schedule.arrival_s, self.schedule.isl, self.schedule.osl, strict=True):
                delay = self.started_s + float(at_s) - time.monotonic()
                if delay > 0 and await self._stopped_within(delay):
                    break
                if self._stop.is_set():
                    break
                task = asyncio.create_task(self._one(client, time.monotonic() - self.started_s, int(isl), int(osl)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            self.finished.set()
            while tasks and not self._abandon.is_set():
                await asyncio.sleep(0.1)

    async def _stopped_within(self, delay_s: float) -> bool:
        end = time.monotonic() + delay_s
        while time.monotonic() < end:
            if self._stop.is_set():
                return True
            await asyncio.sleep(min(0.05, max(0.0, end - time.monotonic())))
        return self._stop.is_set()

    def _lengths(self, isl: int, osl: int) -> tuple[int, int]:
        isl, osl = max(1, isl), max(1, osl)
        if self.max_model_len is not None:  # a small real model's context: the answer first, then the prompt
            osl = min(osl, self.max_model_len // 2)
            isl = min(isl, self.max_model_len - osl - 1)
        return isl, osl

    async def _one(self, client: httpx.AsyncClient, sent_s: float, isl: int, osl: int) -> None:
        isl, osl = self._lengths(isl, osl)
        body = {"prompt": [10 + i % TOKEN_ID_SPAN for i in range(isl)], "max_tokens": osl, "ignore_eos": True,
                "stream": False}
        with self._lock:
            self.sent += 1
            self.in_flight += 1
            self._recent.append(time.monotonic())
        begun = time.monotonic()
        try:
            r = await client.post(f"{self.url}/v1/completions", json=body)
            got = (r.json().get("usage") or {}).get("completion_tokens") if r.status_code == 200 else None
            ok = r.status_code == 200 and got == osl
            problem = "" if ok else f"status {r.status_code}, {got} tokens of {osl}: {r.text[:200]}"
        except (httpx.HTTPError, ValueError) as exc:
            ok, problem = False, f"{type(exc).__name__}: {exc}"
        outcome = Outcome(sent_s, time.monotonic() - begun, ok, isl, osl, problem)
        with self._lock:
            self.in_flight -= 1
            self.outcomes.append(outcome)
