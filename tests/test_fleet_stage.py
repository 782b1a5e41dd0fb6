"""The fleet stage (planner/decide/fleet.py): many policies' decisions fitted into one GPU budget. Table tests."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.decide.behavior import behave, commit
from planner.decide.fleet import (
    FleetFit,
    PolicyAsk,
    PoolAsk,
    fit_fleet,
    granted_decision,
    regranted_state,
    wake_clock,
    wake_first,
)
from planner.decide.state import PlannerState, PoolMemory
from planner.types import Decision, PoolDecision, Reason
from tests.support.decide_support import policy

P, S = Reason.FLEET_PRIORITY, Reason.FLEET_SHARE


def agg(wanted: int, floor: int = 1, gpus: int = 1, costs: tuple[float, ...] = (), current: int | None = None) -> dict:
    return {"aggregated": PoolAsk(wanted, gpus, floor, costs, current)}


def ask(name: str, priority: int, pools: dict) -> PolicyAsk:
    return PolicyAsk(name, priority, pools)


# The conv policy's frontier at 150 req/s (Outlook.carries of planner plan --fleet fleets/example.yaml): the
# share of the load 1 .. 21 prefill and 1 .. 5 decode replicas carry within the SLA.
CONV_PREFILL = (0.0625, 0.125, 0.15625, 0.1875, 0.25, 0.3125, 0.375, 0.4375, 0.46875, 0.5, 0.5625, 0.625, 0.6875,
                0.71875, 0.75, 0.8125, 0.875, 0.9375, 0.96875, 1.0, 22 / 21)
CONV_DECODE = (0.25, 0.4375, 0.625, 0.8125, 1.2)


# (id, budget, asks, expected granted {policy: {pool: n}}, expected reasons {policy: reason})
CASES = [
    ("fits: nothing changes", 10,
     [ask("a", 0, agg(4)), ask("b", 0, agg(6))],
     {"a": {"aggregated": 4}, "b": {"aggregated": 6}}, {}),
    ("higher priority keeps its SLA size first", 10,
     [ask("hi", 10, agg(8)), ask("lo", 0, agg(6))],
     {"hi": {"aggregated": 8}, "lo": {"aggregated": 2}}, {"lo": P}),
    ("priority order does not depend on the order given", 10,
     [ask("lo", 0, agg(6)), ask("hi", 10, agg(8))],
     {"hi": {"aggregated": 8}, "lo": {"aggregated": 2}}, {"lo": P}),
    ("equal priority: the pool that suffers most without the GPU gets it", 6,
     [ask("a", 0, agg(5, costs=(5.0, 4.0, 3.0, 2.0))), ask("b", 0, agg(5, costs=(1.2, 1.1, 0.9, 0.5)))],
     {"a": {"aggregated": 5}, "b": {"aggregated": 1}}, {"b": S}),
    ("equal priority and cost: shared in proportion to what each asked", 8,
     [ask("a", 0, agg(8, costs=(1.0,) * 7)), ask("b", 0, agg(4, costs=(1.0,) * 3))],
     {"a": {"aggregated": 5}, "b": {"aggregated": 3}}, {"a": S, "b": S}),
    ("the cost is per GPU: a 2-GPU replica at pressure 3 loses to a 1-GPU one at 2", 5,
     [ask("big", 0, agg(2, gpus=2, costs=(3.0,))), ask("small", 0, agg(2, costs=(2.0,)))],
     {"big": {"aggregated": 1}, "small": {"aggregated": 2}}, {"big": S}),
    ("an unbounded queue outranks any finite pressure", 3,
     [ask("a", 0, agg(2, costs=(1e9,))), ask("b", 0, agg(2, costs=(math.inf,)))],
     {"a": {"aggregated": 1}, "b": {"aggregated": 2}}, {"a": S}),
    ("floors are never broken, even for the lowest priority", 3,
     [ask("hi", 5, agg(10)), ask("lo", 0, agg(4, floor=2))],
     {"hi": {"aggregated": 1}, "lo": {"aggregated": 2}}, {"hi": S, "lo": S}),
    ("a level that alone exceeds the budget shares (fleet_share), the level below lost to priority", 6,
     [ask("a", 5, agg(4)), ask("b", 5, agg(4)), ask("c", 0, agg(3))],
     {"a": {"aggregated": 3}, "b": {"aggregated": 2}, "c": {"aggregated": 1}}, {"a": S, "b": S, "c": P}),
    ("scale-downs free capacity for scale-ups in the same tick", 14,
     [ask("a", 0, agg(6, current=10)), ask("b", 0, agg(8, current=4))],
     {"a": {"aggregated": 6}, "b": {"aggregated": 8}}, {}),
    ("a pool held for missing data keeps what it holds", 8,
     [ask("held", 0, agg(6, floor=6)), ask("b", 10, agg(6))],
     {"held": {"aggregated": 6}, "b": {"aggregated": 2}}, {"b": S}),
    ("leftover too small for a big replica goes to small ones", 7,
     [ask("big", 1, agg(3, floor=1, gpus=4)), ask("small", 0, agg(3))],
     {"big": {"aggregated": 1}, "small": {"aggregated": 3}}, {"big": S}),
    ("prefill and decode of one policy grow together along its frontier (unknown: in proportion)", 5,
     [ask("pd", 0, {"prefill": PoolAsk(4, 1, 1, (3.0, 2.0, 1.5)), "decode": PoolAsk(3, 1, 1, (2.5, 0.8))})],
     {"pd": {"prefill": 3, "decode": 2}}, {"pd": S}),
    # planner plan --fleet fleets/example.yaml at 150 req/s: the conv policy (priority 5) has 19 GPUs left
    # after the chat policy's 26 and the code policy's floors; it asks 21 prefill + 5 two-GPU decode, every
    # pool short of its ask unbounded. Filling prefill first gave 17 + 1: a starved decode pool wasting 16
    # prefill GPUs. Along its frontier (the sizing model's replicas at shares of the load) it gets 12 + 3.
    ("150 req/s: the budget goes to a balanced prefill/decode pair, not prefill first", 48,
     [ask("chat", 10, {"prefill": PoolAsk(16, 1, 1), "decode": PoolAsk(5, 2, 1)}),
      ask("conv", 5, {"prefill": PoolAsk(21, 1, 1, (math.inf,) * 20, carries=CONV_PREFILL),
                      "decode": PoolAsk(5, 2, 1, (math.inf,) * 4, carries=CONV_DECODE)}),
      ask("code", 0, {"prefill": PoolAsk(21, 1, 1), "decode": PoolAsk(5, 2, 1)})],
     {"chat": {"prefill": 16, "decode": 5}, "conv": {"prefill": 12, "decode": 3},
      "code": {"prefill": 2, "decode": 1}}, {"conv": P, "code": P}),
    ("a policy whose next step does not fit stops; the GPU goes to another", 5,
     [ask("pd", 1, {"prefill": PoolAsk(4, 1, 1, carries=(0.6, 0.8, 0.9, 1.1)),
                    "decode": PoolAsk(2, 2, 1, carries=(0.5, 1.2))}),  # decode runs out first: 2 GPUs, 1 left
      ask("a", 0, agg(3))],
     {"pd": {"prefill": 1, "decode": 1}, "a": {"aggregated": 2}}, {"pd": S, "a": S}),
    ("pools whose counts run out at the same share step together", 4,
     [ask("pd", 0, {"prefill": PoolAsk(3, 1, 1, carries=(0.5, 1.0, 1.5)),
                    "decode": PoolAsk(3, 1, 1, carries=(0.5, 1.0, 1.5))})],
     {"pd": {"prefill": 2, "decode": 2}}, {"pd": S}),
]


@pytest.mark.parametrize(("budget", "asks", "granted", "reasons"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fit(budget: int, asks: list[PolicyAsk], granted: dict, reasons: dict) -> None:
    fit = fit_fleet(asks, budget)
    assert {n: dict(g) for n, g in fit.granted.items()} == granted
    assert {n: fit.reason(n) for n in granted if fit.reason(n) is not None} == reasons
    assert fit.used_gpus <= budget or any(p.floor == p.wanted for a in asks for p in a.pools.values())
    for a in asks:  # never below a floor, never above the ask
        for pool, p in a.pools.items():
            assert p.floor <= fit.granted[a.name][pool] <= p.wanted


def test_every_clamped_pool_has_a_reason_and_no_other_does() -> None:
    # decode's 2 replicas carry the whole load (pressure 0.8 < 1): the last GPU goes to prefill
    pools = {"prefill": PoolAsk(4, 1, 1, (3.0, 2.0, 1.5), carries=(0.3, 0.55, 0.8, 1.05)),
             "decode": PoolAsk(3, 1, 1, (2.5, 0.8), carries=(0.5, 1.0, 1.3))}
    fit = fit_fleet([ask("pd", 0, pools)], 6)
    assert dict(fit.granted["pd"]) == {"prefill": 4, "decode": 2}
    assert dict(fit.reasons["pd"]) == {"decode": (S,)}


def test_a_policy_with_no_pool_known_is_still_in_the_fit() -> None:
    fit = fit_fleet([ask("unknown", 0, {}), ask("a", 0, agg(3))], 2)
    assert dict(fit.granted["unknown"]) == {} and fit.granted_gpus["unknown"] == 0 and fit.granted["a"]["aggregated"] == 2


def test_a_sleeping_policy_is_never_woken_half() -> None:
    pools = {"prefill": PoolAsk(2, 1, 0, (5.0, 1.0)), "decode": PoolAsk(1, 2, 0, (5.0,))}
    tight = fit_fleet([PolicyAsk("z", 0, pools, together=True), ask("a", 0, agg(3))], 3)
    assert dict(tight.granted["z"]) == {"prefill": 0, "decode": 0}  # 1 prefill alone would fit; not alone
    room = fit_fleet([PolicyAsk("z", 0, pools, together=True), ask("a", 0, agg(3))], 4)
    assert dict(room.granted["z"]) == {"prefill": 1, "decode": 1} and room.granted["a"]["aggregated"] == 1


def test_two_unbounded_queues_tie_whatever_their_steps_cost() -> None:
    """A policy woken from zero (its first step a whole prefill + decode pair, 3 GPUs) and a busy one growing a
    GPU at a time, both with an unbounded queue: the tie goes to the one furthest behind, the woken one, where
    the cheaper step used to win every time (and the woken policy's held requests timed out)."""
    # Not ``together``: a sleeping policy's first step is a wake (rule 1b, tested below) and never reaches the tie.
    woken = PolicyAsk("woken", 0, {"prefill": PoolAsk(1, 1, 0, (math.inf,)), "decode": PoolAsk(1, 2, 0, (math.inf,))})
    busy = ask("busy", 0, agg(5, floor=1, costs=(math.inf,) * 4))
    fit = fit_fleet([busy, woken], 1 + 3)
    assert dict(fit.granted["woken"]) == {"prefill": 1, "decode": 1} and fit.granted["busy"]["aggregated"] == 1
    finite = PolicyAsk("woken", 0, {"prefill": PoolAsk(1, 1, 0, (2.0,)), "decode": PoolAsk(1, 2, 0, (2.0,))},
                       together=True)
    fit = fit_fleet([ask("busy", 0, agg(5, floor=1, costs=(3.0,) * 4)), finite], 1 + 3)
    assert fit.granted["busy"]["aggregated"] == 4  # finite pressures still compare per GPU: 3.0/1 over 2.0/3


W = Reason.FLEET_WAKE


def sleeper(name: str, priority: int, first: float = math.inf, together: bool = True, wanted: int = 2) -> PolicyAsk:
    """A policy at zero (floors 0) asking for ``wanted`` prefill and 1 two-GPU decode replica; ``first``: the
    price of its first step (inf: requests held at the router that nothing else serves)."""
    return PolicyAsk(name, priority, {"prefill": PoolAsk(wanted, 1, 0, (first, *(1.5,) * (wanted - 1))),
                                      "decode": PoolAsk(1, 2, 0, (first,))}, together=together)


WAKES = [  # (id, budget, asks, granted, reasons)
    ("held requests wake a sleeping policy ahead of a higher priority", 10,
     [ask("hi", 10, agg(10)), sleeper("lo", 0)],
     {"hi": {"aggregated": 7}, "lo": {"prefill": 1, "decode": 1}}, {"hi": W, "lo": P}),
    ("only its first step: past it the priorities rule", 11,
     [ask("hi", 10, agg(8)), sleeper("lo", 0, wanted=3)],
     {"hi": {"aggregated": 8}, "lo": {"prefill": 1, "decode": 1}}, {"lo": P}),
    ("no traffic priced (an idle window's replicas): no wake", 10,
     [ask("hi", 10, agg(10)), sleeper("lo", 0, first=1.0)],
     {"hi": {"aggregated": 10}, "lo": {"prefill": 0, "decode": 0}}, {"lo": P}),
    ("a policy that does not sleep together is not woken ahead", 10,
     [ask("hi", 10, agg(10)), sleeper("lo", 0, together=False)],
     {"hi": {"aggregated": 10}, "lo": {"prefill": 0, "decode": 0}}, {"lo": P}),
    ("two wakes, room for one: the higher priority's", 6,
     [sleeper("a-lo", 0), sleeper("b-mid", 5), ask("hi", 10, agg(4))],
     {"a-lo": {"prefill": 0, "decode": 0}, "b-mid": {"prefill": 1, "decode": 1}, "hi": {"aggregated": 3}},
     {"a-lo": P, "b-mid": P, "hi": W}),
    ("a wake that does not fit is never half granted", 2,
     [sleeper("lo", 0), ask("hi", 10, agg(3))],
     {"lo": {"prefill": 0, "decode": 0}, "hi": {"aggregated": 2}}, {"lo": S, "hi": S}),
    ("a wake at the same priority is the level's own (fleet_share, not fleet_wake)", 6,
     [sleeper("z", 5), ask("a", 5, agg(6, costs=(1.0,) * 5))],
     {"z": {"prefill": 2, "decode": 1}, "a": {"aggregated": 2}}, {"a": S}),
]


@pytest.mark.parametrize(("budget", "asks", "granted", "reasons"), [c[1:] for c in WAKES], ids=[c[0] for c in WAKES])
def test_a_sleeping_policy_with_held_requests_wakes_before_the_priorities(budget: int, asks: list[PolicyAsk],
                                                                          granted: dict, reasons: dict) -> None:
    """Rule 1b: priorities decide who grows past the smallest size that serves a request, not who serves at all
    (behind higher priorities a sleeping model's held requests timed out at the router: 272 failed in
    `planner bench fleet`)."""
    fit = fit_fleet(asks, budget)
    assert {n: dict(g) for n, g in fit.granted.items()} == granted
    assert {n: fit.reason(n) for n in granted if fit.reason(n) is not None} == reasons
    assert fit.used_gpus <= budget


def test_without_wake_first_a_wake_waits_for_its_priority() -> None:
    """No policy allowed first (fleet.yaml ``budget.wake_first: false``, or its wake_after_s not yet passed): the
    first row of the table above as strict priority has it."""
    asks = [ask("hi", 10, agg(10)), sleeper("lo", 0)]
    fit = fit_fleet(asks, 10, first=frozenset())
    assert {n: dict(g) for n, g in fit.granted.items()} == {"hi": {"aggregated": 10}, "lo": {"prefill": 0, "decode": 0}}
    assert fit.reason("lo") is P and fit.reason("hi") is None
    room = fit_fleet([ask("hi", 10, agg(7)), sleeper("lo", 0)], 10, first=frozenset())  # room left: it wakes
    assert dict(room.granted["lo"]) == {"prefill": 1, "decode": 1}


def _asleep(name: str, first: float = math.inf, current: int | None = 0) -> PolicyAsk:
    return PolicyAsk(name, 0, {"prefill": PoolAsk(2, 1, 0, (first, 1.5), current),
                               "decode": PoolAsk(1, 2, 0, (first,), current)}, together=True)


@pytest.mark.parametrize(("ask_", "previous", "held", "expected"), [
    (_asleep("z"), {}, (), 100.0),  # asleep with traffic: its clock starts now
    (_asleep("z"), {"z": 40.0}, (), 40.0),  # and runs on
    (_asleep("z", current=1), {"z": 40.0}, (), 40.0),  # awake with traffic: still running (not put back to zero)
    (_asleep("z", current=1), {}, (), None),  # awake before it had traffic to wait: nothing waited
    (_asleep("z", current=None), {}, (), 100.0),  # none known: counted as asleep
    (_asleep("z", first=1.0), {"z": 40.0}, (), None),  # no traffic (an idle window's replicas): stopped
    (_asleep("z", first=1.0), {"z": 40.0}, ("z",), 40.0),  # held on another's wake tick: kept as it was
    (PolicyAsk("a", 0, {"aggregated": PoolAsk(2, 1, 0, (math.inf, 1.0), 0)}), {}, (), None),  # does not sleep
])
def test_the_wake_clock(ask_: PolicyAsk, previous: dict, held: tuple, expected: float | None) -> None:
    assert wake_clock([ask_], previous, held, 100.0).get(ask_.name) == expected


def test_wake_first_after_the_policys_wait() -> None:
    asks = [_asleep("a"), _asleep("b"), _asleep("c"), _asleep("d", current=1), _asleep("e")]
    since = {"a": 0.0, "b": 70.0, "c": 100.0, "d": 90.0}
    assert wake_first(asks, since, 100.0, 0.0) == {"a", "b", "c", "d"}  # at once (the default)
    assert wake_first(asks, since, 100.0, 60.0) == {"a", "d"}  # a waited 100 s, b only 30 s; d is awake already
    assert wake_first(asks, since, 100.0, None) == frozenset()  # wake_first: false


def test_shrinking_policies_are_applied_first() -> None:
    fit = fit_fleet([ask("a-grows", 0, agg(8, current=4)), ask("b-shrinks", 0, agg(6, current=10)),
                     ask("c-new", 0, agg(1))], 20)
    assert fit.order == ("b-shrinks", "a-grows", "c-new")


def test_pool_ask_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="floor"):
        PoolAsk(2, 1, 3)
    with pytest.raises(ValueError, match="costs"):
        PoolAsk(4, 1, 1, (1.0,))
    with pytest.raises(ValueError, match="carries"):
        PoolAsk(3, 1, 1, carries=(0.5, 1.0))  # one share per count 1 .. 3
    with pytest.raises(ValueError, match="carries"):
        PoolAsk(2, 1, 1, carries=(0.5, 0.4))  # a replica more never carries less


