"""Published desired replicas: what KEDA (metrics-api, external gRPC) and HPA (gauge) read.

With KEDA/HPA the planner does not write the cluster; it serves N per pool and the HPA, with an
AverageValue target of 1, computes ceil(N / 1) = N (INTEGRATION.md §2.5). ``DesiredStore`` is the one
place the latest N lives; ``PublishActuator`` alone writes it (the keda and hpa kinds; with other kinds it
stays empty and KEDA sees "unavailable"), and the HTTP and gRPC servers, on other threads, read it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.types import Applied

log = logging.getLogger("planner.actuators")


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

    def __init__(self, store: DesiredStore, kind: str, reader: Any = None) -> None:
        self.store = store
        self.kind = kind
        # Reads what KEDA/the HPA set (the targets' spec.replicas) when the planner has credentials to read
        # the targets' /scale: a KubernetesScaleActuator used for ``read_replicas()`` only, never to write.
        self.reader = reader

    replicas_source = "the targets' spec.replicas"  # what KEDA/the HPA set, read through ``reader``

    def read_replicas(self) -> dict[str, int] | None:
        """The targets' ``spec.replicas``, or None when the planner cannot read them (no credentials or
        no targets in the policy; the control loop then says so and seeds from the ready replicas)."""
        if self.reader is None:
            return None
        from planner.actuators.errors import ActuationError

        try:
            return self.reader.read_replicas()
        except ActuationError as exc:
            # Publishing must not wait on a read it does not need: fall back (the loop says so) and go on.
            log.warning("%s: cannot read what KEDA/the HPA set (%s)", self.kind, exc)
            return None

    def apply(self, targets: Mapping[str, int]) -> Applied:
        before = self.store.publish(targets)
        changed = any(before[p] != n for p, n in targets.items())
        return Applied(before=before, after=dict(targets), changed=changed, detail=f"published for {self.kind}")


class DesiredStores:
    """The stores of every policy one controller process runs (``planner run --policy A --policy B``).

    KEDA names the policy in its trigger (``policy=`` in the metrics-api URL, ``policy`` in the external
    scaler's metadata); with one policy it may leave it out."""

    def __init__(self, stores: Iterable[DesiredStore]) -> None:
        self.by_policy = {s.policy: s for s in stores}

    @classmethod
    def of(cls, stores: DesiredStore | DesiredStores) -> DesiredStores:
        return stores if isinstance(stores, DesiredStores) else cls([stores])

    def pick(self, policy: str | None) -> DesiredStore | str:
        """The store for ``policy``, or the error to answer (unknown policy, or several and none named)."""
        if policy:
            return self.by_policy.get(policy) or f"unknown policy {policy!r}; allowed: {', '.join(self.by_policy)}"
        if len(self.by_policy) == 1:
            return next(iter(self.by_policy.values()))
        return f"this controller runs several policies: name one with policy= ({', '.join(self.by_policy)})"
