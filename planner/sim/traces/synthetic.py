"""Synthetic request traces: arrivals from aggregate rate windows (ServeGen), and shaped rates for tests and
benchmarks (constant, step, ramp, sinusoid, spike, on/off), with lengths drawn from a :class:`LengthDist`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from planner.errors import UserError
from planner.sim.traces.records import LengthDist, RateWindows, RequestTrace

# Azure conv 2023: ISL mean 1,155 (p99 4,142, max 14,050), OSL mean 211 (p99 601, max 1,000). Capped at the
# trace's maxima: an uncapped lognormal draws 40k+-token prompts once in millions (a day of ServeGen
# arrivals), longer than a 32k-40k-context model accepts, and the trace never had them.
DEFAULT_ISL = LengthDist("lognormal", 1155.0, 1.0, maximum=14050)
DEFAULT_OSL = LengthDist("lognormal", 211.0, 0.8, maximum=1000)


def _gamma_arrivals(rng: np.random.Generator, rate_rps: float, start_s: float, length_s: float,
                    cv: float) -> np.ndarray:
    """Renewal arrivals in [start, start+length) with mean rate ``rate_rps`` and inter-arrival CV ``cv``."""
    if rate_rps <= 0 or length_s <= 0:
        return np.empty(0)
    if abs(cv - 1.0) < 1e-12:
        n = rng.poisson(rate_rps * length_s)
        return np.sort(start_s + rng.random(n) * length_s)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_rps * shape)
    expected = rate_rps * length_s
    out: list[np.ndarray] = []
    t = start_s + rng.random() * rng.gamma(shape, scale)  # random phase so windows do not all start at 0
    end = start_s + length_s
    while t < end:
        gaps = rng.gamma(shape, scale, int(expected * 1.2) + 16)
        ts = t + np.cumsum(gaps)
        out.append(np.concatenate(([t], ts[:-1])))
        t = float(ts[-1])
    a = np.concatenate(out) if out else np.empty(0)
    return a[a < end]


def synthesise_from_rates(windows: RateWindows, isl_dist: LengthDist = DEFAULT_ISL,
                          osl_dist: LengthDist = DEFAULT_OSL, cv: float = 1.0, seed: int = 0) -> RequestTrace:
    """Arrivals per window (Poisson for cv=1, Gamma renewal otherwise) at the window's rate."""
    if cv <= 0:
        raise UserError(f"cv: {cv} must be > 0", key="cv")
    rng = np.random.default_rng(seed)
    parts = [_gamma_arrivals(rng, float(r), float(s), float(w), cv)
             for s, w, r in zip(windows.window_start_s, windows.window_s, windows.rate_rps, strict=True)]
    t = np.sort(np.concatenate(parts)) if parts else np.empty(0)
    n = len(t)
    return RequestTrace(t, isl_dist.sample(rng, n), osl_dist.sample(rng, n), windows.source,
                        f"synthesised from {len(windows)} rate windows (cv {cv:g}, seed {seed})")


def from_rate_fn(rate_fn: Callable[[np.ndarray], np.ndarray], duration_s: float, *, isl: LengthDist | int = 1000,
                 osl: LengthDist | int = 200, seed: int = 0, name: str = "synthetic") -> RequestTrace:
    """Inhomogeneous Poisson arrivals with rate ``rate_fn(t)`` over [0, duration) (Lewis-Shedler thinning)."""
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, duration_s, 4097)
    peak = float(np.max(rate_fn(grid))) * 1.05 + 1e-12
    n = rng.poisson(peak * duration_s)
    cand = np.sort(rng.random(n) * duration_s)
    keep = rng.random(n) * peak < rate_fn(cand)
    t = cand[keep]
    isl_d = isl if isinstance(isl, LengthDist) else LengthDist("fixed", float(isl))
    osl_d = osl if isinstance(osl, LengthDist) else LengthDist("fixed", float(osl))
    return RequestTrace(t, isl_d.sample(rng, len(t)), osl_d.sample(rng, len(t)), name, f"seed {seed}")


def constant(rate_rps: float, duration_s: float, **kw: object) -> RequestTrace:
    return from_rate_fn(lambda t: np.full_like(t, rate_rps, dtype=float), duration_s, name="constant", **kw)  # type: ignore[arg-type]


def step(rate_before_rps: float, rate_after_rps: float, at_s: float, duration_s: float, **kw: object) -> RequestTrace:
    return from_rate_fn(lambda t: np.where(t < at_s, rate_before_rps, rate_after_rps), duration_s,
                        name="step", **kw)  # type: ignore[arg-type]


def ramp(rate_start_rps: float, rate_end_rps: float, duration_s: float, **kw: object) -> RequestTrace:
    return from_rate_fn(lambda t: rate_start_rps + (rate_end_rps - rate_start_rps) * t / duration_s, duration_s,
                        name="ramp", **kw)  # type: ignore[arg-type]


def sinusoid(mean_rps: float, amplitude_rps: float, period_s: float, duration_s: float,
             **kw: object) -> RequestTrace:
    return from_rate_fn(lambda t: np.maximum(0.0, mean_rps + amplitude_rps * np.sin(2 * np.pi * t / period_s)),
                        duration_s, name="sinusoid", **kw)  # type: ignore[arg-type]


def spike(base_rps: float, spike_rps: float, at_s: float, width_s: float, duration_s: float,
          **kw: object) -> RequestTrace:
    return from_rate_fn(lambda t: np.where((t >= at_s) & (t < at_s + width_s), spike_rps, base_rps), duration_s,
                        name="spike", **kw)  # type: ignore[arg-type]


def on_off(rate_on_rps: float, on_s: float, off_s: float, duration_s: float, **kw: object) -> RequestTrace:
    return from_rate_fn(lambda t: np.where(np.mod(t, on_s + off_s) < on_s, rate_on_rps, 0.0), duration_s,
                        name="on_off", **kw)  # type: ignore[arg-type]


SYNTHETIC: dict[str, Callable[..., RequestTrace]] = {
    "constant": constant, "step": step, "ramp": ramp, "sinusoid": sinusoid, "spike": spike, "on_off": on_off,
}
