"""PURE: when may ``auto`` leave last-value? A test on loss differences that has to hold out of sample.

For a candidate ``c`` and an origin ``t`` whose target is already observed, the loss difference is
``d_c[t] = |y[t+h] - y[t]| - |y[t+h] - f_c[t]|`` (positive: ``c`` beat last-value there). Picking the
backtest winner among two dozen candidates on a short, noisy window is a bet that loses out of sample:
the winner is partly luck, and the loss differences of overlapping h-step forecasts (and of regimes)
are correlated, so they carry less evidence than their count suggests. Every candidate also comes as
its half-blend with last-value, ``(y[t] + f_c[t]) / 2``: by convexity of the absolute error it loses at
most half of what ``c`` loses, and for a mean-reverting series it is often better than either.

A candidate replaces last-value only if (``decide``):

1. it has at least ``min_origins`` loss differences, and enough for ``blocks`` blocks of at least
   ``block_horizons`` x h origins each (no switch on a young series);
2. its mean gain is at least ``margin`` of last-value's mean error;
3. a t-test over the ``blocks`` block means (batch means, a Diebold-Mariano test robust to correlated
   loss differences; the gain must show in most blocks, not in one lucky stretch) exceeds Student's t
   quantile at ``alpha / m``, ``m`` the number of candidates tested (Bonferroni: the chance that *any*
   candidate passes by luck is at most ``alpha`` per re-check).

The decision is replayed over the live loop's last ``replay`` re-checks (a pure function of the history:
a replay of the control loop makes the same choices as the live run), which gives it a state:

- hysteresis: an incumbent stays while its gain is positive and its p-value below ``keep_alpha``;
- probation: a switch goes to the winner's half-blend first, to the winner itself at a later re-check
  where it still passes;
- demotion: a decision whose own period (from its re-check to now) lost to last-value steps down one
  level (candidate -> half-blend -> last-value), whatever the window says;
- track record: while the replayed decisions together have lost to last-value, the decision is
  last-value.

Between re-checks a choice is on trial out of sample (``in_force``): at every tick, while the chosen
candidate's realised gain over the origins since its re-check is negative, last-value is used instead. A
regime change (a level shift after which a smoother lags) then costs at most the h steps it takes to see
it, not the rest of the period. The replay applies the same rule, so its track record is what the live
loop realised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_NORMAL = NormalDist()


@dataclass(frozen=True)
class Gate:
    """The test's constants, tuned only on ``planner.forecast.heldout.training()`` (see that module)."""

    alpha: float = 0.05  # chance per re-check that any candidate passes by luck (Bonferroni over candidates)
    keep_alpha: float = 0.25  # an incumbent stays while its one-sided p-value is below this (hysteresis)
    margin: float = 0.02  # least gain, relative to last-value's mean error
    min_origins: int = 30  # fewest backtest origins before any switch
    window: int = 288  # most recent origins tested (at least enough for the blocks below)
    blocks: int = 8  # block means the t-test runs over
    block_horizons: float = 2.0  # a block spans at least this many horizons (h-step errors overlap within h)
    replay: int = 4  # re-checks replayed for hysteresis, probation and the track record
    guard: bool = True  # no switch while the replayed decisions' realised gain is negative (off: ablation only)
    probation: bool = True  # switches go up, and losing ones down, through the half-blend (off: ablation only)


