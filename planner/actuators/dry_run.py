"""The dry-run twin of every actuator: logs what it would do and remembers it, touches nothing."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from planner.types import Applied

log = logging.getLogger("planner.actuators")


class DryRunActuator:
    """Idempotent like the real ones: a target already "applied" is reported unchanged."""

    def __init__(self, initial: Mapping[str, int] | None = None, logger: logging.Logger = log) -> None:
        self.current: dict[str, int] = dict(initial or {})
        self._known = bool(initial)
        self.history: list[dict[str, int]] = []
        self.logger = logger

    replicas_source = "what it was told the pools hold"

    def read_replicas(self) -> dict[str, int] | None:
        """What it was told the pools hold (``initial``), None when told nothing: a dry run reads no cluster."""
        return dict(self.current) if self._known else None

    def apply(self, targets: Mapping[str, int]) -> Applied:
        before: dict[str, int | None] = {p: self.current.get(p) for p in targets}
        changed = any(before[p] != n for p, n in targets.items())
        if changed:
            moves = ", ".join(f"{p} {before[p] if before[p] is not None else '?'}->{n}" for p, n in targets.items())
            self.logger.info("dry-run: would scale %s", moves)
            self.history.append(dict(targets))
        self.current.update(targets)
        return Applied(before=before, after=dict(targets), changed=changed, detail="dry-run")
