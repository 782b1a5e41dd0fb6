"""The simulator checked against facts: profile timings, KV link physics, overload, billing, Little's law;
and its parts (link, fleet, token-gap records) one at a time."""

from __future__ import annotations

import heapq
import math
from pathlib import Path

import numpy as np
import pytest

from planner.perf.engine import EngineModel
from planner.profile import Profile, load_profile
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.cluster.events import EventQueue
from planner.sim.cluster.fleet import Fleet
from planner.sim.cluster.kv_link import KvTransfers
from planner.sim.cluster.metrics import SimActuator, SimMetricSource
from planner.sim.cluster.replicas import DRAINING, GONE, READY, DecodeReplica, PrefillReplica, Replica
from planner.sim.cluster.request_log import RequestLog
from planner.sim.traces.records import RequestTrace
from planner.sim.traces.synthetic import constant
from planner.types import NoData, Observation

REPO = Path(__file__).resolve().parent.parent
FAST_LINK = 1e18  # bytes/s: transfer time ~0


@pytest.fixture(scope="module")
def small() -> Profile:
    return load_profile(REPO / "profiles/h200/qwen3-0.6b.json")


@pytest.fixture(scope="module")
def big() -> Profile:
    return load_profile(REPO / "profiles/h200/qwen3-32b.json")


def _trace(arrivals: list[float], isl: list[int], osl: list[int]) -> RequestTrace:
    return RequestTrace(np.asarray(arrivals, dtype=float), np.asarray(isl, dtype=np.int64),
                        np.asarray(osl, dtype=np.int64), "test")


def _run(trace: RequestTrace, profile: Profile, sizes: dict[str, int], **cfg: object) -> Cluster:
    c = Cluster(trace, profile, SimConfig(**cfg), sizes)  # type: ignore[arg-type]
    c.run_until(math.inf)
    return c


def _engine(p: Profile) -> EngineModel:
    return EngineModel(p.prefill_curve(p.selected_tp("prefill")), p.decode_curve(p.selected_tp("decode")))


@pytest.mark.parametrize("isl,osl", [(500, 50), (2000, 200), (12000, 20)], ids=["short", "medium", "chunked"])
def test_one_request_on_idle_replicas_reproduces_the_profile(big: Profile, isl: int, osl: int) -> None:
    c = _run(_trace([0.0], [isl], [osl]), big, {"prefill": 1, "decode": 1}, link_bytes_per_s=FAST_LINK)
    r = c.results()
    eng = _engine(big)
    chunks = [(a, min(isl, a + eng.chunk_tokens)) for a in range(0, isl, eng.chunk_tokens)]
    prefill = sum(eng.prefill_batch_s([c]) for c in chunks)
    expect_ttft = prefill + eng.decode_step_s(1, isl)
    assert r["ttft_s"][0] == pytest.approx(expect_ttft, rel=0.01)
    expect_itl = eng.decode_step_s(1, isl + osl / 2)
    assert r["itl_mean_s"][0] == pytest.approx(expect_itl, rel=0.01)
    assert r["e2e_s"][0] == pytest.approx(prefill + sum(eng.decode_step_s(1, isl + k) for k in range(osl)),
                                          rel=0.01)


def test_kv_transfer_adds_bytes_over_bandwidth(small: Profile) -> None:
    # Public measurement: 351.75 MB of KV (Qwen3-0.6B, ~3,067 tokens) over ~104 MB/s added ~3.4 s of TTFT.
    isl = round(351.75e6 / small.model.kv_bytes_per_token)
    tr = _trace([0.0], [isl], [10])
    fast = _run(tr, small, {"prefill": 1, "decode": 1}, link_bytes_per_s=FAST_LINK).results()["ttft_s"][0]
    slow = _run(tr, small, {"prefill": 1, "decode": 1}, link_bytes_per_s=104e6).results()["ttft_s"][0]
    assert slow - fast == pytest.approx(isl * small.model.kv_bytes_per_token / 104e6, rel=0.01)
    assert 3.2 < slow - fast < 3.6


