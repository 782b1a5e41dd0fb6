"""The Dynamo baselines (dynamo-throughput, dynamo-load) checked against hand-computed numbers from Dynamo's
formulas, plus the simulator's completed-request counts they read and one short backtest with every baseline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.errors import UserError
from planner.policy_file import load_policy, parse_policy
from planner.profile import DecodePoint, DecodeSweep, PrefillPoint, PrefillSweep, Profile, load_profile
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.cluster.metrics import SimMetricSource
from planner.sim.evaluate.baselines import DynamoLoadController, DynamoThroughputController
from planner.sim.evaluate.baselines.dynamo_load import LoadRegression, step_decision
from planner.sim.evaluate.baselines.dynamo_perf import dynamo_global_budget
from planner.sim.evaluate.baselines.dynamo_predictors import ARIMA_MIN_POINTS, make_predictor
from planner.sim.evaluate.baselines.registry import REGISTRY
from planner.sim.traces.synthetic import ramp, step
from planner.types import Completions, Decision, NoData, NoDataReason, Observation, PoolObservation, Reason

REPO = Path(__file__).resolve().parent.parent
REAL_PROFILE = REPO / "profiles/h200/qwen3-32b.json"


# ------------------------------------------------------------------------------------- a hand-sized world
def _tiny_profile() -> Profile:
    """Prefill: TTFT = ISL / 10 ms (10,000 tokens/s/GPU at every ISL, ISL 500..4000).
    Decode: ITL = 10 + 0.5 x batch ms at every context (1000 and 1980 tokens), KV 99,000 tokens, batch <= 256.
    On Dynamo's 100 x 100 grid the context axis steps by 1980 / 99 = 20 tokens and, at a 1000-token context, KV
    usage bin ix holds batch ix (ix / 99 x 99,000 / 1000)."""
    real = load_profile(REAL_PROFILE)
    pre = PrefillSweep(tp=1, gpus=1, points=[PrefillPoint(isl=i, ttft_ms=i / 10, tokens_per_s_per_gpu=10_000.0)
                                             for i in (500, 4000)])
    dec = DecodeSweep(tp=1, gpus=1, kv_capacity_tokens=99_000, max_batch=256, points=[
        DecodePoint(batch=b, context_tokens=c, itl_ms=10 + 0.5 * b, tokens_per_s_per_gpu=b / (10 + 0.5 * b) * 1e3)
        for b in (1, 256) for c in (1000, 1980)])
    return real.model_copy(update={"prefill": [pre], "decode": [dec], "selection": None})


def _policy(prefill_min: int = 1, decode_min: int = 1, max_gpus: int | None = None,  # noqa: ANN202
            mode: str = "disaggregated"):
    data = yaml.safe_load((REPO / "policies/example.yaml").read_text())
    data["profile"] = str(REAL_PROFILE)
    data["mode"] = mode
    data["sla"].update(ttft_ms=500, itl_ms=40)
    data["pools"]["prefill"]["min_replicas"] = prefill_min
    data["pools"]["decode"]["min_replicas"] = decode_min
    if mode == "aggregated":
        data["pools"] = {"aggregated": {**data["pools"]["decode"], "min_replicas": 1}}
    data["budget"]["max_gpus"] = max_gpus
    return parse_policy(data)


def _obs(completed: float = 9000, isl: float | None = 900, osl: float | None = 200, duration_s: float = 2.0,
         ttft: float | None = 180, itl: float | None = 30, ready: int = 2, running: float = 100,
         started: float | None = None, window_s: float = 180.0) -> Observation:
    done = Completions(requests=completed, isl_mean=isl, osl_mean=osl, duration_s_mean=duration_s if completed else None)
    n = completed if started is None else started
    po = PoolObservation(requests=n, rate_rps=n / window_s, isl_mean=isl, osl_mean=osl, ttft_ms_mean=ttft,
                         itl_ms_mean=itl, running=running, ready_replicas=ready, completed=done)
    return Observation(at_s=0.0, window_s=window_s, pools={"prefill": po, "decode": po})


# ---------------------------------------------------------------------------------- dynamo-throughput formulas
# Nominal: 9000 completed in 180 s, ISL 900, OSL 200, duration 2 s, TTFT 180 ms, ITL 30 ms, 2 decode replicas.
#   prefill: cf_p = 180 / 90 = 2 -> min(1, 2) = 1; 9000 x 900 / 180 = 45,000 tok/s / 10,000 = 4.5 -> 5
#   decode: concurrency = 9000 / 2 x 2 / 180 = 50 -> KV 50 x 1000 / 99,000 -> bin 50 -> batch 50 -> ITL 35 ms;
#     cf_d = 30 / 35; ITL target 40 / cf_d = 46.67 -> largest batch with 10 + b/2 <= 46.67 is 73 (ITL 46.5),
#     73 / 0.0465 = 1569.9 tok/s/GPU; 9000 x 200 / 180 = 10,000 tok/s / 1569.9 = 6.37 -> 7
CASES = [
    ("nominal", {}, {}, (5, 7)),
    # cf_p = 45 / 90 = 0.5: 45,000 x 0.5 / 10,000 = 2.25 -> 3 (Dynamo's prefill correction only shrinks)
    ("prefill-correction-shrinks", {"ttft": 45}, {}, (3, 7)),
    # ITL 63: cf_d = 1.8, target 22.2 -> batch 24 (ITL 22), 24 / 0.022 = 1090.9 -> 10,000 / 1090.9 = 9.2 -> 10
    ("worse-itl-raises-decode", {"itl": 63}, {}, (5, 10)),
    # utilization 0.5: 45,000 / 5,000 = 9; 10,000 / (0.5 x 1569.9) = 12.7 -> 13
    ("utilization-headroom", {}, {"utilization": 0.5}, (9, 13)),
    # 90 completed: prefill 450 / 10,000 -> 1, below the floor of 3; decode concurrency 0.5 -> bin 0 -> batch 1
    # (ITL 10.5, cf_d = 25 / 10.5) -> target 16.8 -> batch 13 (ITL 16.5) -> 787.9 tok/s; 100 / 787.9 -> 1
    ("floors", {"completed": 90, "itl": 25}, {"prefill_min": 3}, (3, 1)),
    # budget 8 GPUs (1 per replica) for (5, 7): scale 8 / 12; prefill floor(5 x 0.667) = 3; decode gets 8 - 3 = 5
    ("budget", {}, {"max_gpus": 8}, (3, 5)),
    # a budget below the floors: Dynamo enforces zero replicas
    ("budget-below-floors", {}, {"max_gpus": 3, "prefill_min": 2, "decode_min": 2}, (0, 0)),
]


@pytest.mark.parametrize("obs_kw,ctl_kw,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_throughput_decision_matches_the_hand_computed_one(obs_kw: dict, ctl_kw: dict,
                                                           expected: tuple[int, int]) -> None:
    policy_keys = ("prefill_min", "decode_min", "max_gpus")
    pol = _policy(**{k: v for k, v in ctl_kw.items() if k in policy_keys})
    ctl = DynamoThroughputController(pol, _tiny_profile(), {"prefill": 2, "decode": 2},
                                     **{k: v for k, v in ctl_kw.items() if k not in policy_keys})
    d = ctl.tick(_obs(**obs_kw), 180.0)
    assert (d.pools["prefill"].replicas, d.pools["decode"].replicas) == expected
    assert Reason.NO_DATA_HOLD not in d.reasons
    assert (Reason.FLOOR in d.pools["prefill"].reasons) == ("prefill_min" in ctl_kw and "max_gpus" not in ctl_kw)
    assert (Reason.BUDGET in d.pools["decode"].reasons) == ("max_gpus" in ctl_kw)
    if "utilization" in ctl_kw:
        assert d.detail["utilization"] == 0.5 and ctl.name == "dynamo-throughput[utilization=0.5]"


def test_the_nominal_case_in_detail() -> None:
    ctl = DynamoThroughputController(_policy(), _tiny_profile(), {"prefill": 2, "decode": 2})
    d = ctl.tick(_obs(), 180.0)
    assert d.detail["cf_prefill"] == pytest.approx(2.0)
    assert d.detail["decode_concurrency_per_replica"] == pytest.approx(50.0)
    assert d.detail["cf_decode"] == pytest.approx(30 / 35)
    assert d.detail["corrected_itl_ms"] == pytest.approx(40 * 35 / 30)
    assert d.pools["prefill"].desired_unclamped == pytest.approx(4.5)
    assert d.pools["decode"].desired_unclamped == pytest.approx(10_000 / (73 / 0.0465))
    assert ctl.name == "dynamo-throughput" and d.detail["utilization"] == 1.0


def test_decode_concurrency_is_littles_law_not_the_gauge() -> None:
    """A spike in the instantaneous running gauge must not move the decode correction factor or the decision
    (the old model's gauge swung the factor between 0.71 and 4.09)."""
    decisions: list[Decision] = []
    for running in (10.0, 5000.0):
        ctl = DynamoThroughputController(_policy(), _tiny_profile(), {"prefill": 2, "decode": 2})
        decisions.append(ctl.tick(_obs(running=running), 180.0))
    calm, spike = decisions
    assert spike.detail["cf_decode"] == calm.detail["cf_decode"] == pytest.approx(30 / 35)
    assert spike.targets() == calm.targets()
    # ...while the window's completions and durations do move it: twice the duration, twice the concurrency
    ctl = DynamoThroughputController(_policy(), _tiny_profile(), {"prefill": 2, "decode": 2})
    longer = ctl.tick(_obs(duration_s=4.0), 180.0)
    assert longer.detail["decode_concurrency_per_replica"] == pytest.approx(100.0)


def test_sizes_from_completed_not_started_requests() -> None:
    ctl = DynamoThroughputController(_policy(), _tiny_profile(), {"prefill": 2, "decode": 2})
    d = ctl.tick(_obs(completed=9000, started=18_000), 180.0)
    assert d.detail["predicted_requests"] == 9000 and d.detail["observed_requests_completed"] == 9000
    assert d.pools["prefill"].replicas == 5  # 18,000 started would have given 9


@pytest.mark.parametrize("obs", [
    NoData(NoDataReason.EMPTY, "x", 180.0),
    _obs(ttft=None),
    _obs(itl=None),
    _obs(completed=0, isl=None, osl=None),
    Observation(at_s=0.0, window_s=180.0, pools={"prefill": PoolObservation(requests=5, rate_rps=1.0),
                                                  "decode": PoolObservation(requests=5, rate_rps=1.0)}),
], ids=["nodata", "no-ttft", "no-itl", "nothing-finished", "no-completions-field"])
def test_throughput_holds_when_dynamo_skips(obs: Observation | NoData) -> None:
    ctl = DynamoThroughputController(_policy(), _tiny_profile(), {"prefill": 4, "decode": 6})
    d = ctl.tick(obs, 180.0)
    assert d.targets() == {"prefill": 4, "decode": 6}
    assert Reason.NO_DATA_HOLD in d.reasons and d.detail["hold"]


def test_arima_forecasts_from_five_points_and_says_when_it_cannot() -> None:
    ctl = DynamoThroughputController(_policy(), _tiny_profile(), {"prefill": 2, "decode": 2}, predictor="arima")
    counts = [9000, 9400, 9900, 10300, 10800]
    decisions = [ctl.tick(_obs(completed=c), 180.0 * (i + 1)) for i, c in enumerate(counts)]
    for d, n in zip(decisions[:-1], range(1, ARIMA_MIN_POINTS), strict=True):
        assert Reason.FORECAST_FALLBACK in d.reasons
        assert f"{n}/{ARIMA_MIN_POINTS} points" in str(d.detail["predictor_note"])
        assert d.detail["predicted_requests"] == counts[n - 1]  # Dynamo's last value while warming up
    fifth = decisions[-1]
    assert Reason.FORECAST_FALLBACK not in fifth.reasons and "predictor_note" not in fifth.detail
    assert fifth.detail["predicted_requests"] != counts[-1]  # a model's forecast, not the last value
    assert fifth.detail["predicted_isl"] == 900  # a constant series forecasts itself


@pytest.mark.parametrize("name,points,expect", [
    ("constant", [0, 0, 4, 6], 6.0),  # leading zeros skipped, last value
    ("kalman", [0, 10, 10, 10, 10], None),  # a level near 10 (checked below)
], ids=["constant", "kalman"])
def test_other_predictors(name: str, points: list[float], expect: float | None) -> None:
    p = make_predictor(name)
    assert p.predict_next().note  # nothing to predict from yet: said, not silent
    for v in points:
        p.add_data_point(v)
    out = p.predict_next()
    assert out.note == ""
    if expect is not None:
        assert out.value == expect
    else:
        assert 9.0 < out.value < 11.0


def test_unknown_predictor_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="allowed: constant, arima, kalman"):
        make_predictor("prophet")
    with pytest.raises(UserError, match="utilization"):
        DynamoThroughputController(_policy(), _tiny_profile(), {"prefill": 1, "decode": 1}, utilization=1.5)


