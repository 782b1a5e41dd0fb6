"""A Kubernetes Event on each scale: ``core/v1`` Events on the target object, so ``kubectl describe
deployment qwen-decode`` and ``kubectl get events`` show what the planner did and why.

Reason is the pool's decision reasons in the Event's UpperCamelCase convention, joined by commas
(``SlaCapacity,ScaleDownLimit``); the message says the move, every reason, the observed load and the
predicted latency. Emitting is best effort: a failure (403 without the events rule, the API down) never
blocks scaling; it is logged once per kind of failure with the RBAC rule to add, and counted
(``planner_errors_total{kind="event"}``) by the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from planner.actuators.targets import ScaleTarget
from planner.types import Applied, Decision, NoData, Observation, PoolDecision

log = logging.getLogger("planner.events")
COMPONENT = "planner"
RBAC_HINT = ('the planner\'s ServiceAccount needs {{apiGroups: [""], resources: ["events"], verbs: ["create"]}} '
             "in namespace {namespace} (deploy/components/actuator-kubernetes/events-rbac.yaml)")


def camel(reason: str) -> str:
    return "".join(part.capitalize() for part in reason.split("_"))


def event_reason(d: PoolDecision) -> str:
    return (",".join(camel(r.value) for r in d.reasons) or "Scaled")[:128]


def event_message(policy: str, pool: str, before: int, after: int, d: PoolDecision,
                  observation: Observation | NoData) -> str:
    if isinstance(observation, NoData):
        seen = f"no data ({observation.reason.value})"
    elif pool in observation.pools:
        seen = f"{observation.pools[pool].rate_rps:.2f} rps"
    else:
        seen = "no data for the pool"
    predicted = [f"{name} {v:.0f} ms" for name, v in (("TTFT", d.predicted_ttft_ms), ("ITL", d.predicted_itl_ms))
                 if v is not None]
    return (f"policy {policy}: pool {pool} {before} -> {after} replicas; reasons "
            f"{', '.join(r.value for r in d.reasons) or '-'}; observed {seen}"
            + (f"; predicted {', '.join(predicted)}" if predicted else ""))[:1024]


class ScaleEvents:
    def __init__(self, api_client: Any, targets: Mapping[str, ScaleTarget], policy: str, instance: str = "",
                 request_timeout_s: float = 5.0, logger: logging.Logger = log) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.targets = dict(targets)
        self.policy = policy
        self.instance = instance or COMPONENT
        self.request_timeout_s = request_timeout_s
        self.logger = logger
        self._last_failure: str | None = None

    def record(self, decision: Decision, applied: Applied, observation: Observation | NoData,
               now_s: float) -> int:
        """One Event per pool that moved; returns how many could not be created."""
        failed = 0
        for pool, after in applied.after.items():
            before, t, d = applied.before.get(pool), self.targets.get(pool), decision.pools.get(pool)
            if before is None or before == after or t is None or d is None:
                continue
            failed += not self._emit(t, self._body(t, event_reason(d),
                                                   event_message(self.policy, pool, before, after, d, observation),
                                                   now_s, self._identity(t)))
        return failed

    def _identity(self, t: ScaleTarget) -> tuple[str | None, str | None]:
        """(uid, resourceVersion) of the target, read from its Scale (the planner may read it): without the
        uid ``kubectl describe`` does not find the Event (it lists events by the object's uid)."""
        from kubernetes import client

        try:
            if t.builtin:
                apps = client.AppsV1Api(self.core.api_client)
                fn = (apps.read_namespaced_deployment_scale if t.plural == "deployments"
                      else apps.read_namespaced_stateful_set_scale)
                meta = fn(t.name, t.namespace, _request_timeout=self.request_timeout_s).metadata
                return (meta.uid, meta.resource_version) if meta is not None else (None, None)
            obj: Any = client.CustomObjectsApi(self.core.api_client).get_namespaced_custom_object_scale(
                t.group, t.version, t.namespace, t.plural, t.name, _request_timeout=self.request_timeout_s)
            meta_d = obj.get("metadata") or {}
            return meta_d.get("uid"), meta_d.get("resourceVersion")
        except Exception as exc:  # noqa: BLE001 - best effort: the Event still goes out, without the uid
            self.logger.debug("cannot read %s for its uid: %s", t.describe(), exc)
            return None, None

    def _body(self, t: ScaleTarget, reason: str, message: str, now_s: float,
              identity: tuple[str | None, str | None] = (None, None)) -> Any:
        from kubernetes import client

        at = datetime.fromtimestamp(now_s, tz=UTC)
        uid, resource_version = identity
        return client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{t.name}.{int(now_s * 1e9):x}", namespace=t.namespace),
            involved_object=client.V1ObjectReference(api_version=t.api_version, kind=t.kind, name=t.name,
                                                     namespace=t.namespace, uid=uid,
                                                     resource_version=resource_version),
            reason=reason, message=message, type="Normal", action="Scale", count=1,
            first_timestamp=at, last_timestamp=at, source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT, reporting_instance=self.instance[:128])

    def _emit(self, t: ScaleTarget, body: Any) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.create_namespaced_event(t.namespace, body, _request_timeout=self.request_timeout_s)
        except ApiException as exc:
            hint = f"; {RBAC_HINT.format(namespace=t.namespace)}" if exc.status == 403 else ""
            self._failed(f"API error {exc.status} {exc.reason}{hint}", t)
            return False
        except Exception as exc:  # noqa: BLE001 - best effort: an Event must never block scaling
            self._failed(f"{type(exc).__name__}: {str(exc)[:160]}", t)
            return False
        if self._last_failure is not None:
            self.logger.info("events for %s: created again", t.describe())
            self._last_failure = None
        return True

    def _failed(self, what: str, t: ScaleTarget) -> None:
        if what != self._last_failure:
            self.logger.warning("cannot create an Event on %s: %s", t.describe(), what)
        self._last_failure = what