def t_quantile(upper_p: float, df: int) -> float:
    """Student's t quantile with ``upper_p`` in the upper tail (Cornish-Fisher, Abramowitz & Stegun 26.7.5).

    Within 0.5 % of the exact value for df >= 10 and p >= 1e-4, which is all the gate asks of it; scipy's
    import alone would cost more than a control tick.
    """
    z = _NORMAL.inv_cdf(1.0 - upper_p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    v = max(1, df)
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


@dataclass(frozen=True)
class Evidence:
    """One candidate's record against last-value over one window."""

    index: int  # position in the candidate list
    gain: float  # mean loss difference (series units)
    rel_gain: float  # gain / last-value's mean error on the same origins
    stat: float  # DM statistic
    count: int  # loss differences used
    df: int  # degrees of freedom of the statistic

    def p_below(self, p: float) -> bool:
        return self.df >= 1 and self.stat > t_quantile(p, self.df)


def _block_test(d: np.ndarray, lv_err: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean gain, gain relative to last-value's mean error, t statistic) per row of ``d``.

    The statistic is a t-test over ``blocks`` block means of the most recent ``blocks * size`` columns
    (batch means): neighbouring loss differences are correlated (overlapping h-step errors, regimes), block
    means of long blocks much less so, and a gain must show in most blocks, not in one lucky stretch.
    """
    size = d.shape[1] // blocks
    start = d.shape[1] - size * blocks
    means = d[:, start:].reshape(d.shape[0], blocks, size).mean(axis=2)
    gain = means.mean(axis=1)
    sd = means.std(axis=1, ddof=1)
    base = float(lv_err[start:].mean())
    sign_inf = np.where(gain > 0, np.inf, np.where(gain < 0, -np.inf, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        # No spread between blocks: +-inf for a gain or a loss in every block alike, 0 for no difference.
        stat = np.where(sd > 0, gain / (sd / math.sqrt(blocks)), sign_inf)
        rel = gain / base if base > 0 else sign_inf
    return gain, np.broadcast_to(rel, gain.shape), stat


def min_count(h: int, gate: Gate) -> int:
    """Fewest loss differences a candidate is tested on: ``min_origins``, and blocks of >= block_horizons x h."""
    return max(gate.min_origins, gate.blocks * max(2, math.ceil(gate.block_horizons * h)))


def evidence(diffs: np.ndarray, lv_err: np.ndarray, lo: int, hi: int, h: int, gate: Gate) -> list[Evidence]:
    """Evidence of every candidate (rows of ``diffs``, row 0 = last-value) over origins ``[lo, hi)``.

    Candidates defined over the whole window are tested together (a few array operations per re-check);
    one undefined (NaN) at the start of the window, as a seasonal candidate is before its first season,
    is tested on the origins it covers once they are ``min_origins`` or more.
    """
    d = diffs[1:, lo:hi]
    finite = np.isfinite(d)
    defined = finite.sum(axis=1)
    groups = [(np.flatnonzero(finite.all(axis=1)), lo)]
    groups += [(np.array([i]), hi - int(defined[i])) for i in np.flatnonzero(~finite.all(axis=1))]
    out = []
    for rows, start in groups:
        count = (hi - start) // gate.blocks * gate.blocks
        if not len(rows) or count < min_count(h, gate):
            continue
        gain, rel, stat = _block_test(diffs[rows + 1, start:hi], lv_err[start:hi], gate.blocks)
        out += [Evidence(int(i) + 1, float(g), float(r), float(t), count, gate.blocks - 1)
                for i, g, r, t in zip(rows, gain, rel, stat, strict=True)]
    return sorted(out, key=lambda e: e.index)


def decide(ev: list[Evidence], incumbent: int, gate: Gate, half_of: dict[int, int] | None = None) -> int:
    """Index of the candidate to use (0 = last-value) given this window's evidence and the incumbent.

    ``half_of`` maps a candidate's index to its half-blend's (probation: a switch goes to the half-blend
    first, and on to the candidate itself only at a later re-check where it still passes).
    """
    halves = half_of or {}
    m = max(1, len(ev))
    passed = [e for e in ev if e.rel_gain >= gate.margin and e.p_below(gate.alpha / m)]
    winner = max(passed, key=lambda e: e.rel_gain).index if passed else 0
    held = {e.index: e for e in ev}.get(incumbent)
    if held is not None and held.gain > 0 and held.p_below(gate.keep_alpha):
        return winner if halves.get(winner) == incumbent else incumbent
    if gate.probation and winner in halves:
        return halves[winner]
    return winner


def loss_differences(y: np.ndarray, forecasts: list[np.ndarray], h: int) -> tuple[np.ndarray, np.ndarray]:
    """(d per candidate and origin, last-value's absolute error per origin) for origins 0..n-1-h."""
    target = y[h:]
    lv_err = np.abs(target - y[: len(y) - h])
    with np.errstate(invalid="ignore"):
        diffs = np.stack([lv_err - np.abs(target - f[: len(y) - h]) for f in forecasts])
    return diffs, lv_err


def in_force(d: np.ndarray, y: np.ndarray, f: np.ndarray, start: int, stop: int, h: int) -> np.ndarray:
    """Per origin ``T`` in ``[start, stop)``: whether a choice made at ``start`` is used there.

    ``d`` are the choice's h-step loss differences per origin, ``f`` its h-step forecasts. The choice is
    used while its record since ``start`` is not negative: the loss differences of origins ``start..T-h``
    (targets known at ``T``) plus, for the pending origins ``T-h+1..T-1``, their loss differences against
    the latest value ``y[T]`` (a level shift after which a smoother lags shows one step after it happens,
    not h steps). Origin ``T`` itself is left out: against ``y[T]`` last-value's error is 0 by definition.
    NaN (no forecast defined) counts as no gain.
    """
    origins = np.arange(start, stop)
    known = np.concatenate([[0.0], np.cumsum(np.nan_to_num(d[start: max(start, stop - h)]))])
    record = known[np.clip(origins - h - start + 1, 0, len(known) - 1)]
    for lag in range(1, h):
        t = origins - lag
        ok = t >= start
        with np.errstate(invalid="ignore"):
            pending = np.abs(y[origins[ok]] - y[t[ok]]) - np.abs(y[origins[ok]] - f[t[ok]])
        record[ok] += np.nan_to_num(pending)
    return np.asarray(record >= 0.0)


def replay(y: np.ndarray, forecasts: list[np.ndarray], h: int, points: list[int], gate: Gate,
           half_of: dict[int, int] | None = None) -> tuple[int, int]:
    """(index of the candidate to use from the last of ``points``, backtest origins behind that decision).

    ``points`` are the re-checks to replay (ascending indices into ``y``, the live loop's anchors), each
    seeing only the origins whose target it could have seen. ``active[t]`` is the decision in force at
    origin ``t``. At each re-check, in order: a negative realised gain of all replayed decisions so far
    means last-value (track record); a negative gain of the decision in force over its own period means
    one step down (candidate -> its half-blend -> last-value); otherwise ``decide``. Between re-checks a
    choice is in force only while ``in_force`` says so, as in the live loop.
    """
    n = len(y)
    if n - h < 2:
        return 0, 0
    diffs, lv_err = loss_differences(y, forecasts, h)
    full_of = {half: full for full, half in (half_of or {}).items()}
    active = np.zeros(n - h, dtype=np.int64)
    choice, origins, since = 0, 0, 0
    for p in (p for p in points if p - h + 1 >= min_count(h, gate)):
        hi = p - h + 1  # origins 0..p-h have their target observed at p
        used = np.flatnonzero(active[:hi])
        realised = float(np.nansum(diffs[active[used], used]))
        recent = float(np.nansum(diffs[choice, since:hi])) if choice else 0.0
        lo = max(0, hi - max(gate.window, min_count(h, gate)))
        if gate.guard and realised < 0:
            choice = 0
        elif gate.probation and recent < 0:
            choice = (half_of or {}).get(choice, 0) if choice not in full_of else 0
        else:
            choice = decide(evidence(diffs, lv_err, lo, hi, h, gate), choice, gate, half_of)
        origins, since = hi - lo, p
        active[p:] = choice * in_force(diffs[choice], y, forecasts[choice], p, n - h, h) if choice else 0
    return choice, origins