@pytest.mark.parametrize("p,d,gp,gd,floors,budget,expected", [
    (6, 10, 1, 2, (1, 1), 16, (3, 6, True)),  # scale 16/26: prefill floor(3.69) = 3, decode (16 - 3) // 2 = 6
    (6, 10, 1, 2, (1, 1), 26, (6, 10, False)),  # exactly at budget
    (6, 10, 1, 2, (1, 1), None, (6, 10, False)),  # no budget (Dynamo's -1)
    (20, 1, 2, 2, (1, 1), 10, (4, 1, True)),  # prefill capped to leave decode's floor: floor((10 - 2) / 2) = 4
    (6, 10, 1, 2, (2, 2), 5, (0, 0, True)),  # below the floors' 6 GPUs: zero, as Dynamo
], ids=["scale", "at-budget", "none", "prefill-cap", "below-floors"])
def test_global_budget(p: int, d: int, gp: int, gd: int, floors: tuple[int, int], budget: int | None,
                       expected: tuple[int, int, bool]) -> None:
    got = dynamo_global_budget(p, d, {"prefill": gp, "decode": gd}, {"prefill": floors[0], "decode": floors[1]},
                               budget)
    assert got == expected


def test_aggregated_sums_both_needs() -> None:
    pol = _policy(mode="aggregated")
    ctl = DynamoThroughputController(pol, _tiny_profile(), {"aggregated": 2})
    po = _obs().pools["prefill"]
    d = ctl.tick(Observation(at_s=0.0, window_s=180.0, pools={"aggregated": po}), 180.0)
    # concurrency 9000 / 2 x 2 / 180 = 50 as in the nominal case: 4.5 + 6.37 -> 11
    assert d.targets() == {"aggregated": 11}


