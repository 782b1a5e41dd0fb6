"""Aggregated mode: one pool whose replicas prefill and decode, piggy-backing prompt chunks on decode steps.

A request routed here waits for a batch slot and KV room for ``isl + osl`` tokens (reserved then), then its
prompt joins the replica's prompt queue. While prompts are queued every step is a mixed step: the batch's
decode step plus up to ``chunk_tokens`` of queued prompt, timed as EngineModel.mixed_step_s's rule (prompt
pieces as in EngineModel.prefill_batch_s). The step that completes a prompt emits its first token, and the
sequence then decodes like any other (:mod:`planner.sim.cluster.decode`).
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush

from planner.sim.cluster.decode import DecodeStage
from planner.sim.cluster.events import EventQueue
from planner.sim.cluster.replicas import DecodeReplica, Replica
from planner.sim.cluster.request_log import RequestLog
from planner.sim.cluster.step_timing import StepTiming


class AggregatedStage(DecodeStage):
    every_step_is_an_event = True  # while prompts are queued

    def __init__(self, events: EventQueue, timing: StepTiming, log: RequestLog, max_batch: int,
                 kv_capacity_tokens: int, retire_if_drained: Callable[[Replica, float], None],
                 chunk_tokens: int) -> None:
        super().__init__(events, timing, log, max_batch, kv_capacity_tokens, retire_if_drained)
        self._chunk_tokens = chunk_tokens

    def _at_boundary(self, replica: DecodeReplica, now_s: float) -> None:
        """At a step boundary: completed prompts join the batch, waiting requests queue their prompts while
        there is room, then the next step is planned (a mixed step while prompts are queued)."""
        prompts = replica.prompt_queue
        if prompts and prompts[0][1] == 0:
            self._join_completed_prompts(replica)
        self._queue_waiting_prompts(replica)
        if prompts:
            self._start_mixed_step(replica)
        elif replica.batch == 0:
            self._go_idle(replica, now_s)
        else:
            self._plan_next_completion(replica, now_s)

    def _join_completed_prompts(self, replica: DecodeReplica) -> None:
        """The step that just ended completed these prompts: they emitted their first token then."""
        prompts, log, isl, osl = replica.prompt_queue, self._log, self._isl, self._osl
        while prompts and prompts[0][1] == 0:
            req = prompts.popleft()[0]
            log.first_token_s[req] = replica.boundary_s
            output = osl[req]
            log.admitted_segment[req] = replica.segment_count
            if output <= 1:  # the first token was the last
                total = isl[req] + output
                replica.kv_used_tokens -= total
                replica.outstanding_sequences -= 1
                log.finish_s[req] = replica.boundary_s
                log.itl_max_s[req] = 0.0
                log.completed_count += 1
                continue
            replica.batch += 1
            replica.context_tokens += isl[req] + 1
            heappush(replica.finish_steps, (replica.steps_done + output - 1, req))

    def _queue_waiting_prompts(self, replica: DecodeReplica) -> None:
        """FCFS while a batch slot (counting queued prompts) and KV room are free; the KV is reserved now."""
        waiting, prompts, isl, osl = replica.waiting, replica.prompt_queue, self._isl, self._osl
        while waiting and replica.batch + len(prompts) < self._max_batch and \
                replica.kv_used_tokens + isl[waiting[0]] + osl[waiting[0]] <= self._kv_capacity_tokens:
            req = waiting.popleft()
            replica.kv_used_tokens += isl[req] + osl[req]
            prompts.append([req, isl[req]])

    def _start_mixed_step(self, replica: DecodeReplica) -> None:
        """One step: decode the batch and prefill up to ``chunk_tokens`` of queued prompt, FCFS.

        It is one forward pass, so it pays one iteration's fixed cost, not two: the larger of the decode step
        (which holds its own) and the prefill overhead. Paying both would count the fixed cost twice per mixed
        step; a prompt still never finishes sooner than it would alone.
        """
        budget = self._chunk_tokens
        used = 0
        piece_s = self._timing.piece_s
        prefill_s = 0.0
        isl = self._isl
        for item in replica.prompt_queue:
            take = min(item[1], budget - used)
            prefill_s += piece_s(isl[item[0]] - item[1], take)
            item[1] -= take
            used += take
            if used >= budget:
                break
        batch = replica.batch
        fixed_s = self._timing.overhead_s
        if batch:
            fixed_s = max(fixed_s, self._decode_step_s(batch, replica.context_tokens / batch))
        step_s = prefill_s + fixed_s
        replica.step_s = step_s
        replica.version += 1
        replica.next_event_steps = 1
        replica.next_event_s = replica.boundary_s + step_s
        self._events.push(replica.next_event_s, self._on_planned_event, replica, replica.version)