def test_four_concurrent_transfers_each_take_four_times_as_long(small: Profile) -> None:
    # Four prompts finish one prefill iteration together and share one link: ~26 MB/s each at 104 MB/s.
    tr = _trace([0.0] * 4, [2000] * 4, [5] * 4)
    one = _trace([0.0], [2000], [5])
    t_fast = _run(tr, small, {"prefill": 1, "decode": 1}, link_bytes_per_s=FAST_LINK).results()["ttft_s"]
    t_slow = _run(tr, small, {"prefill": 1, "decode": 1}, link_bytes_per_s=104e6).results()["ttft_s"]
    single = (_run(one, small, {"prefill": 1, "decode": 1}, link_bytes_per_s=104e6).results()["ttft_s"][0]
              - _run(one, small, {"prefill": 1, "decode": 1}, link_bytes_per_s=FAST_LINK).results()["ttft_s"][0])
    ratios = (t_slow - t_fast) / single
    assert np.all((ratios > 3.9) & (ratios < 4.1)), ratios


def test_overloaded_pool_queue_grows_without_bound(big: Profile) -> None:
    tr = constant(60.0, 400.0, isl=2000, osl=50, seed=1)  # ~120k prompt tokens/s on one prefill replica
    c = Cluster(tr, big, SimConfig(), {"prefill": 1, "decode": 4})
    queues = []
    for t in (100.0, 200.0, 300.0, 400.0):
        c.run_until(t)
        queues.append(c.gauges("prefill")["queue"])
    assert queues[0] > 1000
    growth = np.diff(queues)
    assert np.all(growth > 0.8 * growth[0]), queues  # linear growth, no plateau


def test_gpu_hours_count_starting_and_draining_replicas(big: Profile) -> None:
    # one long request keeps decode replica busy; scale-down makes it drain until the request ends
    tr = _trace([0.0], [1000], [20000])
    cfg = SimConfig(startup_s=100.0, link_bytes_per_s=FAST_LINK)
    c = Cluster(tr, big, cfg, {"prefill": 1, "decode": 1})
    act = SimActuator(c)
    gp, gd = c.gpus["prefill"], c.gpus["decode"]
    c.run_until(50.0)
    act.apply({"prefill": 3, "decode": 2})  # two replicas start at 50 (ready at 150)
    c.run_until(60.0)
    act.apply({"prefill": 1, "decode": 1})  # the starting ones are cancelled at 60
    g = c.gauges("decode")
    assert g["starting"] == 0 and g["ready"] == 1
    c.run_until(70.0)
    act.apply({"decode": 0})  # the busy decode replica drains
    assert c.gauges("decode")["draining"] == 1
    c.run_until(math.inf)
    finish = c.results()["finish_s"][0]
    assert finish > 70.0
    until = finish + 10.0
    prefill = (until * gp  # original prefill replica, alive throughout
               + 2 * 10.0 * gp)  # two prefill replicas starting 50..60
    decode = (10.0 * gd  # one decode replica starting 50..60
              + finish * gd)  # the draining decode replica until its request ends
    assert c.gpu_seconds(until) == pytest.approx(prefill + decode, rel=1e-9)
    assert c.gpu_seconds(until, "prefill") == pytest.approx(prefill, rel=1e-9)
    assert c.gpu_seconds(until, "decode") == pytest.approx(decode, rel=1e-9)
    assert c.gauges("decode")["draining"] == 0


def test_kill_mode_fails_in_flight_work(big: Profile) -> None:
    tr = _trace([0.0, 0.0], [1000, 1000], [20000, 20000])
    c = Cluster(tr, big, SimConfig(kill=True, link_bytes_per_s=FAST_LINK), {"prefill": 1, "decode": 1})
    c.run_until(10.0)
    c.apply({"decode": 0})
    c.run_until(math.inf)
    c.fail_unfinished()
    assert c.failed_count == 2 and np.all(c.results()["failed"])


def test_littles_law_on_a_long_run(big: Profile) -> None:
    tr = constant(30.0, 1500.0, isl=800, osl=150, seed=4)
    c = Cluster(tr, big, SimConfig(), {"prefill": 4, "decode": 2})
    in_system = []
    for t in np.arange(200.0, 1400.0, 2.0):
        c.run_until(float(t))
        in_system.append(sum(c.gauges(p)["queue"] + c.gauges(p)["running"] for p in ("prefill", "decode")))
    c.run_until(math.inf)
    r = c.results()
    lam = len(tr) / tr.duration_s
    w = float(np.mean(r["e2e_s"]))
    # transfers in flight are not in the gauges; they last ~ms, far below the tolerance
    assert np.mean(in_system) == pytest.approx(lam * w, rel=0.05)


