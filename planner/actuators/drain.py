"""Draining one replica before it stops: out of the router's rotation first, then its in-flight requests end.

The order is the contract: (1) the replica leaves targets.json (the caller has done that: Prometheus and
the router read it); (2) when a router is configured, wait until the router reports the replica out of
rotation, so that no new request can reach it; (3) wait until nothing is in flight on it - the router's
outstanding count for it (requests it forwarded) and the engine's own in-system gauges (requests from
anyone) both 0 - for at most ``drain_s``; only then is it signalled. What cannot be known is waited out:
with neither count available the whole ``drain_s`` passes.

Without the router's word (no ``router_url``, or it does not answer) one idle reading of the engine's gauges
proves nothing: a router we cannot ask may still send it a request (ours re-reads targets.json every 0.2 s,
a Kubernetes Service takes seconds), and a request the engine has accepted counts in its gauges only from
its next step. On real vLLM under load a replica drained on one 0 reading lost a stream (CI, stop 37). So
then the engine must read idle throughout ``UNCONFIRMED_QUIET_S`` (within ``drain_s``).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.actuators.replica import Replica

POLL_S = 0.1
ROUTER_CONFIRM_S = 10.0  # the router re-reads targets.json every 0.2 s; this is for a stalled router
UNCONFIRMED_QUIET_S = 2.0  # ten of our router's re-reads, and many engine steps
REPLICAS_PATH = "/router/replicas"


@dataclass(frozen=True)
class DrainResult:
    idle: bool  # nothing was in flight when it was stopped (False: drain_s ran out, or in flight unknown)
    waited_s: float
    in_flight: float | None  # what was still in flight at the end (None: unknown)


class RouterView:
    """The router's own account of a replica (GET /router/replicas); None when the router cannot be asked."""

    def __init__(self, url: str | None, logger: logging.Logger) -> None:
        self.url = url.rstrip("/") if url else None
        self.logger = logger
        self._warned = False

    def entry(self, address: str) -> dict | None:
        """{"in_rotation": bool, "outstanding": int} for ``address``, {} when the router does not know it."""
        replicas = self.replicas()
        if replicas is None:
            return None
        return replicas.get(address, {})

    def outstanding(self) -> dict[str, float] | None:
        """The router's outstanding count per replica address (None: no router, or it does not answer)."""
        replicas = self.replicas()
        if replicas is None:
            return None
        return {a: float(e["outstanding"]) for a, e in replicas.items()
                if isinstance(e.get("outstanding"), int | float)}

    def replicas(self) -> dict[str, dict] | None:
        """Address -> the router's entry for it; None when there is no router or it does not answer."""
        if self.url is None:
            return None
        try:
            with urllib.request.urlopen(self.url + REPLICAS_PATH, timeout=2.0) as r:
                body = json.loads(r.read())
        except (OSError, urllib.error.URLError, ValueError) as exc:
            if not self._warned:
                self._warned = True
                self.logger.warning("router %s does not answer (%s); draining replicas on the engines' own "
                                    "in-flight counts", self.url, exc)
            return None
        if self._warned:
            self._warned = False
            self.logger.info("router %s answers again", self.url)
        replicas = body.get("replicas") if isinstance(body, dict) else None
        return {item["address"]: item for item in (replicas if isinstance(replicas, list) else [])
                if isinstance(item, dict) and isinstance(item.get("address"), str)}


def drain(replica: Replica, router: RouterView, gauges: Sequence[str], drain_s: float,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> DrainResult:
    """Steps (2) and (3) above; returns when the replica may be stopped."""
    started = clock()
    deadline = started + drain_s
    confirm_until = started + min(ROUTER_CONFIRM_S, max(drain_s, POLL_S))
    entry = router.entry(replica.address)
    while entry and entry.get("in_rotation") and clock() < confirm_until:
        sleep(POLL_S)
        entry = router.entry(replica.address)
    idle_since: float | None = None
    while True:
        entry = router.entry(replica.address) if router.url else None
        confirmed = entry is not None and not entry.get("in_rotation", False)
        if replica.exit_code() is not None:  # it ended on its own: nothing left to wait for
            return DrainResult(True, clock() - started, 0.0)
        known = [n for n in (_router_outstanding(entry), replica.in_flight(gauges)) if n is not None]
        in_flight = sum(known) if known else None
        now = clock()
        idle = in_flight == 0 and bool(known)
        if not idle:
            idle_since = None
        elif idle_since is None:
            idle_since = now
        if idle_since is not None and (confirmed or now - idle_since >= UNCONFIRMED_QUIET_S):
            return DrainResult(True, now - started, in_flight)
        if now >= deadline:  # idle at the end all the same (drain_s shorter than the quiet window, or 0)
            return DrainResult(idle, now - started, in_flight)
        sleep(POLL_S)


def _router_outstanding(entry: dict | None) -> float | None:
    if entry is None:
        return None
    value = entry.get("outstanding", 0)  # a router that no longer lists the replica has nothing on it
    return float(value) if isinstance(value, int | float) else None
