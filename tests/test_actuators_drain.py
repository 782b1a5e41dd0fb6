"""When a retired replica may be stopped (planner/actuators/drain.py), on a fake clock: at once when the router
has it out of rotation and nothing is in flight; without the router's word only after the engine has read idle
for a whole quiet window (one idle reading lost a stream on real vLLM); never past ``drain_s``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from planner.actuators.drain import POLL_S, UNCONFIRMED_QUIET_S, RouterView, drain

ADDRESS = "127.0.0.1:9000"


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


@dataclass
class FakeReplica:
    """The engine's in-flight count as a function of seconds since the drain began (None: unknown)."""
    clock: Clock
    engine: object  # Callable[[float], float | None]
    address: str = ADDRESS
    began_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.began_s = self.clock()

    def in_flight(self, gauges, timeout_s: float = 2.0) -> float | None:  # noqa: ANN001
        return self.engine(self.clock() - self.began_s)

    def exit_code(self) -> int | None:
        return None


class FakeRouter(RouterView):
    """A router that answers with ``entry(t)`` (None: does not answer); url None: no router configured."""

    def __init__(self, clock: Clock, entry, url: str | None = "http://router") -> None:  # noqa: ANN001
        super().__init__(url, logging.getLogger("test"))
        self.clock, self.began_s, self._entry = clock, clock(), entry

    def entry(self, address: str) -> dict | None:
        return self._entry(self.clock() - self.began_s) if self.url else None


def out_of_rotation(outstanding):  # noqa: ANN001, ANN201
    return lambda t: {"in_rotation": False, "outstanding": outstanding(t)}


def after(seconds: float, before: float, then: float):  # noqa: ANN201
    return lambda t: before if t < seconds else then


@pytest.mark.parametrize(("router", "engine", "drain_s", "idle", "waited_s"), [
    # the router has it out of rotation, nothing on it, the engine idle: stopped at once
    (out_of_rotation(lambda t: 0), lambda t: 0, 60, True, 0.0),
    # the router's streams end at 3 s: that is the drain
    (out_of_rotation(after(3, 1, 0)), lambda t: 0, 60, True, 3.0),
    # the engine holds one (another client) until 5 s, the router nothing
    (out_of_rotation(lambda t: 0), after(5, 1, 0), 60, True, 5.0),
    # the router still has it in rotation for 1 s (it re-reads targets.json), then not
    (lambda t: {"in_rotation": t < 1, "outstanding": 0}, lambda t: 0, 60, True, 1.0),
    # no router: one idle reading is not enough; the quiet window is
    (None, lambda t: 0, 60, True, UNCONFIRMED_QUIET_S),
    # no router: a request the engine counts only from its next step (idle at 0 s, busy 0.5-4 s) restarts the window
    (None, lambda t: 1 if 0.5 <= t < 4 else 0, 60, True, 4 + UNCONFIRMED_QUIET_S),
    # a router that does not answer is no router
    (lambda t: None, lambda t: 0, 60, True, UNCONFIRMED_QUIET_S),
    # a router stuck with it in rotation (stalled past the confirmation wait): the quiet window too
    (lambda t: {"in_rotation": True, "outstanding": 0}, lambda t: 0, 60, True, 10 + UNCONFIRMED_QUIET_S),
    # nothing known: all of drain_s, and it is not idle
    (None, lambda t: None, 30, False, 30.0),
    # busy to the end: drain_s, not idle
    (out_of_rotation(lambda t: 2), lambda t: 2, 30, False, 30.0),
    # drain_s 0 (no drain): stopped at once, idle if it reads idle
    (None, lambda t: 0, 0, True, 0.0),
    # drain_s shorter than the quiet window: idle at its end is idle
    (None, lambda t: 0, 1, True, 1.0),
])
def test_a_replica_is_stopped_when_nothing_can_still_reach_it(router, engine, drain_s, idle, waited_s) -> None:
    clock = Clock()
    view = FakeRouter(clock, router) if router is not None else FakeRouter(clock, lambda t: None, url=None)
    result = drain(FakeReplica(clock, engine), view, ("g",), drain_s, clock=clock, sleep=clock.sleep)
    assert result.idle is idle
    assert result.waited_s == pytest.approx(waited_s, abs=POLL_S * 2.5)  # a few polls of float drift
