"""auto's gate: the test statistics, the decision rule, the replay, and the out-of-sample guarantee on
held-out series (never on the training series its constants were tuned on)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from planner.forecast import heldout
from planner.forecast.auto import Auto
from planner.forecast.gate import Evidence, Gate, decide, evidence, in_force, replay, t_quantile


# ------------------------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("df", [5, 7, 11, 30, 200])
@pytest.mark.parametrize("p", [0.25, 0.05, 0.01, 0.05 / 12, 0.001])
def test_t_quantile_matches_scipy(df: int, p: float) -> None:
    assert t_quantile(p, df) == pytest.approx(stats.t.ppf(1 - p, df), rel=5e-3)


def one_candidate(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(diffs, lv_err) for last-value and one candidate whose loss differences are ``d``."""
    return np.stack([np.zeros(len(d)), d]), np.full(len(d), 10.0)


def test_evidence_is_the_t_test_of_block_means() -> None:
    d = np.random.default_rng(0).normal(0.3, 1.0, 99)  # 96 used: the 3 oldest do not fill a block
    (e,) = evidence(*one_candidate(d), 0, 99, 1, Gate(blocks=8, min_origins=30, block_horizons=1.0))
    means = d[3:].reshape(8, 12).mean(axis=1)
    assert e.stat == pytest.approx(stats.ttest_1samp(means, 0.0).statistic)
    assert (e.gain, e.rel_gain, e.count, e.df) == (pytest.approx(means.mean()), pytest.approx(means.mean() / 10),
                                                   96, 7)


def test_evidence_discounts_one_lucky_stretch() -> None:
    steady = np.full(96, 1.0) + np.random.default_rng(1).normal(0, 0.5, 96)
    lucky = np.zeros(96)
    lucky[:12] = 8.0  # the same mean gain, all of it in one block
    gate = Gate(blocks=8, min_origins=30, block_horizons=1.0)
    (s,), (lk,) = evidence(*one_candidate(steady), 0, 96, 1, gate), evidence(*one_candidate(lucky), 0, 96, 1, gate)
    assert s.gain == pytest.approx(lk.gain, rel=0.2)
    assert s.stat > 5 and lk.stat < 1.5


@pytest.mark.parametrize("h,block_horizons,tested", [
    pytest.param(3, 1.0, True, id="blocks-of-12-origins-h3"),
    pytest.param(7, 2.0, False, id="blocks-must-span-2h"),
    pytest.param(13, 1.0, False, id="blocks-shorter-than-h"),
])
def test_evidence_needs_blocks_of_at_least_the_horizon(h: int, block_horizons: float, tested: bool) -> None:
    d = np.random.default_rng(2).normal(1.0, 1.0, 96)
    ev = evidence(*one_candidate(d), 0, 96, h, Gate(blocks=8, min_origins=30, block_horizons=block_horizons))
    assert bool(ev) is tested


def test_evidence_tests_a_seasonal_candidate_on_the_origins_it_covers() -> None:
    d = np.random.default_rng(3).normal(1.0, 1.0, 200)
    d[:100] = np.nan  # undefined before its first season
    (e,) = evidence(*one_candidate(d), 0, 200, 1, Gate(blocks=8, min_origins=30, block_horizons=1.0))
    assert e.count == 96 and math.isfinite(e.stat)


@pytest.mark.parametrize("d,expected", [
    pytest.param(np.full(40, 2.0), math.inf, id="always-better"),
    pytest.param(np.zeros(40), 0.0, id="never-different"),
    pytest.param(np.full(40, -1.0), -math.inf, id="always-worse"),
])
def test_evidence_without_variance(d: np.ndarray, expected: float) -> None:
    (e,) = evidence(*one_candidate(d), 0, 40, 1, Gate(blocks=8, min_origins=30, block_horizons=1.0))
    assert e.stat == expected


# ------------------------------------------------------------------------------------------ decide rule
def ev(index: int, rel_gain: float, stat: float, df: int = 7) -> Evidence:
    return Evidence(index, rel_gain, rel_gain, stat, 96, df)


GATE = Gate(alpha=0.05, keep_alpha=0.25, margin=0.02)
CRIT_2 = t_quantile(0.05 / 2, 7)  # two candidates tested
CRIT_12 = t_quantile(0.05 / 12, 7)


