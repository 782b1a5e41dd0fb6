"""Leader election on a ``coordination.k8s.io/v1`` Lease, stepped by the control loop with its own ``now_s``.

Not ``kubernetes.leaderelection``: that one builds its Lease client from the global configuration (no
injected ApiClient), runs the leader callback in a thread it cannot stop, reads the wall clock itself and
calls ``sys.exit`` on bad parameters (INTEGRATION.md §4.4). This one is a single method the loop calls once
per tick before it actuates: acquire, renew, or take over an expired lease, each a compare-and-swap on
``metadata.resourceVersion`` so two candidates can never both win a write.

Safety: a leader that cannot renew stops acting once ``lease_duration_s`` has passed since its last
successful renewal, which is exactly when a standby may take over.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("planner.leader")


def _ts(now_s: float) -> datetime:
    # The API server parses Lease times as RFC3339 with exactly six fractional digits (MicroTime), but the
    # client serialises with isoformat(), which drops the fraction when it is zero: never send a zero one.
    t = datetime.fromtimestamp(now_s, tz=UTC)
    return t.replace(microsecond=1) if t.microsecond == 0 else t


class LeaseElector:
    def __init__(self, api_client: Any, name: str, namespace: str, identity: str, lease_duration_s: float,
                 logger: logging.Logger = log) -> None:
        from kubernetes import client

        if lease_duration_s <= 0:
            raise ValueError(f"lease_duration_s must be > 0, got {lease_duration_s}")
        self.api = client.CoordinationV1Api(api_client)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s = float(lease_duration_s)
        self.logger = logger
        self._renewed_s: float | None = None  # our last successful acquire/renew
        self._leader = False

    @property
    def is_leader(self) -> bool:
        return self._leader

    def _spec(self, now_s: float, acquired_s: datetime | None, transitions: int) -> Any:
        from kubernetes import client

        return client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=int(round(
            self.lease_duration_s)), acquire_time=acquired_s or _ts(now_s), renew_time=_ts(now_s),
            lease_transitions=transitions)

    def step(self, now_s: float) -> bool:
        """Try to become or stay leader at ``now_s``; returns whether this candidate may act now."""
        from kubernetes.client.exceptions import ApiException

        try:
            won = self._step(now_s)
        except ApiException as exc:
            self.logger.warning("lease %s/%s: API error %s %s", self.namespace, self.name, exc.status, exc.reason)
            won = self._within_lease(now_s)
        except Exception as exc:  # noqa: BLE001 - API unreachable: keep leading only while the lease holds
            self.logger.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            won = self._within_lease(now_s)
        if won != self._leader:
            self.logger.info("lease %s/%s: %s is %s", self.namespace, self.name, self.identity,
                             "now the leader" if won else "no longer the leader")
        self._leader = won
        return won

    def _within_lease(self, now_s: float) -> bool:
        return self._leader and self._renewed_s is not None and now_s - self._renewed_s < self.lease_duration_s

    def _step(self, now_s: float) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                  spec=self._spec(now_s, None, 0))
            try:
                self.api.create_namespaced_lease(self.namespace, body)
            except ApiException as exc2:
                if exc2.status == 409:
                    return False  # another candidate created it first
                raise
            self._renewed_s = now_s
            return True
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity
        renewed = spec.renew_time.timestamp() if spec.renew_time is not None else None
        duration = float(spec.lease_duration_seconds or self.lease_duration_s)
        expired = renewed is None or now_s >= renewed + duration
        if holder != self.identity and holder and not expired:
            return False
        transitions = int(spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        acquired = spec.acquire_time if holder == self.identity else None
        lease.spec = self._spec(now_s, acquired, transitions)
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                return False  # someone else renewed or took over between our read and write
            raise
        self._renewed_s = now_s
        return True

    def release(self, now_s: float) -> None:
        """On clean shutdown: let a standby take over at once instead of after the lease expires."""
        if not self._leader:
            return
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = _ts(now_s - self.lease_duration_s)
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as exc:  # noqa: BLE001 - best effort; the lease expires anyway
            self.logger.info("lease %s/%s: release failed (%s)", self.namespace, self.name, exc)
        self._leader = False