def test_same_seed_same_result(big: Profile) -> None:
    def once() -> dict[str, np.ndarray]:
        tr = constant(20.0, 120.0, isl=900, osl=100, seed=9)
        return _run(tr, big, {"prefill": 2, "decode": 1}).results()

    a, b = once(), once()
    for k in a:
        assert np.array_equal(a[k], b[k], equal_nan=True), k


def test_aggregated_mode_serves_everything(big: Profile) -> None:
    tr = constant(10.0, 120.0, isl=800, osl=100, seed=2)
    c = _run(tr, big, {"aggregated": 2}, mode="aggregated")
    r = c.results()
    assert c.completed_count == len(tr) and not r["failed"].any()
    eng = _engine(big)
    # prefill piggy-backs on decode steps: TTFT at least the prompt's own compute
    assert np.all(r["ttft_s"] >= eng.prefill_batch_s([(0, 800)]) * 0.99)


def test_metric_source_reports_what_prometheus_would(big: Profile) -> None:
    tr = constant(20.0, 300.0, isl=1000, osl=100, seed=3)
    c = Cluster(tr, big, SimConfig(), {"prefill": 3, "decode": 1})
    src = SimMetricSource(c)
    assert isinstance(src.read(60.0, 30.0), NoData)
    c.run_until(200.0)
    obs = src.read(60.0, 200.0)
    assert isinstance(obs, Observation)
    pre = obs.pools["prefill"]
    started = int(np.sum((tr.arrival_s > 140.0) & (tr.arrival_s <= 200.0)))
    assert pre.requests == started and pre.rate_rps == pytest.approx(started / 60.0)
    assert pre.isl_mean == pytest.approx(1000) and pre.osl_mean == pytest.approx(100)
    dec = obs.pools["decode"]
    assert dec.ready_replicas == 1 and dec.kv_usage is not None and 0 < dec.kv_usage < 1
    assert dec.itl_ms_p50 is not None and dec.itl_ms_p50 <= dec.itl_ms_p95  # type: ignore[operator]
    assert pre.ttft_ms_p50 is not None and pre.ttft_ms_p95 >= pre.ttft_ms_p50  # type: ignore[operator]
    assert dec.running > 0
    # At the default SLA percentile (95) the value at the SLA is the p95 itself.
    assert (pre.ttft_ms_at_sla, dec.itl_ms_at_sla) == (pre.ttft_ms_p95, dec.itl_ms_p95)


def test_metric_source_reads_latency_at_the_policys_percentile(big: Profile) -> None:
    tr = constant(20.0, 300.0, isl=1000, osl=100, seed=3)
    runs = {}
    for pct in (95.0, 99.0):
        c = Cluster(tr, big, SimConfig(sla_percentile=pct), {"prefill": 2, "decode": 1})
        c.run_until(200.0)
        obs = SimMetricSource(c).read(60.0, 200.0)
        assert isinstance(obs, Observation)
        runs[pct] = obs.pools["prefill"]
    assert runs[95.0].ttft_ms_p95 == runs[99.0].ttft_ms_p95  # the fixed p95 does not move
    assert runs[99.0].ttft_ms_at_sla > runs[95.0].ttft_ms_at_sla  # type: ignore[operator]


def test_batched_prefill_pays_the_fixed_cost_once(big: Profile) -> None:
    eng = _engine(big)
    one = eng.prefill_batch_s([(0, 1000)])
    assert one == pytest.approx(big.prefill_curve(big.selected_tp("prefill")).ttft_ms(1000).value / 1e3)
    o = eng.prefill_overhead_s()
    assert 0 < o < one
    assert eng.prefill_batch_s([(0, 1000)] * 4) == pytest.approx(4 * one - 3 * o)
    # a continuation chunk costs the marginal time of its tokens on its own prompt
    cont = eng.prefill_batch_s([(8192, 12000)])
    assert cont == pytest.approx(o + eng.prefill_batch_s([(0, 12000)]) - eng.prefill_batch_s([(0, 8192)]))


@pytest.mark.parametrize("mode,sizes", [("aggregated", {"aggregated": 0}), ("disaggregated", {"prefill": 1, "decode": 0})],
                         ids=["aggregated", "decode"])
