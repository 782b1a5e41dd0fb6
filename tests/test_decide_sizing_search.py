"""The sizing searches: bisection over pool sizes gives what a scan of every size gives (the SLA predicate is
monotone in replicas), the one-pass tables equal the per-size predictions, and the exponential model's closed
form is what a one-bucket mix computes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from planner.decide.capacity import (
    Load,
    aggregated_latency_ms,
    prefill_ttft_ms,
    prefill_ttft_table_ms,
    size_aggregated,
)
from planner.decide.prefill_mix import (
    ExponentialPrompts,
    PrefillMix,
    prefill_mix,
    prompt_times,
    queueing_fits,
)
from planner.decide.queueing import smallest_meeting, wait_at, waits
from planner.decide.sizing_model import SizingModel
from planner.types import LengthMix, Reason
from tests.support.decide_support import free_policy, spec

MODELS = {"p95-1s-40ms": spec(free_policy()).model,
          "p99-300ms-25ms": spec(free_policy(sla={"ttft_ms": 300, "itl_ms": 25, "percentile": 99})).model}
CONV = LengthMix.from_buckets(((200.0, 80.0), (500.0, 300.0), (1000.0, 400.0), (2000.0, 300.0), (5000.0, 150.0),
                               (10000.0, 30.0)))
LONG = LengthMix.from_buckets(((2000.0, 120.0), (5000.0, 200.0), (10000.0, 200.0), (20000.0, 150.0),
                               (50000.0, 100.0), (math.inf, 3.0)))
MIXES = {"exponential": None, "conv": CONV, "long": LONG}


# ---------------------------------------------------------------------------------------- smallest_meeting
@dataclass(frozen=True)
class Search:
    id: str
    meets: Callable[[int], bool]
    lower: int
    ceiling: int


SEARCHES = [
    Search("answer-at-the-lower-bound", lambda c: c >= 3, 3, 100),
    Search("answer-above-the-lower-bound", lambda c: c >= 700, 10, 100_000),
    Search("answer-one-above", lambda c: c >= 11, 10, 100_000),
    Search("answer-at-the-ceiling", lambda c: c >= 37, 5, 37),
    Search("answer-above-the-ceiling", lambda c: c >= 38, 5, 37),
    Search("never-meets", lambda c: False, 1, 5000),
    Search("lower-above-the-ceiling", lambda c: True, 6, 5),
    Search("lower-is-the-ceiling-and-meets", lambda c: True, 5, 5),
    Search("lower-is-the-ceiling-and-fails", lambda c: False, 5, 5),
    Search("from-zero", lambda c: c >= 1, 0, 10),
    Search("ceiling-not-a-power-of-two", lambda c: c >= 99_999, 1, 100_000),
]


@pytest.mark.parametrize("case", SEARCHES, ids=[s.id for s in SEARCHES])
def test_smallest_meeting_is_the_first_size_a_scan_finds(case: Search) -> None:
    calls: list[int] = []

    def meets(c: int) -> bool:
        calls.append(c)
        return case.meets(c)

    scan = next((c for c in range(case.lower, case.ceiling + 1) if case.meets(c)), None)
    assert smallest_meeting(meets, case.lower, case.ceiling) == scan
    assert all(case.lower <= c <= case.ceiling for c in calls)
    assert len(calls) <= 2 * math.log2(case.ceiling + 2) + 2  # a bracket and a bisection, never a scan


# ------------------------------------------------------------------------------------- aggregated sizing
def _ttft_rule(model: SizingModel, load: Load, ttft_factor: float, mix: LengthMix | None) -> Callable[[int, float],
                                                                                                       bool]:
    """The TTFT half of the aggregated SLA at c replicas, written out independently of capacity.py: the predicted
    TTFT within the target (exponential), or the waits within the mix's queueing budget."""
    if mix is None:
        return lambda c, ttft_ms: ttft_ms <= model.ttft_target_ms
    pm = prefill_mix(model, model.aggregated, mix, load.isl_tokens, False)
    fits = queueing_fits(pm, load.rate_rps, model.ttft_target_ms / 1e3 / ttft_factor, model.percentile)
    return lambda c, _: fits(wait_at(c, load.rate_rps, pm.mean_s, pm.scv, model.percentile))


def _meets_each(model: SizingModel, load: Load, ttft_factor: float, itl_factor: float, mix: LengthMix | None,
                ceiling: int) -> list[bool]:
    """Whether each size 1..ceiling meets the aggregated SLA, from the public predictions."""
    ttft_ok = _ttft_rule(model, load, ttft_factor, mix)
    out = []
    for c in range(1, ceiling + 1):
        ttft, itl = aggregated_latency_ms(model, load, c, ttft_factor, itl_factor, mix)
        out.append(itl <= model.itl_target_ms and ttft_ok(c, ttft))
    return out


