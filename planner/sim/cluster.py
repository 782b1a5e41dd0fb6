"""Request-level discrete-event simulation of a prefill/decode (or aggregated) serving cluster.

Timing comes only from :class:`planner.perf.engine.EngineModel`. The loop jumps from event to event:
a decode replica whose batch does not change is advanced many steps at once (its context grows by one token
per sequence per step, so ``k`` steps take ``k * step(batch, mean_ctx + (k - 1) / 2)``, exact when the step
time is linear in context), and only re-planned when a sequence finishes or a new one waits at a step
boundary.

Model, in the order a request sees it (disaggregated):
1. arrival -> routed to the READY prefill replica with the least outstanding prompt tokens (a pool queue
   holds requests while no prefill replica is ready);
2. prefill replica: FCFS; each iteration takes up to ``chunk_tokens`` prompt tokens from the head of its
   queue (chunked prefill; several short prompts share one iteration);
3. KV transfer of ``isl * kv_bytes_per_token`` over the prefill replica's egress link; concurrent transfers
   on one link share it equally (processor sharing), so four at once each take ~4x;
4. decode: on arrival of the KV, routed to the READY decode replica with the fewest outstanding sequences;
   admitted at the next step boundary when a batch slot and KV room for ``isl + osl`` tokens are free
   (the whole reservation up front: no preemption); the first step emits the first token, so
   TTFT = queue + prefill + transfer + admission wait + first step; the request ends after ``osl`` steps.
Aggregated: one pool; a replica piggy-backs up to ``chunk_tokens`` of queued prompt onto each decode step
(``EngineModel.mixed_step_s``); the step that finishes a prompt emits its first token.

Replica lifecycle: STARTING (billed, ``startup_s``) -> READY -> DRAINING on scale-down (no new work,
finishes what it holds, billed) -> GONE. With ``kill=True`` scale-down removes replicas at once and
everything they held counts as failed. Scale-down removes STARTING replicas first, then the READY ones
with the least outstanding work.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from planner.perf.engine import EngineModel
from planner.perf.kv import gbps_to_bytes_per_s
from planner.profile import Profile
from planner.sim.traces import RequestTrace

STARTING, READY, DRAINING, GONE = 0, 1, 2, 3
STATE_NAMES = ("starting", "ready", "draining", "gone")

_CTX_QUANTUM = 32  # decode step times are cached per (batch, context // 32 tokens)


@dataclass(frozen=True)
class SimConfig:
    mode: str = "disaggregated"  # or "aggregated"
    link_bytes_per_s: float = gbps_to_bytes_per_s(400.0)
    startup_s: float = 120.0
    kill: bool = False
    chunk_tokens: int = 8192
    prefill_tp: int | None = None  # None: the profile's selected TP
    decode_tp: int | None = None
    tail_s: float = 1800.0  # after the last arrival, requests still unfinished this much later fail


class _Timing:
    """Cached EngineModel look-ups (the curves are interpolated in Python; the cache makes them O(1))."""

    def __init__(self, engine: EngineModel) -> None:
        self.engine = engine
        self.dec: dict[int, float] = {}
        self._pre: dict[int, float] = {}
        self._ttft: dict[int, float] = {}
        self.overhead_s = engine.prefill_overhead_s()

    def step(self, batch: int, mean_ctx: float) -> float:
        key = batch * 1_000_000 + int(mean_ctx) // _CTX_QUANTUM
        v = self.dec.get(key)
        if v is None:
            ctx = (int(mean_ctx) // _CTX_QUANTUM + 0.5) * _CTX_QUANTUM
            v = self.dec[key] = self.engine.decode_step_s(batch, ctx)
        return v

    def prefill(self, tokens: int) -> float:
        v = self._pre.get(tokens)
        if v is None:
            v = self._pre[tokens] = self.engine.prefill_iteration_s(tokens)
        return v

    def ttft_s(self, tokens: int) -> float:
        """The prefill curve at ``tokens`` in seconds (cached); pieces are timed from it as in
        EngineModel.prefill_batch_s."""
        v = self._ttft.get(tokens)
        if v is None:
            v = self._ttft[tokens] = self.engine.prefill_batch_s([(0, tokens)])
        return v


_QUEUED = attrgetter("queued_tokens")
_NOUT = attrgetter("nout")


class _Replica:
    __slots__ = ("rid", "pool", "state", "gpus", "created_s", "ready_s", "gone_s", "version")

    def __init__(self, rid: int, pool: str, gpus: int, now: float, ready_s: float) -> None:
        self.rid = rid
        self.pool = pool
        self.state = STARTING
        self.gpus = gpus
        self.created_s = now
        self.ready_s = ready_s
        self.gone_s = math.inf
        self.version = 0


class _Prefill(_Replica):
    __slots__ = ("queue", "queued_tokens", "inflight_tokens", "busy", "inflight", "link_v", "link_t", "link_heap", "link_version")

    def __init__(self, *a: object) -> None:
        super().__init__(*a)  # type: ignore[arg-type]
        self.queue: deque[list[int]] = deque()  # [request, remaining prompt tokens]
        self.queued_tokens = 0  # prompt tokens routed here and not yet prefilled (in-flight iteration included)
        self.inflight_tokens = 0
        self.busy = False
        self.inflight: list[int] = []  # requests finishing prefill in the current iteration
        self.link_v = 0.0  # processor-sharing virtual bytes served per transfer
        self.link_t = 0.0
        self.link_heap: list[tuple[float, int]] = []
        self.link_version = 0

    def outstanding(self) -> int:
        return self.queued_tokens


class _Decode(_Replica):
    __slots__ = ("b", "ctx_sum", "step_no", "t", "dt", "fin", "waiting", "kv_used", "next_t", "next_k",
                 "stack_i", "stack_v", "seg_no", "pq", "pq_tokens", "nout")

    def __init__(self, *a: object) -> None:
        super().__init__(*a)  # type: ignore[arg-type]
        self.b = 0
        self.ctx_sum = 0
        self.step_no = 0
        self.t = 0.0
        self.dt = 0.0
        self.fin: list[tuple[int, int]] = []  # (finish step, request)
        self.waiting: deque[int] = deque()
        self.kv_used = 0
        self.next_t = math.inf
        self.next_k = 0
        # Monotone stack of step durations, for each request's largest gap in O(log n).
        self.stack_i: list[int] = []
        self.stack_v: list[float] = []
        self.seg_no = 0
        self.pq: deque[list[int]] = deque()  # aggregated: [request, remaining prompt tokens]
        self.pq_tokens = 0
        self.nout = 0  # sequences routed here and not finished (the routing key)

    def outstanding(self) -> int:
        return self.nout


class Cluster:
    """The simulated cluster. Drive it with :meth:`run_until`, :meth:`apply` and read its records."""

    def __init__(self, trace: RequestTrace, profile: Profile, config: SimConfig,
                 initial: Mapping[str, int], initial_ready: bool = True) -> None:
        self.cfg = config
        self.profile = profile
        self.agg = config.mode == "aggregated"
        tp_p = config.prefill_tp or profile.selected_tp("prefill")
        tp_d = config.decode_tp or profile.selected_tp("decode")
        pc, dc = profile.prefill_curve(tp_p), profile.decode_curve(tp_d)
        self.gpus = {"prefill": pc.gpus, "decode": dc.gpus, "aggregated": dc.gpus}
        self.timing = _Timing(EngineModel(pc, dc, config.chunk_tokens))
        self.kv_cap = int(dc.kv_capacity_tokens)
        self.max_batch = int(dc.max_batch)
        self.kv_bytes = float(profile.model.kv_bytes_per_token)
        self.bw = float(config.link_bytes_per_s)
        self.pools = ("aggregated",) if self.agg else ("prefill", "decode")
        # requests
        self.arr = trace.arrival_s.tolist()
        self.isl = trace.isl.tolist()
        self.osl = trace.osl.tolist()
        n = len(self.arr)
        self.n = n
        self.first_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.itl_max_s = [math.nan] * n
        self.failed = [False] * n
        # arrivals into the decode pool (KV transfer done), for its request rate
        self.dec_in_s: list[float] = []
        self.dec_in_req: list[int] = []
        self._seg_pos = [0] * n  # decode segment number at admission (for the largest gap)
        self.next_arrival = 0
        self.done = 0
        self.failed_n = 0
        # token-gap records (end time, step seconds, tokens) for the ITL histogram a scrape would see
        self.segs: list[tuple[float, float, int]] = []
        # replicas
        self.now = 0.0
        self.replicas: dict[str, list[_Replica]] = {p: [] for p in self.pools}
        self.ready: dict[str, list[_Replica]] = {p: [] for p in self.pools}
        self.pending: dict[str, deque[int]] = {p: deque() for p in self.pools}
        self.history: list[_Replica] = []  # every replica ever created (billing)
        self._idle_prefill: list[_Prefill] = []  # READY prefill replicas with nothing to do (may hold stale entries)
        self.scale_events = 0
        self._rid = 0
        self._heap: list[tuple[float, int, Any, object, int]] = []
        self._seq = itertools.count()
        for pool in self.pools:
            for _ in range(int(initial.get(pool, 0))):
                r = self._new_replica(pool, 0.0 if initial_ready else config.startup_s)
                if initial_ready:
                    self._make_ready(r)

    # ------------------------------------------------------------------------------------------ events
    def _push(self, t: float, handler: object, obj: object, ver: int) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), handler, obj, ver))

    def run_until(self, t_end: float) -> None:
        """Process every arrival and event with time <= ``t_end``."""
        heap = self._heap
        pop = heapq.heappop
        arr = self.arr
        n = self.n
        arrive = self._to_agg if self.agg else self._to_prefill
        i = self.next_arrival
        ta = arr[i] if i < n else math.inf
        while True:
            if heap and heap[0][0] < ta:
                t = heap[0][0]
                if t > t_end:
                    break
                _, _, handler, obj, ver = pop(heap)
                self.now = t
                handler(obj, ver)
                continue
            if ta > t_end or ta == math.inf:
                break
            self.now = ta
            self.next_arrival = i + 1
            arrive(i)
            i += 1
            ta = arr[i] if i < n else math.inf
        self.now = max(self.now, t_end)

    def _ev_ready(self, r: _Replica, ver: int) -> None:
        if ver == r.version and r.state == STARTING:
            self._make_ready(r)


    def _ev_decode(self, r: _Decode, ver: int) -> None:
        if ver == r.version:
            self._decode_advance(r, r.next_k, self.now)

    @property
    def finished(self) -> bool:
        return self.next_arrival >= self.n and self.done + self.failed_n >= self.n

    def idle_horizon_s(self) -> float:
        """Last time worth simulating: all requests done, or the tail limit after the last arrival."""
        return (self.arr[-1] if self.n else 0.0) + self.cfg.tail_s

    # --------------------------------------------------------------------------------------- lifecycle
    def _new_replica(self, pool: str, ready_s: float) -> _Replica:
        self._rid += 1
        cls = _Prefill if pool == "prefill" else _Decode
        r = cls(self._rid, pool, self.gpus[pool], self.now, ready_s)
        self.replicas[pool].append(r)
        self.history.append(r)
        if ready_s > self.now:
            self._push(ready_s, self._ev_ready, r, r.version)
        return r

    def _make_ready(self, r: _Replica) -> None:
        r.state = READY
        r.ready_s = self.now
        self.ready[r.pool].append(r)
        if isinstance(r, _Prefill) and not r.busy and not r.queue:
            self._idle_prefill.append(r)
        pend = self.pending[r.pool]
        while pend:
            req = pend.popleft()
            if r.pool == "prefill":
                self._to_prefill(req)
            else:
                self._to_sequences(req, r.pool)

    def _retire(self, r: _Replica) -> None:
        r.state = GONE
        r.gone_s = self.now
        r.version += 1
        if isinstance(r, _Prefill):
            r.link_version += 1
        self.replicas[r.pool].remove(r)

    def _maybe_gone(self, r: _Replica) -> None:
        if r.state != DRAINING:
            return
        if isinstance(r, _Prefill):
            empty = not r.queue and not r.busy and not r.link_heap
        else:
            assert isinstance(r, _Decode)
            empty = r.b == 0 and not r.waiting and not r.pq
        if empty:
            self._retire(r)

    def active(self, pool: str) -> int:
        """Replicas counted against a target: STARTING + READY (DRAINING ones are on their way out)."""
        return sum(1 for r in self.replicas[pool] if r.state in (STARTING, READY))

    def apply(self, targets: Mapping[str, int]) -> dict[str, int]:
        """Move each pool to ``targets[pool]`` replicas; returns the counts before."""
        before = {p: self.active(p) for p in self.pools}
        for pool, want in targets.items():
            if pool not in self.replicas:
                continue
            want = max(0, int(want))
            have = before[pool]
            if want == have:
                continue
            self.scale_events += 1
            if want > have:
                for _ in range(want - have):
                    self._new_replica(pool, self.now + self.cfg.startup_s)
                continue
            victims = sorted((r for r in self.replicas[pool] if r.state in (STARTING, READY)),
                             key=lambda r: (r.state != STARTING, r.outstanding(), -r.rid))  # type: ignore[attr-defined]
            for r in victims[: have - want]:
                self._scale_down(r)
        return before

    def _scale_down(self, r: _Replica) -> None:
        if r.state == READY:
            self.ready[r.pool].remove(r)
        if r.state == STARTING:
            self._retire(r)
            return
        if self.cfg.kill:
            for req in self._held(r):
                self._fail(req)
            self._retire(r)
            return
        r.state = DRAINING
        self._maybe_gone(r)

    def _held(self, r: _Replica) -> list[int]:
        if isinstance(r, _Prefill):
            held = [q[0] for q in r.queue] + [req for _, req in r.link_heap]
            held += [req for req in r.inflight if req not in held]
            return held
        assert isinstance(r, _Decode)
        return [req for _, req in r.fin] + list(r.waiting) + [q[0] for q in r.pq]

    def _fail(self, req: int) -> None:
        if self.failed[req] or not math.isnan(self.finish_s[req]):
            return
        self.failed[req] = True
        self.failed_n += 1

    def fail_unfinished(self) -> int:
        """End of the run: every request not finished counts as failed."""
        before = self.failed_n
        for req in range(self.n):
            if math.isnan(self.finish_s[req]):
                self._fail(req)
        return self.failed_n - before

    def gpu_seconds(self, until_s: float) -> float:
        """Sum of replicas x GPUs x time alive (starting and draining included) up to ``until_s``."""
        return sum(max(0.0, min(r.gone_s, until_s) - min(r.created_s, until_s)) * r.gpus for r in self.history)

    # ------------------------------------------------------------------------------------------ prefill
    def _arrive(self, req: int) -> None:
        # The front pool's arrivals are the trace itself (request id = arrival order): nothing to record.
        if self.agg:
            self._to_agg(req)
        else:
            self._to_prefill(req)

    def _to_prefill(self, req: int) -> None:
        # An idle replica has zero outstanding work, the minimum: take one without scanning the pool.
        idle = self._idle_prefill
        r: _Prefill | None = None
        while idle:
            c = idle.pop()
            if c.state == READY and not c.busy and not c.queue:
                r = c
                break
        if r is None:
            ready = self.ready["prefill"]
            if not ready:
                self.pending["prefill"].append(req)
                return
            r = ready[0] if len(ready) == 1 else min(ready, key=_QUEUED)  # type: ignore[assignment]
        assert r is not None
        tokens = self.isl[req]
        if not r.busy and not r.queue and tokens <= self.cfg.chunk_tokens:
            # idle replica, one whole prompt: its iteration starts now and takes ttft(isl)
            r.queued_tokens += tokens
            r.inflight_tokens = tokens
            r.inflight = [req]
            r.busy = True
            r.version += 1
            heapq.heappush(self._heap, (self.now + self.timing.ttft_s(tokens), next(self._seq), self._ev_prefill,
                                        r, r.version))
            return
        r.queue.append([req, tokens])
        r.queued_tokens += tokens
        if not r.busy:
            self._prefill_start(r)

    def _prefill_start(self, r: _Prefill) -> None:
        """Take up to ``chunk_tokens`` from the head of the queue; time as EngineModel.prefill_batch_s."""
        q = r.queue
        if len(q) == 1:
            head = q[0]
            rem = head[1]
            if rem == self.isl[head[0]] and rem <= self.cfg.chunk_tokens:  # one whole prompt: ttft(isl)
                q.popleft()
                head[1] = 0
                r.inflight_tokens = rem
                r.inflight = [head[0]]
                r.busy = True
                r.version += 1
                heapq.heappush(self._heap, (self.now + self.timing.ttft_s(rem), next(self._seq), self._ev_prefill,
                                            r, r.version))
                return
        budget = self.cfg.chunk_tokens
        used = 0
        done: list[int] = []
        ttft = self.timing.ttft_s
        over = self.timing.overhead_s
        t_iter = over
        isl = self.isl
        while q and used < budget:
            head = q[0]
            rem = head[1]
            take = rem if rem < budget - used else budget - used
            start = isl[head[0]] - rem
            t_iter += ttft(start + take) - (ttft(start) if start else over)
            head[1] = rem - take
            used += take
            if head[1] == 0:
                done.append(head[0])
                q.popleft()
        r.inflight_tokens = used
        r.inflight = done
        r.busy = True
        r.version += 1
        self._push(self.now + t_iter, self._ev_prefill, r, r.version)

    def _ev_prefill(self, r: _Prefill, ver: int) -> None:
        """An iteration ended: its finished prompts start their KV transfers; the next iteration starts."""
        if ver != r.version:
            return
        r.busy = False
        r.queued_tokens -= r.inflight_tokens
        if r.inflight:
            # transfers start: advance the link's processor-sharing clock, add them, re-plan its next event
            now = self.now
            h = r.link_heap
            if h:
                r.link_v += (now - r.link_t) * self.bw / len(h)
            r.link_t = now
            v, kvb, isl = r.link_v, self.kv_bytes, self.isl
            for req in r.inflight:
                heapq.heappush(h, (v + isl[req] * kvb, req))
            r.link_version += 1
            t = now + max(0.0, h[0][0] - v) * len(h) / self.bw
            heapq.heappush(self._heap, (t, next(self._seq), self._ev_link, r, r.link_version))
            r.inflight = []
        if r.queue:
            self._prefill_start(r)
        elif r.state == READY:
            self._idle_prefill.append(r)
        else:
            self._maybe_gone(r)

    # ----------------------------------------------------------------------------------------- KV link
    def _ev_link(self, r: _Prefill, ver: int) -> None:
        """Transfers on this link finished: their requests go to decode."""
        if ver != r.link_version:
            return
        now = self.now
        h = r.link_heap
        if h:
            r.link_v += (now - r.link_t) * self.bw / len(h)
        r.link_t = now
        v = r.link_v
        eps = 1e-6 * (v if v > 1.0 else 1.0)
        ready = self.ready["decode"]
        while h and h[0][0] <= v + eps:
            req = heapq.heappop(h)[1]
            if not self.failed[req]:
                self.dec_in_s.append(now)
                self.dec_in_req.append(req)
                if not ready:
                    self.pending["decode"].append(req)
                    continue
                d: _Decode = ready[0] if len(ready) == 1 else min(ready, key=_NOUT)  # type: ignore[assignment]
                d.nout += 1
                d.waiting.append(req)
                self._decode_kick(d)
        r.link_version += 1
        if h:
            t = now + max(0.0, h[0][0] - v) * len(h) / self.bw
            heapq.heappush(self._heap, (t, next(self._seq), self._ev_link, r, r.link_version))
        elif r.state == DRAINING:
            self._maybe_gone(r)

    # ------------------------------------------------------------------------------------------ decode
    # The hot path: written flat (few calls, locals) because it runs about twice per request.
    def _to_sequences(self, req: int, pool: str) -> None:
        """Route to the ``pool`` replica decoding the fewest sequences (decode, or aggregated)."""
        ready = self.ready[pool]
        if not ready:
            self.pending[pool].append(req)
            return
        r: _Decode = ready[0] if len(ready) == 1 else min(ready, key=_NOUT)  # type: ignore[assignment]
        r.nout += 1
        r.waiting.append(req)
        self._decode_kick(r)

    def _fits(self, r: _Decode, req: int) -> bool:
        return r.b < self.max_batch and r.kv_used + self.isl[req] + self.osl[req] <= self.kv_cap

    def _decode_kick(self, r: _Decode) -> None:
        """Work arrived at ``r``: admit at the next step boundary.

        Instead of an event at that boundary, the replica is advanced to it right away (it may lie a
        fraction of a step in the future; nothing else can change the replica before it), which saves an
        event per admission. A later arrival before that boundary joins at the same boundary.
        """
        if r.b == 0 and not r.pq:
            if r.t < self.now:
                r.t = self.now
            self._decode_boundary(r)
            return
        if r.next_k <= 1 and self.agg:
            return  # aggregated with prompts queued: every step is already an event
        req = r.waiting[0]
        if r.b >= self.max_batch or r.kv_used + self.isl[req] + self.osl[req] > self.kv_cap:
            return  # admission waits for a completion, which is already scheduled
        if r.t >= self.now:
            self._decode_boundary(r)  # the boundary is already materialised at r.t
            return
        j = int((self.now - r.t) / r.dt) + 1
        if j >= r.next_k:
            self._decode_advance(r, r.next_k, r.next_t)
        else:
            self._decode_advance(r, j, r.t + j * r.dt)

    def _decode_schedule(self, r: _Decode, k: int) -> None:
        """Plan the next event ``k`` steps after the last boundary."""
        r.version += 1
        dt = self.timing.step(r.b, r.ctx_sum / r.b + (k - 1) * 0.5) if k > 1 else r.dt
        r.next_k = k
        t = r.t + k * dt
        if t < self.now:
            t = self.now
        r.next_t = t
        heapq.heappush(self._heap, (t, next(self._seq), self._ev_decode, r, r.version))

    def _decode_advance(self, r: _Decode, k: int, t_end: float) -> None:
        """Advance ``k`` steps ending at ``t_end``; finish what is done, then admit at that boundary."""
        b = r.b
        if b and k:
            dt = (t_end - r.t) / k
            self.segs.append((t_end, dt, b * k))
            # one segment on the monotone stack
            si, sv = r.stack_i, r.stack_v
            while sv and sv[-1] <= dt:
                sv.pop()
                si.pop()
            si.append(r.seg_no)
            sv.append(dt)
            r.seg_no += 1
            r.step_no += k
            r.ctx_sum += b * k
        else:
            dt = 0.0
        r.t = t_end
        fin = r.fin
        step_no = r.step_no
        if fin and fin[0][0] <= step_no:
            isl, osl, finish_s, itl_max_s, seg_pos = self.isl, self.osl, self.finish_s, self.itl_max_s, self._seg_pos
            si, sv = r.stack_i, r.stack_v
            while fin and fin[0][0] <= step_no:
                req = heapq.heappop(fin)[1]
                tot = isl[req] + osl[req]
                r.b -= 1
                r.nout -= 1
                r.ctx_sum -= tot
                r.kv_used -= tot
                finish_s[req] = t_end
                pos = bisect_left(si, seg_pos[req])
                itl_max_s[req] = sv[pos] if pos < len(sv) else dt
                self.done += 1
        self._decode_boundary(r)

    def _decode_boundary(self, r: _Decode) -> None:
        """At a step boundary: admit what fits (FCFS), then plan the next event."""
        if self.agg:
            self._agg_boundary(r)
            return
        w = r.waiting
        admitted: list[int] | None = None
        if w:
            isl, osl, fin, seg_pos = self.isl, self.osl, r.fin, self._seg_pos
            max_b, cap = self.max_batch, self.kv_cap
            b, kv, ctx, step, seg = r.b, r.kv_used, r.ctx_sum, r.step_no, r.seg_no
            admitted = []
            while w:
                req = w[0]
                i, o = isl[req], osl[req]
                if b >= max_b or kv + i + o > cap:
                    break
                w.popleft()
                b += 1
                ctx += i
                kv += i + o
                heapq.heappush(fin, (step + o, req))
                seg_pos[req] = seg
                admitted.append(req)
            r.b, r.kv_used, r.ctx_sum = b, kv, ctx
        b = r.b
        if b == 0:
            r.dt = 0.0
            r.next_k = 0
            r.next_t = math.inf
            r.version += 1
            if r.state == DRAINING:
                self._maybe_gone(r)
            return
        cache = self.timing.dec
        mean = r.ctx_sum / b
        key = b * 1_000_000 + int(mean) // _CTX_QUANTUM
        dt = cache.get(key) or self.timing.step(b, mean)
        r.dt = dt
        if admitted:
            first_s = self.first_s
            t1 = r.t + dt
            for req in admitted:
                first_s[req] = t1
        # plan the next event: the next completion, k steps on, at the step time of mid-way context
        k = r.fin[0][0] - r.step_no
        if k > 1:
            mean += (k - 1) * 0.5
            key = b * 1_000_000 + int(mean) // _CTX_QUANTUM
            dt = cache.get(key) or self.timing.step(b, mean)
        r.version += 1
        r.next_k = k
        t = r.t + k * dt
        if t < self.now:
            t = self.now
        r.next_t = t
        heapq.heappush(self._heap, (t, next(self._seq), self._ev_decode, r, r.version))

    # -------------------------------------------------------------------------------------- aggregated
    def _to_agg(self, req: int) -> None:
        self._to_sequences(req, "aggregated")

    def _agg_boundary(self, r: _Decode) -> None:
        # The step that just ended (next_k == 1 with a prompt chunk) may have finished prompts: they
        # emitted their first token now and join the decode batch.
        if r.pq and r.pq[0][1] == 0:
            while r.pq and r.pq[0][1] == 0:
                req = r.pq.popleft()[0]
                self.first_s[req] = r.t
                osl = self.osl[req]
                self._seg_pos[req] = r.seg_no
                if osl <= 1:
                    tot = self.isl[req] + osl
                    r.kv_used -= tot
                    r.nout -= 1
                    self.finish_s[req] = r.t
                    self.itl_max_s[req] = 0.0
                    self.done += 1
                    continue
                r.b += 1
                r.ctx_sum += self.isl[req] + 1
                heapq.heappush(r.fin, (r.step_no + osl - 1, req))
        # move waiting requests into the prompt queue while a slot and KV room are free (reserved now)
        w = r.waiting
        while w and r.b + len(r.pq) < self.max_batch and \
                r.kv_used + self.isl[w[0]] + self.osl[w[0]] <= self.kv_cap:
            req = w.popleft()
            r.kv_used += self.isl[req] + self.osl[req]
            r.pq.append([req, self.isl[req]])
            r.pq_tokens += self.isl[req]
        if r.pq:
            # one mixed step: decode the batch and prefill up to chunk_tokens of queued prompt
            # (prefill pieces timed as EngineModel.prefill_batch_s, plus the decode step: mixed_step_s's rule)
            budget = self.cfg.chunk_tokens
            used = 0
            ttft, over = self.timing.ttft_s, self.timing.overhead_s
            t_pre = over
            for item in r.pq:
                take = min(item[1], budget - used)
                start = self.isl[item[0]] - item[1]
                t_pre += ttft(start + take) - (ttft(start) if start else over)
                item[1] -= take
                used += take
                if used >= budget:
                    break
            r.pq_tokens -= used
            b = r.b
            dt = t_pre + (self.timing.step(b, r.ctx_sum / b) if b else 0.0)
            r.dt = dt
            r.version += 1
            r.next_k = 1
            r.next_t = r.t + dt
            self._push(r.next_t, self._ev_decode, r, r.version)
            return
        if r.b == 0:
            r.dt = 0.0
            r.next_k = 0
            r.next_t = math.inf
            r.version += 1
            self._maybe_gone(r)
            return
        r.dt = self.timing.step(r.b, r.ctx_sum / r.b)
        self._decode_schedule(r, r.fin[0][0] - r.step_no)

    # ------------------------------------------------------------------------------------------ gauges
    def gauges(self, pool: str) -> dict[str, float]:
        """Instantaneous per-pool state: replicas by state, queue, running, KV usage."""
        rs = self.replicas[pool]
        by_state = [0, 0, 0, 0]
        for r in rs:
            by_state[r.state] += 1
        queue = float(len(self.pending[pool]))
        running = 0.0
        kv_used = 0
        kv_cap = 0
        for r in rs:
            if r.state in (READY, DRAINING):
                if isinstance(r, _Prefill):
                    queue += len(r.queue)
                    running += len(r.inflight)
                else:
                    assert isinstance(r, _Decode)
                    queue += len(r.waiting) + len(r.pq)
                    running += r.b
                    kv_used += r.kv_used
                    kv_cap += self.kv_cap
        out = {"starting": by_state[STARTING], "ready": by_state[READY], "draining": by_state[DRAINING],
               "gpus": sum(r.gpus for r in rs), "queue": queue, "running": running,
               "kv_usage": (kv_used / kv_cap) if kv_cap else math.nan}
        return out

    # ------------------------------------------------------------------------------------------ results
    def results(self) -> dict[str, np.ndarray]:
        arr = np.asarray(self.arr)
        first = np.asarray(self.first_s)
        fin = np.asarray(self.finish_s)
        osl = np.asarray(self.osl, dtype=np.float64)
        failed = np.asarray(self.failed)
        ttft = first - arr
        with np.errstate(invalid="ignore", divide="ignore"):
            itl_mean = np.where(osl > 1, (fin - first) / np.maximum(osl - 1, 1), 0.0)
        return {"arrival_s": arr, "ttft_s": ttft, "itl_mean_s": itl_mean,
                "itl_max_s": np.asarray(self.itl_max_s), "e2e_s": fin - arr, "failed": failed,
                "first_s": first, "finish_s": fin}
