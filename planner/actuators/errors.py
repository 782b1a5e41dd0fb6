"""Actuation failures: one line naming the target and what to fix; the control loop counts and retries them."""

from __future__ import annotations


class ActuationError(Exception):
    """A target could not be moved this tick (the loop logs it, counts it and tries again next tick)."""


class LeadershipLost(ActuationError):
    """A write refused because this controller's Lease may have expired: another controller may lead now."""
