"""Interpolated performance curves over a profile's measured or modelled points.

Physics says more tokens, a bigger batch or a longer context never make a step faster, so every curve is
made monotone non-decreasing (running maximum over the grid) before interpolating piecewise-linearly.
Queries outside the grid are answered by extending the last segment and are *flagged* (``extrapolated``),
never silently clamped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    value: float
    extrapolated: bool = False


def _monotone(xs: Sequence[float], ys: Sequence[float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    pairs = sorted(zip(xs, ys, strict=True))
    out_x: list[float] = []
    out_y: list[float] = []
    for x, y in pairs:
        if out_x and x == out_x[-1]:
            out_y[-1] = max(out_y[-1], y)
            continue
        out_x.append(float(x))
        out_y.append(max(float(y), out_y[-1]) if out_y else float(y))
    return tuple(out_x), tuple(out_y)


@dataclass(frozen=True)
class Curve1D:
    """Monotone piecewise-linear y(x)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @classmethod
    def from_points(cls, xs: Sequence[float], ys: Sequence[float]) -> Curve1D:
        if not xs:
            raise ValueError("a curve needs at least one point")
        return cls(*_monotone(xs, ys))

    def __call__(self, x: float) -> Estimate:
        xs, ys = self.xs, self.ys
        if len(xs) == 1:
            return Estimate(ys[0], x != xs[0])
        if x < xs[0]:
            # Below the grid: never faster than linear scaling down to zero tokens allows, and a step can
            # not take less than the smallest measured one's fixed part; the first point is the bound.
            return Estimate(ys[0], True)
        if x > xs[-1]:
            slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
            return Estimate(ys[-1] + slope * (x - xs[-1]), True)
        i = bisect_left(xs, x)
        if xs[i] == x:
            return Estimate(ys[i])
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return Estimate(y0 + (y1 - y0) * (x - x0) / (x1 - x0))

    @property
    def x_max(self) -> float:
        return self.xs[-1]


@dataclass(frozen=True)
class PrefillCurve:
    """TTFT (prefill compute only, no queueing) as a function of ISL for one TP size."""

    ttft: Curve1D
    gpus: int

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float]], gpus: int) -> PrefillCurve:
        pts = list(points)
        return cls(Curve1D.from_points([p[0] for p in pts], [p[1] for p in pts]), gpus)

    def ttft_ms(self, isl: float) -> Estimate:
        return self.ttft(isl)

    def tokens_per_s_per_gpu(self, isl: float) -> float:
        return isl / (self.ttft(isl).value / 1e3) / self.gpus


@dataclass(frozen=True)
class DecodeCurve:
    """ITL as a function of (batch, context tokens) for one TP size, on a possibly ragged grid."""

    contexts: tuple[float, ...]
    by_context: tuple[Curve1D, ...]  # ITL(batch) at each context level
    gpus: int
    kv_capacity_tokens: int
    max_batch: int

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float, float]], gpus: int, kv_capacity_tokens: int,
                    max_batch: int) -> DecodeCurve:
        levels: dict[float, list[tuple[float, float]]] = {}
        for batch, ctx, itl in points:
            levels.setdefault(float(ctx), []).append((float(batch), float(itl)))
        if not levels:
            raise ValueError("a decode curve needs at least one point")
        contexts = tuple(sorted(levels))
        curves = tuple(Curve1D.from_points([b for b, _ in levels[c]], [v for _, v in levels[c]])
                       for c in contexts)
        return cls(contexts, curves, gpus, kv_capacity_tokens, max_batch)

    def itl_ms(self, batch: float, context_tokens: float) -> Estimate:
        cs = self.contexts
        if len(cs) == 1:
            e = self.by_context[0](batch)
            return Estimate(e.value, e.extrapolated or context_tokens != cs[0])
        if context_tokens <= cs[0]:
            e = self.by_context[0](batch)
            return Estimate(e.value, e.extrapolated or context_tokens < cs[0])
        i = min(bisect_left(cs, context_tokens), len(cs) - 1)
        lo, hi = self.by_context[i - 1](batch), self.by_context[i](batch)
        # More context never helps: a ragged grid may extrapolate the lower level above the higher one.
        hi_v = max(hi.value, lo.value)
        c0, c1 = cs[i - 1], cs[i]
        frac = (context_tokens - c0) / (c1 - c0)
        value = lo.value + (hi_v - lo.value) * frac
        if frac > 1.0:
            value = max(value, hi_v)
        return Estimate(value, lo.extrapolated or hi.extrapolated or context_tokens > cs[-1])

    def tokens_per_s_per_gpu(self, batch: float, context_tokens: float) -> float:
        return batch / (self.itl_ms(batch, context_tokens).value / 1e3) / self.gpus

    def kv_batch_limit(self, context_tokens: float) -> int:
        """Most sequences of ``context_tokens`` whose KV fits one replica."""
        return int(self.kv_capacity_tokens // max(1.0, context_tokens))

    def max_batch_meeting(self, itl_ms: float, context_tokens: float) -> int:
        """Largest batch with ITL <= ``itl_ms`` at ``context_tokens`` that also fits the KV cache (0: none)."""
        hi = min(self.max_batch, self.kv_batch_limit(context_tokens))
        if hi < 1 or self.itl_ms(1, context_tokens).value > itl_ms:
            return 0
        lo = 1
        while lo < hi:  # ITL is monotone in batch: binary search the last batch that meets the target
            mid = (lo + hi + 1) // 2
            if self.itl_ms(mid, context_tokens).value <= itl_ms:
                lo = mid
            else:
                hi = mid - 1
        return lo
