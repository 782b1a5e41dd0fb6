"""Properties of the fleet stage (planner/decide/fleet.py) over generated fleets (hypothesis).

The frontier invariant: a grant never gives a policy's pool more replicas than the load the policy's other
pools can carry needs. Pool A short of its ask carries ``A.carried(g_A)`` of the load (the share at which
its granted count stops sufficing); every other pool B may hold at most what B needs for that share (the
smallest count that carries it), or its floor. A pool filled while another starves breaks it: at 150 req/s
the old fill gave the example fleet's conv policy 17 prefill replicas beside 1 decode replica, which carries
a quarter of the load, for which 4 prefill replicas suffice.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.decide.fleet import PolicyAsk, PoolAsk, fit_fleet
from tests.support.fleet_support import wasted
from tests.test_fleet_stage import CONV_DECODE, CONV_PREFILL


def test_the_invariant_catches_a_pool_filled_while_another_starves() -> None:
    conv = PolicyAsk("conv", 5, {"prefill": PoolAsk(21, 1, 1, carries=CONV_PREFILL),
                                 "decode": PoolAsk(5, 2, 1, carries=CONV_DECODE)})
    assert wasted(conv, {"prefill": 17, "decode": 1})  # what filling prefill first granted
    assert not wasted(conv, {"prefill": 12, "decode": 3})  # what the frontier grants (tests/test_fleet_stage.py)
    assert not wasted(conv, {"prefill": 21, "decode": 5})


@st.composite
def pool_asks(draw: st.DrawFn) -> PoolAsk:
    floor = draw(st.integers(0, 2))
    wanted = draw(st.integers(floor, floor + 8))
    gpus = draw(st.sampled_from([1, 1, 2, 4]))
    # strictly increasing shares carried by floor .. wanted replicas (none at zero replicas)
    steps = draw(st.lists(st.floats(0.01, 0.5), min_size=wanted - floor + 1, max_size=wanted - floor + 1))
    carries = tuple(sum(steps[: i + 1]) for i in range(len(steps)))
    costs = draw(st.one_of(st.just(()), st.lists(st.sampled_from([0.5, 1.0, 1.5, 3.0, math.inf]),
                                                 min_size=wanted - floor, max_size=wanted - floor).map(tuple)))
    return PoolAsk(wanted, gpus, floor, costs, carries=draw(st.sampled_from([carries, ()])))


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[PolicyAsk], int]:
    asks = []
    for i in range(draw(st.integers(1, 4))):
        names = draw(st.sampled_from([("prefill", "decode"), ("aggregated",), ("prefill", "decode", "extra")]))
        pools = {n: draw(pool_asks()) for n in names}
        asks.append(PolicyAsk(f"p{i}", draw(st.sampled_from([0, 5, 10])), pools, together=draw(st.booleans())))
    floors = sum(p.floor * p.gpus_per_replica for a in asks for p in a.pools.values())
    wanted = sum(a.wanted_gpus for a in asks)
    return asks, draw(st.integers(floors, max(floors, wanted)))


@settings(max_examples=150, deadline=None)
@given(fleets())
def test_a_grant_never_gives_a_pool_more_than_its_starved_siblings_can_use(fleet: tuple[list[PolicyAsk], int]) -> None:
    asks, budget = fleet
    fit = fit_fleet(asks, budget)
    assert fit.used_gpus <= budget
    for a in asks:
        granted = dict(fit.granted[a.name])
        for pool, p in a.pools.items():
            assert p.floor <= granted[pool] <= p.wanted
            assert (granted[pool] < p.wanted) == (pool in fit.reasons.get(a.name, {}))
        assert not wasted(a, granted), wasted(a, granted)


@settings(max_examples=100, deadline=None)
@given(fleets())
def test_no_policy_is_left_a_step_it_could_take(fleet: tuple[list[PolicyAsk], int]) -> None:
    """The frontier does not hoard: GPUs left over are fewer than any short policy's next step costs."""
    asks, budget = fleet
    fit = fit_fleet(asks, budget)
    left = budget - fit.used_gpus
    for a in asks:
        granted = dict(fit.granted[a.name])
        step = a.next_step(granted)
        assert not step or sum(a.pools[p].gpus_per_replica for p in step) > left
