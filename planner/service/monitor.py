"""Missing-signal detection wired to telemetry and logs: what the control loop calls once per tick.

``SignalTracker`` (pure) decides; this exports the result (``planner_signal_*``, ``planner_ready``), logs
each state change once, and holds the latest status for ``/readyz``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

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
                 metrics: PlannerMetrics, logger: logging.Logger = log) -> None:
        self.policy = policy
        self.pools = tuple(pools)
        self.metrics = metrics
        self.logger = logger
        self.tracker = SignalTracker(required_signals(self.pools), interval_s, stale_after_intervals)
        self._status: SignalStatus | None = None
        self._no_data: str | None = None  # the reason while the source gives no data (said once per outage)

    @classmethod
    def for_policy(cls, policy, metrics: PlannerMetrics) -> MissingSignalMonitor:  # noqa: ANN001 - config.Policy
        return cls(policy.name, policy.pool_names(), policy.interval_s, policy.metrics.stale_after_intervals,
                   metrics)

    def observe(self, observation: Observation | NoData, now_s: float) -> SignalStatus:
        self._say_outage(observation)
        changes = self.tracker.update(signals_present(observation, self.pools), now_s)
        log_changes(changes, self.logger, self.policy)
        self._status = self.tracker.status(now_s)
        record_signals(self.metrics, self.policy, self._status)
        return self._status

    def _say_outage(self, observation: Observation | NoData) -> None:
        """One line when the source stops giving data (the decision holds every pool meanwhile), one when
        it gives data again - not one per tick."""
        if isinstance(observation, NoData):
            if self._no_data is None:
                self._no_data = observation.reason.value
                self.logger.warning("policy %s: no data from the metrics source (%s: %s); holding every pool at "
                                    "its size until it answers", self.policy, observation.reason.value,
                                    observation.detail)
        elif self._no_data is not None:
            self.logger.info("policy %s: metrics source answers again after no data (%s); deciding from data",
                             self.policy, self._no_data)
            self._no_data = None

    def status(self) -> SignalStatus | None:
        """Latest status (None before the first read): pass as ``readiness`` to service.app.create_app."""
        return self._status
