"""Iteration times for the simulator: :class:`planner.perf.engine.EngineModel` look-ups, cached.

The curves are interpolated in Python; the simulator asks for the same few values millions of times, so each
is computed once. Decode step times are cached per (batch, context // ``CONTEXT_QUANTUM_TOKENS``) and taken
at the middle of that context bucket.
"""

from __future__ import annotations

from planner.perf.engine import EngineModel

CONTEXT_QUANTUM_TOKENS = 32


class StepTiming:
    def __init__(self, engine: EngineModel) -> None:
        self.engine = engine
        # batch * 1_000_000 + context bucket -> step seconds (DecodeStage._plan_next_completion reads it directly)
        self.decode_cache: dict[int, float] = {}
        self._prefill_cache: dict[int, float] = {}
        # The front end's share of the curve (EngineModel.front_end_s) is a delay outside the engine: the
        # cluster adds it to each request, and the engine's iterations are timed without it.
        self.front_end_s = engine.front_end_s
        self.overhead_s = engine.iteration_overhead_s()  # a prefill iteration's fixed cost, paid once per iteration

    def decode_step_s(self, batch: int, mean_context_tokens: float) -> float:
        key = batch * 1_000_000 + int(mean_context_tokens) // CONTEXT_QUANTUM_TOKENS
        step_s = self.decode_cache.get(key)
        if step_s is None:
            context = (int(mean_context_tokens) // CONTEXT_QUANTUM_TOKENS + 0.5) * CONTEXT_QUANTUM_TOKENS
            step_s = self.decode_cache[key] = self.engine.decode_step_s(batch, context)
        return step_s

    def prefill_s(self, tokens: int) -> float:
        """The prefill curve at ``tokens``, less the front end: one whole prompt of that length alone in an
        iteration."""
        prefill_s = self._prefill_cache.get(tokens)
        if prefill_s is None:
            prefill_s = self._prefill_cache[tokens] = max(
                self.overhead_s, self.engine.prefill_batch_s([(0, tokens)]) - self.front_end_s)
        return prefill_s

    def piece_s(self, start_tokens: int, tokens: int) -> float:
        """Marginal time of prompt tokens ``start_tokens .. start_tokens + tokens`` in a chunked-prefill iteration
        (as EngineModel.prefill_batch_s: the piece's own curve, the iteration's fixed cost counted once apart)."""
        before_s = self.prefill_s(start_tokens) if start_tokens else self.overhead_s
        return self.prefill_s(start_tokens + tokens) - before_s
