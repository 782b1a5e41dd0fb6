"""Request-level discrete-event simulation of a prefill/decode (or aggregated) serving cluster.

Timing comes only from :class:`planner.perf.engine.EngineModel`. The loop jumps from event to event (events
are few: a decode replica whose batch does not change is advanced many steps at once).

Model, in the order a request sees it (disaggregated), and the module that implements each part:
1. arrival -> routed to the READY prefill replica with the least outstanding prompt tokens (a pool queue
   holds requests while no prefill replica is ready): :mod:`~planner.sim.cluster.fleet`;
2. prefill replica: FCFS; each iteration takes up to ``chunk_tokens`` prompt tokens from the head of its
   queue (chunked prefill; several short prompts share one iteration): :mod:`~planner.sim.cluster.prefill`;
3. KV transfer of ``isl * kv_bytes_per_token`` over the prefill replica's egress link; concurrent transfers
   on one link share it equally (processor sharing), so four at once each take ~4x: :mod:`~planner.sim.cluster.kv_link`;
4. decode: on arrival of the KV, routed to the READY decode replica with the fewest outstanding sequences
   (:mod:`~planner.sim.cluster.fleet`); admitted at the next step boundary when a batch slot and KV room for
   ``isl + osl`` tokens are free (the whole reservation up front: no preemption); the first step emits the
   first token, so TTFT = queue + prefill + transfer + admission wait (+ the decode engine's own admission
   work, ``SimConfig.decode_admit_s``, which stalls the batch) + first step; the request ends after
   ``osl`` steps: :mod:`~planner.sim.cluster.decode`.
Aggregated: one pool; a replica piggy-backs up to ``chunk_tokens`` of queued prompt onto each decode step
(``EngineModel.mixed_step_s``); the step that finishes a prompt emits its first token: :mod:`~planner.sim.cluster.aggregated`.

A profile measured over HTTP (the endpoint backend) holds the API front end's latency in its TTFT curve; the
cluster takes that share out of the engine's iteration times and adds it to each request as a delay, once
per hop (arrival, and disaggregated the decode request after the KV hand-over): ``SimConfig.front_end_s``.

Replica lifecycle (:mod:`~planner.sim.cluster.fleet`): STARTING (billed, ``startup_s``) -> READY -> DRAINING on
scale-down (no new work, finishes what it holds, billed) -> GONE. With ``kill=True`` scale-down removes
replicas at once and everything they held counts as failed.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.perf.curves import DecodeCurve, PrefillCurve
from planner.perf.engine import EngineModel, client_front_end_s
from planner.perf.kv import gbps_to_bytes_per_s
from planner.profile import Profile
from planner.sim.cluster.aggregated import AggregatedStage
from planner.sim.cluster.decode import DecodeStage
from planner.sim.cluster.events import EventQueue
from planner.sim.cluster.fleet import Fleet
from planner.sim.cluster.kv_link import KvTransfers
from planner.sim.cluster.prefill import PrefillStage
from planner.sim.cluster.request_log import RequestLog
from planner.sim.cluster.step_timing import StepTiming
from planner.sim.traces.records import RequestTrace
from planner.types import Mode, Pool

__all__ = ["Cluster", "SimConfig", "front_end_s"]


@dataclass(frozen=True)
class SimConfig:
    mode: Mode = Mode.DISAGGREGATED
    link_bytes_per_s: float = gbps_to_bytes_per_s(400.0)
    startup_s: float = 120.0
    kill: bool = False
    # The SLA's percentile (the policy's): the simulated metrics source reports latency at it, as the
    # Prometheus source does, for calibration.
    sla_percentile: float = 95.0
    # The SLA's targets: the simulated metrics source counts the window's requests (TTFT) and token gaps (ITL)
    # within them, as the Prometheus source does from the histograms, for the error budget. None: not counted.
    sla_ttft_ms: float | None = None
    sla_itl_ms: float | None = None
    chunk_tokens: int = 8192
    prefill_tp: int | None = None  # None: the profile's selected TP
    decode_tp: int | None = None
    tail_s: float = 1800.0  # after the last arrival, requests still unfinished this much later fail
    # Per-request latency outside the engine (API front end) per hop; None: the profile's own share
    # (client_front_end_s of a client-observed profile, 0 for an engine-only one). See :func:`front_end_s`.
    front_end_s: float | None = None
    # Disaggregated: the hand-over's latency from the end of prefill to the decode server's first step (the
    # decode request's front end and the connector's load of the KV; planner bench fidelity measures it), on
    # top of the link's transfer time. None: the front end's share alone.
    kv_handoff_s: float | None = None
    # Disaggregated: the decode engine's own work on each sequence it admits (loading the KV the connector
    # wrote, recomputing the prompt's last partial block), done inside its step, so the batch waits for it.
    # 0 for a link that writes the KV straight into the decode server's cache (NIXL); planner bench fidelity
    # measures it for vLLM's ExampleConnector.
    decode_admit_s: float = 0.0
    # Scale to zero: how long the router holds a request while its first pool has no READY replica (`planner
    # route --hold-timeout-s`); past it the request fails. None: held as long as it takes.
    hold_timeout_s: float | None = None
    # ... and how many it holds at once (`--hold-queue`); one more fails at once. None: no bound.
    hold_queue: int | None = None


CLIENT_OBSERVED_BACKENDS = ("endpoint", "kubernetes")  # profiles timed over HTTP, the front end included


def front_end_s(profile: Profile, config: SimConfig, prefill: PrefillCurve, decode: DecodeCurve) -> float:
    """The front end's latency per request and hop: given, or a client-observed profile's own share."""
    if config.front_end_s is not None:
        return config.front_end_s
    if profile.provenance.backend in CLIENT_OBSERVED_BACKENDS:
        return client_front_end_s(prefill, decode)
    return 0.0


class Cluster:
    """The simulated cluster. Drive it with :meth:`run_until`, :meth:`apply` and read its records."""

    def __init__(self, trace: RequestTrace, profile: Profile, config: SimConfig,
                 initial: Mapping[str, int], initial_ready: bool = True) -> None:
        self.config = config
        self.aggregated = config.mode == Mode.AGGREGATED
        prefill_curve = profile.prefill_curve(config.prefill_tp or profile.selected_tp("prefill"))
        decode_curve = profile.decode_curve(config.decode_tp or profile.selected_tp("decode"))
        self.gpus: dict[str, int] = {Pool.PREFILL: prefill_curve.gpus, Pool.DECODE: decode_curve.gpus, Pool.AGGREGATED: decode_curve.gpus}
        self.pools = Mode(config.mode).pools
        self.log = RequestLog(trace)
        self.now = 0.0
        self.next_arrival = 0  # the next trace request to arrive
        kv_capacity_tokens = int(decode_curve.kv_capacity_tokens)
        max_batch = int(decode_curve.max_batch)
        self.front_end_s = front_s = front_end_s(profile, config, prefill_curve, decode_curve)
        # A request reaches the engine after the front end (its share of TTFT is paid on the way in).
        self._enter_s = [a + front_s for a in self.log.arrival_s] if front_s else self.log.arrival_s
        timing = StepTiming(EngineModel(prefill_curve, decode_curve, config.chunk_tokens, front_s))
        self._events = EventQueue()
        self._fleet = fleet = Fleet(self.pools, self.gpus, config.startup_s, config.kill, kv_capacity_tokens,
                                    self._events, self.log, config.hold_timeout_s, config.hold_queue)
        decode: DecodeStage
        if self.aggregated:
            decode = AggregatedStage(self._events, timing, self.log, max_batch, kv_capacity_tokens,
                                     fleet.retire_if_drained, config.chunk_tokens)
        else:
            decode = DecodeStage(self._events, timing, self.log, max_batch, kv_capacity_tokens,
                                 fleet.retire_if_drained, config.decode_admit_s)
        link = KvTransfers(self._events, self.log, float(profile.model.kv_bytes_per_token),
                           float(config.link_bytes_per_s), fleet.route_sequence, fleet.retire_if_drained,
                           hop_s=front_s if config.kv_handoff_s is None else config.kv_handoff_s)
        prefill = PrefillStage(self._events, timing, self.log.isl, config.chunk_tokens, link.start,
                               fleet.idle_prefill, fleet.retire_if_drained)
        fleet.attach(prefill.admit, decode.accept)
        for pool in self.pools:
            for _ in range(int(initial.get(pool, 0))):
                replica = fleet.add(pool, 0.0 if initial_ready else config.startup_s, self.now)
                if initial_ready:
                    fleet.make_ready(replica, self.now)

    def run_until(self, t_end: float) -> None:
        """Process every arrival and event with time <= ``t_end`` (an arrival goes before an event at the same
        time)."""
        heap = self._events.heap
        pop = heapq.heappop
        arrival_s = self._enter_s
        count = self.log.count
        arrive = self._fleet.route_sequence if self.aggregated else self._fleet.route_prompt
        i = self.next_arrival
        next_arrival_s = arrival_s[i] if i < count else math.inf
        while True:
            if heap and heap[0][0] < next_arrival_s:
                at_s = heap[0][0]
                if at_s > t_end:
                    break
                _, _, handler, replica, version = pop(heap)
                handler(replica, version, at_s)
                continue
            if next_arrival_s > t_end or next_arrival_s == math.inf:
                break
            arrive(i, next_arrival_s)
            i += 1
            next_arrival_s = arrival_s[i] if i < count else math.inf
        self.next_arrival = i
        self.now = max(self.now, t_end)

    def held(self) -> int:
        """Requests waiting for a READY replica of the pool every request starts in (the router holds them)."""
        return self._fleet.held()

    def enter_s(self, req: int) -> float:
        """When request ``req`` reaches its first pool (its arrival plus the front end's share)."""
        return self._enter_s[req]

    @property
    def finished(self) -> bool:
        """Every request has arrived and completed or failed."""
        log = self.log
        return self.next_arrival >= log.count and log.completed_count + log.failed_count >= log.count

    @property
    def completed_count(self) -> int:
        return self.log.completed_count

    @property
    def failed_count(self) -> int:
        return self.log.failed_count

    def apply(self, targets: Mapping[str, int]) -> dict[str, int]:
        """Move each pool to ``targets[pool]`` replicas; returns the counts before."""
        return self._fleet.apply(targets, self.now)

    def active(self, pool: str) -> int:
        """Replicas counted against a target: STARTING + READY (DRAINING ones are on their way out)."""
        return self._fleet.active(pool)

    def gauges(self, pool: str) -> dict[str, float]:
        """Instantaneous per-pool state: replicas by state, queue, running, KV usage."""
        return self._fleet.gauges(pool)

    def draining_gpus(self) -> int:
        """GPUs held by replicas that drain: taken out of service, not yet free for another replica."""
        return self._fleet.draining_gpus()

    def gpu_seconds(self, until_s: float, pool: str | None = None) -> float:
        """Sum of replicas x GPUs x time alive (starting and draining included) up to ``until_s``; of one pool's
        replicas where ``pool`` is given."""
        return self._fleet.gpu_seconds(until_s, pool)

    def fail_unfinished(self) -> int:
        """End of the run: every request not finished counts as failed; returns how many were."""
        return self.log.fail_unfinished()

    def results(self) -> dict[str, np.ndarray]:
        """Per request: arrival_s, ttft_s, itl_mean_s, itl_max_s, e2e_s, failed, first_s, finish_s."""
        return self.log.results()