# ------------------------------------------------------------------------------------------- dynamo-load
def test_regression_solves_for_the_sla_and_falls_back_on_a_flat_slope() -> None:
    r = LoadRegression(window=50, min_observations=5)
    for x in range(2000, 4000, 200):
        r.add(x, 0.1 * x + 100)  # Dynamo's own test data: TTFT = 0.1 x + 100
    assert r.fit() == pytest.approx((0.1, 100.0))
    assert r.x_at(500.0) == pytest.approx(4000.0)
    assert r.x_at(50.0) == 0.0  # an SLA under the intercept: clamped at zero load
    window = LoadRegression(window=3, min_observations=3)
    for x, y in ((1, 1000), (2, 2000), (10, 20), (20, 30), (30, 40)):  # only the last three are kept
        window.add(x, y)
    assert window.fit() == pytest.approx((1.0, 10.0))
    cold = LoadRegression(window=50, min_observations=5)
    cold.add(1.0, 1.0)
    assert cold.x_at(10.0) is None


def test_regression_heuristic_when_slope_is_not_positive() -> None:
    r = LoadRegression(window=50, min_observations=3)
    for x, y in ((100, 50), (200, 40), (300, 30)):  # latency falling with load: slope < 0
        r.add(x, y)
    assert r.x_at(45.0) == 200  # the smallest x whose latency was under the SLA
    assert r.x_at(10.0) == 100  # none under it: the smallest x


