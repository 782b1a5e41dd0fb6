"""The router's replicas: exactly those in the process actuator's targets.json, least outstanding first.

The file is re-read whenever it changes (checked on every request and every 0.2 s), so a replica the
actuator stops listing leaves the rotation at once; it stays *known* (out of rotation, its outstanding
requests still counted) until those requests finish, so the actuator can wait for them before it stops
the replica. Only the router's event loop touches this state: no locks.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from planner.actuators.file_sd import Target, TargetsError, parse_targets
from planner.telemetry import RouterMetrics

log = logging.getLogger("planner.router")


@dataclass(eq=False)
class Backend:
    address: str  # host:port
    pool: str
    in_rotation: bool = True
    outstanding: int = 0
    sent: int = 0  # requests sent: ties on outstanding go to the one sent fewer (round robin)

    @property
    def url(self) -> str:
        return f"http://{self.address}"


class Backends:
    def __init__(self, targets_file: Path, metrics: RouterMetrics, logger: logging.Logger = log) -> None:
        self.targets_file = targets_file
        self.metrics = metrics
        self.logger = logger
        self.by_address: dict[str, Backend] = {}
        self._signature: tuple[int, int, int] | None = None
        self._problem: str | None = None  # said once until the file is good again
        self.loads = 0  # times a changed file was read

    # ----------------------------------------------------------------------------------- the file
    def refresh(self) -> bool:
        """Re-read targets.json if it changed; True when the rotation was rebuilt from it."""
        try:
            st = os.stat(self.targets_file)
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:  # missing (not written yet) or unreadable: no replicas from it
            signature = None
        if signature == self._signature and self.loads:
            return False
        self._signature = signature
        if signature is None:
            self._say(f"{self.targets_file} does not exist yet: no replicas (is `planner run` with actuator "
                      "kind process running with this policy?)")
            targets: list[Target] = []
        else:
            try:
                targets = parse_targets(self.targets_file.read_text(), str(self.targets_file))
            except (OSError, TargetsError, UnicodeDecodeError) as exc:
                self._say(f"{exc}; keeping the {sum(b.in_rotation for b in self.by_address.values())} replicas "
                          "in rotation")
                return False
        self._problem = None
        self.loads += 1
        self._rebuild(targets)
        return True

    def _say(self, problem: str) -> None:
        if problem != self._problem:
            self._problem = problem
            self.logger.warning("router: %s", problem)

    def _rebuild(self, targets: list[Target]) -> None:
        wanted = {t.address: t.pool for t in targets}
        for address, backend in self.by_address.items():
            if address not in wanted and backend.in_rotation:
                backend.in_rotation = False
                self.logger.info("router: %s (%s) out of rotation, %d in flight", address, backend.pool,
                                 backend.outstanding)
        for address, pool in wanted.items():
            known = self.by_address.get(address)
            if known is None or known.pool != pool:
                if known is not None:  # the same port now serves another pool: a new replica
                    self._drop(known)
                self.by_address[address] = Backend(address, pool)
                self.metrics.outstanding.labels(pool=pool, replica=address).set(0)
                self.logger.info("router: %s (%s) in rotation", address, pool)
            elif not known.in_rotation:
                known.in_rotation = True
        for backend in [b for b in self.by_address.values() if not b.in_rotation and b.outstanding == 0]:
            self._drop(backend)
        self._export_counts()

    def _drop(self, backend: Backend) -> None:
        self.by_address.pop(backend.address, None)
        try:
            self.metrics.outstanding.remove(backend.pool, backend.address)
        except KeyError:
            pass

    def _export_counts(self) -> None:
        pools = {b.pool for b in self.by_address.values()} | set(self.metrics_pools)
        for pool in pools:
            self.metrics.replicas.labels(pool=pool).set(self.in_rotation(pool))

    @property
    def metrics_pools(self) -> tuple[str, ...]:
        return tuple(s.labels["pool"] for f in self.metrics.replicas.collect() for s in f.samples)

    # ----------------------------------------------------------------------------------- routing
    def in_rotation(self, pool: str) -> int:
        return sum(1 for b in self.by_address.values() if b.in_rotation and b.pool == pool)

    def pick(self, pool: str, exclude: set[str]) -> Backend | None:
        """The in-rotation replica of ``pool`` with the fewest requests in flight (not one in ``exclude``)."""
        candidates = [b for b in self.by_address.values()
                      if b.in_rotation and b.pool == pool and b.address not in exclude]
        return min(candidates, key=lambda b: (b.outstanding, b.sent)) if candidates else None

    def acquire(self, backend: Backend) -> None:
        backend.outstanding += 1
        backend.sent += 1
        self.metrics.outstanding.labels(pool=backend.pool, replica=backend.address).set(backend.outstanding)

    def release(self, backend: Backend) -> None:
        backend.outstanding -= 1
        if backend.address in self.by_address and self.by_address[backend.address] is backend:
            if not backend.in_rotation and backend.outstanding == 0:
                self._drop(backend)
            else:
                self.metrics.outstanding.labels(pool=backend.pool, replica=backend.address).set(backend.outstanding)

    def view(self) -> list[dict]:
        return [{"address": b.address, "pool": b.pool, "in_rotation": b.in_rotation, "outstanding": b.outstanding,
                 "sent": b.sent} for b in sorted(self.by_address.values(), key=lambda b: (b.pool, b.address))]