def test_requests_waiting_for_a_starting_replica_are_served_once_it_is_ready(big: Profile, mode, sizes) -> None:
    # Requests that arrive while the sequence pool has no ready replica wait in its pending queue and must be
    # routed to that same pool when a replica comes up (not lost, not sent to another pool).
    tr = constant(2.0, 20.0, isl=500, osl=20, seed=4)
    c = Cluster(tr, big, SimConfig(mode=mode, startup_s=30.0), sizes)
    c.apply({pool: 1 for pool in sizes})
    c.run_until(math.inf)
    r = c.results()
    assert c.completed_count == len(tr) and not r["failed"].any()
    assert np.all(r["ttft_s"] > 0)


def test_a_requests_largest_token_gap_is_the_slowest_stretch_it_lived_through(big: Profile) -> None:
    # A decodes alone, then 40 short requests join (batch 41: the slowest steps of the run) and leave before A.
    tr = _trace([0.0] + [1.0] * 40, [1000] + [100] * 40, [400] + [30] * 40)
    c = _run(tr, big, {"prefill": 1, "decode": 1}, link_bytes_per_s=FAST_LINK)
    r = c.results()
    slowest = max(step_s for _, step_s, _ in c.log.token_gaps)
    assert np.all(r["itl_max_s"] == slowest)
    assert r["itl_mean_s"][0] < 0.95 * slowest  # A spent most of its life in faster steps
    assert r["itl_mean_s"][-1] == pytest.approx(slowest, rel=0.01)  # a short one lived only through the slow ones


def _run_events(events: EventQueue, until_s: float = math.inf) -> None:
    while events.heap and events.heap[0][0] <= until_s:
        at_s, _, handler, replica, version = heapq.heappop(events.heap)
        handler(replica, version, at_s)


def test_link_shares_its_bandwidth_equally_between_concurrent_transfers() -> None:
    # 1,000 B/s; A (1,000 B) starts at 0 and has 500 B at 0.5 when B (3,000 B) starts. Sharing, each gets 500 B/s:
    # A is done at 0.5 + 500 / 500 = 1.5; B then has 500 B and the whole link: done at 1.5 + 2,500 / 1,000 = 4.0.
    events = EventQueue()
    log = RequestLog(_trace([0.0, 0.5], [1000, 3000], [1, 1]))
    arrived: list[tuple[int, float]] = []
    link = KvTransfers(events, log, 1.0, 1000.0, lambda req, now_s: arrived.append((req, now_s)),
                       lambda replica, now_s: None)
    prefill = PrefillReplica(1, "prefill", 1, 0.0, 0.0)
    link.start(prefill, [0], 0.0)
    _run_events(events, until_s=0.5)
    link.start(prefill, [1], 0.5)
    _run_events(events)
    assert arrived == [(0, pytest.approx(1.5)), (1, pytest.approx(4.0))]
    assert log.decode_arrival_s == [pytest.approx(1.5), pytest.approx(4.0)] and log.decode_arrival_request == [0, 1]


def _fleet(kill: bool = False) -> tuple[Fleet, list[tuple[int, int]], RequestLog]:
    log = RequestLog(_trace([0.0] * 4, [100] * 4, [10] * 4))
    fleet = Fleet(("prefill", "decode"), {"prefill": 1, "decode": 2}, 60.0, kill, 1000, EventQueue(), log)
    routed: list[tuple[int, int]] = []  # (replica id, request) handed to a stage

    def take(replica: Replica, req: int, now_s: float) -> None:
        routed.append((replica.replica_id, req))

    fleet.attach(take, take)
    return fleet, routed, log


def _ready_decode(fleet: Fleet, outstanding: list[int]) -> list[DecodeReplica]:
    replicas = []
    for n in outstanding:
        replica = fleet.add("decode", 0.0, 0.0)
        fleet.make_ready(replica, 0.0)
        assert isinstance(replica, DecodeReplica)
        replica.outstanding_sequences = replica.batch = n
        replicas.append(replica)
    return replicas


def test_fleet_routes_a_sequence_to_the_replica_with_the_fewest_and_holds_it_while_none_is_ready() -> None:
    fleet, routed, _ = _fleet()
    _, light, _ = _ready_decode(fleet, [5, 2, 7])
    fleet.route_sequence(0, 1.0)
    assert routed == [(light.replica_id, 0)]
    fleet, routed, _ = _fleet()
    starting = fleet.add("decode", 60.0, 0.0)
    fleet.route_sequence(3, 1.0)
    assert routed == [] and fleet.gauges("decode")["queue"] == 1
    fleet.make_ready(starting, 60.0)
    assert routed == [(starting.replica_id, 3)] and fleet.gauges("decode")["queue"] == 0