def test_granted_decision_carries_the_reason_and_new_prediction() -> None:
    d = Decision(0.0, {"prefill": PoolDecision(6, 1, 6.0, (Reason.SLA_CAPACITY,), 500.0, None),
                       "decode": PoolDecision(4, 2, 4.0, (Reason.SLA_CAPACITY,), None, 30.0)},
                 (Reason.SLA_CAPACITY,))
    g = granted_decision(d, {"prefill": 3, "decode": 4}, {"prefill": (P,)}, {"prefill": (1900.0, None)})
    assert g.targets() == {"prefill": 3, "decode": 4}
    assert g.pools["prefill"].reasons == (Reason.SLA_CAPACITY, P)
    assert g.pools["prefill"].predicted_ttft_ms == 1900.0
    assert g.pools["decode"] == d.pools["decode"]
    assert g.reasons == (Reason.SLA_CAPACITY, P)


def test_regranted_state_remembers_the_grant() -> None:
    pol = policy()
    # decide() committed a scale-up 2 -> 6 at t=100; the fleet granted 3.
    state = PlannerState(100.0, {"prefill": PoolMemory(6, ((100.0, 6),), ((70.0, 2), (100.0, 4)), (), 1)})
    wanted = Decision(100.0, {"prefill": PoolDecision(6, 1, 6.0)})
    granted = Decision(100.0, {"prefill": PoolDecision(3, 1, 6.0, (P,))})
    m = regranted_state(state, wanted, granted, 100.0, pol.behavior).pool("prefill")
    assert m.target == 3
    assert m.events == ((70.0, 2), (100.0, 1))  # the step actually taken: 2 -> 3
    assert m.recommendations == ((100.0, 6),)  # what the SLA asked stays for the stabilisation windows