@pytest.mark.parametrize("active,target,workers,expected", [
    (1100, 1000, 2, 3),  # above the target: +1
    (1000, 1000, 2, None),  # at the target: no action
    (399, 1000, 2, 1),  # below 1000 x 1/2 x 0.8 = 400: -1
    (401, 1000, 2, None),
    (10, 1000, 1, None),  # never below one worker
    (533, 1000, 3, 2),  # 1000 x 2/3 x 0.8 = 533.3
], ids=["up", "at-target", "down", "band", "one-worker", "three-workers"])
def test_load_thresholds(active: float, target: float, workers: int, expected: int | None) -> None:
    assert step_decision(active, target, workers, 80.0) == expected


def _load_obs(prefill_busy: float, kv_usage: float, ttft: float, itl: float, ready: tuple[int, int] = (2, 2),
              isl: float = 1000.0) -> Observation:
    pre = PoolObservation(requests=10, rate_rps=2.0, isl_mean=isl, ttft_ms_mean=ttft, itl_ms_mean=itl,
                          queue=prefill_busy, ready_replicas=ready[0])
    dec = PoolObservation(requests=10, rate_rps=2.0, isl_mean=isl, ttft_ms_mean=ttft, itl_ms_mean=itl,
                          kv_usage=kv_usage, ready_replicas=ready[1])
    return Observation(at_s=0.0, window_s=5.0, pools={"prefill": pre, "decode": dec})


