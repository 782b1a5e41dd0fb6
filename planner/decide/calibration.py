"""Calibration: a bounded correction of the profile from observed vs predicted latency at the observed load.

The factor multiplies the model's latency prediction, so it can raise capacity (observed slower than the
profile: factor > 1) as well as lower it (observed faster: factor < 1). It is bounded to
[1/max_factor, max_factor] and decays toward 1 with ``half_life_s`` when no new evidence arrives, so a
transient (a cold cache, a noisy window) cannot pin the pool forever. Worked example: the profile predicts
a 20 ms ITL at the observed batch and 26 ms is observed; one sample moves the factor from 1.0 to
sqrt(1.3) = 1.14 (each sample carries half the weight), the next one to 1.22, and so on toward 1.3.
"""

from __future__ import annotations

import math

from planner.config import Calibration
from planner.decide.state import Calibrated

SAMPLE_WEIGHT = 0.5  # weight of a new observation against the decayed history (in log space)
MIN_REQUESTS = 20  # a window with fewer requests gives too noisy a percentile to learn from


def current(cal: Calibrated, now_s: float, cfg: Calibration) -> float:
    """The factor at ``now_s``: its log decays toward 0 with the configured half-life."""
    if not cfg.enabled or cal.at_s is None or cal.factor <= 0:
        return 1.0
    age = max(0.0, now_s - cal.at_s)
    return math.exp(math.log(cal.factor) * 0.5 ** (age / cfg.half_life_s))


def update(cal: Calibrated, observed_ms: float | None, predicted_ms: float, now_s: float,
           cfg: Calibration) -> Calibrated:
    """Blend one observed/predicted ratio into the factor (no change without a usable sample)."""
    if not cfg.enabled or observed_ms is None or not math.isfinite(observed_ms) or observed_ms <= 0:
        return cal
    if not math.isfinite(predicted_ms) or predicted_ms <= 0:
        return cal
    lo, hi = 1.0 / cfg.max_factor, cfg.max_factor
    ratio = min(hi, max(lo, observed_ms / predicted_ms))
    prior = current(cal, now_s, cfg)
    blended = math.exp((1 - SAMPLE_WEIGHT) * math.log(prior) + SAMPLE_WEIGHT * math.log(ratio))
    return Calibrated(min(hi, max(lo, blended)), now_s, cal.samples + 1)
