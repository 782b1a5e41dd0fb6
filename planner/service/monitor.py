"""Missing-signal detection wired to telemetry and logs: what the control loop calls once per tick.

``SignalTracker`` (pure) decides; this exports the result (``planner_signal_*``, ``planner_ready``), logs
each state change once, and holds the latest status for ``/readyz``.

An outage of the metrics source (a read that returns NoData: unreachable, timing out, garbage, empty) is
one log line when it starts ("Prometheus unreachable (...); holding") and one when data is back, not one
line per signal: the signals that go missing during it are the outage, already said. Readiness also fails
on ``problems`` that are not signals (the Lease cannot be taken: ``set_problem("lease", ...)``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from planner.policy_file import PolicyFile
from planner.signals import (
    SignalStatus,
    SignalTracker,
    log_changes,
    required_signals,
    signals_present,
)
from planner.telemetry import PlannerMetrics, record_signals
from planner.types import NoData, Observation

log = logging.getLogger("planner.signals")


class MissingSignalMonitor:
    def __init__(self, policy: str, pools: Iterable[str], interval_s: float, stale_after_intervals: int,
                 metrics: PlannerMetrics, logger: logging.Logger = log, source_name: str = "metrics source") -> None:
        self.policy = policy
        self.pools = tuple(pools)
        self.metrics = metrics
        self.logger = logger
        self.source_name = source_name
        self.tracker = SignalTracker(required_signals(self.pools), interval_s, stale_after_intervals)
        self._status: SignalStatus | None = None
        self._outage_since_s: float | None = None
        self._said_by_outage: set[str] = set()  # signals that went missing during an outage: not logged alone
        self.problems: dict[str, str] = {}

    @classmethod
    def for_policy(cls, policy: PolicyFile, metrics: PlannerMetrics, source_name: str = "metrics source",
                   ) -> MissingSignalMonitor:
        return cls(policy.name, policy.pool_names(), policy.interval_s, policy.metrics.stale_after_intervals,
                   metrics, source_name=source_name)

    def observe(self, observation: Observation | NoData, now_s: float) -> SignalStatus:
        changes = self.tracker.update(signals_present(observation, self.pools), now_s)
        self._log_outage(observation, now_s)
        if isinstance(observation, NoData):
            self._said_by_outage |= {c.signal for c in changes if c.missing}
        else:
            back = {c.signal for c in changes if not c.missing} & self._said_by_outage
            log_changes([c for c in changes if c.signal not in back], self.logger, self.policy)
            still = sorted(self._said_by_outage - back)
            if still:  # the source answers again, but not with these: now they are news of their own
                self.logger.warning("policy %s: signal%s %s still missing after the outage; readiness degraded",
                                    self.policy, "" if len(still) == 1 else "s", ", ".join(still))
            self._said_by_outage.clear()
        self._status = self.tracker.status(now_s)
        self._export()
        return self._status

    def _log_outage(self, observation: Observation | NoData, now_s: float) -> None:
        if isinstance(observation, NoData):
            if self._outage_since_s is None:
                self._outage_since_s = now_s
                self.logger.warning("policy %s: %s %s (%s); holding: no scale-down until it answers",
                                    self.policy, self.source_name, observation.reason.value,
                                    observation.detail[:300])
        elif self._outage_since_s is not None:
            self.logger.info("policy %s: %s answering again after %.0fs", self.policy, self.source_name,
                             now_s - self._outage_since_s)
            self._outage_since_s = None

    def set_problem(self, key: str, message: str | None) -> None:
        """A reason readiness fails that is not a signal (``message`` None clears it)."""
        if message is None:
            self.problems.pop(key, None)
        else:
            self.problems[key] = message
        self._export()

    @property
    def starting(self) -> bool:
        """Some signal not yet seen once (and not yet missing): nothing says the inputs work."""
        return self._status is None or any(age is None for age in self._status.seconds_since_good.values())

    @property
    def ready(self) -> bool:
        """The one readiness /readyz, /v1/policies and ``planner_ready`` report: every signal seen, none missing,
        no problem."""
        return self._status is not None and not self.starting and self._status.ready and not self.problems

    def _export(self) -> None:
        if self._status is not None:
            record_signals(self.metrics, self.policy, self._status)
        self.metrics.ready.labels(policy=self.policy).set(1 if self.ready else 0)

    def status(self) -> SignalStatus | None:
        """Latest status (None before the first read): pass as ``readiness`` to service.app.create_app."""
        return self._status
