"""The replay's decode load, run on the decode server while the prefill server beside it is profiled.

On the fidelity bench the two engines share one machine (2 cores, one each), and a busy decode engine slows
the prefill engine's prompts (docs/engines/vllm-cpu.md: 31 ms alone, 59 ms beside 3 streams; the machine's
caches and memory are shared). During the replay the decode server is busy about as often as the slice
keeps it; profiled alone, the prefill curve misses that, and the simulated disaggregated TTFT comes out
short of the measured (docs/fidelity.md, "The prefill curve is measured beside the decode load"). So the
prefill server is profiled with the slice's own decode load running on the decode server: every request of
the slice at its arrival time (cycled), each with a short prompt and its own output length, sent to the
decode server directly. The simulator still times each server from its own curve; the curve is measured
under the conditions it is used in.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from planner.profiler.loadgen import (
    CONTINUOUS_USAGE,
    OPTIONAL_BODY,
    RequestShape,
    make_client,
    stream_completion,
)
from planner.profiler.prompts import TOKEN_IDS, PromptMaker
from planner.sim.traces.records import RequestTrace

PROMPT_TOKENS = 64  # the decode server prefills these itself (no KV files for them): a small share of its work


class DecodeBackground:
    """``with DecodeBackground(url, trace) as bg:`` sends ``trace``'s requests (arrival times and output
    lengths, prompts of PROMPT_TOKENS) to ``url`` over and over, from a thread of its own, until the block
    ends; then the requests in flight are cancelled. ``sent`` / ``failed`` count finished requests."""

    def __init__(self, url: str, trace: RequestTrace, model: str = "tiny", vocab: int = 4096,
                 seed: int = 2) -> None:
        self.url, self.trace, self.model = url, trace, model
        self.sent = self.failed = self.cycles = 0
        self._prompts = PromptMaker(TOKEN_IDS, vocab, seed)  # fresh ids: no prefix-cache hit
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="decode-background", daemon=True)
        self._task: asyncio.Task[None] | None = None

    def __enter__(self) -> DecodeBackground:
        self._thread.start()
        self._task = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        try:  # cancel inside the loop and wait there, so the streams are closed and the server aborts them
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()

    async def _start(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._cycles())

    async def _stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _cycles(self) -> None:
        shape = RequestShape(self.model, CONTINUOUS_USAGE, OPTIONAL_BODY)
        async with make_client(self.url, len(self.trace) + 1, 600.0) as client:
            while True:
                start = time.perf_counter()
                await asyncio.gather(*(self._one(client, shape, start + float(a), int(osl))
                                       for a, osl in zip(self.trace.arrival_s, self.trace.osl, strict=True)))
                self.cycles += 1

    async def _one(self, client: Any, shape: RequestShape, at_s: float, osl: int) -> None:
        delay = at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            r = await stream_completion(client, shape, self._prompts.make(PROMPT_TOKENS), osl)
        except Exception:  # noqa: BLE001 - background load: a lost request is counted, not raised
            self.failed += 1
            return
        if r.ok:
            self.sent += 1
        else:
            self.failed += 1