SCAN_CEILING = 120
GRID = list(itertools.product(MODELS, MIXES, [(1.0, 1.0), (1.6, 0.7)], [0.5, 6.0, 40.0, 150.0],
                              [300.0, 1200.0, 9000.0], [220.0, 2000.0]))


@pytest.mark.parametrize("model_id,mix_id,factors,rate,isl,osl", GRID,
                         ids=["-".join(map(str, (m, x, f[0], r, i, o))) for m, x, f, r, i, o in GRID])
def test_aggregated_bisection_matches_a_scan_of_every_size(model_id: str, mix_id: str, factors: tuple[float, float],
                                                           rate: float, isl: float, osl: float) -> None:
    """The chosen size is the first a scan from one replica finds, under the scan's ceiling, at the answer as the
    ceiling and one below it (clamped: infeasible); a load no size serves is infeasible with an unbounded TTFT."""
    model, mix, (ff, fi) = MODELS[model_id], MIXES[mix_id], factors
    load = Load(rate, isl, osl)
    meets = _meets_each(model, load, ff, fi, mix, SCAN_CEILING)
    first = next((c for c, ok in enumerate(meets, 1) if ok), None)
    assert meets == [first is not None and c >= first for c in range(1, SCAN_CEILING + 1)], "not monotone in c"
    sized = size_aggregated(model, load, ff, fi, ceiling=SCAN_CEILING, mix=mix)
    if first is None:
        assert Reason.SLA_INFEASIBLE in sized.reasons and sized.predicted_ms == math.inf
        return
    assert sized.replicas == first
    assert (sized.predicted_ms, sized.predicted_other_ms) == aggregated_latency_ms(model, load, first, ff, fi, mix)
    assert size_aggregated(model, load, ff, fi, ceiling=first, mix=mix).replicas == first
    below = size_aggregated(model, load, ff, fi, ceiling=first - 1, mix=mix)
    assert Reason.SLA_INFEASIBLE in below.reasons and below.predicted_ms == math.inf


def test_an_infeasible_aggregated_load_is_answered_without_a_scan_to_the_ceiling() -> None:
    """A prompt whose prefill alone misses the TTFT target: no size meets the SLA (a scan of 100,000 sizes, each
    an O(c) Erlang C, took about 20 minutes); the pool asks for what throughput needs."""
    model = MODELS["p95-1s-40ms"]
    sized = size_aggregated(model, Load(5.0, 60000.0, 220.0))
    assert Reason.SLA_INFEASIBLE in sized.reasons and sized.predicted_ms == math.inf
    assert 1 <= sized.replicas < 100


# ------------------------------------------------------------------------------------------- prefill tables
@pytest.mark.parametrize("mix_id", list(MIXES))
@pytest.mark.parametrize("rate", [0.0, 3.0, 40.0])
def test_the_prefill_table_is_the_prediction_at_each_size(mix_id: str, rate: float) -> None:
    model, mix = MODELS["p95-1s-40ms"], MIXES[mix_id]
    load = Load(rate, 4000.0, 220.0)
    assert prefill_ttft_table_ms(model, load, 30, 1.3, mix) == [prefill_ttft_ms(model, load, c, 1.3, mix)
                                                                 for c in range(31)]


@pytest.mark.parametrize("rate", [0.0, 0.5, 12.0, 80.0])
def test_waits_are_wait_at_each_size(rate: float) -> None:
    assert waits(60, rate, 0.4, 0.7, 0.95) == [wait_at(c, rate, 0.4, 0.7, 0.95) for c in range(61)]


# ------------------------------------------------------------------------------------- the exponential model
@pytest.mark.parametrize("rate,servers", [(0.0, 1), (3.0, 2), (20.0, 6), (20.0, 12), (20.0, 5)])
def test_the_exponential_closed_form_is_a_one_bucket_mix(rate: float, servers: int) -> None:
    """The exponential model's TTFT (wait quantile + the prompt at the percentile) is what the mix's bisection
    computes for one bucket holding that prompt, to the bisection's tolerance."""
    model = MODELS["p95-1s-40ms"]
    exp = prompt_times(model, model.engine, None, 1500.0, True)
    assert isinstance(exp, ExponentialPrompts)
    one = PrefillMix((1.0,), (exp.at_percentile_s,), (0.0,), exp.mean_s, exp.scv)
    wait = wait_at(servers, rate, exp.mean_s, exp.scv, model.percentile)
    closed, bisected = exp.ttft_s(wait, rate, model.percentile), one.ttft_s(wait, rate, model.percentile)
    assert closed == pytest.approx(bisected, rel=1e-9) or closed == bisected == math.inf