def test_regranted_state_when_the_grant_is_a_scale_down() -> None:
    pol = policy()
    state = PlannerState(100.0, {"decode": PoolMemory(5, (), (), (), 0)})  # decide held at 5: no event
    wanted = Decision(100.0, {"decode": PoolDecision(5, 1, 5.0)})
    granted = Decision(100.0, {"decode": PoolDecision(2, 1, 5.0, (P,))})
    m = regranted_state(state, wanted, granted, 100.0, pol.behavior).pool("decode")
    # the step taken counts for the rate limits; the audit keeps decide()'s direction (it held: none)
    assert (m.target, m.events, m.last_direction, m.direction_changes) == (2, ((100.0, -3),), 0, ())


def test_a_fleet_clamp_and_its_undo_are_not_the_pools_flap() -> None:
    """A priority-10 decode pool last scaled up, clamped 2 -> 1 for a tick (a wake took its GPUs) and given its 2
    back: a later one-replica scale-down it decides is applied, not held by the flap guard for the audit's hour
    (which held 2 GPUs for 45 minutes in `planner bench fleet`)."""
    pol = policy()
    rules, spec = pol.behavior, pol.pool("decode")
    state = PlannerState(600.0, {"decode": PoolMemory(2, (), (), (), 1)})  # scaled up to 2 before: last direction up
    two = Decision(660.0, {"decode": PoolDecision(2, 2, 2.0)})
    state = regranted_state(state, two, Decision(660.0, {"decode": PoolDecision(1, 2, 2.0, (W,))}), 660.0, rules)
    memory = state.pool("decode")
    assert memory.target == 1 and memory.direction_changes == () and memory.last_direction == 1
    # next tick decide() asks for 2 again (an up, the pool's own direction): still no reversal
    memory = behave(2, 1, memory, 690.0, rules, spec).memory
    memory = commit(memory, 1, 2, 690.0, rules)
    assert memory.direction_changes == ()
    # past the scale-down window, the load drops: 2 -> 1 is applied
    late = 690.0 + rules.scale_down.stabilization_window_s + 60.0
    assert behave(1, 2, memory, late, rules, spec).replicas == 1
    # as it was before: the clamp audited as a reversal, the same scale-down is held as a flap
    flapped = replace(memory, direction_changes=(660.0, 690.0))
    assert behave(1, 2, flapped, late, rules, spec).replicas == 2