@pytest.mark.parametrize("evidence,incumbent,expected", [
    pytest.param([], 0, 0, id="no-evidence-last-value"),
    pytest.param([ev(1, 0.2, CRIT_2 + 0.1), ev(2, 0.1, 0.0)], 0, 1, id="clear-winner"),
    pytest.param([ev(1, 0.2, CRIT_2 - 0.1), ev(2, 0.1, 0.0)], 0, 0, id="significant-only-uncorrected"),
    pytest.param([ev(1, 0.01, 99.0), ev(2, 0.0, 0.0)], 0, 0, id="below-margin"),
    pytest.param([ev(1, 0.3, CRIT_2 + 1), ev(2, 0.2, CRIT_2 + 5)], 0, 1, id="largest-gain-among-passers"),
    pytest.param([ev(1, 0.3, CRIT_2 + 1), ev(2, 0.05, 1.0)], 2, 2, id="incumbent-kept-while-it-holds"),
    pytest.param([ev(1, 0.3, CRIT_2 + 1), ev(2, 0.05, 0.1)], 2, 1, id="incumbent-dropped-when-it-fades"),
    pytest.param([ev(1, 0.3, 0.0), ev(2, -0.05, 5.0)], 2, 0, id="incumbent-dropped-when-losing"),
])
def test_decide(evidence: list[Evidence], incumbent: int, expected: int) -> None:
    assert decide(evidence, incumbent, GATE) == expected


PASS = CRIT_2 + 1


@pytest.mark.parametrize("evidence,incumbent,probation,expected", [
    pytest.param([ev(1, 0.3, PASS), ev(2, 0.2, PASS)], 0, True, 2, id="first-switch-to-the-half-blend"),
    pytest.param([ev(1, 0.3, PASS), ev(2, 0.2, PASS)], 2, True, 1, id="promoted-when-it-still-passes"),
    pytest.param([ev(1, 0.3, 1.0), ev(2, 0.2, 1.0)], 2, True, 2, id="half-blend-kept-while-it-holds"),
    pytest.param([ev(1, 0.3, PASS), ev(2, 0.2, PASS)], 0, False, 1, id="no-probation-straight-to-winner"),
])
def test_decide_probation(evidence: list[Evidence], incumbent: int, probation: bool, expected: int) -> None:
    assert decide(evidence, incumbent, Gate(probation=probation), {1: 2}) == expected


def test_bonferroni_grows_with_the_number_of_candidates() -> None:
    stat = (CRIT_2 + CRIT_12) / 2
    two = [ev(1, 0.2, stat)] + [ev(2, 0.0, 0.0)]
    twelve = [ev(1, 0.2, stat)] + [ev(i, 0.0, 0.0) for i in range(2, 13)]
    assert decide(two, 0, GATE) == 1
    assert decide(twelve, 0, GATE) == 0


# -------------------------------------------------------------------------------------------- replay
def every(step: int, n: int) -> list[int]:
    """Re-checks every ``step`` points up to the last point of a series of ``n``."""
    return list(range((n - 1) % step, n, step))


def test_replay_needs_min_origins_before_any_switch() -> None:
    rng = np.random.default_rng(3)
    y = 100 + rng.normal(0, 10, 400)
    mean = np.cumsum(y) / np.arange(1, 401)  # the running mean: far better than last-value on noise
    gate = Gate(min_origins=60, block_horizons=1.0)
    assert replay(y[:60], [y[:60], mean[:60]], 3, every(20, 60), gate) == (0, 0)
    choice, origins = replay(y, [y, mean], 3, every(20, 400), gate)
    assert choice == 1 and origins >= 60


def test_replay_goes_through_the_half_blend() -> None:
    rng = np.random.default_rng(5)
    y = 100 + rng.normal(0, 10, 400)
    mean = np.cumsum(y) / np.arange(1, 401)
    forecasts = [y, mean, 0.5 * (y + mean)]
    gate = Gate(block_horizons=1.0, window=200)
    points = every(30, 400)
    first = next(p for p in points if replay(y[: p + 1], [f[: p + 1] for f in forecasts], 3,
                                             [q for q in points if q <= p], gate, {1: 2})[0] != 0)
    assert replay(y[: first + 1], [f[: first + 1] for f in forecasts], 3, [q for q in points if q <= first],
                  gate, {1: 2})[0] == 2  # the first switch: the half-blend
    assert replay(y, forecasts, 3, points, gate, {1: 2})[0] == 1  # later: the candidate itself


