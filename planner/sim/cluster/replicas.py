"""The simulated replicas: their lifecycle states and the state each stage keeps on them.

A replica's ``version`` is stamped on every event planned for it; bumping it cancels those events (their
handlers see a stale version and do nothing), which is cheaper than removing them from the heap.
"""

from __future__ import annotations

import math
from collections import deque

# Plain ints, not an Enum: they are compared on the hot path and index the gauges' per-state counts.
STARTING, READY, DRAINING, GONE = 0, 1, 2, 3


class Replica:
    """One replica of a pool: STARTING (billed, not serving) -> READY -> DRAINING (finishes what it holds,
    takes nothing new) -> GONE."""

    __slots__ = ("replica_id", "pool", "state", "gpus", "created_s", "ready_s", "gone_s", "version")

    def __init__(self, replica_id: int, pool: str, gpus: int, created_s: float, ready_s: float) -> None:
        self.replica_id = replica_id
        self.pool = pool
        self.state = STARTING
        self.gpus = gpus
        self.created_s = created_s
        self.ready_s = ready_s  # planned while STARTING, actual once READY
        self.gone_s = math.inf
        self.version = 0

    def outstanding(self) -> int:
        """Work routed here and not done: the routing and scale-down key."""
        raise NotImplementedError

    def is_empty(self) -> bool:
        """Holds no request (a DRAINING replica is removed once it is)."""
        raise NotImplementedError

    def held_requests(self) -> list[int]:
        """Every request this replica holds (they fail when it is killed)."""
        raise NotImplementedError

    def cancel_events(self) -> None:
        self.version += 1


class PrefillReplica(Replica):
    """Chunked prefill (FCFS) and the egress link its finished prompts' KV leaves on."""

    __slots__ = ("queue", "queued_tokens", "busy", "iteration_tokens", "finishing_prompts",
                 "link_served_bytes", "link_updated_s", "link_transfers", "link_version")

    def __init__(self, replica_id: int, pool: str, gpus: int, created_s: float, ready_s: float) -> None:
        super().__init__(replica_id, pool, gpus, created_s, ready_s)
        self.queue: deque[list[int]] = deque()  # [request, prompt tokens not yet prefilled]
        self.queued_tokens = 0  # prompt tokens routed here and not yet prefilled (running iteration included)
        self.busy = False  # an iteration is running
        self.iteration_tokens = 0  # prompt tokens in the running iteration
        self.finishing_prompts: list[int] = []  # requests whose prompt the running iteration completes
        # The link is processor-shared: each of its n transfers gets 1/n of the bandwidth. ``link_served_bytes``
        # is what each transfer has received since the link was created (as of ``link_updated_s``); a
        # transfer is done when that reaches the value it started at plus its size.
        self.link_served_bytes = 0.0
        self.link_updated_s = 0.0
        self.link_transfers: list[tuple[float, int]] = []  # heap of (served bytes when done, request)
        self.link_version = 0  # the version of link events, kept apart from the iteration events'

    def outstanding(self) -> int:
        return self.queued_tokens

    def is_empty(self) -> bool:
        return not self.queue and not self.busy and not self.link_transfers

    def held_requests(self) -> list[int]:
        held = [item[0] for item in self.queue] + [req for _, req in self.link_transfers]
        held += [req for req in self.finishing_prompts if req not in held]
        return held

    def cancel_events(self) -> None:
        self.version += 1
        self.link_version += 1


class DecodeReplica(Replica):
    """Continuous batching, also the aggregated replica (which piggy-backs prompt chunks on its steps).

    Between two planned events the batch does not change, so the replica is advanced a whole segment of
    steps at a time: ``boundary_s`` is the last step boundary it was advanced to, ``step_s`` the time of
    each step from there on.
    """

    __slots__ = ("batch", "context_tokens", "steps_done", "boundary_s", "step_s", "finish_steps", "waiting",
                 "kv_used_tokens", "next_event_s", "next_event_steps", "gap_stack_segments", "gap_stack_step_s",
                 "segment_count", "prompt_queue", "outstanding_sequences", "stall_s",
                 "stall_newcomers")

    def __init__(self, replica_id: int, pool: str, gpus: int, created_s: float, ready_s: float) -> None:
        super().__init__(replica_id, pool, gpus, created_s, ready_s)
        self.batch = 0  # sequences in the running batch
        self.context_tokens = 0  # their contexts summed (mean context = context_tokens / batch)
        self.steps_done = 0
        self.boundary_s = 0.0
        self.step_s = 0.0
        self.finish_steps: list[tuple[int, int]] = []  # heap of (steps_done at which it ends, request)
        self.waiting: deque[int] = deque()  # routed here, not admitted yet (no batch slot or KV room)
        self.kv_used_tokens = 0  # KV reserved by admitted requests: isl + osl each, for their whole life
        self.next_event_s = math.inf
        self.next_event_steps = 0  # steps from boundary_s to the planned event
        # Monotone stack of segment step times (decreasing), with their segment numbers: the largest step time
        # since a request's admission segment is the first entry at or after it, found by bisection.
        self.gap_stack_segments: list[int] = []
        self.gap_stack_step_s: list[float] = []
        self.segment_count = 0
        self.prompt_queue: deque[list[int]] = deque()  # aggregated: [request, prompt tokens not yet prefilled]
        self.outstanding_sequences = 0  # routed here and not finished (the routing key)
        # The current segment began this long before boundary_s: admission work that stalled the batch
        # (DecodeStage.admit_s), so its steps' gaps include it.
        self.stall_s = 0.0
        self.stall_newcomers = 0  # the sequences that admission work admitted (their first token ends it)

    def outstanding(self) -> int:
        return self.outstanding_sequences

    def is_empty(self) -> bool:
        return self.batch == 0 and not self.waiting and not self.prompt_queue

    def held_requests(self) -> list[int]:
        return [req for _, req in self.finish_steps] + list(self.waiting) + [item[0] for item in self.prompt_queue]
