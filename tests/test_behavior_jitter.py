"""Rate limits and stabilisation windows on a live tick's jitter, and HPA's period start over both directions.

A live loop's ticks land a few hundred ms either side of their grid points. Comparing "is this event older
than the period" exactly made a 20 s step come 20 or 25 s after the last one at a 5 s interval, depending on
microseconds; with the tolerance (a quarter tick) every step and every release comes on the tick the exact
simulator clock gives. Pure: behave()/commit() driven with a list of jittered tick times (no clock).
"""

from __future__ import annotations

import random

import pytest

from planner.config import Behavior, PoolSpec, ScalingPolicy, ScalingRules
from planner.decide.behavior import JITTER_SHARE, behave, commit, period_start
from planner.decide.state import PoolMemory

INTERVAL_S = 5.0
POOL = PoolSpec(min_replicas=1, max_replicas=32)


def jittered_ticks(n: int, jitter_s: float, seed: int) -> list[tuple[int, float]]:
    """(grid index, time) of ``n`` ticks at INTERVAL_S with ±jitter_s; both extremes appear early on."""
    rng = random.Random(seed)
    extremes = [jitter_s, -jitter_s, -jitter_s, jitter_s]
    return [(k, k * INTERVAL_S + (extremes[k] if k < len(extremes) else rng.uniform(-jitter_s, jitter_s)))
            for k in range(n)]


def run(rules: Behavior, desired: list[int], ticks: list[tuple[int, float]], current: int,
        tick_s: float) -> list[tuple[int, int]]:
    """(grid index, replicas) of every tick that changed the replicas."""
    memory = PoolMemory(target=current)
    changes = []
    for (k, t), want in zip(ticks, desired, strict=True):
        b = behave(want, current, memory, t, rules, POOL, flap_guard=False, tick_s=tick_s)
        memory = commit(b.memory, current, b.replicas, t, rules)
        if b.replicas != current:
            changes.append((k, b.replicas))
        current = b.replicas
    return changes


def down_rules(window_s: int, pods: int, period_s: int) -> Behavior:
    return Behavior(scale_down=ScalingRules(stabilization_window_s=window_s,
                                            policies=[ScalingPolicy(type="pods", value=pods, period_s=period_s)]))


def up_rules(pods: int, period_s: int) -> Behavior:
    return Behavior(scale_up=ScalingRules(policies=[ScalingPolicy(type="pods", value=pods, period_s=period_s)]))


# (name, rules, desired per tick, start replicas, grid indices at which the replicas must change)
CASES = [
    ("one pod per 20 s down: a step every 4 ticks", down_rules(0, 1, 20), [1] * 30, 8,
     [0, 4, 8, 12, 16, 20, 24]),
    ("one pod per 20 s up: a step every 4 ticks", up_rules(1, 20), [8] * 30, 1, [0, 4, 8, 12, 16, 20, 24]),
    ("a 60 s window releases at 60 s", down_rules(60, 100, 15), [8] + [2] * 20, 8, [12]),
    ("a 60 s window, then one pod per 30 s", down_rules(60, 1, 30), [8] + [5] * 40, 8, [12, 18, 24]),
]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("name", "rules", "desired", "start", "expect"), CASES, ids=[c[0] for c in CASES])
def test_steps_and_releases_land_on_the_tick_the_exact_clock_gives(name: str, rules: Behavior, desired: list[int],
                                                                   start: int, expect: list[int], seed: int) -> None:
    exact = [(k, k * INTERVAL_S) for k in range(len(desired))]
    assert [k for k, _ in run(rules, desired, exact, start, INTERVAL_S)] == expect  # the simulator's clock
    jittered = jittered_ticks(len(desired), 0.3, seed)
    assert [k for k, _ in run(rules, desired, jittered, start, INTERVAL_S)] == expect


def test_without_the_tolerance_the_same_jitter_holds_a_step_one_tick_too_long() -> None:
    """The defect itself, so the cases above are known to exercise it: exact comparisons on jittered ticks."""
    rules, desired = down_rules(0, 1, 20), [1] * 30
    late = [k for k, _ in run(rules, desired, jittered_ticks(30, 0.3, 0), 8, tick_s=0.0)]
    assert late != [0, 4, 8, 12, 16, 20, 24]
    assert any(b - a == 5 for a, b in zip(late, late[1:], strict=False)), late  # a 25 s step


@pytest.mark.parametrize("early_s", [1.5, 2.0, 2.5])
def test_the_tolerance_never_releases_a_whole_tick_early(early_s: float) -> None:
    """A tick more than a quarter interval before the boundary still holds (here 1.5-2.5 s early at 5 s)."""
    assert early_s > JITTER_SHARE * INTERVAL_S
    rules = down_rules(0, 1, 20)
    memory = commit(PoolMemory(target=8), 8, 7, 0.0, rules)
    assert behave(1, 7, memory, 20.0 - early_s, rules, POOL, flap_guard=False, tick_s=INTERVAL_S).replicas == 7
    assert behave(1, 7, memory, 20.0 - 0.3, rules, POOL, flap_guard=False, tick_s=INTERVAL_S).replicas == 6


# (events within the period, current, HPA's periodStartReplicas)
PERIOD_STARTS = [
    (((10.0, +2), (15.0, -1)), 5, 4),  # up 2 and down 1: started one below where it is
    (((10.0, -3), (20.0, +1)), 4, 6),
    (((10.0, +1),), 3, 2),
    ((), 3, 3),
]


@pytest.mark.parametrize(("events", "current", "start"), PERIOD_STARTS)
def test_the_period_start_counts_both_directions_as_hpa_does(events: tuple, current: int, start: int) -> None:
    assert period_start(current, events, 0.0) == start


def test_a_scale_up_after_a_scale_down_in_the_period_is_capped_from_the_period_start() -> None:
    """Up 2 pods per 60 s: 5 -> 3 (down) then up: HPA's start is 5, so the cap is 7; counting the
    scale-ups only (start 3) capped at 5."""
    rules = Behavior(scale_up=ScalingRules(policies=[ScalingPolicy(type="pods", value=2, period_s=60)]),
                     scale_down=ScalingRules(policies=[ScalingPolicy(type="pods", value=2, period_s=60)]))
    memory = commit(PoolMemory(target=5), 5, 3, 0.0, rules)
    assert behave(10, 3, memory, 10.0, rules, POOL, flap_guard=False, tick_s=INTERVAL_S).replicas == 7


@pytest.mark.parametrize(("tick_s", "held"), [(30.0, True), (15.0, True), (1.0, False)])
def test_the_flap_guard_reads_120_intervals_back_at_most_an_hour(tick_s: float, held: bool) -> None:
    """A one-replica scale-down right after a scale-up that reversed a scale-down 200 s ago: within the audit
    at a 30 s or 15 s interval (an hour, 30 minutes), so held; past it at `planner up`'s 1 s (2 minutes)."""
    from planner.types import Reason

    rules = Behavior(scale_down=ScalingRules(stabilization_window_s=0,
                                             policies=[ScalingPolicy(type="percent", value=100, period_s=1)]))
    memory = PoolMemory(target=2, direction_changes=(800.0,), last_direction=1)
    b = behave(1, 2, memory, 1000.0, rules, POOL, tick_s=tick_s)
    assert (b.replicas == 2) == held
    assert (Reason.SCALE_DOWN_STABILIZED in b.reasons) == held
