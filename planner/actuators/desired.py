"""Published desired replicas: what KEDA (metrics-api, external gRPC) and HPA (gauge) read.

With KEDA/HPA the planner does not write the cluster; it serves N per pool and the HPA, with an
AverageValue target of 1, computes ceil(N / 1) = N (INTEGRATION.md §2.5). ``DesiredStore`` is the one
place the latest N lives; ``PublishActuator`` alone writes it (the keda and hpa kinds; with other kinds it
stays empty and KEDA sees "unavailable"), and the HTTP and gRPC servers, on other threads, read it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from planner.types import Applied


@dataclass(frozen=True)
class Desired:
    policy: str
    replicas: Mapping[str, int]
    version: int  # bumps on every change (stream subscribers compare it)


class DesiredStore:
    def __init__(self, policy: str, pools: tuple[str, ...]) -> None:
        self.policy = policy
        self.pools = tuple(pools)
        self._lock = threading.Lock()
        self._replicas: dict[str, int] = {}
        self._version = 0

    def publish(self, targets: Mapping[str, int]) -> dict[str, int | None]:
        with self._lock:
            before: dict[str, int | None] = {p: self._replicas.get(p) for p in targets}
            if any(before[p] != n for p, n in targets.items()):
                self._replicas.update({p: int(n) for p, n in targets.items()})
                self._version += 1
            return before

    def snapshot(self) -> Desired:
        with self._lock:
            return Desired(self.policy, dict(self._replicas), self._version)

    def get(self, pool: str) -> int | None:
        """N for ``pool``; None before the first decision (served as 'unavailable', never as 0)."""
        with self._lock:
            return self._replicas.get(pool)


class PublishActuator:
    """Actuator kinds ``keda`` and ``hpa``: publish N to the store (the one writer of it), touch nothing else.

    The ``planner_desired_replicas`` gauge, which the HPA reads, is set by the loop's telemetry for every
    actuator kind (planner/telemetry.py ``record_decision``), not here.
    """

    def __init__(self, store: DesiredStore, kind: str) -> None:
        self.store = store
        self.kind = kind

    def apply(self, targets: Mapping[str, int]) -> Applied:
        before = self.store.publish(targets)
        changed = any(before[p] != n for p, n in targets.items())
        return Applied(before=before, after=dict(targets), changed=changed, detail=f"published for {self.kind}")
