"""Strict parsing of a read's result: shape, cardinality, finiteness; missing is never zero."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.sources.dialects import DIALECTS, VLLM
from planner.sources.parse import parse_read
from planner.sources.promql import POOL_LABEL, Q_LABEL
from planner.types import NoData, NoDataReason, Observation

NOW = 1_700_000_000.0
W = 60.0
STALE = 30.0


def s(pool: str, q: str, value: float | str) -> dict:
    return {"metric": {POOL_LABEL: pool, Q_LABEL: q}, "value": [NOW, str(value)]}


def healthy(pool: str = "prefill", **over: float | str | None) -> list[dict]:
    """A busy pool: 10 completed, 3 in flight now, 1 in flight a window ago -> 12 started."""
    vals: dict[str, float | str | None] = {
        "newest": NOW - 1, "fresh": 2, "seen": 2, "completed": 10, "running": 2, "queue": 1,
        "in_now_0": 2, "in_now_1": 1, "in_before_0": 1, "in_before_1": 0,
        "isl_num": 1000, "isl_den": 10, "osl_num": 500, "osl_den": 10,
        "ttft_sum": 2.0, "ttft_count": 10, "ttft_p50": 0.15, "ttft_p95": 0.4,
        "itl_sum": 9.8, "itl_count": 490, "itl_p50": 0.018, "itl_p95": 0.03, "kv": 0.25,
        "ttft_sla": 0.45, "itl_sla": 0.032,  # at the policy's percentile (here not 95, to tell them apart)
    }
    vals.update(over)
    return [s(pool, q, v) for q, v in vals.items() if v is not None]


def read(result: object, pools: tuple[str, ...] = ("prefill",)) -> Observation | NoData:
    return parse_read(result, VLLM, pools, W, NOW, STALE)


def test_healthy_pool_is_read_whole() -> None:
    obs = read(healthy())
    assert isinstance(obs, Observation)
    p = obs.pools["prefill"]
    assert (p.requests, p.rate_rps, p.isl_mean, p.osl_mean) == (12, 12 / W, 100, 50)
    assert (p.ttft_ms_p50, p.ttft_ms_p95, p.ttft_ms_mean) == pytest.approx((150, 400, 200))
    assert (p.itl_ms_p50, p.itl_ms_p95, p.itl_ms_mean) == pytest.approx((18, 30, 20))
    assert (p.ttft_ms_at_sla, p.itl_ms_at_sla) == pytest.approx((450, 32))
    assert (p.queue, p.running, p.kv_usage, p.ready_replicas) == (1, 2, 0.25, 2)
    assert (obs.at_s, obs.window_s) == (NOW, W)


def test_measured_zero_traffic_is_zero_with_no_latencies() -> None:
    obs = read(healthy(completed=0, running=0, queue=0, in_now_0=0, in_now_1=0, in_before_0=0,
                       isl_num=0, isl_den=0, osl_num=0, osl_den=0, ttft_sum=0, ttft_count=0, itl_sum=0,
                       itl_count=0, ttft_p50="NaN", ttft_p95="NaN", itl_p50="NaN", itl_p95="NaN"))
    assert isinstance(obs, Observation)
    p = obs.pools["prefill"]
    assert (p.requests, p.rate_rps) == (0, 0)
    assert (p.isl_mean, p.osl_mean, p.ttft_ms_p50, p.ttft_ms_p95, p.ttft_ms_mean, p.itl_ms_p95) == (None,) * 6


def test_pool_born_inside_the_window_had_nothing_in_flight_before() -> None:
    obs = read(healthy(in_before_0=None, in_before_1=None))
    assert isinstance(obs, Observation) and obs.pools["prefill"].requests == 13


def test_kv_absent_is_none_not_zero() -> None:
    obs = read(healthy(kv=None))
    assert isinstance(obs, Observation) and obs.pools["prefill"].kv_usage is None


FAULTS = [
    ("nothing-at-all", [], NoDataReason.EMPTY),
    ("stale-by-age", healthy(newest=NOW - STALE - 1), NoDataReason.STALE),
    ("stale-marker", [s("prefill", "seen", 1)], NoDataReason.STALE),
    ("nan-gauge", healthy(running="NaN"), NoDataReason.NAN),
    ("inf-counter", healthy(completed="+Inf"), NoDataReason.NAN),
    ("nan-kv", healthy(kv="NaN"), NoDataReason.NAN),
    ("nan-quantile-with-observations", healthy(ttft_p95="NaN"), NoDataReason.NAN),
    ("nan-offset-gauge", healthy(in_before_0="NaN"), NoDataReason.NAN),
    ("counter-absent", healthy(completed=None), NoDataReason.EMPTY),
    ("histogram-absent", healthy(itl_count=None), NoDataReason.EMPTY),
    ("buckets-absent-with-observations", healthy(ttft_p50=None), NoDataReason.EMPTY),
    ("duplicate-series", healthy() + [s("prefill", "running", 1)], NoDataReason.BAD_RESPONSE),
    ("unknown-pool", healthy() + [s("other", "running", 1)], NoDataReason.BAD_RESPONSE),
    ("scalar-result", [NOW, "1"], NoDataReason.BAD_RESPONSE),
    ("matrix-result", [{"metric": {}, "values": [[NOW, "1"]]}], NoDataReason.BAD_RESPONSE),
    ("not-a-list", {"resultType": "vector"}, NoDataReason.BAD_RESPONSE),
    ("non-numeric", healthy(running="many"), NoDataReason.BAD_RESPONSE),
]


@pytest.mark.parametrize(("result", "reason"), [(r, why) for _, r, why in FAULTS], ids=[f[0] for f in FAULTS])
def test_faults_are_no_data_with_the_reason(result: object, reason: NoDataReason) -> None:
    got = read(result)
    assert isinstance(got, NoData), got
    assert got.reason == reason, got.detail
    assert got.at_s == NOW and got.detail


def test_one_pool_missing_is_missing_pool_naming_it() -> None:
    got = read(healthy("prefill"), pools=("prefill", "decode"))
    assert isinstance(got, NoData) and got.reason == NoDataReason.MISSING_POOL
    assert "decode" in got.detail


def test_all_pools_missing_is_empty() -> None:
    got = read([], pools=("prefill", "decode"))
    assert isinstance(got, NoData) and got.reason == NoDataReason.EMPTY


def test_two_pools() -> None:
    got = read(healthy("prefill") + healthy("decode", completed=3), pools=("prefill", "decode"))
    assert isinstance(got, Observation)
    assert (got.pools["prefill"].requests, got.pools["decode"].requests) == (12, 5)


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_every_dialect_parses_its_own_signals(dialect: str) -> None:
    d = DIALECTS[dialect]
    rows = healthy()
    n_in = len(d.in_system_gauges)
    rows = [r for r in rows if not (r["metric"][Q_LABEL].startswith(("in_now_", "in_before_"))
                                    and int(r["metric"][Q_LABEL][-1]) >= n_in)]
    if d.kv_usage_gauge is None:
        rows = [r for r in rows if r["metric"][Q_LABEL] != "kv"]
    got = parse_read(rows, d, ("prefill",), W, NOW, STALE)
    assert isinstance(got, Observation), got
    assert (got.pools["prefill"].kv_usage is None) == (d.kv_usage_gauge is None)


finite = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(completed=finite, now_in=finite, before=finite, den=finite, num=finite)
def test_property_requests_never_negative_or_nan(completed: float, now_in: float, before: float, den: float,
                                                 num: float) -> None:
    got = read(healthy(completed=completed, in_now_0=now_in, in_now_1=0, in_before_0=before, in_before_1=0,
                       isl_num=num, isl_den=den))
    assert isinstance(got, Observation)
    p = got.pools["prefill"]
    assert p.requests >= 0 and math.isfinite(p.requests) and p.rate_rps == p.requests / W
    assert (p.isl_mean is None) == (den == 0)


def bounds(pool: str, signal: str, les: tuple[float, ...]) -> list[dict]:
    """The ``{signal}_le`` answer: one sample per bucket bound, the bound in ``le`` (as Prometheus sends it)."""
    return [{"metric": {POOL_LABEL: pool, Q_LABEL: f"{signal}_le", "le": "+Inf" if le == math.inf else repr(le)},
             "value": [NOW, "1"]} for le in (*les, math.inf)]


def test_resolution_of_each_target_on_vllm_buckets() -> None:
    from planner.emulator.vllm_metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S

    rows = healthy() + bounds("prefill", "ttft", TTFT_BUCKETS_S) + bounds("prefill", "itl", ITL_BUCKETS_S)
    obs = parse_read(rows, VLLM, ("prefill",), W, NOW, STALE, {"ttft": 1000.0, "itl": 40.0})
    assert isinstance(obs, Observation)
    p = obs.pools["prefill"]
    assert p.ttft_p95_bracket_ms == pytest.approx((750, 1000)) and p.ttft_p95_resolved is True
    assert p.ttft_p95_resolution == pytest.approx(0.25)
    assert p.itl_p95_bracket_ms == pytest.approx((25, 50)) and p.itl_p95_resolved is False
    assert p.itl_p95_resolution == pytest.approx(0.625)


def test_resolution_is_not_assessed_without_a_target_or_buckets() -> None:
    rows = healthy() + bounds("prefill", "itl", (0.01, 0.05))
    no_target = read(rows)
    no_buckets = parse_read(healthy(), VLLM, ("prefill",), W, NOW, STALE, {"ttft": 200.0, "itl": 40.0})
    for obs in (no_target, no_buckets):
        assert isinstance(obs, Observation)
        p = obs.pools["prefill"]
        assert (p.ttft_p95_resolved, p.itl_p95_resolved, p.itl_p95_bracket_ms, p.ttft_p95_resolution) == (None,) * 4


@pytest.mark.parametrize("metric", [{POOL_LABEL: "prefill", Q_LABEL: "itl_le"},
                                    {POOL_LABEL: "prefill", Q_LABEL: "itl_le", "le": "wide"}],
                         ids=["no-le-label", "le-not-a-number"])
def test_a_bucket_bound_without_a_bound_is_a_bad_response(metric: dict) -> None:
    got = read(healthy() + [{"metric": metric, "value": [NOW, "1"]}])
    assert isinstance(got, NoData) and got.reason == NoDataReason.BAD_RESPONSE and "le" in got.detail


def counts(pool: str, signal: str, cumulative: dict[float, float | str]) -> list[dict]:
    """The ``{signal}_buckets`` answer: the window's cumulative count per bound, the bound in ``le``."""
    return [{"metric": {POOL_LABEL: pool, Q_LABEL: f"{signal}_buckets", "le": "+Inf" if le == math.inf else repr(le)},
             "value": [NOW, str(c)]} for le, c in cumulative.items()]


