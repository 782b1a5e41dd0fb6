"""Iteration-time model of one serving engine replica, shared by the simulator and the engine emulator.

A continuous-batching engine runs iterations. A prefill iteration processes up to ``chunk_tokens`` prompt
tokens (chunked prefill); its time is the profile's prefill time for that many tokens, because GEMM work
dominates and scales with tokens whether they come from one prompt or several. A decode iteration advances
every running sequence by one token; its time is the profile's ITL at the batch size and the batch's mean
context. An aggregated engine piggy-backs a prefill chunk on a decode step and pays both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.perf.curves import DecodeCurve, PrefillCurve


@dataclass(frozen=True)
class EngineModel:
    prefill: PrefillCurve
    decode: DecodeCurve
    chunk_tokens: int = 8192
    # Per-request latency outside the engine's iterations: a client-observed TTFT curve (the endpoint backend
    # times requests over HTTP) holds the API front end's work (parse, hand to the engine, detokenise, SSE)
    # in every point. It delays a request but does not occupy the engine (vLLM runs it in another process).
    front_end_s: float = 0.0

    def prefill_iteration_s(self, tokens: float) -> float:
        return self.prefill.ttft_ms(max(1.0, tokens)).value / 1e3

    def prefill_s(self, isl: float) -> float:
        """Compute time of one whole prompt on an idle replica, its chunks run back to back.

        Each chunk costs its marginal time on the prompt's own curve (as ``prefill_batch_s``: later chunks
        attend to a longer prefix), and each chunk is an iteration that pays the fixed cost, so a prompt of n
        chunks takes ttft(isl) + (n - 1) x the fixed cost. (Pricing every chunk as a fresh ``chunk_tokens``
        prompt would leave out the prefix attention: 2.6 s instead of 6.6 s for an 85k prompt of
        Llama-3.1-8B.)
        """
        tokens = max(1.0, isl)
        chunks = max(1, math.ceil(tokens / self.chunk_tokens))
        return self.prefill_iteration_s(tokens) + (chunks - 1) * self.prefill_overhead_s()

    def prefill_overhead_s(self) -> float:
        """Fixed cost of one prefill iteration (weights read, launch): the curve's intercept at zero tokens,
        extrapolated from its two smallest points and kept within [0, smallest measured time]."""
        xs, ys = self.prefill.ttft.xs, self.prefill.ttft.ys
        if len(xs) < 2:
            return 0.0
        slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        return min(ys[0], max(0.0, ys[0] - slope * xs[0])) / 1e3

    def iteration_overhead_s(self) -> float:
        """The engine's own fixed cost per iteration: the prefill intercept less the front end's share."""
        return max(0.0, self.prefill_overhead_s() - self.front_end_s)

    def prefill_batch_s(self, pieces: Sequence[tuple[float, float]]) -> float:
        """One chunked-prefill iteration over prompt pieces ``(start_token, end_token)``.

        Each piece costs its marginal time on its own prompt's curve, ttft(end) - ttft(start): its attention
        reads its own prefix, not the other prompts' (a batch of eight 1k prompts is not one 8k prompt).
        The iteration's fixed cost is paid once. One whole prompt costs exactly ttft(isl).
        """
        overhead = self.prefill_overhead_s()
        total = overhead
        for start, end in pieces:
            end_s = self.prefill.ttft_ms(max(1.0, end)).value / 1e3
            total += end_s - (self.prefill.ttft_ms(start).value / 1e3 if start > 0 else overhead)
        return max(total, overhead)

    def decode_step_s(self, batch: int, mean_context_tokens: float) -> float:
        if batch <= 0:
            return 0.0
        return self.decode.itl_ms(batch, mean_context_tokens).value / 1e3

    def mixed_step_s(self, batch: int, mean_context_tokens: float, prefill_tokens: float) -> float:
        """Aggregated mode: one decode step with ``prefill_tokens`` of prompt piggy-backed."""
        step = self.decode_step_s(batch, mean_context_tokens)
        if prefill_tokens <= 0:
            return step
        return step + self.prefill_iteration_s(prefill_tokens)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.decode.kv_capacity_tokens

    @property
    def max_batch(self) -> int:
        return self.decode.max_batch


def client_front_end_s(prefill: PrefillCurve, decode: DecodeCurve) -> float:
    """The front end's share of a client-observed TTFT curve: its intercept (a prompt of no tokens) less one
    engine iteration that does almost nothing, a decode step of one sequence at the smallest context (both
    read the weights once). What is left was spent outside the engine: HTTP, hand-over, streaming."""
    intercept_s = EngineModel(prefill, decode).prefill_overhead_s()
    step_s = decode.itl_ms(1, decode.contexts[0]).value / 1e3
    return max(0.0, intercept_s - step_s)
