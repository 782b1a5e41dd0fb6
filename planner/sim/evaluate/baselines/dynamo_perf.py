"""What NVIDIA Dynamo's planner looks up in its profile, and its GPU budget, over this project's Profile.

Followed (ai-dynamo/dynamo, argparse-era planner; version note in ``dynamo_throughput.py``):
- ``components/src/dynamo/planner/utils/perf_interpolation.py`` (stored version 0dcef4ef):
  ``PrefillInterpolator`` clamps the ISL to the profiled range (no extrapolation) for TTFT and tokens/s/GPU;
  ``DecodeInterpolator`` works on a 100 x 100 grid of (active KV usage 0..1, context 0..max profiled context):
  a query snaps to the nearest grid point (``compute_idx``), and ``find_best_throughput_per_gpu`` scans KV usage
  from the top for the first point whose ITL <= the (corrected) target, else returns the lowest-usage point.
- ``components/src/dynamo/planner/utils/planner_core.py`` (commit 002a7c31): ``_apply_global_gpu_budget``.

Departures: Dynamo interpolates its profiler's raw points cubically (scipy ``interp1d`` / ``griddata``, with
nearest-neighbour fill); we read this project's monotone piecewise-linear curves at the same grid points. The
nearest-neighbour fill at the grid's edges is kept: batch at least 1 (usage 0), at most the profile's max batch,
and context at least the lowest profiled context.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from planner.perf.curves import DecodeCurve, PrefillCurve

GRID = 100  # DecodeInterpolator(resolution=100)


class DynamoPrefillView:
    def __init__(self, curve: PrefillCurve) -> None:
        self.curve = curve
        self.isl_lo, self.isl_hi = curve.ttft.xs[0], curve.ttft.xs[-1]

    def _clamp(self, isl: float) -> float:
        return max(self.isl_lo, min(isl, self.isl_hi))

    def ttft_ms(self, isl: float) -> float:
        return self.curve.ttft_ms(self._clamp(isl)).value

    def tokens_per_s_per_gpu(self, isl: float) -> float:
        return self.curve.tokens_per_s_per_gpu(self._clamp(isl))


class DynamoDecodeView:
    def __init__(self, curve: DecodeCurve) -> None:
        self.curve = curve
        self.max_kv = float(curve.kv_capacity_tokens)
        self.max_ctx = float(curve.contexts[-1])

    def _iy(self, context_tokens: float) -> int:
        step = self.max_ctx / (GRID - 1)
        return int(min(max(round(context_tokens / step), 0), GRID - 1))

    @staticmethod
    def _ix(kv_usage: float) -> int:
        return int(min(max(round(kv_usage * (GRID - 1)), 0), GRID - 1))

    def _point(self, ix: int, iy: int) -> tuple[float, float]:
        """(ITL ms, output tokens/s/GPU) at grid point (ix, iy)."""
        c = self.curve
        ctx = max(iy * self.max_ctx / (GRID - 1), c.contexts[0])
        batch = max(1.0, min(float(c.max_batch), ix / (GRID - 1) * self.max_kv / ctx))
        itl = c.itl_ms(batch, ctx).value
        return itl, batch / (itl / 1e3) / c.gpus

    def itl_ms(self, concurrency: float, context_tokens: float) -> float:
        """Dynamo's ``interpolate_itl``: KV usage = concurrency x context / max KV tokens, snapped to the grid."""
        return self._point(self._ix(concurrency * context_tokens / self.max_kv), self._iy(context_tokens))[0]

    def best_tokens_per_s_per_gpu(self, itl_ms: float, context_tokens: float) -> float:
        """Dynamo's ``find_best_throughput_per_gpu``: the highest grid usage whose ITL meets ``itl_ms``."""
        iy = self._iy(context_tokens)
        for ix in range(GRID - 1, -1, -1):
            itl, thpt = self._point(ix, iy)
            if itl <= itl_ms:
                return thpt
        return self._point(0, iy)[1]


def dynamo_global_budget(prefill: int, decode: int, gpus: Mapping[str, int], floors: Mapping[str, int],
                         max_gpus: int | None) -> tuple[int, int, bool]:
    """Dynamo's ``_apply_global_gpu_budget``: over budget, prefill is scaled by budget / wanted (floored, kept
    between its floor and what leaves room for decode's floor) and decode gets every GPU left; a budget below
    the two floors gives (0, 0), as Dynamo's does. ``max_gpus`` None is Dynamo's -1 (no budget)."""
    gp, gd = gpus["prefill"], gpus["decode"]
    total = prefill * gp + decode * gd
    if max_gpus is None or total <= max_gpus:
        return prefill, decode, False
    if max_gpus < floors["prefill"] * gp + floors["decode"] * gd:
        return 0, 0, True
    scale = max_gpus / total
    max_prefill = math.floor((max_gpus - floors["decode"] * gd) / gp)
    p = max(floors["prefill"], min(max_prefill, math.floor(prefill * scale)))
    d = max(floors["decode"], math.floor((max_gpus - p * gp) / gd))
    return p, d, True


def dynamo_component_budget(replicas: int, gpus_per_replica: int, floor: int, max_gpus: int | None) -> tuple[int, bool]:
    """Dynamo's ``_apply_component_gpu_budget`` (one pool): scale down by budget / wanted, floored."""
    total = replicas * gpus_per_replica
    if max_gpus is None or total <= max_gpus:
        return replicas, False
    if max_gpus < floor * gpus_per_replica:
        return 0, True
    return max(floor, math.floor(replicas * max_gpus / total)), True