# healthy(): 10 TTFTs and 490 token gaps in the window. TTFT: 8 at or under 0.1 s, all 10 under 0.25 s;
# ITL: 400 gaps at or under 25 ms, 480 at or under 50 ms, 10 past the last bound.
TTFT_COUNTS = {0.1: 8, 0.25: 10, math.inf: 10}
ITL_COUNTS = {0.025: 400, 0.05: 480, math.inf: 490}
ATTAINMENT = [
    # (id, extra rows, healthy() overrides, targets, (ttft_counted, ttft_met, itl_counted, itl_met))
    ("between-bounds", TTFT_COUNTS, ITL_COUNTS, {}, {"ttft": 200.0, "itl": 40.0},
     (10, 8 + 2 * (0.2 - 0.1) / (0.25 - 0.1), 490, 400 + 80 * (0.04 - 0.025) / (0.05 - 0.025))),
    ("on-bounds", TTFT_COUNTS, ITL_COUNTS, {}, {"ttft": 100.0, "itl": 50.0}, (10, 8, 490, 480)),
    ("past-the-last-bound", TTFT_COUNTS, ITL_COUNTS, {}, {"ttft": 1000.0, "itl": 100.0}, (10, 10, 490, 480)),
    ("no-targets", TTFT_COUNTS, ITL_COUNTS, {}, {}, (None,) * 4),
    ("only-an-itl-target", TTFT_COUNTS, ITL_COUNTS, {}, {"itl": 50.0}, (None, None, 490, 480)),
    ("no-bucket-series", {}, {}, {}, {"ttft": 200.0, "itl": 40.0}, (None,) * 4),
    ("empty-window", {0.1: 0, math.inf: 0}, {}, {"ttft_count": 0, "itl_count": 0, "ttft_sum": 0, "itl_sum": 0},
     {"ttft": 200.0, "itl": 40.0}, (0, 0, 0, 0)),
    ("nan-bucket", {0.1: "NaN", math.inf: 10}, ITL_COUNTS, {}, {"ttft": 200.0, "itl": 40.0},
     (None, None, 490, 400 + 80 * 0.6)),
]


