"""Continuous batching on a decode replica, with KV admission.

A sequence routed here waits until a step boundary where a batch slot and KV room for ``isl + osl`` tokens
are free, and reserves that room for its whole life (no preemption). The step that admits it emits its first
token, and it ends ``osl`` steps after admission. A step's time is the profile's ITL at the batch size and the
batch's mean context. With ``admit_s`` (a disaggregated decode server that loads each sequence's KV and
recomputes the prompt's last partial block itself, as vLLM's connectors do), the step that admits ``n``
sequences is ``n * admit_s`` longer: the whole batch waits for that work, and the newcomers' first token
comes after it.

The replica jumps from event to event: while its batch does not change it is advanced many steps at once
(each sequence's context grows by one token per step, so ``k`` steps take ``k * step(batch, mean + (k - 1)
/ 2)``, exact when the step time is linear in context). The one event planned is the next completion; work
that arrives in between is admitted at the next step boundary.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from heapq import heappop, heappush

from planner.sim.cluster.events import EventQueue
from planner.sim.cluster.replicas import DRAINING, DecodeReplica, Replica
from planner.sim.cluster.request_log import RequestLog
from planner.sim.cluster.step_timing import CONTEXT_QUANTUM_TOKENS, StepTiming


class DecodeStage:
    # Aggregated mode plans an event at every step while prompts are queued: when the planned event is at
    # most one step away, work that arrives waits for it instead of advancing the replica.
    every_step_is_an_event = False

    def __init__(self, events: EventQueue, timing: StepTiming, log: RequestLog, max_batch: int,
                 kv_capacity_tokens: int, retire_if_drained: Callable[[Replica, float], None],
                 admit_s: float = 0.0) -> None:
        self._heap = events.heap
        self._counter = events.counter
        self._events = events
        self._timing = timing
        self._decode_step_s = timing.decode_step_s
        self._decode_cache = timing.decode_cache
        self._log = log
        self._token_gaps = log.token_gaps
        self._isl = log.isl
        self._osl = log.osl
        self._max_batch = max_batch
        self._kv_capacity_tokens = kv_capacity_tokens
        self._retire_if_drained = retire_if_drained
        self._admit_s = admit_s

    def accept(self, replica: DecodeReplica, req: int, now_s: float) -> None:
        """A sequence routed here: admit it at the next step boundary.

        Instead of an event at that boundary, the replica is advanced to it right away (it may lie a fraction
        of a step in the future; nothing else can change the replica before it), which saves an event per
        admission. A later arrival before that boundary joins at the same boundary.
        """
        replica.outstanding_sequences += 1
        replica.waiting.append(req)
        if replica.batch == 0 and not replica.prompt_queue:
            if replica.boundary_s < now_s:
                replica.boundary_s = now_s
            self._at_boundary(replica, now_s)
            return
        if replica.next_event_steps <= 1 and self.every_step_is_an_event:
            return
        head = replica.waiting[0]
        if (replica.batch >= self._max_batch
                or replica.kv_used_tokens + self._isl[head] + self._osl[head] > self._kv_capacity_tokens):
            return  # admission waits for a completion, which is already planned
        if replica.boundary_s >= now_s:
            self._at_boundary(replica, now_s)  # the boundary is already materialised at boundary_s
            return
        steps = int((now_s - replica.boundary_s) / replica.step_s) + 1
        if steps >= replica.next_event_steps:
            self._advance(replica, replica.next_event_steps, replica.next_event_s, now_s)
        else:
            self._advance(replica, steps, replica.boundary_s + steps * replica.step_s, now_s)

    def _on_planned_event(self, replica: DecodeReplica, version: int, now_s: float) -> None:
        if version == replica.version:
            self._advance(replica, replica.next_event_steps, now_s, now_s)

    def _advance(self, replica: DecodeReplica, steps: int, end_s: float, now_s: float) -> None:
        """Advance ``steps`` steps ending at ``end_s``; finish what is done, then admit at that boundary."""
        batch = replica.batch
        if batch and steps:
            stall_s = replica.stall_s
            step_s = (end_s - replica.boundary_s + stall_s) / steps
            if stall_s:
                # The admission work held the segment's first step only: that one gap is a step plus the
                # stall (spread over the segment it would hide in the largest gap and in the ITL histogram's
                # tail); the sequences it admitted count from the next segment (_at_boundary), the stall being
                # before their first token.
                base_s = step_s - stall_s / steps
                self._token_gaps.append((end_s, base_s + stall_s, batch - replica.stall_newcomers))
                self._push_gap(replica, base_s + stall_s)
                if steps > 1:
                    self._token_gaps.append((end_s, base_s, batch * (steps - 1)))
                    self._push_gap(replica, base_s)
            else:
                self._token_gaps.append((end_s, step_s, batch * steps))
                self._push_gap(replica, step_s)
            replica.steps_done += steps
            replica.context_tokens += batch * steps
        else:
            step_s = 0.0
        replica.boundary_s = end_s
        replica.stall_s = 0.0
        replica.stall_newcomers = 0
        finish_steps = replica.finish_steps
        steps_done = replica.steps_done
        if finish_steps and finish_steps[0][0] <= steps_done:
            log = self._log
            isl, osl, finish_s, itl_max_s = self._isl, self._osl, log.finish_s, log.itl_max_s
            admitted_segment = log.admitted_segment
            segments, segment_step_s = replica.gap_stack_segments, replica.gap_stack_step_s
            while finish_steps and finish_steps[0][0] <= steps_done:
                req = heappop(finish_steps)[1]
                total = isl[req] + osl[req]
                replica.batch -= 1
                replica.outstanding_sequences -= 1
                replica.context_tokens -= total
                replica.kv_used_tokens -= total
                finish_s[req] = end_s
                # its largest token gap: the slowest segment since its admission
                pos = bisect_left(segments, admitted_segment[req])
                itl_max_s[req] = segment_step_s[pos] if pos < len(segment_step_s) else step_s
                log.completed_count += 1
        self._at_boundary(replica, now_s)

    @staticmethod
    def _push_gap(replica: DecodeReplica, step_s: float) -> None:
        """A segment's token gap onto the monotone stack, over the shorter gaps it makes irrelevant."""
        segments, segment_step_s = replica.gap_stack_segments, replica.gap_stack_step_s
        while segment_step_s and segment_step_s[-1] <= step_s:
            segment_step_s.pop()
            segments.pop()
        segments.append(replica.segment_count)
        segment_step_s.append(step_s)
        replica.segment_count += 1

    def _at_boundary(self, replica: DecodeReplica, now_s: float) -> None:
        """At a step boundary: admit what fits (FCFS), then plan the next event."""
        waiting = replica.waiting
        admitted: list[int] | None = None
        if waiting:
            isl, osl, admitted_segment = self._isl, self._osl, self._log.admitted_segment
            finish_steps = replica.finish_steps
            max_batch, kv_capacity_tokens = self._max_batch, self._kv_capacity_tokens
            batch, kv_used, context = replica.batch, replica.kv_used_tokens, replica.context_tokens
            steps_done, segment = replica.steps_done, replica.segment_count
            admitted = []
            while waiting:
                req = waiting[0]
                prompt, output = isl[req], osl[req]
                if batch >= max_batch or kv_used + prompt + output > kv_capacity_tokens:
                    break
                waiting.popleft()
                batch += 1
                context += prompt
                kv_used += prompt + output
                heappush(finish_steps, (steps_done + output, req))
                admitted_segment[req] = segment
                admitted.append(req)
            replica.batch, replica.kv_used_tokens, replica.context_tokens = batch, kv_used, context
            if admitted and self._admit_s:
                stall_s = self._admit_s * len(admitted)
                replica.boundary_s += stall_s
                replica.stall_s += stall_s
                replica.stall_newcomers += len(admitted)
                for req in admitted:  # the stall's own gap is segment_count; theirs begin after it
                    admitted_segment[req] = segment + 1
        if replica.batch == 0:
            self._go_idle(replica, now_s)
            return
        self._plan_next_completion(replica, now_s)
        if admitted:
            first_token_s, at_s = self._log.first_token_s, replica.boundary_s + replica.step_s
            for req in admitted:
                first_token_s[req] = at_s

    def _go_idle(self, replica: DecodeReplica, now_s: float) -> None:
        replica.step_s = 0.0
        replica.stall_s = 0.0
        replica.stall_newcomers = 0
        replica.next_event_steps = 0
        replica.next_event_s = math.inf
        replica.version += 1
        if replica.state == DRAINING:
            self._retire_if_drained(replica, now_s)

    def _plan_next_completion(self, replica: DecodeReplica, now_s: float) -> None:
        """Time the batch's step at its mean context; plan the next event at the next completion, ``k`` steps
        on, timed at the mean context half-way there."""
        # StepTiming.decode_step_s with its cache look-up inlined: this runs about twice per request.
        cache, batch = self._decode_cache, replica.batch
        mean_context = replica.context_tokens / batch
        key = batch * 1_000_000 + int(mean_context) // CONTEXT_QUANTUM_TOKENS
        step_s = replica.step_s = cache.get(key) or self._decode_step_s(batch, mean_context)
        steps = replica.finish_steps[0][0] - replica.steps_done
        if steps > 1:
            mean_context += (steps - 1) * 0.5
            key = batch * 1_000_000 + int(mean_context) // CONTEXT_QUANTUM_TOKENS
            step_s = cache.get(key) or self._decode_step_s(batch, mean_context)
        replica.version += 1
        replica.next_event_steps = steps
        at_s = replica.boundary_s + steps * step_s
        if at_s < now_s:
            at_s = now_s
        replica.next_event_s = at_s
        heappush(self._heap, (at_s, next(self._counter), self._on_planned_event, replica, replica.version))
