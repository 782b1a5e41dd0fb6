"""The sizing searches: the one-pass tables equal the per-size predictions, and the exponential model's closed
form is what a one-bucket mix computes."""

from __future__ import annotations

import math

import pytest
from test_decide_support import free_policy, spec

from planner.decide.capacity import Load, prefill_ttft_ms, prefill_ttft_table_ms
from planner.decide.prefill_mix import ExponentialPrompts, PrefillMix, prompt_times
from planner.decide.queueing import wait_at, waits
from planner.types import LengthMix

MODELS = {"p95-1s-40ms": spec(free_policy()).model,
          "p99-300ms-25ms": spec(free_policy(sla={"ttft_ms": 300, "itl_ms": 25, "percentile": 99})).model}
CONV = LengthMix.from_buckets(((200.0, 80.0), (500.0, 300.0), (1000.0, 400.0), (2000.0, 300.0), (5000.0, 150.0),
                               (10000.0, 30.0)))
LONG = LengthMix.from_buckets(((2000.0, 120.0), (5000.0, 200.0), (10000.0, 200.0), (20000.0, 150.0),
                               (50000.0, 100.0), (math.inf, 3.0)))
MIXES = {"exponential": None, "conv": CONV, "long": LONG}


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