@pytest.mark.parametrize(("ttft", "itl", "over", "targets", "want"), [a[1:] for a in ATTAINMENT],
                         ids=[a[0] for a in ATTAINMENT])
def test_attainment_from_the_window_bucket_counts(ttft: dict, itl: dict, over: dict, targets: dict,
                                                  want: tuple) -> None:
    rows = healthy(**over) + counts("prefill", "ttft", ttft) + counts("prefill", "itl", itl)
    obs = parse_read(rows, VLLM, ("prefill",), W, NOW, STALE, targets)
    assert isinstance(obs, Observation), obs
    p = obs.pools["prefill"]
    got = (p.ttft_counted, p.ttft_met, p.itl_counted, p.itl_met)
    assert [g is None for g in got] == [w is None for w in want]
    assert tuple(g for g in got if g is not None) == pytest.approx(tuple(w for w in want if w is not None))


def test_attainment_on_every_pool_with_a_target() -> None:
    rows = (healthy("prefill") + counts("prefill", "ttft", TTFT_COUNTS)
            + healthy("decode") + counts("decode", "itl", ITL_COUNTS))
    obs = parse_read(rows, VLLM, ("prefill", "decode"), W, NOW, STALE, {"ttft": 100.0, "itl": 50.0})
    assert isinstance(obs, Observation), obs
    pre, dec = obs.pools["prefill"], obs.pools["decode"]
    assert (pre.ttft_counted, pre.ttft_met, pre.itl_counted, pre.itl_met) == (10, 8, None, None)
    assert (dec.ttft_counted, dec.ttft_met, dec.itl_counted, dec.itl_met) == (None, None, 490, 480)
