"""Real-time continuous batching over the shared EngineModel (planner/perf/engine.py).

One asyncio task runs iterations back to back while there is work. Each iteration takes one prefill
chunk (up to ``chunk_tokens`` prompt tokens, first come first served, across requests) and every running
sequence that already has its first token (one decode token each); it lasts
``EngineModel.mixed_step_s(batch, mean_context, prefill_tokens)`` scaled by ``time_scale``. A request whose
prompt completes in an iteration emits its first token at the end of that iteration, as vLLM does.

A decode replica of a disaggregated pair (``kv_from_prefill``) computes no prompt: its KV comes from the prefill
replica through the KV connector (vLLM counts those prompt tokens under source ``external_kv_transfer``), so a
request's first token comes at the end of the first decode iteration after admission, and its iterations are
decode steps alone. Recomputing every prompt there made `planner up`'s decode replica spend most of each step
on 23,000 prompt tokens/s (18.8 req/s of 1,233 tokens) that its sizing rightly never counts, and its ITL 40x the
profile's. The transfer's own time is not emulated.

Iterations are scheduled against absolute deadlines, so the event loop's millisecond timer granularity
delays single steps but not the average rate. Metrics are measured wall-clock durations (vLLM semantics:
what was served), so with ``time_scale`` 0.1 latencies are a tenth of the profile's and throughput ten
times higher.

State changes and metric updates happen in the same synchronous block on the loop, and /metrics is
rendered on the loop too, so one scrape always sees counters and gauges from the same instant (the
Prometheus source's started-requests identity relies on it).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field

from planner.emulator.vllm_metrics import VllmMetrics
from planner.perf.engine import EngineModel


@dataclass(eq=False)
class Sequence:
    index: int
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    prefilled: int = 0
    generated: int = 0
    scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_reason: str | None = None
    tokens: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)

    @property
    def context_tokens(self) -> int:
        return self.prefilled + self.generated

    @property
    def done(self) -> bool:
        return self.finished_reason is not None


@dataclass(frozen=True)
class Served:
    """What the engine measured for one finished request (tests compare Prometheus against these)."""

    prompt_tokens: int
    generation_tokens: int
    finished_reason: str
    ttft_s: float | None
    e2e_s: float


class EmulatedEngine:
    def __init__(self, model: EngineModel, metrics: VllmMetrics, time_scale: float = 1.0,
                 kv_from_prefill: bool = False) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.model = model
        self.kv_from_prefill = kv_from_prefill
        self.metrics = metrics
        self.time_scale = time_scale
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.served: list[Served] = []
        self.ttft_s: list[float] = []
        self.itl_s: list[float] = []
        self.iterations = 0
        self._ids = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------------------ control
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="emulated-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def submit(self, prompt_tokens: int, max_tokens: int) -> Sequence:
        now = asyncio.get_running_loop().time()
        seq = Sequence(next(self._ids), prompt_tokens, max_tokens, now)
        self.waiting.append(seq)
        self.metrics.request_params_n.observe(1)  # vLLM observes both on arrival, max_tokens at the end
        self.metrics.request_max_num_generation_tokens.observe(max_tokens)
        self._sync_gauges()
        self._wake.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        if seq.done:
            return
        if seq in self.waiting:
            self.waiting.remove(seq)
        if seq in self.running:
            self.running.remove(seq)
        self._finish(seq, "abort", asyncio.get_running_loop().time())
        self._sync_gauges()

    # ------------------------------------------------------------------------------------------- loop
    @property
    def kv_used_tokens(self) -> int:
        """KV tokens held: a running request holds its prompt's blocks from admission on, plus its output."""
        return sum(s.prompt_tokens + s.generated for s in self.running)

    def _admit(self) -> None:
        capacity = self.model.kv_capacity_tokens
        while self.waiting and len(self.running) < max(1, self.model.max_batch):
            seq = self.waiting[0]
            # Reserve the whole request (prompt + max_tokens): the emulator does not preempt, so it admits
            # only what can finish; an idle engine admits anything rather than deadlock.
            reserved = sum(s.prompt_tokens + s.max_tokens for s in self.running)
            fits = capacity <= 0 or reserved + seq.prompt_tokens + seq.max_tokens <= capacity
            if self.running and not fits:
                break
            self.waiting.popleft()
            seq.scheduled_s = asyncio.get_running_loop().time()
            if self.kv_from_prefill:
                seq.prefilled = seq.prompt_tokens  # the prompt's KV arrived from the prefill replica
            self.running.append(seq)
            self.metrics.prefix_cache_queries.inc(seq.prompt_tokens)  # looked up, never found: no prefix cache

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_s = loop.time()
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                next_s = loop.time()
                continue
            self._admit()
            budget = self.model.chunk_tokens
            chunk: list[tuple[Sequence, int]] = []
            for seq in self.running:
                if budget <= 0:
                    break
                if seq.first_token_s is None and seq.prefilled >= seq.prompt_tokens:
                    chunk.append((seq, 0))  # KV from prefill: its first token comes with this step
                elif seq.prefilled < seq.prompt_tokens:
                    take = min(budget, seq.prompt_tokens - seq.prefilled)
                    chunk.append((seq, take))
                    budget -= take
            decoding = [s for s in self.running if s.first_token_s is not None]
            prefill_tokens = sum(t for _, t in chunk)
            mean_ctx = sum(s.context_tokens for s in decoding) / len(decoding) if decoding else 0.0
            step_s = self.model.mixed_step_s(len(decoding), mean_ctx, prefill_tokens) * self.time_scale
            next_s = max(next_s, loop.time() - step_s) + step_s  # catch up after a stall, never run ahead
            delay = next_s - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            self._complete_iteration(chunk, decoding, prefill_tokens, loop.time())

    def _complete_iteration(self, chunk: list[tuple[Sequence, int]], decoding: list[Sequence],
                            prefill_tokens: int, now: float) -> None:
        m = self.metrics
        self.iterations += 1
        m.iteration_tokens.observe(prefill_tokens + len(decoding))
        for seq in decoding:
            if seq.done:  # aborted while the iteration ran
                continue
            gap = now - (seq.last_token_s or now)
            m.inter_token_latency.observe(gap)
            self.itl_s.append(gap)
            self._emit(seq, now)
        for seq, take in chunk:
            if seq.done:
                continue
            seq.prefilled += take
            if seq.prefilled >= seq.prompt_tokens:
                seq.first_token_s = now
                ttft = now - seq.arrival_s
                m.time_to_first_token.observe(ttft)
                self.ttft_s.append(ttft)
                m.prompt_tokens.inc(seq.prompt_tokens)
                source = "external_kv_transfer" if self.kv_from_prefill else "local_compute"
                m.prompt_tokens_by_source[source].inc(seq.prompt_tokens)
                self._emit(seq, now)
        self._sync_gauges()

    def _emit(self, seq: Sequence, now: float) -> None:
        seq.tokens.put_nowait(seq.generated)
        seq.generated += 1
        seq.last_token_s = now
        self.metrics.generation_tokens.inc()
        if seq.generated >= seq.max_tokens:
            self.running.remove(seq)
            self._finish(seq, "length", now)

    def _finish(self, seq: Sequence, reason: str, now: float) -> None:
        """vLLM's per-request observations (IterationStats.update_from_finished_request), one each per
        finished request whatever the reason; a phase the request never reached is observed as 0 s."""
        m = self.metrics
        seq.finished_reason = reason
        seq.tokens.put_nowait(None)
        m.request_success[reason].inc()
        m.request_prompt_tokens.observe(seq.prompt_tokens)
        m.request_generation_tokens.observe(seq.generated)
        m.request_params_max_tokens.observe(seq.max_tokens)
        m.request_num_preemptions.observe(0)  # admission reserves prompt + max_tokens: never preempted
        # No prefix cache: all computed here, or none when the KV came from the prefill replica.
        m.request_prefill_kv_computed_tokens.observe(0 if self.kv_from_prefill else seq.prompt_tokens)
        e2e = now - seq.arrival_s
        m.e2e_request_latency.observe(e2e)
        scheduled = seq.scheduled_s if seq.scheduled_s is not None else now
        first = seq.first_token_s if seq.first_token_s is not None else scheduled
        last = seq.last_token_s if seq.last_token_s is not None else first
        m.request_queue_time.observe(scheduled - seq.arrival_s)
        m.request_inference_time.observe(last - scheduled)
        m.request_prefill_time.observe(first - scheduled)
        m.request_decode_time.observe(last - first)
        m.request_time_per_output_token.observe((last - first) / (seq.generated - 1) if seq.generated > 1 else 0.0)
        ttft = seq.first_token_s - seq.arrival_s if seq.first_token_s is not None else None
        self.served.append(Served(seq.prompt_tokens, seq.generated, reason, ttft, e2e))

    def _sync_gauges(self) -> None:
        m = self.metrics
        m.num_requests_running.set(len(self.running))
        m.num_requests_waiting.set(len(self.waiting))
        m.num_requests_waiting_by_reason["capacity"].set(len(self.waiting))  # nothing is ever deferred
        capacity = self.model.kv_capacity_tokens
        m.kv_cache_usage_perc.set(min(1.0, self.kv_used_tokens / capacity) if capacity > 0 else 0.0)