def _trained_load_controller(**kw: object) -> DynamoLoadController:
    """TTFT = 0.1 x (active + ISL) + 100 and ITL = 0.001 x KV tokens + 10 over ten 5-second ticks: at TTFT 500 ms
    and ITL 40 ms, the prefill target is 4000 - 1000 = 3000 active tokens per worker and the decode target
    30,000 KV tokens per worker."""
    ctl = DynamoLoadController(_policy(), _tiny_profile(), {"prefill": 2, "decode": 2}, **kw)  # type: ignore[arg-type]
    for i in range(10):
        busy = 2.0 + i * 0.2  # requests per pool; per worker active = busy / 2 x 1000
        active = busy / 2 * 1000
        kv_tokens = 10_000.0 + 1000 * i
        d = ctl.tick(_load_obs(busy, kv_tokens / 99_000, 0.1 * (active + 1000) + 100, 0.001 * kv_tokens + 10),
                     5.0 * (i + 1))
        assert d.targets() == {"prefill": 2, "decode": 2}  # inside both bands while learning
    return ctl


@pytest.mark.parametrize("busy,kv_tokens,expected", [
    (6.2, 20_000, {"prefill": 3, "decode": 2}),  # prefill 3100 per worker > 3000: prefill up, decode holds
    (2.0, 31_000, {"prefill": 2, "decode": 3}),  # decode above 30,000: decode up
    (2.0, 11_000, {"prefill": 1, "decode": 1}),  # both below their bands (1200, 12,000): both down
    (2.0, 20_000, {"prefill": 2, "decode": 2}),  # only prefill wants down: no action (down needs both)
], ids=["prefill-up", "decode-up", "both-down", "one-down-holds"])
def test_load_mode_decisions(busy: float, kv_tokens: float, expected: dict[str, int]) -> None:
    ctl = _trained_load_controller()
    d = ctl.tick(_load_obs(busy, kv_tokens / 99_000, 0.1 * (busy / 2 * 1000 + 1000) + 100,
                           0.001 * kv_tokens + 10), 100.0)
    assert d.targets() == expected
    assert d.detail["prefill_target_active_tokens"] == pytest.approx(3000.0, rel=1e-6)
    assert d.detail["decode_target_kv_tokens"] == pytest.approx(30_000.0, rel=1e-6)


def test_load_mode_waits_for_a_scale_to_finish_and_holds_on_no_data() -> None:
    ctl = _trained_load_controller()
    up = ctl.tick(_load_obs(6.2, 20_000 / 99_000, 510, 30), 100.0)
    assert up.targets()["prefill"] == 3
    # the third prefill replica is still starting (2 ready): Dynamo's blocking apply waits
    waiting = ctl.tick(_load_obs(9.0, 20_000 / 99_000, 900, 30), 105.0)
    assert waiting.targets() == {"prefill": 3, "decode": 2} and Reason.SCALE_UP_STABILIZED in waiting.reasons
    held = ctl.tick(NoData(NoDataReason.STALE, "x", 110.0), 110.0)
    assert held.targets() == {"prefill": 3, "decode": 2} and Reason.NO_DATA_HOLD in held.reasons


def test_load_mode_budget() -> None:
    ctl = DynamoLoadController(_policy(max_gpus=4), _tiny_profile(), {"prefill": 2, "decode": 2})
    trained = _trained_load_controller()
    ctl.ttft, ctl.itl, ctl.last_isl = trained.ttft, trained.itl, trained.last_isl
    d = ctl.tick(_load_obs(6.2, 20_000 / 99_000, 510, 30), 100.0)
    # wants (3, 2) = 5 GPUs over a budget of 4: prefill floor(3 x 4/5) = 2, decode 4 - 2 = 2
    assert d.targets() == {"prefill": 2, "decode": 2} and Reason.BUDGET in d.pools["prefill"].reasons


