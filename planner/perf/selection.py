"""Pick the best TP size per stage: the highest tokens/s per GPU that meets the stage's target."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.perf.curves import DecodeCurve, PrefillCurve


@dataclass(frozen=True)
class StageChoice:
    tp: int
    gpus: int
    meets_sla: bool
    tokens_per_s_per_gpu: float
    latency_ms: float
    target_ms: float
    batch: int | None
    context_tokens: int | None
    reason: str

    @property
    def miss_ratio(self) -> float:
        """How far the latency is above target (0 when it meets it)."""
        return max(0.0, self.latency_ms / self.target_ms - 1.0)


def decode_context(isl: float, osl: float) -> int:
    """Mean context of a sequence over its decode: the prompt plus half the output."""
    return int(round(isl + osl / 2.0))


def select_prefill(curves: Mapping[int, PrefillCurve], isl: float, ttft_ms: float) -> StageChoice:
    options = []
    for tp, curve in sorted(curves.items()):
        t = curve.ttft_ms(isl).value
        options.append(StageChoice(tp, curve.gpus, t <= ttft_ms, curve.tokens_per_s_per_gpu(isl), t, ttft_ms,
                                   None, None, ""))
    feasible = [o for o in options if o.meets_sla]
    if feasible:
        best = max(feasible, key=lambda o: (o.tokens_per_s_per_gpu, -o.tp))
        why = (f"highest prefill throughput per GPU ({best.tokens_per_s_per_gpu:,.0f} tok/s/GPU) with TTFT "
               f"{best.latency_ms:.1f} ms <= {ttft_ms:g} ms at ISL {isl:g}")
    else:
        best = min(options, key=lambda o: o.latency_ms)
        why = (f"no TP meets TTFT {ttft_ms:g} ms at ISL {isl:g}; closest is TP {best.tp} at "
               f"{best.latency_ms:.1f} ms ({best.miss_ratio:.0%} over)")
    return StageChoice(**{**best.__dict__, "reason": why})


def select_decode(curves: Mapping[int, DecodeCurve], isl: float, osl: float, itl_ms: float) -> StageChoice:
    ctx = decode_context(isl, osl)
    options = []
    for tp, curve in sorted(curves.items()):
        batch = curve.max_batch_meeting(itl_ms, ctx)
        if batch >= 1:
            itl = curve.itl_ms(batch, ctx).value
            options.append(StageChoice(tp, curve.gpus, True, curve.tokens_per_s_per_gpu(batch, ctx), itl, itl_ms,
                                       batch, ctx, ""))
        else:
            fits = curve.kv_batch_limit(ctx) >= 1
            itl = curve.itl_ms(1, ctx).value if fits else float("inf")
            options.append(StageChoice(tp, curve.gpus, False, 0.0, itl, itl_ms, 0, ctx,
                                       "" if fits else "KV cache cannot hold one sequence"))
    feasible = [o for o in options if o.meets_sla]
    if feasible:
        best = max(feasible, key=lambda o: (o.tokens_per_s_per_gpu, -o.tp))
        why = (f"highest decode throughput per GPU ({best.tokens_per_s_per_gpu:,.0f} tok/s/GPU) at batch "
               f"{best.batch}, ITL {best.latency_ms:.2f} ms <= {itl_ms:g} ms at context {ctx}, KV fits")
    else:
        best = min(options, key=lambda o: o.latency_ms)
        if best.latency_ms == float("inf"):
            why = f"no TP can hold one sequence of {ctx} tokens in its KV cache"
        else:
            why = (f"no TP meets ITL {itl_ms:g} ms at context {ctx}; closest is TP {best.tp} at batch 1 with "
                   f"{best.latency_ms:.2f} ms ({best.miss_ratio:.0%} over)")
    return StageChoice(**{**best.__dict__, "reason": why})