def oracle_with_a_bad_spell(n: int, h: int, bad: slice, off: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """Noise (sd 5), and a candidate that knows the target except in ``bad``, where it is ``off`` off."""
    y = 100 + np.random.default_rng(4).normal(0, 5, n)
    f = np.concatenate([y[h:], np.full(h, np.nan)])
    f[bad] += off
    return y, f


def test_replay_steps_down_after_a_losing_period() -> None:
    # 12 off from origin 330: each origin there loses ~6 to last-value (whose error is ~5.6 on average).
    y, f = oracle_with_a_bad_spell(400, 3, slice(330, 400), off=12.0)
    forecasts = [y, f, 0.5 * (y + f)]
    points = every(30, 400)

    def at(end: int, gate: Gate) -> int:
        return replay(y[:end], [x[:end] for x in forecasts], 3, [p for p in points if p < end], gate, {1: 2})[0]

    gate = Gate(window=200, min_origins=30, replay=8, blocks=8, block_horizons=1.0)
    assert at(330, gate) == 1
    # The period of the decision made at 339 lost (origins 339-366 seen at the re-check at 369): down to the
    # half-blend, although the window (origins 167-366) still favours the candidate enough to keep it.
    assert at(370, gate) == 2
    assert at(370, Gate(window=200, min_origins=30, replay=8, blocks=8, block_horizons=1.0, probation=False)) == 1


def test_replay_guard_keeps_last_value_after_switches_that_lost() -> None:
    # At the end the candidate's last 60 origins (the window) are perfect again, but the switches the replay
    # made lost over last-value in 300-359 (the stop-loss cuts each period's loss to its first h origins, so
    # the spell is made costly enough to outweigh the gains before it).
    n, h = 500, 3
    y, f = oracle_with_a_bad_spell(n, h, slice(300, 360), off=1e4)
    gate = Gate(window=60, min_origins=30, replay=8, blocks=6, block_horizons=1.0, probation=False)
    points = every(30, n)
    assert replay(y[:290], [y[:290], f[:290]], h, [p for p in points if p < 290], gate)[0] == 1
    assert replay(y, [y, f], h, points, gate)[0] == 0
    no_guard = Gate(window=60, min_origins=30, replay=8, blocks=6, block_horizons=1.0, probation=False, guard=False)
    assert replay(y, [y, f], h, points, no_guard)[0] == 1


# ---------------------------------------------------------------------------- the held-out guarantee
def ratio(case: heldout.EvalCase) -> float:
    return heldout.score_case(case, time.perf_counter).auto


def test_training_and_held_out_synthetic_series_are_disjoint() -> None:
    train = {c.name for c in heldout.training()}
    held = heldout.held_out_synthetic()
    assert not train & {c.name for c in held}
    assert not set(heldout.TRAINING_FAMILIES) & set(heldout.HELD_OUT_FAMILIES)
    assert not set(heldout.TRAINING_SEEDS) & set(heldout.HELD_OUT_SEEDS)
    assert {c.role for c in held} == {"held-out"}


def held_out_case(family: str, seed: int) -> heldout.EvalCase:
    """The held-out synthetic series at the controller's shape (6 h of 30 s steps, 150 s ahead)."""
    return next(c for c in heldout.held_out_synthetic() if c.name == f"{family}/{seed} 720x30s h=150s")


@pytest.mark.parametrize("family", sorted(heldout.HELD_OUT_FAMILIES))
def test_auto_is_never_worse_than_last_value_on_held_out_synthetic(family: str) -> None:
    assert ratio(held_out_case(family, heldout.HELD_OUT_SEEDS[0])) <= 1.0


def test_auto_keeps_the_gain_where_the_mean_is_optimal() -> None:
    assert ratio(held_out_case("noise", heldout.HELD_OUT_SEEDS[1])) < 0.85  # iid noise: the mean's MAE is ~0.71 of last-value's


def test_naive_scale_is_the_mean_absolute_step() -> None:
    assert heldout.naive_scale(np.array([1.0, 3.0, np.nan, 2.0, 2.0])) == pytest.approx(1.0)  # |2|, |0|
    assert math.isnan(heldout.naive_scale(np.full(5, 7.0)))


@pytest.mark.parametrize("kind,target,step_s", [
    pytest.param("conv", "rate", 60.0, id="conv-rate-60s"),  # the series: 1.029 before
    pytest.param("code", "rate", 60.0, id="code-rate-60s"),
    pytest.param("conv", "output-tps", 30.0, id="conv-output-tps-30s"),
])
def test_auto_is_never_worse_than_last_value_on_held_out_traces(shipped: Path, kind: str, target: str,
                                                                 step_s: float) -> None:
    from planner.bench.forecast import azure_cases

    cases = azure_cases(shipped / "traces" / "azure2023" / f"AzureLLMInferenceTrace_{kind}.csv", kind)
    case = next(c for c in cases if c.name == f"azure-{kind} {target} {step_s:g}s")
    assert ratio(case) <= 1.0


def test_auto_options_reach_the_gate() -> None:
    a = Auto(alpha=0.01, keep_alpha=0.5, margin=0.05, min_origins=40.0, window=100, replay=3, blocks=6)
    assert a.gate == Gate(alpha=0.01, keep_alpha=0.5, margin=0.05, min_origins=40, window=100, replay=3, blocks=6)
    with pytest.raises(TypeError, match="alhpa"):
        Auto(alhpa=0.01)


# ------------------------------------------------------------------------- the trial between re-checks
ZEROS = [0.0] * 8


@pytest.mark.parametrize("d,y,h,expected", [
    pytest.param([1.0] * 8, ZEROS, 2, [True] * 8, id="winning-stays"),
    # The loss at origin 2 is known at origin 4 (h = 2): from there the record since origin 0 is negative.
    pytest.param([1.0, 1.0, -9.0, 1.0, 1.0, 1.0, 1.0, 1.0], ZEROS, 2, [True] * 4 + [False] * 4, id="h-step-loss"),
    pytest.param([1.0, 1.0, -9.0, 1.0, 9.0, 1.0, 1.0, 1.0], ZEROS, 2, [True] * 4 + [False] * 2 + [True] * 2,
                 id="back-once-the-record-recovers"),
    # A level shift at 3 that the forecasts (0) do not follow: origin 3's h-step loss is known only at 6,
    # but against the latest value it shows at 4.
    pytest.param(ZEROS, [0.0, 0.0, 0.0, 10.0, 10.0, 10.0, 10.0, 10.0], 3, [True] * 4 + [False] * 4,
                 id="pending-loss-seen-one-step-after"),
    pytest.param([np.nan] * 8, ZEROS, 2, [True] * 8, id="undefined-is-no-gain"),
])
def test_in_force(d: list[float], y: list[float], h: int, expected: list[bool]) -> None:
    assert in_force(np.array(d), np.array(y), np.zeros(8), 0, len(d), h).tolist() == expected


def test_in_force_starts_at_the_re_check() -> None:
    d = np.array([-9.0] * 4 + [1.0] * 6)  # losses before the re-check at 4 are not the choice's
    assert in_force(d, np.zeros(10), np.zeros(10), 4, 10, 2).all()


def test_auto_leaves_a_smoother_one_step_after_a_level_shift() -> None:
    rng = np.random.default_rng(7)
    y = np.maximum(0.0, rng.normal(100.0, 15.0, 600))  # noise: a smoother wins, and auto takes it
    y[560:] += 500.0  # a level shift 20 steps after the re-check at 540: the smoother now lags
    t = np.arange(600) * 30.0
    auto = Auto()
    before = auto.fit(t[:559], y[:559]).forecast(150.0)
    assert before.model != "auto:last-value"
    after = auto.fit(t[:562], y[:562]).forecast(150.0)
    assert after.model == "auto:last-value" and "stopped" in after.reason
    assert after.mean == pytest.approx(y[561])
