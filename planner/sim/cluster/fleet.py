"""The fleet: every replica of every pool, their lifecycle, routing to them, and scaling to targets.

Lifecycle: a new replica is STARTING (billed) for ``startup_s``, then READY; scale-down makes a READY one
DRAINING (it takes no new work, finishes what it holds, still billed) and it is GONE once empty. With ``kill``
scale-down removes replicas at once and everything they held fails. Scale-down takes STARTING replicas first,
then the READY ones with the least outstanding work.

Routing, least outstanding work first: a prompt goes to the READY prefill replica with the fewest prompt
tokens queued; a sequence (its KV transferred, or an aggregated request) to the READY replica with the fewest
sequences. While a pool has no READY replica its requests wait in the pool's pending queue: for the pool every
request starts in (prefill, aggregated) that is the router's hold (router/hold.py), bounded by
``hold_timeout_s``: a request held longer fails (the router's 503), counted when the pool's first replica is
ready (or at the end of the run); one that arrives while ``hold_queue`` requests are held fails at once.

The stages (:mod:`~planner.sim.cluster.prefill`, :mod:`~planner.sim.cluster.decode`, ...) run the replicas' work; they are
attached after construction because they in turn call :meth:`Fleet.route_sequence` and
:meth:`Fleet.retire_if_drained`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import cast

from planner.sim.cluster.events import EventQueue
from planner.sim.cluster.replicas import (
    DRAINING,
    GONE,
    READY,
    STARTING,
    DecodeReplica,
    PrefillReplica,
    Replica,
)
from planner.sim.cluster.request_log import RequestLog
from planner.types import Pool

_QUEUED_TOKENS = attrgetter("queued_tokens")
_OUTSTANDING_SEQUENCES = attrgetter("outstanding_sequences")


class Fleet:
    def __init__(self, pools: tuple[str, ...], gpus_per_replica: Mapping[str, int], startup_s: float, kill: bool,
                 kv_capacity_tokens: int, events: EventQueue, log: RequestLog,
                 hold_timeout_s: float | None = None, hold_queue: int | None = None) -> None:
        self.pools = pools
        self.replicas: dict[str, list[Replica]] = {p: [] for p in pools}  # not GONE
        self.ready: dict[str, list[Replica]] = {p: [] for p in pools}
        self.pending: dict[str, deque[int]] = {p: deque() for p in pools}
        self.history: list[Replica] = []  # every replica ever created (billing)
        # READY prefill replicas with nothing to do: routing takes one without scanning the pool. May hold
        # stale entries (busy again, or no longer READY); routing skips them.
        self.idle_prefill: list[PrefillReplica] = []
        self._gpus_per_replica = gpus_per_replica
        self._startup_s = startup_s
        self._kill = kill
        self._kv_capacity_tokens = kv_capacity_tokens
        self._events = events
        self._log = log
        self._hold_timeout_s = hold_timeout_s
        self._hold_queue = hold_queue
        self._last_replica_id = 0
        sequence_pool = Pool.AGGREGATED if Pool.AGGREGATED in pools else Pool.DECODE
        self._prefill_ready = cast("list[PrefillReplica]", self.ready.get("prefill", []))
        self._prefill_pending = self.pending.get("prefill", deque())
        self._sequence_ready = cast("list[DecodeReplica]", self.ready[sequence_pool])
        self._sequence_pending = self.pending[sequence_pool]
        self._sequence_held = sequence_pool == Pool.AGGREGATED  # aggregated: the router holds its requests

    def attach(self, admit_prompt: Callable[[PrefillReplica, int, float], None],
               accept_sequence: Callable[[DecodeReplica, int, float], None]) -> None:
        """Connect the stages that take a routed request: prefill, and decode (or aggregated)."""
        self._admit_prompt = admit_prompt
        self._accept_sequence = accept_sequence

    def held(self) -> int:
        """Requests in the pending queue of the pool every request starts in (prefill, or aggregated)."""
        return len(self._prefill_pending) if "prefill" in self.pending else len(self._sequence_pending)

    # ------------------------------------------------------------------------------------------ routing
    def route_prompt(self, req: int, now_s: float) -> None:
        """To the READY prefill replica with the fewest queued prompt tokens (an idle one has none)."""
        idle = self.idle_prefill
        replica: PrefillReplica | None = None
        while idle:
            candidate = idle.pop()
            if candidate.state == READY and not candidate.busy and not candidate.queue:
                replica = candidate
                break
        if replica is None:
            ready = self._prefill_ready
            if not ready:
                self._hold(self._prefill_pending, req)
                return
            replica = ready[0] if len(ready) == 1 else min(ready, key=_QUEUED_TOKENS)
        self._admit_prompt(replica, req, now_s)

    def _hold(self, pending: deque[int], req: int) -> None:
        """The router's hold: queued for the pool's first READY replica, or refused (failed) when full."""
        if self._hold_queue is not None and len(pending) >= self._hold_queue:
            self._log.fail(req)
        else:
            pending.append(req)

    def route_sequence(self, req: int, now_s: float) -> None:
        """To the READY decode (or aggregated) replica with the fewest outstanding sequences."""
        ready = self._sequence_ready
        if not ready:
            if self._sequence_held:
                self._hold(self._sequence_pending, req)
            else:
                self._sequence_pending.append(req)  # decode's queue: the request is past the router
            return
        replica = ready[0] if len(ready) == 1 else min(ready, key=_OUTSTANDING_SEQUENCES)
        self._accept_sequence(replica, req, now_s)

    # ---------------------------------------------------------------------------------------- lifecycle
    def add(self, pool: str, ready_s: float, now_s: float) -> Replica:
        """A new replica, READY at ``ready_s`` (the caller makes it ready now when ``ready_s`` is not later)."""
        self._last_replica_id += 1
        cls = PrefillReplica if pool == "prefill" else DecodeReplica
        replica = cls(self._last_replica_id, pool, self._gpus_per_replica[pool], now_s, ready_s)
        self.replicas[pool].append(replica)
        self.history.append(replica)
        if ready_s > now_s:
            self._events.push(ready_s, self._on_started, replica, replica.version)
        return replica

    def _on_started(self, replica: Replica, version: int, now_s: float) -> None:
        if version == replica.version and replica.state == STARTING:
            self.make_ready(replica, now_s)

    def make_ready(self, replica: Replica, now_s: float) -> None:
        """READY: takes routed work from now on, starting with what waited in the pool's pending queue."""
        replica.state = READY
        replica.ready_s = now_s
        self.ready[replica.pool].append(replica)
        if isinstance(replica, PrefillReplica) and not replica.busy and not replica.queue:
            self.idle_prefill.append(replica)
        pending = self.pending[replica.pool]
        route = self.route_prompt if replica.pool == "prefill" else self.route_sequence
        at_router = replica.pool != Pool.DECODE  # the pool every request starts in: the router held them
        timeout_s = self._hold_timeout_s if at_router else None
        while pending:
            req = pending.popleft()
            if timeout_s is not None and now_s - self._log.arrival_s[req] > timeout_s:
                self._log.fail(req)  # past the router's --hold-timeout-s: a 503, counted as failed
                continue
            if at_router:
                self._log.dispatched_s[req] = now_s  # the engine sees it from now
            route(req, now_s)

    def retire_if_drained(self, replica: Replica, now_s: float) -> None:
        """A DRAINING replica is removed once it holds nothing."""
        if replica.state == DRAINING and replica.is_empty():
            self._retire(replica, now_s)

    def _retire(self, replica: Replica, now_s: float) -> None:
        replica.state = GONE
        replica.gone_s = now_s
        replica.cancel_events()
        self.replicas[replica.pool].remove(replica)

    # ------------------------------------------------------------------------------------------ scaling
    def active(self, pool: str) -> int:
        """Replicas counted against a target: STARTING + READY (DRAINING ones are on their way out)."""
        return sum(1 for r in self.replicas[pool] if r.state in (STARTING, READY))

    def apply(self, targets: Mapping[str, int], now_s: float) -> dict[str, int]:
        """Move each pool to ``targets[pool]`` replicas; returns the counts before."""
        before = {p: self.active(p) for p in self.pools}
        for pool, want in targets.items():
            if pool not in self.replicas:
                continue
            want = max(0, int(want))
            have = before[pool]
            if want > have:
                for _ in range(want - have):
                    self.add(pool, now_s + self._startup_s, now_s)
            elif want < have:
                victims = sorted((r for r in self.replicas[pool] if r.state in (STARTING, READY)),
                                 key=lambda r: (r.state != STARTING, r.outstanding(), -r.replica_id))
                for replica in victims[: have - want]:
                    self._scale_down(replica, now_s)
        return before

    def _scale_down(self, replica: Replica, now_s: float) -> None:
        if replica.state == READY:
            self.ready[replica.pool].remove(replica)
        if replica.state == STARTING:
            self._retire(replica, now_s)
            return
        if self._kill:
            for req in replica.held_requests():
                self._log.fail(req)
            self._retire(replica, now_s)
            return
        replica.state = DRAINING
        self.retire_if_drained(replica, now_s)

    # ---------------------------------------------------------------------------------------- reporting
    def draining_gpus(self) -> int:
        return sum(r.gpus for rs in self.replicas.values() for r in rs if r.state == DRAINING)

    def gauges(self, pool: str) -> dict[str, float]:
        """Instantaneous per-pool state: replicas by state, queue, running, KV usage."""
        replicas = self.replicas[pool]
        by_state = [0, 0, 0, 0]
        for r in replicas:
            by_state[r.state] += 1
        queue = float(len(self.pending[pool]))
        running = 0.0
        kv_used = 0
        kv_cap = 0
        for r in replicas:
            if r.state in (READY, DRAINING):
                if isinstance(r, PrefillReplica):
                    queue += len(r.queue)
                    running += len(r.finishing_prompts)
                else:
                    assert isinstance(r, DecodeReplica)
                    queue += len(r.waiting) + len(r.prompt_queue)
                    running += r.batch
                    kv_used += r.kv_used_tokens
                    kv_cap += self._kv_capacity_tokens
        return {"starting": by_state[STARTING], "ready": by_state[READY], "draining": by_state[DRAINING],
                "gpus": sum(r.gpus for r in replicas), "queue": queue, "running": running,
                "kv_usage": (kv_used / kv_cap) if kv_cap else math.nan}

    def gpu_seconds(self, until_s: float, pool: str | None = None) -> float:
        """Sum of replicas x GPUs x time alive (starting and draining included) up to ``until_s``; of one pool's
        replicas where ``pool`` is given."""
        return sum(max(0.0, min(r.gone_s, until_s) - min(r.created_s, until_s)) * r.gpus for r in self.history
                   if pool is None or r.pool == pool)
