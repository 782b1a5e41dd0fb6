"""Kubernetes: choosing which pod a scale-down removes, before the replica count is lowered.

A Deployment's ReplicaSet controller picks the pods to delete itself, in this order (kube-controller-manager,
``ActivePodsWithRanks``): not yet scheduled, then Pending, then not Ready, then the lowest
``controller.kubernetes.io/pod-deletion-cost`` (absent = 0), then by node spread, readiness time and age.
So the actuator only has to choose among the Ready pods, and only as many as the not-ready ones do not
already cover: it marks those with the lowest cost there is, lifts its mark from any other pod still
carrying it from an earlier scale-down (a pod marked then and not removed must not be the first to go
now), and then writes the Scale. The choice is the same as the process actuator's (victims.py): fewest
requests in flight - the engine's own in-system gauges, read from each pod's /metrics - and the newest
among equals. A pod whose load cannot be read goes after the ones known.

Only Deployments (their ReplicaSets) honour the annotation; StatefulSets and LeaderWorkerSets remove the
highest ordinal, and the Dynamo and Grove operators decide for themselves. Marking is best effort: a pod
list or a patch that fails is said once per target and the scale is written anyway (the ReplicaSet then
picks by its own order; each engine's preStop still drains whichever pod goes, docs/drain.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from planner.actuators.errors import LeadershipLost
from planner.actuators.replica import engine_in_flight
from planner.actuators.targets import MARKED_KINDS, ScaleTarget
from planner.actuators.victims import Candidate, least_loaded

ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
MARK = str(-(2**31))  # the lowest int32: below any cost a user may have set; also how our mark is recognised
SCRAPE_TIMEOUT_S = 1.0
SCRAPE_THREADS = 16


@dataclass(frozen=True)
class PodState:
    name: str
    created_s: float  # creationTimestamp, seconds since the epoch
    ready: bool  # Running with condition Ready True: the pods a deletion cost orders
    url: str | None  # http://podIP:port of the engine, None when the pod has no IP or no port
    cost: str | None  # the pod-deletion-cost annotation as it is now


def pod_state(pod: Any) -> PodState | None:
    """What the choice needs from a V1Pod; None for a pod already terminating or finished (the ReplicaSet
    does not count it)."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    if meta.deletion_timestamp is not None or (status is not None and status.phase in ("Succeeded", "Failed")):
        return None
    ready = bool(status is not None and status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in (status.conditions or [])))
    port = _engine_port(spec.containers if spec is not None else [])
    ip = status.pod_ip if status is not None else None
    created = meta.creation_timestamp.timestamp() if meta.creation_timestamp is not None else 0.0
    return PodState(meta.name, created, ready, f"http://{_host(ip)}:{port}" if ip and port else None,
                    (meta.annotations or {}).get(ANNOTATION))


def _engine_port(containers: Sequence[Any]) -> int | None:
    """The container port named ``http`` (what `planner init` renders), else the first one declared."""
    ports = [p for c in containers for p in (c.ports or [])]
    named = [p for p in ports if p.name == "http"]
    chosen = (named or ports or [None])[0]
    return int(chosen.container_port) if chosen is not None else None


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def to_mark(pods: Sequence[PodState], replicas: int) -> int:
    """How many Ready pods the ReplicaSet will remove going to ``replicas``: what the not-ready ones, which
    go first, leave."""
    not_ready = sum(1 for p in pods if not p.ready)
    return max(0, min(len(pods) - replicas - not_ready, sum(1 for p in pods if p.ready)))


class DeletionMarker:
    def __init__(self, api_client: Any, gauges: Sequence[str], request_timeout_s: float,
                 logger: logging.Logger) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.gauges = tuple(gauges)
        self.request_timeout_s = request_timeout_s
        self.logger = logger
        self._warned: set[str] = set()

    def mark(self, t: ScaleTarget, selector: str | None, replicas: int,
             may_write: Callable[[], str | None] | None) -> list[str]:
        """Mark the pods of ``t`` that going to ``replicas`` should remove; returns their names (in removal
        order). Best effort: a failure is said once per target and [] returned."""
        if t.kind not in MARKED_KINDS:
            return []
        if not selector:
            self._warn(t, "its Scale reports no status.selector: cannot find its pods")
            return []
        try:
            listed = self.core.list_namespaced_pod(t.namespace, label_selector=selector,
                                                   _request_timeout=self.request_timeout_s).items
        except Exception as exc:  # noqa: BLE001 - best effort: 403, a timeout, anything
            self._warn(t, f"cannot list its pods ({_short(exc)}); grant list and patch on pods "
                          "(deploy/overlays/direct/rbac.yaml)")
            return []
        pods = [p for p in (pod_state(x) for x in listed) if p is not None]
        count = to_mark(pods, replicas)
        ready = [p for p in pods if p.ready]
        chosen = self._choose(ready, count) if count else []
        stale = [p.name for p in pods if p.cost == MARK and p.name not in chosen]
        fresh = [p.name for p in pods if p.cost != MARK and p.name in chosen]
        for name, cost in [*((n, None) for n in stale), *((n, MARK) for n in fresh)]:
            refusal = may_write() if may_write is not None else None
            if refusal:
                raise LeadershipLost(f"{t.describe()}: not marking pod {name}: {refusal}")
            try:
                self.core.patch_namespaced_pod(name, t.namespace, {"metadata": {"annotations": {ANNOTATION: cost}}},
                                               _request_timeout=self.request_timeout_s)
            except Exception as exc:  # noqa: BLE001 - best effort, as above
                self._warn(t, f"cannot patch pod {name} ({_short(exc)})")
                return []
        self._warned.discard(t.pool)
        return chosen

    def _choose(self, ready: list[PodState], count: int) -> list[str]:
        with ThreadPoolExecutor(max_workers=min(SCRAPE_THREADS, len(ready))) as pool:
            loads = list(pool.map(lambda p: engine_in_flight(p.url, self.gauges, SCRAPE_TIMEOUT_S)
                                  if p.url else None, ready))
        candidates = [Candidate(p.name, p.created_s, None, load) for p, load in zip(ready, loads, strict=True)]
        chosen = least_loaded(candidates, count)
        self.logger.info("marking pod%s %s for deletion (%s=%s; in flight per Ready pod: %s)",
                         "" if len(chosen) == 1 else "s", ", ".join(chosen), ANNOTATION, MARK,
                         ", ".join(f"{c.item}: {'unknown' if c.load is None else f'{c.load:g}'}" for c in candidates))
        return chosen

    def _warn(self, t: ScaleTarget, why: str) -> None:
        if t.pool not in self._warned:
            self._warned.add(t.pool)
            self.logger.warning("%s: scaling down without choosing the pod that goes: %s", t.describe(), why)


def _short(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    return f"{status} {reason}" if status is not None else f"{type(exc).__name__}: {str(exc)[:200]}"
