"""The endpoint backend's two sweeps against one live server (async; planner.profiler.endpoint drives it).

Prefill: TTFT at concurrency 1 over the ISL grid, one token out (``max_tokens`` 1). Decode: for each
context and batch, ``batch`` streams at once, each with a prompt of ``context - decode_tokens/2`` tokens (so
the context averaged over the measured tokens is the grid's), asked for enough tokens that every stream
decodes ``decode_tokens`` tokens while all of them do (planner.profiler.steady). The grid runs in passes,
one run of every point each; the first ``warmup`` passes are not timed; each point is the median of its
timed runs.

Nothing is invented: a point the server cannot do (context beyond max_model_len, a batch above the
concurrency limit, an HTTP 4xx, a batch it did not run at once, preemptions) is skipped with a note; a
server failing point after point (5xx, broken streams) ends the sweep with an error naming the URL.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from planner.errors import UserError
from planner.profiler.endpoint_server import Counters, ServerInfo, counters, wait_idle
from planner.profiler.loadgen import LoopLag, RequestShape, StreamResult, run_streams, stream_completion
from planner.profiler.prompts import PromptMaker, close_enough
from planner.profiler.steady import Window, steady_window

FAILURES_IN_A_ROW = 3  # points failing with 5xx / broken streams before the server counts as down
PREFILL_CHUNK_GUESS = 2048  # tokens per engine iteration assumed before a batch was seen (vLLM's smallest)
DECODE_ATTEMPTS = 4  # runs of one decode point before its streams count as queued by the server
QUEUED_GROWTH = 4  # after a run whose streams never all decoded at once, room for this many times the tokens
CLIENT_LAG_SHARE = 0.1  # the client's median event-loop lag above this share of the ITL gets a note
# The client's steady-window ITL against the server's own mean over the same runs (vLLM's exact histogram
# _sum/_count). The server's mean also counts the slow steps that carry the other streams' prefill chunks
# while the batch fills, so it sits above the steady ITL: by ~2.4x at batch 16 x context 2,048 on the CPU
# build, by up to ~7x for the largest GPU grid points. A client reading under a tenth of it is chunks that
# arrived merged (a starved client). A client cannot receive tokens more slowly than the server makes them
# without falling behind, so a reading well above the mean (1.5x) was set by the client, not the server.
# docs/fidelity.md, change 5 of "What was off in the simulator", has the readings behind both bounds.
SERVER_ITL_FLOOR = 0.1
# A decode batch starts on an idle server (endpoint_server.wait_idle): at most this long for the streams of an
# earlier run, closed early by the client, to be aborted by the server.
IDLE_WAIT_S = 15.0
MISREAD_ATTEMPTS = 3
MISREAD_BACKOFF_S = 1.0  # before the n-th run again, n times this  # runs of a decode point whose reading fell under the floor before it is skipped
SERVER_ITL_CEILING = 1.5


class PointSkipped(Exception):
    """The server cannot do this point; the message says why (goes to the provenance notes)."""

    def __init__(self, message: str, failed: bool = False, queued: bool = False) -> None:
        super().__init__(message)
        self.failed = failed  # the server failed (5xx, broken stream), rather than declined the point
        self.queued = queued  # the server did not run the whole batch at once (a larger one will not run)


@dataclass(frozen=True)
class Plan:
    isl_grid: tuple[int, ...]
    batch_grid: tuple[int, ...]
    context_grid: tuple[int, ...]
    warmup: int
    iters: int
    decode_tokens: int
    max_model_len: int
    concurrency_limit: int | None = None


@dataclass
class Measured:
    prefill: list[tuple[int, float]] = field(default_factory=list)  # (isl, ttft_ms)
    decode: list[tuple[int, int, float]] = field(default_factory=list)  # (batch, context, itl_ms)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    most_tokens_held: int = 0  # the most KV tokens seen held at once (batch x context at the window's end)
    largest_batch: int = 0


def held_to_server(where: str, itl_s: float, server_s: float | None) -> tuple[float, str | None]:
    """A decode point's ITL held to the server's own mean over its runs (None: the server exports none): a
    reading far under it is not a measurement (PointSkipped), one far over it was the client's (the server's
    mean is used instead, an upper estimate of the steady ITL, with a note saying so)."""
    if server_s is None or server_s <= 0:
        return itl_s, None
    ratio = itl_s / server_s
    if ratio < SERVER_ITL_FLOOR:
        raise PointSkipped(f"{where}: the client read {itl_s * 1e3:.3g} ms per token, {ratio:.2g}x the server's "
                           f"own mean of {server_s * 1e3:.3g} ms over the run (its chunks arrived merged); not used")
    if ratio > SERVER_ITL_CEILING:
        return server_s, (f"{where}: the client read {itl_s * 1e3:.3g} ms per token, {ratio:.2g}x the server's own "
                          f"mean of {server_s * 1e3:.3g} ms over the run: the client set the pace; the server's "
                          "mean used")
    return itl_s, None


def _judge(results: list[StreamResult], where: str) -> None:
    """Raise PointSkipped for the first failed stream: declined (4xx) or failed (5xx, broken, no tokens)."""
    for r in results:
        if r.ok or r.closed_early:
            continue
        if 400 <= r.status < 500:
            raise PointSkipped(f"{where}: HTTP {r.status} {r.error}")
        what = f"HTTP {r.status} {r.error}" if r.status != 200 else (r.error or "the stream ended without tokens")
        raise PointSkipped(f"{where}: {what}", failed=True)


@dataclass
class Point:
    """One grid point and what its timed runs measured (ms); dead once the server could not do it."""

    where: str
    isl: int = 0  # prefill
    batch: int = 0  # decode
    context: int = 0  # decode
    samples_ms: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)  # prefill: as the server counted them
    mean_contexts: list[float] = field(default_factory=list)  # decode: context while measured
    dead: bool = False


class Sweeper:
    """Runs the grid in passes (one run of every point per pass; the first ``warmup`` passes untimed), so a
    slow spell of the server or the machine lands on one run of many points, not on every run of one point,
    and the median over passes drops it."""

    def __init__(self, client: httpx.AsyncClient, server: ServerInfo, shape: RequestShape, prompts: PromptMaker,
                 plan: Plan, on_point: Callable[[], None] = lambda: None) -> None:
        self.client, self.server, self.shape, self.prompts, self.plan = client, server, shape, prompts, plan
        self.on_point = on_point
        self.out = Measured()
        self._failures: list[str] = []
        self._decode_before: dict[tuple[int, int], int] = {}  # (batch, context) -> tokens before the window

    def points(self) -> list[Point]:
        prefill = [Point(f"prefill isl {isl}", isl=isl) for isl in self.plan.isl_grid]
        decode = [Point(f"decode batch {b} context {c}", batch=b, context=c)
                  for c in self.plan.context_grid for b in sorted(self.plan.batch_grid)]
        return prefill + decode

    # --------------------------------------------------------------------------------------- driver
    async def run(self) -> Measured:
        await self._warm_up()
        points = self.points()
        for run in range(self.plan.warmup + self.plan.iters):
            for point in points:
                if not point.dead and await self._point(point, timed=run >= self.plan.warmup):
                    self._drop_larger(points, point)
                self.on_point()
        self._collect(points)
        return self.out

    def _drop_larger(self, points: list[Point], queued: Point) -> None:
        for p in points:
            if p.batch > queued.batch and p.context == queued.context and not p.dead:
                p.dead = True
                self.out.skipped.append(f"{p.where}: not tried (batch {queued.batch} was already more than the "
                                        "server ran at once)")

    async def _point(self, point: Point, timed: bool) -> bool:
        """One run of one point; True when the server queued its batch (so larger batches are not tried)."""
        try:
            if point.batch:
                await self._decode(point, timed)
            else:
                await self._prefill(point, timed)
            self._failures.clear()
            return False
        except PointSkipped as exc:
            point.dead = True
            self.out.skipped.append(str(exc))
            if exc.failed:
                self._failures.append(str(exc))
                if len(self._failures) >= FAILURES_IN_A_ROW:
                    raise UserError(f"url: {self.server.url}: the server failed {len(self._failures)} points in "
                                    f"a row mid-sweep (last: {exc}); nothing was written", key="url") from None
            else:
                self._failures.clear()
            return exc.queued

    def _collect(self, points: list[Point]) -> None:
        for p in points:
            if p.dead or not p.samples_ms:
                continue
            if not p.batch:
                isl = p.isl
                counted = round(statistics.median(p.prompt_tokens)) if p.prompt_tokens else p.isl
                if not close_enough(p.isl, counted):
                    self.out.notes.append(f"{p.where}: prompts came to {counted} tokens; recorded at that ISL")
                    isl = counted
                self.out.prefill.append((isl, statistics.median(p.samples_ms)))
                continue
            mean_ctx = statistics.fmean(p.mean_contexts)
            if abs(mean_ctx - p.context) > 0.1 * p.context:
                self.out.notes.append(f"{p.where}: mean context while measured was {mean_ctx:.0f} tokens")
            self.out.decode.append((p.batch, p.context, statistics.median(p.samples_ms)))
            self.out.largest_batch = max(self.out.largest_batch, p.batch)
            prompt = max(1, p.context - self.plan.decode_tokens // 2)
            self.out.most_tokens_held = max(self.out.most_tokens_held, p.batch * (prompt + self.plan.decode_tokens))

    async def _warm_up(self) -> None:
        """Untimed requests first: connections, the server's first-request paths, the prompt calibration."""
        isl = min(min(self.plan.isl_grid), self.plan.max_model_len - 8)
        results = [await stream_completion(self.client, self.shape, self.prompts.make(isl), 8) for _ in range(2)]
        try:
            _judge(results, "warm-up")
        except PointSkipped as exc:
            raise UserError(f"url: {self.server.url}: the server failed the first requests ({exc})", key="url") from None

    # -------------------------------------------------------------------------------------- prefill
    async def _prefill(self, point: Point, timed: bool) -> None:
        if point.isl + 1 > self.plan.max_model_len:
            raise PointSkipped(f"{point.where}: above the server's max_model_len {self.plan.max_model_len}")
        result = await stream_completion(self.client, self.shape, self.prompts.make(point.isl), 1)
        _judge([result], point.where)
        if result.prompt_tokens is not None:
            self.prompts.observe(point.isl, [result.prompt_tokens])
        if timed:
            point.samples_ms.append(result.ttft_s * 1e3)
            if result.prompt_tokens is not None:
                point.prompt_tokens.append(result.prompt_tokens)

    # --------------------------------------------------------------------------------------- decode
    async def _decode(self, point: Point, timed: bool) -> None:
        where, batch, ctx, want = point.where, point.batch, point.context, self.plan.decode_tokens
        limit = self.plan.concurrency_limit
        if limit is not None and batch > limit:
            raise PointSkipped(f"{where}: above the concurrency limit {limit}")
        prompt = max(1, ctx - want // 2)
        if prompt + want > self.plan.max_model_len:
            raise PointSkipped(f"{where}: context + {want} tokens is above the server's max_model_len "
                               f"{self.plan.max_model_len}")
        kv = self.server.kv_capacity_tokens
        if kv is not None and batch * (prompt + want) > kv:
            raise PointSkipped(f"{where}: needs {batch * (prompt + want)} KV tokens, the server holds {kv}",
                               queued=True)
        for attempt in range(MISREAD_ATTEMPTS):
            await wait_idle(self.client, IDLE_WAIT_S)  # the server's counters over this run only
            before = await counters(self.client)
            window = await self._decode_run(where, batch, ctx, prompt)
            after = await counters(self.client)
            if before.preemptions is not None and after.preemptions is not None and after.preemptions > before.preemptions:
                raise PointSkipped(f"{where}: the server preempted {after.preemptions - before.preemptions:g} "
                                   "requests (KV cache full), so the batch did not decode at once")
            try:
                itl_s = self._checked_itl(where, window, after, before)
                break
            except PointSkipped:  # a misread (merged chunks) on a moment's starvation: run the batch again
                if attempt == MISREAD_ATTEMPTS - 1:
                    raise
                # Starvation comes in spells (other jobs, the host's steal): let this one pass first.
                await asyncio.sleep(MISREAD_BACKOFF_S * (attempt + 1))
        if timed:
            point.samples_ms.append(itl_s * 1e3)
            point.mean_contexts.append(window.mean_context_tokens)

    def _checked_itl(self, where: str, window: Window, after: Counters, before: Counters) -> float:
        itl_s, note = held_to_server(where, window.itl_s, after.itl_mean_s_since(before))
        if note:
            self.out.notes.append(note)
        return itl_s

    def _max_tokens(self, batch: int, ctx: int, prompt: int) -> int:
        want = self.plan.decode_tokens
        before = self._decode_before.get((batch, ctx))
        if before is None:  # first run of the point: the prefill of the others, at a small chunk size
            before = math.ceil(batch * prompt / PREFILL_CHUNK_GUESS) if batch > 1 else 0
        return min(want + before + max(2, want // 4), self.plan.max_model_len - prompt)

    async def _decode_run(self, where: str, batch: int, ctx: int, prompt: int) -> Window:
        """One batch. When the window held fewer tokens than asked, or none (streams that reached the server
        late, after others had finished), again with room for the tokens that came before it; a batch that
        still never decodes all at once was queued by the server."""
        steps, evidence = 0, ""
        for _attempt in range(DECODE_ATTEMPTS):
            left = await wait_idle(self.client, IDLE_WAIT_S)
            if left:
                self.out.notes.append(f"{where}: {left:g} requests were still in flight on the server after "
                                      f"{IDLE_WAIT_S:g} s; measured beside them")
            max_tokens = self._max_tokens(batch, ctx, prompt)
            prompts = [self.prompts.make(prompt) for _ in range(batch)]
            with LoopLag() as lag:
                results = await run_streams(self.client, self.shape, prompts, max_tokens, stop_if_queued=True)
            _judge(results, where)
            counted = [r.prompt_tokens if r.prompt_tokens is not None else prompt for r in results]
            self.prompts.observe(prompt, counted)
            window = steady_window(results, counted)
            if window is None:
                # One stream ended before another began (they reached the server spread out, e.g. on a busy
                # client or a starved API process): room for four times as many tokens first, so a late
                # arrival of any length is caught within a few attempts (up to max_model_len) rather than
                # creeping up by one run's worth each time.
                seen = max((r.tokens[-1] for r in results if r.tokens), default=0)
                self._decode_before[(batch, ctx)] = QUEUED_GROWTH * max(seen, max_tokens)
                steps = 0
                evidence = queue_evidence(results, left)
            else:
                self._decode_before[(batch, ctx)] = window.tokens_before
                steps = window.steps
                if steps >= max(2, self.plan.decode_tokens // 2):
                    self._check_client(where, lag, window)
                    return window
            if max_tokens >= self.plan.max_model_len - prompt:
                break
        if steps == 0:
            raise PointSkipped(f"{where}: the server queued some of the {batch} streams (fewer slots or less KV "
                               f"cache than the batch needs), so it did not run them all at once ({evidence})",
                               queued=True)
        raise PointSkipped(f"{where}: every stream decoding at once for only {steps} tokens "
                           f"(asked {self.plan.decode_tokens}; max_model_len {self.plan.max_model_len})")

    def _check_client(self, where: str, lag: LoopLag, window: Window) -> None:
        """Say so when this client, not the server, may have set the pace (its loop ran late)."""
        flagged = f"{where}: the load generator's event loop ran"
        if lag.median_s > CLIENT_LAG_SHARE * window.itl_s and not any(n.startswith(flagged) for n in self.out.notes):
            self.out.notes.append(f"{flagged} {lag.median_s * 1e3:.1f} ms late (median) against an ITL of "
                                  f"{window.itl_s * 1e3:.1f} ms: the client may have limited this point")


def queue_evidence(results: list[StreamResult], in_flight_before: float | None) -> str:
    """What the last run of a queued point saw, for its note: when the streams' first tokens came, when the
    first stream ended, and what the server was running before the run."""
    sent = min(r.sent_s for r in results)
    firsts = sorted(r.events_s[0] - sent for r in results if r.events_s)
    ends = [r.events_s[-1] - sent for r in results if r.events_s and not r.closed_early]
    parts = [f"last run: {len(firsts)} of {len(results)} streams had a first token"]
    if firsts:
        parts.append(f"between +{firsts[0]:.2f} s and +{firsts[-1]:.2f} s")
    if ends:
        parts.append(f"the first stream done at +{min(ends):.2f} s")
    parts.append(f"{sum(r.closed_early for r in results)} closed early")
    if in_flight_before is not None:
        parts.append(f"{in_flight_before:g} requests in flight on the server before it")
    return ", ".join(parts)
