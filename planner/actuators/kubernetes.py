"""Direct actuation through the scale subresource (INTEGRATION.md §4.1), with compare-and-swap.

Each pool is moved by read -> compare -> replace with ``metadata.resourceVersion``. A write answering 409
(the object changed between our read and our write) is counted (``on_conflict``), and the target is read
again before anything else is written:
- if its replicas are still what we read first, only something else changed (a status update, a label):
  the same count is written again from the fresh read (bounded, ``max_attempts``);
- if another writer changed the replicas (``kubectl scale``, an HPA), nothing is written: ``Applied.after``
  reports what is there, and the control loop re-seeds the controller from it, so the next tick re-decides
  from what is there instead of overwriting it.
Only ``spec.replicas`` of the Scale object is written, never below the pool's floor, and no write at all
when the target is already at the wanted count. Before a scale-down of a Deployment the pods it should
remove (the least loaded Ready ones) are marked with ``controller.kubernetes.io/pod-deletion-cost``
(deletion_cost.py), so that its ReplicaSet removes those. ``may_write`` (leader election) is asked right before every
write: a controller whose Lease may have expired does not write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from planner.actuators.errors import ActuationError, LeadershipLost
from planner.actuators.targets import ScaleTarget, targets_from_policy
from planner.config import Policy
from planner.types import Applied

log = logging.getLogger("planner.actuators")

MAX_ATTEMPTS = 4


class KubernetesScaleActuator:
    def __init__(self, targets: Mapping[str, ScaleTarget], api_client: Any = None, *,
                 field_manager: str = "planner", max_attempts: int = MAX_ATTEMPTS,
                 request_timeout_s: float = 10.0, logger: logging.Logger = log,
                 may_write: Callable[[], str | None] | None = None,
                 on_conflict: Callable[[str], None] | None = None,
                 in_flight_gauges: tuple[str, ...] = ("vllm:num_requests_running", "vllm:num_requests_waiting"),
                 ) -> None:
        from kubernetes import client

        from planner.actuators.deletion_cost import DeletionMarker

        self.targets = dict(targets)
        self.api_client = api_client
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.field_manager = field_manager
        self.max_attempts = max_attempts
        self.request_timeout_s = request_timeout_s
        self.logger = logger
        # None: write; a message: why this controller must not write now (e.g. its Lease may have expired).
        self.may_write = may_write
        self.on_conflict = on_conflict
        # The dialect's in-system gauges: a pod's load when choosing which one a scale-down removes.
        self.marker = DeletionMarker(api_client, in_flight_gauges, request_timeout_s, logger)
        self.selectors: dict[str, str | None] = {}  # pool -> its Scale's status.selector, as last read

    @classmethod
    def from_policy(cls, policy: Policy, api_client: Any = None, kind: str = "kubernetes",
                    **kwargs: Any) -> KubernetesScaleActuator:
        return cls(targets_from_policy(policy, kind), api_client, **kwargs)

    # --------------------------------------------------------------------------------------- scale I/O
    def read(self, t: ScaleTarget) -> tuple[int, str]:
        """(spec.replicas, metadata.resourceVersion) of the target's Scale."""
        if t.builtin:
            fn = (self.apps.read_namespaced_deployment_scale if t.plural == "deployments"
                  else self.apps.read_namespaced_stateful_set_scale)
            scale = fn(t.name, t.namespace, _request_timeout=self.request_timeout_s)
            replicas = scale.spec.replicas if scale.spec is not None else None
            self.selectors[t.pool] = scale.status.selector if scale.status is not None else None
            return int(replicas or 0), str(scale.metadata.resource_version if scale.metadata is not None else "")
        obj: Any = self.custom.get_namespaced_custom_object_scale(t.group, t.version, t.namespace, t.plural,
                                                                  t.name, _request_timeout=self.request_timeout_s)
        self.selectors[t.pool] = (obj.get("status") or {}).get("selector")
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
    replicas_source = "the targets' spec.replicas"  # how the control loop names what read_replicas returns

    def read_replicas(self) -> dict[str, int]:
        """``spec.replicas`` of every pool's target: what the cluster holds (seeds a fresh controller)."""
        out: dict[str, int] = {}
        for pool, t in self.targets.items():
            out[pool] = self._call(t, partial(self.read, t))[0]
        return out

    def _call(self, t: ScaleTarget, fn: Callable[[], Any]) -> Any:
        """One API call with the errors named after the target (403 with the RBAC rule to add)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return fn()
        except ApiException as exc:
            if exc.status == 409:
                raise
            raise _explain(t, exc) from None
        except ActuationError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection errors, timeouts: name the target
            raise ActuationError(f"{t.describe()}: cannot reach the Kubernetes API ({type(exc).__name__}: "
                                 f"{str(exc)[:200]})") from None

    def _write(self, t: ScaleTarget, replicas: int, resource_version: str) -> None:
        refusal = self.may_write() if self.may_write is not None else None
        if refusal:
            raise LeadershipLost(f"{t.describe()}: not writing {replicas}: {refusal}")
        self._call(t, lambda: self._replace(t, replicas, resource_version))

    def scale(self, t: ScaleTarget, replicas: int) -> tuple[int, int, bool]:
        """Move one target to ``replicas``; returns (replicas before, replicas now, whether we wrote)."""
        from kubernetes.client.exceptions import ApiException

        if replicas < t.min_replicas:
            # The decision already clamps to the floor; a caller that did not is not allowed below it.
            self.logger.warning("%s: target %d is below the floor %d; using the floor", t.describe(), replicas,
                                t.min_replicas)
            replicas = t.min_replicas
        first: int | None = None
        conflicts = 0
        for _attempt in range(self.max_attempts):
            current, rv = self._call(t, lambda: self.read(t))
            if first is None:
                first = current
                if replicas < current:  # which pods go, chosen before the count that removes them is written
                    self.marker.mark(t, self.selectors.get(t.pool), replicas, self.may_write)
            elif current != first:
                self.logger.warning("%s: another writer moved replicas %d -> %d while we wrote %d (%d conflict%s); "
                                    "not overwriting it: the next tick decides from %d", t.describe(), first,
                                    current, replicas, conflicts, "" if conflicts == 1 else "s", current)
                return first, current, False
            if current == replicas:
                return first, current, False
            try:
                self._write(t, replicas, rv)
            except ApiException:  # only 409 reaches here (_call explains the others)
                conflicts += 1
                if self.on_conflict is not None:
                    self.on_conflict(t.pool)
                continue
            if conflicts:
                self.logger.info("%s: %d write conflict%s (409), re-read and written again", t.describe(),
                                 conflicts, "" if conflicts == 1 else "s")
            self.logger.info("scaled %s %d -> %d", t.describe(), current, replicas)
            return first, replicas, True
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
                was, now, wrote = self.scale(t, int(replicas))
            except LeadershipLost:
                raise  # nothing more may be written this tick, to any pool
            except ActuationError as exc:
                errors.append(str(exc))
                before[pool] = None
                continue
            before[pool], after[pool] = was, now
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
