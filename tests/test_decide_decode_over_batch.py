"""Decode sequences held beyond the batch the ITL target allows are a backlog (reason decode_over_batch).

The output length engines export is observed when a request ends, so an overloaded decode pool reads a small
mean (only short answers finish) and its throughput is its capacity: neither says what the demand is. The
sequences it runs beyond ready replicas x the target's batch are known to be served over the ITL target.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.decide import decide
from planner.decide.capacity import Load, decode_batch_limit, held_over_target
from planner.decide.demand import demand
from planner.types import Observation, Reason
from tests.support.decide_support import (
    assert_decision,
    free_policy,
    load_forecast,
    observation,
    spec,
)

R = Reason
SLA = R.SLA_CAPACITY
FREE = free_policy()
# `planner up`'s SLA and lead time: ITL 18 ms, decisions 1 s apart, replicas ready 10 s after asked for.
UP = free_policy(sla={"itl_ms": 18}, startup_s=10, interval_s=1)


def with_decode(obs: Observation, running: float, ready: int) -> Observation:
    pools = dict(obs.pools)
    pools["decode"] = replace(pools["decode"], running=running, ready_replicas=ready)
    return replace(obs, pools=pools)


def test_the_batch_limit_is_the_largest_batch_within_the_itl_target() -> None:
    s = spec(FREE)
    load = Load(50.0, 1155.0, 211.0)
    b = decode_batch_limit(s.model, load)
    ctx = 1155.0 + 211.0 / 2
    assert s.model.itl_ms(s.model.engine, b, ctx) <= 40.0 < s.model.itl_ms(s.model.engine, b + 1, ctx)
    # Calibrated slower (factor 1.25), the target holds fewer sequences.
    assert decode_batch_limit(s.model, load, 1.25) < b


@pytest.mark.parametrize(("running", "ready", "horizon_s", "added_rps"), [
    (100.0, 2, 150.0, 0.0),  # well within two replicas' batch
    (0.0, 2, 150.0, 0.0),  # nothing running
    (900.0, 0, 150.0, 0.0),  # no ready replica: nothing to hold the excess against
    (900.0, 2, 0.0, 0.0),  # no horizon to drain over (never divides by zero)
])
def test_no_excess_no_change(running: float, ready: int, horizon_s: float, added_rps: float) -> None:
    s = spec(FREE)
    load = Load(50.0, 1155.0, 211.0)
    got, excess = held_over_target(load, running, ready, horizon_s, decode_batch_limit(s.model, load))
    assert (got, excess) == (load, added_rps)


def test_the_excess_drains_over_the_horizon() -> None:
    s = spec(FREE)
    load = Load(50.0, 1155.0, 211.0)
    b = decode_batch_limit(s.model, load)
    got, excess = held_over_target(load, 2 * b + 300.0, 2, 150.0, b)
    assert excess == pytest.approx(300.0)
    assert got == Load(pytest.approx(50.0 + 2.0), 1155.0, 211.0)  # type: ignore[arg-type]


def test_only_a_disaggregated_decode_pool_is_held_against_its_batch() -> None:
    agg = free_policy(mode="aggregated", pools={"aggregated": {"max_replicas": 1000}})
    obs = observation(0, 50, pools=("aggregated",), running=5000.0)
    d = demand(spec(agg), obs, load_forecast(50))
    assert not isinstance(d, str) and d.decode_held == (0.0, 0)  # type: ignore[union-attr]


CASES = [
    # 50 req/s of chat: 2 decode replicas of TP2 (the table's moderate-load row); at or under their batch the
    # running gauge changes nothing.
    ("within-batch", FREE, 50, 2, 400.0, {"prefill": (8, {SLA}), "decode": (2, {SLA})}),
    # 6,000 sequences on 2 replicas of 313 at 40 ms: 5,374 over, drained over the 150 s horizon (+36 req/s).
    ("over-batch", FREE, 50, 2, 6000.0, {"prefill": (8, {SLA}), "decode": (3, {SLA, R.DECODE_OVER_BATCH})}),
    # `planner up` as measured: 18.8 req/s sent with a 262-token mean answer, 65 read (only short answers had
    # finished), 700 sequences on the one replica (73 at 18 ms) at 40x the ITL target. Sized from the read mean
    # it stayed at one replica; 627 over drained in the 11 s horizon (+57 req/s) ask for a second one.
    ("up-survivor-bias", UP, 18.8, 1, 700.0, {"prefill": (4, {SLA}), "decode": (2, {SLA, R.DECODE_OVER_BATCH})}),
]


@pytest.mark.parametrize(("id_", "pol", "rate", "ready", "running", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decode_over_batch(id_: str, pol: object, rate: float, ready: int, running: float,
                           expected: dict[str, tuple[int, set[Reason]]]) -> None:
    osl = 65.0 if id_ == "up-survivor-bias" else 211.0
    obs = with_decode(observation(0, rate, {"prefill": 1, "decode": ready}, osl=osl), running, ready)
    d, _ = decide(spec(pol), obs, load_forecast(rate, osl=osl), None, 0.0)  # type: ignore[arg-type]
    assert_decision(d, expected)


def test_the_same_load_without_the_gauge_sizes_from_the_read_length_alone() -> None:
    # What the controller did before: the read 65-token mean sizes one decode replica.
    obs = observation(0, 18.8, {"prefill": 1, "decode": 1}, osl=65.0)
    d, _ = decide(spec(UP), obs, load_forecast(18.8, osl=65.0), None, 0.0)
    assert d.pools["decode"].replicas == 1 and R.DECODE_OVER_BATCH not in d.pools["decode"].reasons
    # The true 262-token mean needs more than one.
    d262, _ = decide(spec(UP), observation(0, 18.8, {"prefill": 1, "decode": 1}, osl=262.0),
                     load_forecast(18.8, osl=262.0), None, 0.0)
    assert d262.pools["decode"].replicas > 1
    assert math.isfinite(d262.pools["decode"].predicted_itl_ms or math.inf)
