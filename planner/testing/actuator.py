"""RecordingActuator: the test twin of every actuator (records calls, can fail on demand); UnreadableActuator:
an actuator that cannot say what the targets hold (the simulator's), as the control loop takes it."""

from __future__ import annotations

from collections.abc import Mapping

from planner.service.loop import ReadableActuator
from planner.types import Actuator, Applied


class RecordingActuator(ReadableActuator):  # subclassed so that mypy holds it to the protocol
    """Holds replica counts per pool like a tiny cluster; ``fail_next`` makes the next N applies raise.

    With ``inner`` it records and then hands every apply and read on (a real actuator observed by a test)."""

    def __init__(self, initial: Mapping[str, int] | None = None, inner: ReadableActuator | None = None) -> None:
        self.inner = inner
        self.current: dict[str, int] = dict(initial or {})
        self.calls: list[dict[str, int]] = []
        self.writes: list[dict[str, int]] = []
        self.fail_next = 0
        self.error: Exception = RuntimeError("injected actuation failure")

    @property
    def replicas_source(self) -> str:
        return self.inner.replicas_source if self.inner is not None else "the targets' spec.replicas"

    def read_replicas(self) -> dict[str, int] | None:
        """What the pools hold (``current``), None when it was given nothing: the loop then seeds from the
        observation, as with an actuator that cannot read the cluster."""
        if self.inner is not None:
            return self.inner.read_replicas()
        return dict(self.current) if self.current else None

    def apply(self, targets: Mapping[str, int]) -> Applied:
        self.calls.append(dict(targets))
        if self.fail_next > 0:
            self.fail_next -= 1
            raise self.error
        if self.inner is not None:
            return self.inner.apply(targets)
        before: dict[str, int | None] = {p: self.current.get(p) for p in targets}
        moved = {p: n for p, n in targets.items() if before[p] != n}
        if moved:
            self.writes.append(moved)
        self.current.update(targets)
        return Applied(before=before, after=dict(targets), changed=bool(moved))


class UnreadableActuator(ReadableActuator):
    """``inner`` (an actuator that only applies, such as planner.sim.metrics.SimActuator) as one that cannot
    read what the targets hold: the loop seeds the controller from the ready replicas the metrics show."""

    replicas_source = "nothing: it cannot read the targets"  # never logged: read_replicas is always None

    def __init__(self, inner: Actuator) -> None:
        self.inner = inner

    def read_replicas(self) -> None:
        return None

    def apply(self, targets: Mapping[str, int]) -> Applied:
        return self.inner.apply(targets)
