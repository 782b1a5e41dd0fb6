"""Chunked prefill on a prefill replica (disaggregated mode).

FCFS: each iteration takes up to ``chunk_tokens`` prompt tokens from the head of the replica's queue, so
several short prompts share one iteration and a long one spans several. An iteration costs the fixed
overhead once plus each piece's marginal time on its own prompt (EngineModel.prefill_batch_s); one whole
prompt alone costs exactly the prefill curve at its length. When an iteration ends, the prompts it completed
start their KV transfers.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush

from planner.sim.cluster.events import EventQueue
from planner.sim.cluster.replicas import READY, PrefillReplica, Replica
from planner.sim.cluster.step_timing import StepTiming


class PrefillStage:
    def __init__(self, events: EventQueue, timing: StepTiming, isl: list[int], chunk_tokens: int,
                 start_transfers: Callable[[PrefillReplica, list[int], float], None],
                 idle_replicas: list[PrefillReplica], retire_if_drained: Callable[[Replica, float], None]) -> None:
        self._events = events
        self._heap = events.heap
        self._counter = events.counter
        self._timing = timing
        self._prefill_s = timing.prefill_s
        self._isl = isl
        self._chunk_tokens = chunk_tokens
        self._start_transfers = start_transfers
        self._idle_replicas = idle_replicas  # the fleet's: routing takes from it
        self._retire_if_drained = retire_if_drained

    def admit(self, replica: PrefillReplica, req: int, now_s: float) -> None:
        """A prompt routed here: it starts now if the replica is idle, or queues."""
        tokens = self._isl[req]
        replica.queued_tokens += tokens
        if not replica.busy and not replica.queue and tokens <= self._chunk_tokens:
            self._start_whole_prompt(replica, req, tokens, now_s)
            return
        replica.queue.append([req, tokens])
        if not replica.busy:
            self._start_iteration(replica, now_s)

    def _start_whole_prompt(self, replica: PrefillReplica, req: int, tokens: int, now_s: float) -> None:
        replica.iteration_tokens = tokens
        replica.finishing_prompts = [req]
        replica.busy = True
        replica.version += 1
        heappush(self._heap, (now_s + self._prefill_s(tokens), next(self._counter), self._on_iteration_end, replica,
                              replica.version))

    def _start_iteration(self, replica: PrefillReplica, now_s: float) -> None:
        """Take up to ``chunk_tokens`` from the head of the queue."""
        queue = replica.queue
        if len(queue) == 1:
            req, remaining = queue[0]
            if remaining == self._isl[req] and remaining <= self._chunk_tokens:
                queue.popleft()
                self._start_whole_prompt(replica, req, remaining, now_s)
                return
        budget = self._chunk_tokens
        used = 0
        finishing: list[int] = []
        piece_s = self._timing.piece_s
        iteration_s = self._timing.overhead_s
        isl = self._isl
        while queue and used < budget:
            head = queue[0]
            remaining = head[1]
            take = remaining if remaining < budget - used else budget - used
            iteration_s += piece_s(isl[head[0]] - remaining, take)
            head[1] = remaining - take
            used += take
            if head[1] == 0:
                finishing.append(head[0])
                queue.popleft()
        replica.iteration_tokens = used
        replica.finishing_prompts = finishing
        replica.busy = True
        replica.version += 1
        self._events.push(now_s + iteration_s, self._on_iteration_end, replica, replica.version)

    def _on_iteration_end(self, replica: PrefillReplica, version: int, now_s: float) -> None:
        """The completed prompts start their KV transfers; the next iteration starts."""
        if version != replica.version:
            return
        replica.busy = False
        replica.queued_tokens -= replica.iteration_tokens
        if replica.finishing_prompts:
            self._start_transfers(replica, replica.finishing_prompts, now_s)
            replica.finishing_prompts = []
        if replica.queue:
            self._start_iteration(replica, now_s)
        elif replica.state == READY:
            self._idle_replicas.append(replica)
        else:
            self._retire_if_drained(replica, now_s)
