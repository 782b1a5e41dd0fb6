"""The lower bound: hand-computed cases on a linear toy profile, and never above what a replay spends at the SLA."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.config import Policy
from planner.perf.kv import gbps_to_bytes_per_s
from planner.policy_file import parse_policy
from planner.profile import DecodePoint, DecodeSweep, PrefillPoint, PrefillSweep, Profile, load_profile
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.evaluate.backtest import run_backtest
from planner.sim.evaluate.lower_bound import (
    BoundOptions,
    _affine_minorants,
    _mixture_min,
    drop_allowance,
    lower_bound,
)
from planner.sim.traces.records import RequestTrace
from planner.sim.traces.synthetic import constant, sinusoid, spike, step
from tests.support.decide_support import example_data, merge

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles/h200/qwen3-32b.json"
LINK_BYTES_PER_S = gbps_to_bytes_per_s(400.0)


# Toy profile, linear so every number below is arithmetic: prefill ttft = 10 ms + 0.1 ms/token on 1 GPU (so the
# fixed per-iteration cost is 10 ms and a prompt's marginal work 0.1 ms/token); decode on 2 GPUs, ITL =
# 10 ms + 30 ms x (b - 1)/99 whatever the context, max batch 100: at the 40 ms target the cheapest batch is
# b = 100, 0.4 ms of replica time per token, and no mixture of batches beats it.
PREFILL_MS_PER_TOKEN, PREFILL_FIXED_MS, DECODE_MS_PER_TOKEN, DECODE_GPUS = 0.1, 10.0, 0.4, 2


@pytest.fixture(scope="module")
def toy() -> Profile:
    base = load_profile(PROFILE)
    pre = [PrefillPoint(isl=n, ttft_ms=PREFILL_FIXED_MS + PREFILL_MS_PER_TOKEN * n,
                        tokens_per_s_per_gpu=n / (PREFILL_FIXED_MS + PREFILL_MS_PER_TOKEN * n) * 1e3)
           for n in (1000, 2000, 4000, 8000, 32000)]
    dec = [DecodePoint(batch=b, context_tokens=1000, itl_ms=10.0 + 30.0 * (b - 1) / 99, tokens_per_s_per_gpu=1.0)
           for b in (1, 100)]
    return base.model_copy(update={"prefill": [PrefillSweep(tp=1, gpus=1, points=pre)],
                                   "decode": [DecodeSweep(tp=2, gpus=DECODE_GPUS, kv_capacity_tokens=10**7,
                                                          max_batch=100, points=dec)],
                                   "selection": None})


def _policy(percentile: float = 99.9, startup_s: float = 60.0, itl_ms: float = 40.0, mode: str = "disaggregated") -> Policy:
    over: dict = {"profile": str(PROFILE), "startup_s": startup_s,
                  "sla": {"ttft_ms": 1000.0, "itl_ms": itl_ms, "percentile": percentile}}
    if mode == "aggregated":
        over |= {"mode": "aggregated", "pools": {"aggregated": {"min_replicas": 1, "max_replicas": 50}}}
    return parse_policy(merge(example_data(), over))


def _trace(arrival_s: list[float] | np.ndarray, isl: int | list[int], osl: int | list[int]) -> RequestTrace:
    a = np.asarray(arrival_s, dtype=np.float64)
    return RequestTrace(a, np.broadcast_to(np.asarray(isl, dtype=np.int64), a.shape).copy(),
                        np.broadcast_to(np.asarray(osl, dtype=np.int64), a.shape).copy(), "test")


def _per_request_gpu_s(isl: int, osl: int, mode: str = "disaggregated") -> float:
    prefill = isl * PREFILL_MS_PER_TOKEN / 1e3  # marginal: the fixed 10 ms is shared by a batch
    if mode == "aggregated":  # one pool on the decode replica's GPUs; the first token comes with the prompt
        return (prefill + (osl - 1) * DECODE_MS_PER_TOKEN / 1e3) * DECODE_GPUS
    return prefill + osl * DECODE_MS_PER_TOKEN / 1e3 * DECODE_GPUS


# ------------------------------------------------------------------------------------------- hand-computed
@pytest.mark.parametrize("mode", ["disaggregated", "aggregated"])
def test_a_single_request_costs_its_own_work(toy: Profile, mode: str) -> None:
    lb = lower_bound(_trace([0.0], 1000, 101), toy, _policy(mode=mode), config=SimConfig(mode=mode))
    # prefill 1000 x 0.1 ms = 0.1 s on 1 GPU; decode 101 tokens x 0.4 ms = 40.4 ms on 2 GPUs (aggregated:
    # 0.1 s + 100 x 0.4 ms on 2 GPUs); the capacity at the start is free of start-up
    assert lb.gpu_hours * 3600 == pytest.approx(_per_request_gpu_s(1000, 101, mode), rel=1e-6)
    assert (lb.requests, lb.infeasible_requests, lb.drop_allowance, lb.attainable) == (1, 0, 0, True)
    report = json.loads(json.dumps(lb.to_report()))  # what a report embeds: plain JSON
    assert report["gpu_hours"] == round(lb.gpu_hours, 4) and set(report["pools"]) == set(lb.pools)


@pytest.mark.parametrize("percentile", [99.9, 95.0, 90.0], ids=["q99.9", "q95", "q90"])
def test_a_steady_stream_costs_its_total_work_less_the_allowed_misses(toy: Profile, percentile: float) -> None:
    t = np.arange(0.0, 600.0, 0.5)  # 2 req/s, all alike: the fluid bound is exact
    lb = lower_bound(_trace(t, 1000, 101), toy, _policy(percentile))
    kept = len(t) - math.floor(len(t) * (1 - percentile / 100) + 1e-6)
    assert lb.drop_allowance == len(t) - kept
    assert lb.gpu_hours * 3600 == pytest.approx(kept * _per_request_gpu_s(1000, 101), rel=1e-6)
    assert lb.pools["prefill"].startup_gpu_hours == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("startup_s", [0.0, 60.0, 300.0], ids=["none", "60s", "300s"])
def test_a_burst_after_an_idle_start_pays_the_start_up(toy: Profile, startup_s: float) -> None:
    # 40 prompts at once, 100 s into the scored window; nothing before. Prefill: 40 x 0.1 s = 4 s of work due
    # within a second, all in one 2-s slot -> 2 replicas there, each charged min(start-up, 100 s) of start-up.
    # Decode (OSL 1): 40 first steps x 0.4 ms = 16 ms in one 10-s slot -> 0.0016 replicas, same charge, 2 GPUs.
    # (A start-up longer than the 100 s wait costs as much as holding the replicas from the window start.)
    lb = lower_bound(_trace(np.full(40, 200.0), 1000, 1), toy, _policy(startup_s=startup_s), warmup_s=100.0,
                     options=BoundOptions(prefill_slot_s=2.0, decode_slot_s=10.0))
    charged_s = min(startup_s, 100.0)
    assert lb.pools["prefill"].gpu_hours * 3600 == pytest.approx(4.0 + 2.0 * charged_s, rel=1e-6)
    assert lb.pools["decode"].gpu_hours * 3600 == pytest.approx((0.016 + 0.0016 * charged_s) * DECODE_GPUS, rel=1e-6)
    if startup_s < 100.0:
        assert lb.pools["prefill"].startup_gpu_hours * 3600 == pytest.approx(2.0 * charged_s, rel=1e-6)


def test_a_burst_at_the_window_start_is_served_by_free_warm_capacity(toy: Profile) -> None:
    lb = lower_bound(_trace(np.full(40, 100.0), 1000, 1), toy, _policy(startup_s=120.0), warmup_s=100.0)
    assert lb.pools["prefill"].gpu_hours * 3600 == pytest.approx(4.0, rel=1e-6)


def test_infeasible_requests_are_counted_and_use_up_the_allowance(toy: Profile) -> None:
    normal = _trace([0.0, 10.0, 20.0], 1000, 101)
    # ISL 20,000: its prefill alone (10 + 2,000 ms) is past the 1 s TTFT target on any number of replicas
    mixed = _trace([0.0, 5.0, 10.0, 15.0, 20.0], [1000, 20000, 1000, 20000, 1000], 101)
    lb = lower_bound(mixed, toy, _policy(95.0))
    assert (lb.infeasible_requests, lb.drop_allowance, lb.attainable) == (2, 0, False)
    assert lb.gpu_hours == pytest.approx(lower_bound(normal, toy, _policy(95.0)).gpu_hours, rel=1e-9)
    many = _trace(np.arange(100.0), [20000] * 2 + [1000] * 98, 101)
    lb = lower_bound(many, toy, _policy(95.0))
    assert (lb.infeasible_requests, lb.drop_allowance, lb.attainable) == (2, 5, True)
    # an ITL target below the fastest step (10 ms): every request with a second token is out of reach
    lb = lower_bound(_trace([0.0, 1.0, 2.0], 1000, [1, 50, 2]), toy, _policy(itl_ms=5.0))
    assert lb.infeasible_requests == 2


@pytest.mark.parametrize("requests,percentile,allowed", [
    (1000, 95.0, 50), (1000, 99.9, 1), (999, 95.0, 49), (200000, 95.0, 10001), (1, 99.9, 0),
], ids=["q95", "q99.9", "rounds-down", "report-rounding", "one"])
def test_drop_allowance(requests: int, percentile: float, allowed: int) -> None:
    # 200,000 at 95 %: 10,001 misses give 0.949995, which the report's 5 decimals show as 0.95000
    assert drop_allowance(requests, percentile) == allowed


@pytest.mark.parametrize("points,limit,expected", [
    ([(10, 1.0), (30, 0.5), (50, 0.2)], 40.0, 0.35),  # convex: between the two neighbours
    ([(10, 1.0), (30, 0.9), (50, 0.2)], 30.0, 0.6),  # a 50/50 mix of 10 and 50 beats the pure 30
    ([(10, 1.0), (30, 0.5), (50, 0.2)], 60.0, 0.2),  # every batch meets it: the cheapest
    ([(10, 1.0), (30, 0.5), (50, 0.6)], 60.0, 0.5),  # the cheapest need not be the slowest
    ([(10, 1.0), (30, 0.5)], 5.0, math.inf),  # nothing is fast enough
], ids=["convex", "mix-beats-pure", "all-meet", "interior-min", "none"])
def test_mixture_min_is_the_convex_envelope(points: list[tuple[float, float]], limit: float, expected: float) -> None:
    xs, ys = (np.array(v, dtype=float) for v in zip(*points, strict=True))
    assert _mixture_min(xs, ys, limit) == pytest.approx(expected)


@pytest.mark.parametrize("name", ["qwen3-32b", "qwen3-0.6b", "llama-3.1-70b-torch-tp2"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=st.integers(1, 512), c=st.floats(0.0, 40000.0), c_ref=st.floats(1.0, 30000.0))
def test_affine_minorant_is_below_the_decode_curve(name: str, b: int, c: float, c_ref: float) -> None:
    # The bound's per-member step share relies on L_b(c) <= itl(b, c) over every context a batch can have.
    dc = load_profile(REPO / f"profiles/h200/{name}.json").decode_curve(2 if "torch" in name else 1)
    icpt, slope = _affine_minorants(dc, c_ref, 40000.0)
    b = min(b, dc.max_batch)
    assert slope[b - 1] >= 0
    assert icpt[b - 1] + slope[b - 1] * c <= dc.itl_ms(b, c).value + 1e-9


# --------------------------------------------------------------------------- never above what a replay spends
def _static_replay(trace: RequestTrace, profile: Profile, policy: Policy, sizes: dict[str, int],
                   warmup_s: float) -> tuple[float, float]:
    """(joint attainment, GPU-hours) of a fixed ready cluster, scored and billed as the backtest does."""
    cfg = SimConfig(mode=policy.mode, link_bytes_per_s=LINK_BYTES_PER_S)
    c = Cluster(trace, profile, cfg, sizes)
    c.run_until(math.inf)
    c.fail_unfinished()
    r = c.results()
    scored = r["arrival_s"] >= warmup_s
    with np.errstate(invalid="ignore"):
        met = (~r["failed"]) & (r["ttft_s"] * 1e3 <= policy.sla.ttft_ms) & (r["itl_mean_s"] * 1e3 <= policy.sla.itl_ms)
    end_s = max(float(trace.arrival_s[-1]), float(np.nanmax(r["finish_s"])))
    gpu_s = c.gpu_seconds(end_s) - c.gpu_seconds(warmup_s)
    return float(met[scored].mean()), gpu_s / 3600.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rate=st.floats(2.0, 40.0), isl=st.sampled_from([200, 1000, 3000]), osl=st.sampled_from([1, 50, 300]),
       prefill=st.integers(1, 6), decode=st.integers(1, 3), warm=st.sampled_from([0.0, 30.0]),
       mode=st.sampled_from(["disaggregated", "aggregated"]), seed=st.integers(0, 10**6))
def test_no_fixed_cluster_that_meets_the_sla_spends_less(rate: float, isl: int, osl: int, prefill: int, decode: int,
                                                         warm: float, mode: str, seed: int) -> None:
    from planner.sim.traces.records import LengthDist

    prof = load_profile(PROFILE)
    tr = constant(rate, 90.0, isl=LengthDist("lognormal", isl, 1.0, maximum=12000),
                  osl=LengthDist("lognormal", osl, 0.8, maximum=1000), seed=seed)
    if len(tr) == 0 or tr.duration_s <= warm:
        return
    sizes = {"aggregated": prefill + decode} if mode == "aggregated" else {"prefill": prefill, "decode": decode}
    attained, spent = _static_replay(tr, prof, _policy(mode=mode), sizes, warm)
    if attained < 0.5:
        return  # the SLA schema allows percentiles from 50
    percentile = min(99.9, math.floor(attained * 1000) / 10)
    pol = _policy(percentile, mode=mode)
    lb = lower_bound(tr, prof, pol, warmup_s=warm,
                     config=SimConfig(mode=mode, link_bytes_per_s=LINK_BYTES_PER_S))
    assert lb.gpu_hours <= spent * (1 + 1e-9), (attained, percentile, lb.to_report(), spent)


@pytest.fixture(scope="module")
def qwen() -> Profile:
    return load_profile(PROFILE)


@pytest.mark.parametrize("trace,warm", [
    (step(4.0, 16.0, 300.0, 600.0, isl=1000, osl=150, seed=4), 120.0),
    (sinusoid(12.0, 8.0, 300.0, 600.0, isl=1500, osl=200, seed=5), 60.0),
    (spike(4.0, 30.0, 300.0, 40.0, 600.0, isl=2000, osl=300, seed=2), 0.0),
], ids=["step", "sinusoid", "spike"])
def test_no_baseline_that_meets_the_sla_spends_less(qwen: Profile, trace: RequestTrace, warm: float) -> None:
    pol = _policy(95.0, startup_s=60.0)
    res = run_backtest(trace, qwen, pol, baselines=["static", "reactive", "clairvoyant"], warmup_s=warm, workers=1)
    lb = lower_bound(trace, qwen, pol, warmup_s=warm)
    meeting = {k: p["gpu_hours"] for k, p in res.report["policies"].items() if p["attainment_joint"] >= 0.95}
    assert meeting, "no policy met the SLA: the case checks nothing"
    assert lb.gpu_hours > 0
    for name, spent in meeting.items():
        assert lb.gpu_hours <= spent, (name, spent, lb.to_report())
