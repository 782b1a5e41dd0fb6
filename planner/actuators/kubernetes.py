"""Direct actuation through the scale subresource (INTEGRATION.md §4.1), with compare-and-swap.

Each pool is moved by read -> compare -> replace with ``metadata.resourceVersion``: a write based on a stale
read answers 409 and is retried from a fresh read (bounded), so the planner never silently overwrites a
concurrent ``kubectl scale``; it re-decides from what is there. Only ``spec.replicas`` of the Scale object
is written. No write at all when the target is already at the wanted count.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from planner.actuators.errors import ActuationError
from planner.actuators.targets import ScaleTarget, targets_from_policy
from planner.types import Applied

log = logging.getLogger("planner.actuators")

MAX_ATTEMPTS = 4


class KubernetesScaleActuator:
    def __init__(self, targets: Mapping[str, ScaleTarget], api_client: Any = None, *,
                 field_manager: str = "planner", max_attempts: int = MAX_ATTEMPTS,
                 request_timeout_s: float = 10.0, logger: logging.Logger = log) -> None:
        from kubernetes import client

        self.targets = dict(targets)
        self.api_client = api_client
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.field_manager = field_manager
        self.max_attempts = max_attempts
        self.request_timeout_s = request_timeout_s
        self.logger = logger

    @classmethod
    def from_policy(cls, policy, api_client: Any = None, **kwargs: Any) -> KubernetesScaleActuator:  # noqa: ANN001
        return cls(targets_from_policy(policy), api_client, **kwargs)

    # --------------------------------------------------------------------------------------- scale I/O
    def read(self, t: ScaleTarget) -> tuple[int, str]:
        """(spec.replicas, metadata.resourceVersion) of the target's Scale."""
        if t.builtin:
            fn = (self.apps.read_namespaced_deployment_scale if t.plural == "deployments"
                  else self.apps.read_namespaced_stateful_set_scale)
            scale = fn(t.name, t.namespace, _request_timeout=self.request_timeout_s)
            replicas = scale.spec.replicas if scale.spec is not None else None
            return int(replicas or 0), str(scale.metadata.resource_version if scale.metadata is not None else "")
        obj: Any = self.custom.get_namespaced_custom_object_scale(t.group, t.version, t.namespace, t.plural,
                                                                  t.name, _request_timeout=self.request_timeout_s)
        return int((obj.get("spec") or {}).get("replicas") or 0), str(obj["metadata"]["resourceVersion"])

    def _replace(self, t: ScaleTarget, replicas: int, resource_version: str) -> None:
        if t.builtin:
            from kubernetes import client

            body = client.V1Scale(api_version="autoscaling/v1", kind="Scale",
                                  metadata=client.V1ObjectMeta(name=t.name, namespace=t.namespace,
                                                               resource_version=resource_version),
                                  spec=client.V1ScaleSpec(replicas=replicas))
            fn = (self.apps.replace_namespaced_deployment_scale if t.plural == "deployments"
                  else self.apps.replace_namespaced_stateful_set_scale)
            fn(t.name, t.namespace, body, field_manager=self.field_manager,
               _request_timeout=self.request_timeout_s)
            return
        custom_body: dict[str, Any] = {
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": t.name, "namespace": t.namespace, "resourceVersion": resource_version},
            "spec": {"replicas": replicas}}
        self.custom.replace_namespaced_custom_object_scale(t.group, t.version, t.namespace, t.plural, t.name,
                                                           custom_body, field_manager=self.field_manager,
                                                           _request_timeout=self.request_timeout_s)

    # --------------------------------------------------------------------------------------- actuate
    def scale(self, t: ScaleTarget, replicas: int) -> tuple[int, bool]:
        """Move one target to ``replicas``; returns (replicas before, whether a write happened)."""
        from kubernetes.client.exceptions import ApiException

        if replicas < t.min_replicas:
            # The decision already clamps to the floor; a caller that did not is not allowed below it.
            self.logger.warning("%s: target %d is below the floor %d; using the floor", t.describe(), replicas,
                                t.min_replicas)
            replicas = t.min_replicas
        first: int | None = None
        for _attempt in range(self.max_attempts):
            try:
                current, rv = self.read(t)
                first = current if first is None else first
                if current == replicas:
                    return first, False
                self._replace(t, replicas, rv)
                self.logger.info("scaled %s %d -> %d", t.describe(), current, replicas)
                return first, True
            except ApiException as exc:
                if exc.status == 409:
                    continue  # someone wrote between our read and our write: re-read and decide again
                raise _explain(t, exc) from None
            except ActuationError:
                raise
            except Exception as exc:  # noqa: BLE001 - connection errors, timeouts: name the target
                raise ActuationError(f"{t.describe()}: cannot reach the Kubernetes API ({type(exc).__name__}: "
                                     f"{str(exc)[:200]})") from None
        raise ActuationError(f"{t.describe()}: still conflicting after {self.max_attempts} attempts (another "
                             "writer keeps changing replicas: is an HPA/KEDA object also targeting it?)")

    def apply(self, targets: Mapping[str, int]) -> Applied:
        before: dict[str, int | None] = {}
        after: dict[str, int] = {}
        changed = False
        errors: list[str] = []
        for pool, replicas in targets.items():
            t = self.targets.get(pool)
            if t is None:
                errors.append(f"pool {pool}: no target configured (pools.{pool}.target)")
                continue
            try:
                was, wrote = self.scale(t, int(replicas))
            except ActuationError as exc:
                errors.append(str(exc))
                before[pool] = None
                continue
            before[pool], after[pool] = was, max(int(replicas), t.min_replicas)
            changed = changed or wrote
        if errors:
            raise ActuationError("; ".join(errors))
        return Applied(before=before, after=after, changed=changed)


def _explain(t: ScaleTarget, exc: Any) -> ActuationError:
    message = _status_message(exc)
    if exc.status == 404:
        return ActuationError(f"{t.describe()}: not found ({message}); check pools.{t.pool}.target in the policy "
                              f"and that the {t.plural}.{t.group} resource (CRD) exists in the cluster")
    if exc.status == 403:
        return ActuationError(f"{t.describe()}: forbidden ({message}); {t.rbac_hint()}")
    if exc.status == 422:
        return ActuationError(f"{t.describe()}: rejected as invalid ({message})")
    return ActuationError(f"{t.describe()}: API error {exc.status} {exc.reason} ({message})")


def _status_message(exc: Any) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message", exc.reason))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)
