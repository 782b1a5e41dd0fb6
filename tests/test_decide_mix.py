"""Prefill sizing over the prompt-length mix: the mix from buckets, its service times checked against the
simulator, unservable requests counted (not chased), and the KV limit of a batch of unlike sequences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.decide.capacity import Load, kv_batch_limit, size_decode, size_prefill
from planner.decide.prefill_mix import miss_share, prefill_mix, queueing_budget
from planner.decide.queueing import wait_at
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.cluster.metrics import prompt_buckets
from planner.sim.traces.records import LengthDist, RequestTrace
from planner.types import LengthMix, Reason
from tests.support.decide_support import PROFILE, free_policy, spec

MODEL = spec(free_policy()).model


def lognormal(mean: float, cv: float, n: int = 20000, seed: int = 0, maximum: int = 120_000) -> np.ndarray:
    return LengthDist("lognormal", mean, cv, maximum=maximum).sample(np.random.default_rng(seed), n).astype(float)


@pytest.mark.parametrize("mean,cv", [(1155.0, 1.0), (12000.0, 1.54), (300.0, 0.3)], ids=["conv", "long", "narrow"])
def test_mix_from_buckets_keeps_the_shape_and_takes_the_exact_mean(mean: float, cv: float) -> None:
    lengths = lognormal(mean, cv)
    mix = LengthMix.from_buckets(prompt_buckets(lengths))
    assert mix is not None and sum(mix.weights) == pytest.approx(1.0)
    assert mix.scaled_to(float(lengths.mean())).mean == pytest.approx(float(lengths.mean()))
    # The 90th percentile of the mix is within one 1-2-5 bucket (x2.5) of the data's.
    order = np.argsort(mix.tokens)
    cum = np.cumsum(np.asarray(mix.weights)[order])
    p90 = np.asarray(mix.tokens)[order][np.searchsorted(cum, 0.9)]
    assert 0.4 < p90 / np.percentile(lengths, 90) < 2.5


def test_no_requests_is_no_mix() -> None:
    assert LengthMix.from_buckets(()) is None and LengthMix.from_buckets(((100.0, 0.0),)) is None


@pytest.mark.parametrize("isl", [1000, 8000, 30000, 85000])
def test_prefill_time_of_one_prompt_is_what_the_simulator_spends(isl: int) -> None:
    """The decision's service time is the simulator's (chunks attend to the prompt's prefix); what the sim adds
    on top is the KV transfer and the first decode step, both small."""
    tr = RequestTrace(np.array([0.0]), np.array([isl]), np.array([2]), "one")
    cluster = Cluster(tr, PROFILE, SimConfig(startup_s=0.0), {"prefill": 1, "decode": 1})
    cluster.run_until(1e5)
    sim_ttft = float(cluster.results()["ttft_s"][0])
    own = MODEL.prefill_s(MODEL.engine, isl)
    assert own <= sim_ttft <= own * 1.15 + 0.1


def test_unservable_prompts_are_counted_not_chased() -> None:
    """Long prompts whose prefill alone misses TTFT: sla_infeasible with their share, and a pool no bigger than
    what the servable requests need (adding replicas would not serve them in time)."""
    lengths = lognormal(30000.0, 1.0, seed=3)
    mix = LengthMix.from_buckets(prompt_buckets(lengths))
    assert mix is not None
    load = Load(4.0, float(lengths.mean()), 200.0)
    sized = size_prefill(MODEL, load, mix=mix)
    assert Reason.SLA_INFEASIBLE in sized.reasons and sized.unservable_share > 0.05
    pm = prefill_mix(MODEL, MODEL.engine, mix, load.isl_tokens, True)
    wait = wait_at(sized.replicas, load.rate_rps, pm.mean_s, pm.scv, MODEL.percentile)
    waiting = miss_share(pm, wait, load.rate_rps, MODEL.ttft_target_ms / 1e3) - pm.infeasible_share(1.0)
    assert waiting <= queueing_budget(pm, 1.0, MODEL.percentile) + 1e-9
    assert sized.replicas < 3 * math.ceil(load.rate_rps * pm.mean_s)  # finite, not a chase to the ceiling


def test_a_mix_of_like_prompts_sizes_as_one_prompt_does() -> None:
    """A mix whose prompts are all alike sizes close to the exponential model's mean-based answer at most."""
    mix = LengthMix((1200.0,), (1.0,))
    load = Load(40.0, 1200.0, 220.0)
    assert size_prefill(MODEL, load, mix=mix).replicas <= size_prefill(MODEL, load).replicas


def test_heavier_tails_need_more_prefill_replicas() -> None:
    load = Load(20.0, 4000.0, 200.0)
    light = LengthMix.from_buckets(prompt_buckets(lognormal(4000.0, 0.3, seed=1)))
    heavy = LengthMix.from_buckets(prompt_buckets(lognormal(4000.0, 1.5, seed=1, maximum=30000)))
    assert light is not None and heavy is not None
    assert size_prefill(MODEL, load, mix=heavy).replicas > size_prefill(MODEL, load, mix=light).replicas


def test_kv_limit_of_unlike_sequences() -> None:
    load = Load(2.0, 12000.0, 300.0)
    alike = LengthMix((12000.0,), (1.0,))
    spread = LengthMix.from_buckets(prompt_buckets(lognormal(12000.0, 1.54)))
    assert spread is not None
    assert kv_batch_limit(MODEL, load, alike) == pytest.approx(kv_batch_limit(MODEL, load), abs=1)
    assert kv_batch_limit(MODEL, load, spread) < kv_batch_limit(MODEL, load)
    assert size_decode(MODEL, load, mix=spread).replicas >= size_decode(MODEL, load).replicas