def test_fit_result_summary_fields() -> None:
    fit: FleetFit = fit_fleet([ask("hi", 10, agg(8)), ask("lo", 0, agg(6))], 10)
    assert fit.binds and fit.used_gpus == 10 and fit.wanted_gpus == {"hi": 8, "lo": 6}
    assert fit.granted_gpus == {"hi": 8, "lo": 2}


@pytest.mark.parametrize(("zero", "why", "priced"), [
    (True, Reason.WAKE_TOGETHER, True),  # woken for requests held at the router: nothing measured yet
    (True, Reason.SLA_CAPACITY, True),  # sized while its replicas start and show nothing
    (True, Reason.IDLE_WINDOW, False),  # kept through the idle window: no request waits for it
    (False, Reason.SLA_CAPACITY, False),  # a floor of one: its first replica is never in the fit
], ids=["woken", "starting", "idle-window", "cannot-sleep"])
def test_a_sleeping_policys_first_replicas_unmeasured_are_priced_as_an_unbounded_queue(zero: bool, why: Reason,
                                                                                       priced: bool) -> None:
    from planner.fleet import policy_ask

    floors = {"prefill": {"min_replicas": 0}, "decode": {"min_replicas": 0}} if zero else {}
    pol = policy(pools=floors, **({"scale_to_zero_after_s": 600} if zero else {}))
    decision = Decision(0.0, {"prefill": PoolDecision(2, 1, 2.0, (why,)), "decode": PoolDecision(1, 2, 1.0, (why,))},
                        (why,))
    asked = policy_ask("sleepy", 0, pol, decision, PlannerState(), look=None)
    costs = {p: a.sla_cost for p, a in asked.pools.items()}
    if priced:
        assert costs == {"prefill": (math.inf, 1.0), "decode": (math.inf,)}
        assert asked.pools["prefill"].pressure(0) > 1e17  # outranks any finite pressure
    else:
        assert costs == {"prefill": (), "decode": ()}


def test_requests_held_at_the_router_make_a_pool_at_zero_an_unbounded_queue() -> None:
    """Outlook.pressure at zero replicas: no traffic misses nothing, unless requests wait at the router for a
    replica (Observation.waiting): those are served by nothing else."""
    from dataclasses import replace

    from planner.decide.outlook import outlook
    from planner.decide.whatif import what_if_inputs, what_if_policy
    from planner.types import Pool
    from tests.support.decide_support import spec

    pol = what_if_policy(policy())
    obs, forecast = what_if_inputs(pol, 0.0, 1000, 200)
    idle = outlook(spec(pol), obs, forecast, None, 0.0)
    held = outlook(spec(pol), replace(obs, waiting=3), forecast, None, 0.0)
    assert idle is not None and held is not None
    assert idle.pressure(Pool.PREFILL, 0) == 0.0 and held.pressure(Pool.PREFILL, 0) == math.inf
    assert held.pressure(Pool.PREFILL, 1) == idle.pressure(Pool.PREFILL, 1)  # one replica: as without them
