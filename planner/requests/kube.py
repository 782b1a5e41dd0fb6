"""ProfileRequest objects in a cluster: pick them up, run them, write their status back; with auto_apply,
create the manifests they render. Used by `planner serve --watch-namespace NS`.

A periodic list (every ``poll_s``, each list no older than the last one seen: ``resourceVersion`` with
``resourceVersionMatch=NotOlderThan``) rather than a watch: a missed event costs one period, never a stuck
request, and nothing has to resume a broken stream. Per object:
- new (no phase): the spec is checked; a bad one ends Failed/InvalidSpec at once, naming its fields; a good
  one is queued in the RequestManager under the id ``k8s-<uid>``;
- running: the manager's status is written through the ``status`` subresource whenever it changes;
- Profiling but unknown to the manager (the profiler restarted): Failed/Interrupted;
- deleted while Pending or Profiling: cancelled; whatever auto_apply had created is deleted again.
A Ready request's objects are the user's deployment: deleting the ProfileRequest leaves them running.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from planner.clock import Clock, SystemClock
from planner.requests import pipeline
from planner.requests.manager import RequestManager, View, iso
from planner.requests.spec import FieldError, RequestInvalid, parse_spec
from planner.requests.status import FailReason, Phase, Status, failed, pending
from planner.requests.sweep import Cancelled, RequestFailed

log = logging.getLogger("planner.requests.kube")
GROUP, VERSION, PLURAL, KIND = "planner.dev", "v1alpha1", "profilerequests", "ProfileRequest"
FIELD_MANAGER = "planner-profiler"
OWNER_LABEL = "planner.dev/profile-request"
# What auto_apply may create (the rendered kinds except RBAC): kind -> (group, plural). The profiler's Role
# (deploy/profile-requests/rbac.yaml) grants create/delete on exactly these.
APPLY_KINDS = {"Deployment": ("apps", "deployments"), "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
               "DynamoGraphDeployment": ("nvidia.com", "dynamographdeployments"),
               "ScaledObject": ("keda.sh", "scaledobjects"),
               "HorizontalPodAutoscaler": ("autoscaling", "horizontalpodautoscalers")}


def _api_message(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


@dataclass
class AppliedObjects:
    api: Any
    refs: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # group, version, ns, plural, name
    names: list[str] = field(default_factory=list)

    def undo(self) -> None:
        """Delete what was created, newest first; an object already gone is fine."""
        for group, version, ns, plural, name in reversed(self.refs):
            try:
                self.api.delete_namespaced_custom_object(group, version, ns, plural, name)
            except ApiException as exc:
                if exc.status != 404:
                    log.error("could not delete %s/%s in %s after a failed apply: %s", plural, name, ns,
                              _api_message(exc))
        self.refs, self.names = [], []


def apply_objects(api_client: Any, owner: str, outcome: pipeline.Outcome, cancelled: Any) -> AppliedObjects:
    """Create every rendered object (never overwrite: an existing one fails the request, nothing is left)."""
    api = client.CustomObjectsApi(api_client)
    done = AppliedObjects(api)
    for obj in outcome.rendered.objects:
        if cancelled():
            done.undo()
            raise Cancelled()
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = APPLY_KINDS[obj["kind"]][1]
        meta = obj["metadata"]
        body = {**obj, "metadata": {**meta, "labels": {**meta.get("labels", {}), OWNER_LABEL: owner}}}
        try:
            api.create_namespaced_custom_object(group, version, meta["namespace"], plural, body,
                                                field_manager=FIELD_MANAGER)
        except ApiException as exc:
            done.undo()
            hint = ": delete it or choose another spec.name" if exc.status == 409 else ""
            raise RequestFailed(FailReason.APPLY_FAILED, f"creating {obj['kind']} {meta['namespace']}/"
                                f"{meta['name']}: {_api_message(exc)}{hint}; nothing was left applied") from None
        done.refs.append((group, version, meta["namespace"], plural, meta["name"]))
        done.names.append(f"{obj['kind']}/{meta['name']}")
    return done


class ProfileRequestWatcher:
    def __init__(self, api_client: Any, namespace: str, manager: RequestManager, clock: Clock | None = None,
                 poll_s: float = 5.0) -> None:
        self.api_client = api_client
        self.api = client.CustomObjectsApi(api_client)
        self.namespace, self.manager, self.poll_s = namespace, manager, poll_s
        self.clock = clock or SystemClock()
        self._seen: dict[str, str] = {}  # uid -> name of the objects in the last list
        self._written: dict[str, dict[str, Any]] = {}  # uid -> the last status written
        self._resource_version: str | None = None

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll_once()
            except ApiException as exc:
                log.error("listing %s in %s: %s %s", PLURAL, self.namespace, exc.status, _api_message(exc))
            except Exception:  # noqa: BLE001 - the watcher keeps going; the next list retries
                log.exception("profile request watcher")
            stop.wait(self.poll_s)

    def poll_once(self) -> None:
        rv = self._resource_version
        listing: Any = self.api.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, resource_version=rv,
            resource_version_match="NotOlderThan" if rv else None)
        self._resource_version = (listing.get("metadata") or {}).get("resourceVersion") or self._resource_version
        current = {}
        for item in listing.get("items", []):
            meta = item["metadata"]
            current[meta["uid"]] = meta["name"]
            self._reconcile(item)
        for uid in set(self._seen) - set(current):  # deleted: stop it if it is still running
            self.manager.cancel(f"k8s-{uid}")
            self._written.pop(uid, None)
        self._seen = current

    def _reconcile(self, item: dict[str, Any]) -> None:
        uid = item["metadata"]["uid"]
        rid = f"k8s-{uid}"
        view = self.manager.get(rid)
        if view is None:
            phase = (item.get("status") or {}).get("phase")
            if phase in (Phase.READY.value, Phase.FAILED.value):
                return
            if phase == Phase.PROFILING.value:
                self._interrupted(item)
                return
            view = self._accept(item, rid)
            if view is None:
                return
        self._write(item, view.status)

    def _accept(self, item: dict[str, Any], rid: str) -> View | None:
        meta = item["metadata"]
        ns, name = meta["namespace"], meta["name"]
        try:
            spec = parse_spec(item.get("spec"))
            if spec.namespace not in (None, ns):
                raise RequestInvalid([FieldError("namespace", f"{spec.namespace!r}: a ProfileRequest renders into "
                                                 f"its own namespace {ns!r}")])
            hook = ((lambda outcome, cancelled: apply_objects(self.api_client, name, outcome, cancelled))
                    if spec.auto_apply else None)
            return self.manager.submit(spec, request_id=rid, hook=hook, namespace=ns)
        except RequestInvalid as exc:
            now = iso(self.clock.now_s())
            self._write(item, failed(pending(now), FailReason.INVALID_SPEC, str(exc), now))
            return None

    def _interrupted(self, item: dict[str, Any]) -> None:
        now = iso(self.clock.now_s())
        written = {k: v for k, v in (item.get("status") or {}).items() if k != "observed_generation"}
        try:
            before = Status.model_validate(written)
        except ValueError:
            before = pending(now)
        self._write(item, failed(before, FailReason.INTERRUPTED, "the profiler restarted while this request was "
                                 "profiling; create it again", now))

    def _write(self, item: dict[str, Any], status: Status) -> None:
        meta = item["metadata"]
        body = {**status.model_dump(mode="json"), "observed_generation": meta.get("generation")}
        if self._written.get(meta["uid"]) == body or item.get("status") == body:
            return
        try:
            self.api.patch_namespaced_custom_object_status(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"],
                                                           {"status": body})
        except ApiException as exc:
            if exc.status != 404:  # 404: deleted since the list; the next poll cancels it
                log.error("writing the status of %s/%s: %s", meta["namespace"], meta["name"], _api_message(exc))
            return
        self._written[meta["uid"]] = body