def test_scale_down_takes_starting_replicas_first_then_the_least_loaded_ready_ones() -> None:
    fleet, _, _ = _fleet()
    loaded, idle, light = _ready_decode(fleet, [4, 0, 2])
    starting = [fleet.add("decode", 60.0, 10.0) for _ in range(2)]
    assert fleet.apply({"decode": 2}, 20.0) == {"prefill": 0, "decode": 5}
    assert [r.state for r in starting] == [GONE, GONE] and idle.state == GONE  # empty: gone without draining
    assert fleet.apply({"decode": 1}, 30.0) == {"prefill": 0, "decode": 2}
    assert light.state == DRAINING and loaded.state == READY  # it holds sequences: it drains
    light.batch = light.outstanding_sequences = 0
    fleet.retire_if_drained(light, 40.0)
    assert light.state == GONE and light.gone_s == 40.0
    g = fleet.gauges("decode")
    assert (g["starting"], g["ready"], g["draining"], g["gpus"]) == (0, 1, 0, 2)
    assert fleet.gpu_seconds(100.0) == pytest.approx(2 * (100.0 + 20.0 + 40.0 + 2 * 10.0))


def test_kill_mode_fails_what_the_removed_replica_held() -> None:
    fleet, _, log = _fleet(kill=True)
    (replica,) = _ready_decode(fleet, [0])
    replica.waiting.extend([1, 2])
    fleet.apply({"decode": 0}, 5.0)
    assert replica.state == GONE and log.failed == [False, True, True, False] and log.failed_count == 2


def test_output_length_is_read_from_finished_requests_as_engines_export_it(big: Profile) -> None:
    # Half the requests answer in 20 tokens, half in 2,000 (mean 1,010). Over the first minute the long ones are
    # still decoding: the read mean is the finished requests' (vLLM observes request_generation_tokens at a
    # request's end), a fraction of the arrivals' own. After five minutes the pool is steady and it is the mean.
    n = 6000
    arrival = np.linspace(0.0, 300.0, n, endpoint=False)
    osl = np.where(np.arange(n) % 2 == 0, 20, 2000).astype(np.int64)
    tr = RequestTrace(arrival, np.full(n, 500, dtype=np.int64), osl)
    c = Cluster(tr, big, SimConfig(), {"prefill": 4, "decode": 1})
    src = SimMetricSource(c)
    c.run_until(60.0)
    early = src.read(60.0, 60.0)
    assert isinstance(early, Observation)
    finished = np.asarray(c.log.finish_s) <= 60.0
    assert 0 < finished.sum() < 1200
    read = early.pools["decode"].osl_mean
    assert read == pytest.approx(float(osl[finished].mean()))
    assert read is not None and read < 0.2 * float(osl.mean())
    assert early.pools["prefill"].osl_mean == read  # the frontend's view, the same on every pool
    c.run_until(300.0)
    steady = src.read(60.0, 300.0)
    assert isinstance(steady, Observation)
    assert steady.pools["decode"].osl_mean == pytest.approx(float(osl.mean()), rel=0.02)


def test_the_metric_source_reports_the_requests_the_router_holds(big: Profile) -> None:
    # Live, the router's wake signal repeats while it holds requests for a policy with no ready replica, and the
    # loop's read carries them (Observation.waiting). The simulator's read did not: a fleet policy whose traffic
    # stopped while its replicas started read as idle, lost its wake to the priorities and failed what it held
    # (`planner bench fleet --quick`: 389 requests of sparse-c).
    tr = constant(5.0, 120.0, isl=500, osl=50, seed=1)
    c = Cluster(tr, big, SimConfig(startup_s=300.0), {"prefill": 0, "decode": 0})
    src = SimMetricSource(c)
    c.run_until(90.0)
    assert c.held() == int(np.sum(tr.arrival_s <= 90.0)) > 0
    assert src.read(60.0, 90.0).waiting == c.held()  # type: ignore[union-attr]
    SimActuator(c).apply({"prefill": 1, "decode": 1})
    c.run_until(400.0)  # ready at 390: everything held is dispatched
    obs = src.read(60.0, 400.0)
    assert isinstance(obs, Observation) and c.held() == 0 and obs.waiting == 0
