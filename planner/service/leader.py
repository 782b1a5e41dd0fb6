"""Leader election on a ``coordination.k8s.io/v1`` Lease, stepped by the control loop with its own ``now_s``.

Not ``kubernetes.leaderelection``: that one builds its Lease client from the global configuration (no
injected ApiClient), runs the leader callback in a thread it cannot stop, reads the wall clock itself and
calls ``sys.exit`` on bad parameters (INTEGRATION.md §4.4). This one is a single method the loop calls once
per tick before it actuates: acquire, renew, or take over an expired lease, each a compare-and-swap on
``metadata.resourceVersion`` so two candidates can never both win a write.

Safety against split brain:
- every Lease call carries ``request_timeout_s`` (default a fifth of the lease, at most 5 s): an API server
  that accepts connections and never answers costs one timeout, not the lease;
- after a failed call leadership is judged by the clock *after* the call, not by the tick's start;
- ``may_write()``, asked by the actuator right before every write, refuses once the renew deadline has
  passed since the last renewal (``renew_deadline_s``, at most the lease less ``request_timeout_s``, the
  longest a write may still be in flight), so an old leader never writes after a standby may have taken over;
- ``leads_now()`` is the same judgement by the local clock at any moment: ``planner_leader`` reads it when
  scraped, so a leader cut off from the API server reports 0 as soon as its deadline passes, not at the next
  tick.
Timing follows client-go's names: ``lease_duration_s`` > ``renew_deadline_s`` > ``retry_period_s``. Lease calls
happen on the loop's ticks; a renewal younger than ``retry_period_s`` is not repeated (the loops of one process
would otherwise race each other to a 409). ``check_timing`` says which combinations work with an interval.
A lease that cannot be taken at all (403: no RBAC on leases; 404 on the API; unreachable) is a *problem*
(``problem``): logged with the RBAC hint when it starts, counted by the loop each tick, and it fails
readiness. Losing a race or finding the lease held by another candidate is not a problem: that is standby.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("planner.leader")
RBAC_HINT = ("the planner's ServiceAccount needs get/update on the Lease {name!r} and create on leases in "
             "namespace {namespace} (deploy/components/leader-election)")


def default_timing(interval_s: float, lease_duration_s: float | None = None, renew_deadline_s: float | None = None,
                   retry_period_s: float | None = None) -> tuple[float, float, float]:
    """(lease duration, renew deadline, retry period) with the defaults filled in: the lease 3 intervals (at
    least 15 s), the deadline two thirds of it, the retry period half an interval (every tick renews)."""
    lease = float(max(15.0, 3.0 * interval_s) if lease_duration_s is None else lease_duration_s)
    renew = float(lease * 2.0 / 3.0 if renew_deadline_s is None else renew_deadline_s)
    retry = float(min(interval_s / 2.0, renew / 3.0) if retry_period_s is None else retry_period_s)
    return lease, renew, retry


def check_timing(interval_s: float, lease_duration_s: float, renew_deadline_s: float,
                 retry_period_s: float) -> str | None:
    """Why these lease timings cannot work with a loop ticking every ``interval_s`` (None when they can)."""
    for flag, value in (("--lease-duration-s", lease_duration_s), ("--renew-deadline-s", renew_deadline_s),
                        ("--retry-period-s", retry_period_s)):
        if not value > 0:
            return f"{flag} {value:g}: must be > 0"
    if renew_deadline_s >= lease_duration_s:
        return (f"--renew-deadline-s {renew_deadline_s:g}: must be less than --lease-duration-s "
                f"{lease_duration_s:g} (a leader must stop acting before a standby may take the lease)")
    if renew_deadline_s <= 1.2 * retry_period_s:
        return (f"--retry-period-s {retry_period_s:g}: must be less than --renew-deadline-s {renew_deadline_s:g} "
                "/ 1.2 (as client-go requires: a renewal must be retried before the deadline)")
    if renew_deadline_s <= interval_s + retry_period_s:
        return (f"--renew-deadline-s {renew_deadline_s:g}: must exceed the policy's interval_s {interval_s:g} + "
                f"--retry-period-s {retry_period_s:g}: the lease is renewed on the ticks, and a healthy leader "
                "would lose it between two")
    return None


def timing_problem(interval_s: float, lease_duration_s: float | None = None, renew_deadline_s: float | None = None,
                   retry_period_s: float | None = None) -> str | None:
    """Why the timings given (None: default_timing's) cannot work, naming a flag the user gave: a renew deadline
    derived from --lease-duration-s (two thirds of it) that is too short is the lease duration's fault."""
    for flag, value in (("--lease-duration-s", lease_duration_s), ("--renew-deadline-s", renew_deadline_s),
                        ("--retry-period-s", retry_period_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"{flag} {value:g}: must be > 0 and finite (seconds)"
    lease, renew, retry = default_timing(interval_s, lease_duration_s, renew_deadline_s, retry_period_s)
    problem = check_timing(interval_s, lease, renew, retry)
    derived = lease_duration_s is not None and renew_deadline_s is None
    if problem is None or not (derived and problem.startswith("--renew-deadline-s")):
        return problem
    return (f"--lease-duration-s {lease:g}: too short for the policy's interval_s {interval_s:g}: its renew deadline "
            f"(two thirds of it, {renew:g} s) must exceed interval_s + the retry period ({retry:g} s); the default "
            f"is 3 intervals ({max(15.0, 3 * interval_s):g} s)")


def _ts(now_s: float) -> datetime:
    # The API server parses Lease times as RFC3339 with exactly six fractional digits (MicroTime), but the
    # client serialises with isoformat(), which drops the fraction when it is zero: never send a zero one.
    t = datetime.fromtimestamp(now_s, tz=UTC)
    return t.replace(microsecond=1) if t.microsecond == 0 else t


class LeaseElector:
    def __init__(self, api_client: Any, name: str, namespace: str, identity: str, lease_duration_s: float,
                 logger: logging.Logger = log, *, clock: Callable[[], float] | None = None,
                 request_timeout_s: float | None = None, renew_deadline_s: float | None = None,
                 retry_period_s: float | None = None) -> None:
        from kubernetes import client

        if lease_duration_s <= 0:
            raise ValueError(f"lease_duration_s must be > 0, got {lease_duration_s}")
        self.api = client.CoordinationV1Api(api_client)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s = float(lease_duration_s)
        self.request_timeout_s = float(request_timeout_s or max(0.1, min(5.0, self.lease_duration_s / 5.0)))
        # Past the deadline a write could still be in flight when the lease ends: at most lease - timeout.
        most_s = self.lease_duration_s - self.request_timeout_s
        self.renew_deadline_s = min(float(renew_deadline_s), most_s) if renew_deadline_s else most_s
        self.retry_period_s = float(retry_period_s or self.lease_duration_s / 3.0)
        self.logger = logger
        self.clock = clock  # the control loop's clock; None: judge by the ``now_s`` each call is given
        self._renewed_s: float | None = None  # our last successful acquire/renew
        self._leader = False
        self.problem: str | None = None  # why the lease cannot be taken or renewed; None when it can
        self.holder: str | None = None  # the identity holding the lease at our last read
        self._lock = threading.Lock()

    def _now(self, fallback_s: float) -> float:
        return self.clock() if self.clock is not None else fallback_s

    def may_write(self) -> str | None:
        """None while this candidate surely leads; else why it must not write (asked before every write)."""
        now_s = self._now(self._renewed_s or 0.0)
        if not self._leader or self._renewed_s is None:
            return f"not the leader of lease {self.namespace}/{self.name}"
        if now_s - self._renewed_s >= self.renew_deadline_s:
            return (f"lease {self.namespace}/{self.name} last renewed {now_s - self._renewed_s:.1f}s ago "
                    f"(renew deadline {self.renew_deadline_s:g}s, duration {self.lease_duration_s:g}s): another "
                    "candidate may lead by now")
        return None

    def leads_now(self) -> bool:
        """Whether this candidate leads by the local clock now (``planner_leader``, read when scraped)."""
        return self.may_write() is None if self.clock is not None else self._leader

    @property
    def is_leader(self) -> bool:
        return self._leader

    def _spec(self, now_s: float, acquired_s: datetime | None, transitions: int) -> Any:
        from kubernetes import client

        return client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=int(round(
            self.lease_duration_s)), acquire_time=acquired_s or _ts(now_s), renew_time=_ts(now_s),
            lease_transitions=transitions)

    def step(self, now_s: float) -> bool:
        """Try to become or stay leader at ``now_s``; returns whether this candidate may act now.

        Thread-safe: the loops of several policies share one elector. A renewal younger than a third of the
        lease is not repeated (the loops of one process would otherwise race each other to a 409)."""
        with self._lock:
            if self._leader and self._renewed_s is not None and 0 <= now_s - self._renewed_s < \
                    self.retry_period_s:
                return True
            return self._step_locked(now_s)

    def _step_locked(self, now_s: float) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            won = self._step(now_s)
            problem = None
        except ApiException as exc:
            problem = self._describe(exc)
            won = self._within_lease(self._now(now_s))  # judged after the call: it may have taken long
        except Exception as exc:  # noqa: BLE001 - API unreachable: keep leading only while the lease holds
            problem = f"lease {self.namespace}/{self.name}: cannot reach the API server ({type(exc).__name__}: " \
                      f"{str(exc)[:160]})"
            won = self._within_lease(self._now(now_s))
        if problem != self.problem:
            if problem is not None:
                self.logger.error("%s; %s", problem, "acting until the lease expires" if won else "not acting")
            else:
                self.logger.info("lease %s/%s: reachable again", self.namespace, self.name)
        self.problem = problem
        if won != self._leader:
            self.logger.info("lease %s/%s: %s is %s", self.namespace, self.name, self.identity,
                             "now the leader" if won else "no longer the leader")
        self._leader = won
        return won

    def _describe(self, exc: Any) -> str:
        where = f"lease {self.namespace}/{self.name}"
        if exc.status == 403:
            return f"{where}: forbidden (403); " + RBAC_HINT.format(name=self.name, namespace=self.namespace)
        if exc.status == 404:
            return f"{where}: API error 404 (is coordination.k8s.io/v1 served?)"
        return f"{where}: API error {exc.status} {exc.reason}"

    def _within_lease(self, now_s: float) -> bool:
        return self._leader and self._renewed_s is not None and now_s - self._renewed_s < self.renew_deadline_s

    def _step(self, now_s: float) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace,
                                                   _request_timeout=self.request_timeout_s)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                  spec=self._spec(now_s, None, 0))
            try:
                self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.request_timeout_s)
            except ApiException as exc2:
                if exc2.status == 409:
                    return False  # another candidate created it first
                raise
            self._renewed_s = now_s
            self.holder = self.identity
            return True
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity
        self.holder = holder
        renewed = spec.renew_time.timestamp() if spec.renew_time is not None else None
        duration = float(spec.lease_duration_seconds or self.lease_duration_s)
        expired = renewed is None or now_s >= renewed + duration
        if holder != self.identity and holder and not expired:
            return False
        transitions = int(spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        acquired = spec.acquire_time if holder == self.identity else None
        lease.spec = self._spec(now_s, acquired, transitions)
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, lease,
                                              _request_timeout=self.request_timeout_s)
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
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.request_timeout_s)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = _ts(now_s - self.lease_duration_s)
                self.api.replace_namespaced_lease(self.name, self.namespace, lease,
                                                  _request_timeout=self.request_timeout_s)
        except Exception as exc:  # noqa: BLE001 - best effort; the lease expires anyway
            self.logger.info("lease %s/%s: release failed (%s)", self.namespace, self.name, exc)
        self._leader = False