# ------------------------------------------------------------------------------- what the simulator reports
def test_sim_counts_completed_requests_in_a_ramp() -> None:
    prof = load_profile(REAL_PROFILE)
    tr = ramp(2.0, 30.0, 600.0, isl=1000, osl=200, seed=3)
    cluster = Cluster(tr, prof, SimConfig(startup_s=60.0), {"prefill": 2, "decode": 2})
    src = SimMetricSource(cluster)
    window, now = 120.0, 480.0
    cluster.run_until(now)
    obs = src.read(window, now)
    assert isinstance(obs, Observation)
    fin = np.asarray(cluster.log.finish_s)
    arr = np.asarray(cluster.log.arrival_s)
    with np.errstate(invalid="ignore"):
        done = (fin > now - window) & (fin <= now)
    started = (arr > now - window) & (arr <= now)
    front = obs.pools["prefill"]
    assert front.completed is not None and front.completed.requests == int(done.sum()) > 0
    assert front.requests == int(started.sum())
    assert front.completed.requests < front.requests  # a ramp: fewer finish than start in the same window
    assert front.completed.duration_s_mean == pytest.approx(float(np.mean(fin[done] - arr[done])))
    assert front.completed.osl_mean == pytest.approx(float(np.mean(np.asarray(cluster.log.osl)[done])))
    assert obs.pools["decode"].completed == front.completed  # a frontend figure, the same on every pool


# ------------------------------------------------------------------------------------------ end to end
def test_short_step_backtest_runs_both_with_the_other_baselines(tmp_path: Path) -> None:
    from planner.sim.evaluate.backtest import run_backtest

    data = yaml.safe_load((REPO / "policies/example.yaml").read_text())
    data["profile"] = str(REAL_PROFILE)
    data["startup_s"] = 60
    p = tmp_path / "policy.yaml"
    p.write_text(yaml.safe_dump(data))
    tr = step(4.0, 16.0, 400.0, 900.0, isl=1000, osl=150, seed=2)
    res = run_backtest(tr, load_profile(REAL_PROFILE), load_policy(p),
                       baselines=["static", "reactive", "dynamo-throughput", "dynamo-load", "oracle"], workers=1,
                       offline_simulations=4)  # the search is not under test here; static needs its schedule
    pols = res.report["policies"]
    assert {"planner", "static", "reactive", "dynamo-throughput", "dynamo-load"} == set(pols)
    assert "offline" in res.report["references"]  # "oracle" asks for the offline schedule, in every report anyway
    for name in ("dynamo-throughput", "dynamo-load"):
        assert pols[name]["requests"] == len(tr) and pols[name]["gpu_hours"] > 0
        decisions = res.replays[name].decisions
        assert decisions and all(d.detail.get("dynamo_source") for d in decisions)
    assert res.replays["dynamo-throughput"].decisions[0].at_s == 180.0
    assert res.replays["dynamo-load"].decisions[0].at_s == 5.0
    # the step up is answered: more replicas after it than before it
    tgt = res.replays["dynamo-load"].targets
    assert max(sum(t.values()) for s, t in tgt if s > 400) > max(sum(t.values()) for s, t in tgt if s <= 300)


def test_dynamo_sla_is_an_honestly_labelled_alias() -> None:
    from planner.sim.evaluate.baselines.registry import BaselineContext

    pol = _policy()
    prof = _tiny_profile()
    ctx = BaselineContext(pol, prof, step(1.0, 2.0, 10.0, 20.0), {"prefill": 1, "decode": 1}, None, 0.0, 60.0,
                          "constant")
    alias, real = REGISTRY["dynamo-sla"].build(ctx), REGISTRY["dynamo-throughput"].build(ctx)
    assert type(alias) is type(real) is DynamoThroughputController
    assert alias.name == real.name == "dynamo-throughput"
    assert "alias of dynamo-throughput" in REGISTRY["dynamo-sla"].help


def test_cli_refuses_an_unmodelled_predictor(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from planner.cli import run

    data = yaml.safe_load((REPO / "policies/example.yaml").read_text())
    data["profile"] = str(REAL_PROFILE)
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "t.csv").write_text("t,isl,osl\n" + "".join(f"{i * 0.5},500,50\n" for i in range(40)))
    rc = run(["backtest", "--trace", str(tmp_path / "t.csv"), "--format", "csv", "--columns",
              "arrival=t,isl=isl,osl=osl", "--profile", str(REAL_PROFILE), "--policy", str(tmp_path / "policy.yaml"),
              "--out", str(tmp_path / "o"), "--baselines", "dynamo-throughput", "--dynamo-predictor", "prophet"])
    assert rc == 2
    assert "'prophet'; allowed: constant, arima, kalman" in capsys.readouterr().err
