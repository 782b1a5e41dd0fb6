"""An in-process fake Kubernetes API server for the endpoints the planner uses, driven by the official client.

Implemented faithfully enough to exercise the client's real request/response path:
- scale subresource GET/PUT/PATCH for ``apps/v1`` deployments and statefulsets and for any custom resource
  registered with :meth:`FakeKube.add` (``/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/scale``);
  the body is an ``autoscaling/v1`` Scale;
- ``coordination.k8s.io/v1`` Lease GET/POST/PUT (leader election);
- ``apps/v1`` Deployments and ``v1`` Services as whole objects (``stored``): create (POST, 409 AlreadyExists),
  get (GET, also a Deployment's ``/status``), delete (DELETE, 404 when gone; a Service's answer is the
  object, as the API server's); 403 for ``(plural, verb)`` in ``forbidden``. Nothing runs pods: the
  ``on_create`` / ``on_delete`` hooks let a test stand processes in for them, and :meth:`FakeKube.set_ready`
  reports a Deployment's replicas ready;
- status codes with ``Status`` bodies: 404 NotFound, 403 Forbidden (targets or verbs configured as
  forbidden), 409 Conflict (stale ``metadata.resourceVersion`` on PUT/PATCH, or a Lease that exists),
  422 Invalid (negative replicas);
- one cluster-wide ``resourceVersion`` counter that increments on every write, like etcd's revision;
- namespaced custom objects of any kind registered with :meth:`FakeKube.define` (also built-in group kinds
  such as apps/v1 Deployments, stored as plain objects): list, get, create (POST), merge and apply PATCH,
  DELETE, and the ``status`` subresource (a write to the main resource ignores ``status``, a write to
  ``/status`` changes only ``status``; ``metadata.generation`` counts spec changes). A kind may reject a spec
  change (an immutable spec, as a CEL ``self == oldSelf`` rule does) and validate objects (as a CRD schema
  does: 422 Invalid). An undefined kind answers 404, as the API server does for a CRD that is not installed.

Every request is logged in ``requests`` as (method, path) so tests can assert that nothing was written; the
query string of the latest request is in ``query``.

Also ``core/v1`` Event POST (``events``: what the planner recorded on its targets), and injectable faults
(``inject``): any status (409, 403, 404, 500, 503 ...) or a delay (a slow or hung API server that accepts
connections and never answers in time) on the requests a method and path pattern match, a given number of
times or every time, with an optional hook (a test advances its fake clock while the server "hangs").
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SCALE_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/"
                        r"(?P<plural>[^/]+)/(?P<name>[^/]+)/scale$")
LEASE_PATH = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$")
EVENTS_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
OBJECT_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
                         r"(?:/(?P<name>[^/]+)(?P<status>/status)?)?$")
VERB = {"GET": "get", "PUT": "update", "PATCH": "patch", "POST": "create", "DELETE": "delete"}


@dataclass
class Kind:
    """A kind the fake serves as plain objects (a CRD, or a built-in group kind such as apps/v1 Deployment)."""

    group: str
    version: str
    plural: str
    kind: str
    status_subresource: bool = True
    immutable_spec: bool = False
    validate: Callable[[dict[str, Any]], str | None] | None = None  # an error message makes the write 422


@dataclass
class ScaleObject:
    group: str
    version: str
    plural: str
    namespace: str
    name: str
    replicas: int
    resource_version: int
    selector: str = ""
    uid: str = ""


# ---------------------------------------------------------------------------------------------- custom objects
def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _not_found(kind: Kind, name: str) -> tuple[int, dict[str, Any]]:
    return status_body(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found',
                       {"name": name, "group": kind.group, "kind": kind.plural})


def _invalid(kind: Kind, name: str, message: str) -> tuple[int, dict[str, Any]]:
    return status_body(422, "Invalid", f'{kind.kind}.{kind.group} "{name}" is invalid: {message}',
                       {"name": name, "group": kind.group, "kind": kind.kind})


class CustomObjects:
    """Namespaced objects of the kinds registered with ``define`` (FakeKube's CRD-backed and group kinds)."""

    kinds: dict[tuple[str, str], Kind]
    custom: dict[tuple[str, str, str, str], dict[str, Any]]
    query: dict[str, list[str]]
    forbidden: set[tuple[str, str]]
    revision: int
    lock: threading.Lock

    def define(self, group: str, version: str, plural: str, kind: str, status_subresource: bool = True,
               immutable_spec: bool = False, validate: Callable[[dict[str, Any]], str | None] | None = None) -> Kind:
        """Serve ``kind`` as plain objects (install its CRD)."""
        k = Kind(group, version, plural, kind, status_subresource, immutable_spec, validate)
        self.kinds[(group, plural)] = k
        return k

    def create_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What ``kubectl create`` does (for test set-up): the stored object, or AssertionError with the reason."""
        group, _, version = obj["apiVersion"].rpartition("/")
        kind = next(k for k in self.kinds.values() if (k.group, k.kind) == (group, obj["kind"]))
        with self.lock:
            code, reply = self._custom_create(kind, obj["metadata"].get("namespace", "default"), obj)
        assert code == 201, reply
        return reply

    def get_object(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.custom.get((group, plural, namespace, name))
            return copy.deepcopy(obj)

    def list_objects(self, group: str, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for (g, p, ns, _), o in sorted(self.custom.items())
                    if (g, p) == (group, plural) and namespace in (None, ns)]

    def update_object(self, group: str, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> dict:
        """Someone else (kubectl patch --type merge) changes an object; returns the answer's body."""
        with self.lock:
            code, reply = self._custom_patch(self.kinds[(group, plural)], namespace, name, patch, False)
        return {"code": code, **reply}

    def delete_object(self, group: str, plural: str, namespace: str, name: str) -> None:
        with self.lock:
            self.revision += 1
            self.custom.pop((group, plural, namespace, name), None)


    def _custom(self, method: str, kind: Kind, ns: str, name: str | None, status: bool, body: Any,
                content_type: str) -> tuple[int, dict[str, Any]]:
        verb = VERB.get(method, method.lower())
        resource = kind.plural + ("/status" if status else "")
        if (resource, verb) in self.forbidden:
            return status_body(403, "Forbidden", f'{kind.plural}.{kind.group} "{name or ""}" is forbidden: cannot '
                               f'{verb} resource "{resource}" in API group "{kind.group}" in the namespace "{ns}"')
        if name is None:
            if method == "GET":
                items = [copy.deepcopy(o) for (g, p, n, _), o in sorted(self.custom.items())
                         if (g, p, n) == (kind.group, kind.plural, ns)]
                return 200, {"apiVersion": f"{kind.group}/{kind.version}", "kind": f"{kind.kind}List",
                             "metadata": {"resourceVersion": str(self.revision)}, "items": items}
            if method == "POST":
                return self._custom_create(kind, ns, body)
            return status_body(405, "MethodNotAllowed", f"method {method} not allowed on a collection")
        current = self.custom.get((kind.group, kind.plural, ns, name))
        if method == "GET":
            return (200, copy.deepcopy(current)) if current is not None else _not_found(kind, name)
        if method == "DELETE":
            if current is None:
                return _not_found(kind, name)
            self.revision += 1
            del self.custom[(kind.group, kind.plural, ns, name)]
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "details": {"name": name, "group": kind.group, "kind": kind.plural}}
        if method == "PATCH":
            if content_type.startswith("application/apply-patch"):
                if not self.query.get("fieldManager"):
                    return status_body(400, "BadRequest", "PatchOptions.meta.k8s.io is invalid: fieldManager: "
                                       "Required value: is required for apply patch")
                if current is None and not status:
                    return self._custom_create(kind, ns, {**(body or {}), "metadata": {
                        **((body or {}).get("metadata") or {}), "name": name}})
            elif not content_type.startswith("application/merge-patch+json"):
                return status_body(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                   f"accepted media types include merge and apply patch, got {content_type!r}")
            if current is None:
                return _not_found(kind, name)
            return self._custom_patch(kind, ns, name, body, status)
        return status_body(405, "MethodNotAllowed", f"method {method} not allowed")


    def _custom_create(self, kind: Kind, ns: str, body: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
            return status_body(422, "Invalid", f"{kind.kind} is invalid: metadata.name: Required value")
        name = body["metadata"]["name"]
        if (kind.group, kind.plural, ns, name) in self.custom:
            return status_body(409, "AlreadyExists", f'{kind.plural}.{kind.group} "{name}" already exists',
                               {"name": name, "group": kind.group, "kind": kind.plural})
        obj = copy.deepcopy(body)
        if kind.status_subresource:
            obj.pop("status", None)  # status is written through /status only
        problem = kind.validate(obj) if kind.validate else None
        if problem:
            return _invalid(kind, name, problem)
        self.revision += 1
        obj["metadata"] = {**obj["metadata"], "namespace": ns, "uid": f"uid-{kind.plural}-{ns}-{name}-{self.revision}",
                           "resourceVersion": str(self.revision), "generation": 1,
                           "creationTimestamp": "2026-01-01T00:00:00Z"}
        self.custom[(kind.group, kind.plural, ns, name)] = obj
        return 201, copy.deepcopy(obj)


    def _custom_patch(self, kind: Kind, ns: str, name: str, patch: Any, status: bool) -> tuple[int, dict]:
        current = self.custom[(kind.group, kind.plural, ns, name)]
        if not isinstance(patch, dict):
            return status_body(400, "BadRequest", "request body must be a JSON object")
        if status:
            patch = {"status": patch.get("status")} if "status" in patch else {}
        elif kind.status_subresource:
            patch = {k: v for k, v in patch.items() if k != "status"}
        meta = patch.get("metadata") or {}
        if meta.get("resourceVersion") is not None and str(meta["resourceVersion"]) != current["metadata"]["resourceVersion"]:
            return status_body(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural}.{kind.group} "{name}": '
                               "the object has been modified; please apply your changes to the latest version and try again")
        updated = merge_patch(current, patch)
        spec_changed = updated.get("spec") != current.get("spec")
        if spec_changed and kind.immutable_spec:
            return _invalid(kind, name, "spec: Invalid value: \"object\": spec is immutable once accepted: create a "
                            "new ProfileRequest")
        problem = kind.validate(updated) if kind.validate and not status else None
        if problem:
            return _invalid(kind, name, problem)
        self.revision += 1
        updated["metadata"] = {**updated["metadata"], "resourceVersion": str(self.revision),
                               "generation": current["metadata"]["generation"] + (1 if spec_changed else 0)}
        self.custom[(kind.group, kind.plural, ns, name)] = updated
        return 200, copy.deepcopy(updated)


@dataclass
class Fault:
    """Requests matching ``method`` (None: any) and ``path`` (a regex searched in the path) wait ``delay_s``,
    then answer ``status`` (None: the normal answer); ``times`` of them (None: all)."""

    method: str | None = None
    path: str = ""
    status: int | None = None
    delay_s: float = 0.0
    times: int | None = None
    hook: Callable[[], None] | None = None
    fired: int = 0

    def matches(self, method: str, path: str) -> bool:
        return ((self.method is None or self.method == method) and re.search(self.path, path) is not None
                and (self.times is None or self.fired < self.times))


REASONS = {403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid", 429: "TooManyRequests",
           500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable", 504: "Timeout"}


@dataclass
class FakeKube(CustomObjects):
    """The fake cluster state plus the HTTP server in front of it."""

    objects: dict[tuple[str, str, str, str], ScaleObject] = field(default_factory=dict)
    leases: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # (plural/scale or leases, verb)
    forbidden_objects: set[tuple[str, str, str]] = field(default_factory=set)  # (plural, ns, name)
    # Deployments and Services created through the API: (plural, namespace, name) -> the stored manifest.
    stored: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    on_create: Any = None  # called as on_create(plural, manifest) under the lock: start work, don't block
    on_delete: Any = None  # called as on_delete(plural, manifest) under the lock
    requests: list[tuple[str, str]] = field(default_factory=list)
    conflicts_to_inject: int = 0  # the next N writes to a scale answer 409 after bumping the object (a race)
    faults: list[Fault] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # core/v1 Events created, in order
    revision: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)
    kinds: dict[tuple[str, str], Kind] = field(default_factory=dict)  # (group, plural) -> Kind
    custom: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)  # group, plural, ns, name
    query: dict[str, list[str]] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------ state
    def add(self, group: str, version: str, plural: str, namespace: str, name: str, replicas: int) -> ScaleObject:
        with self.lock:
            self.revision += 1
            obj = ScaleObject(group, version, plural, namespace, name, replicas, self.revision,
                              selector=f"app={name}", uid=f"uid-{name}")
            self.objects[(group, plural, namespace, name)] = obj
            return obj

    def add_deployment(self, namespace: str, name: str, replicas: int) -> ScaleObject:
        return self.add("apps", "v1", "deployments", namespace, name, replicas)

    def replicas(self, plural: str, namespace: str, name: str, group: str = "apps") -> int:
        return self.objects[(group, plural, namespace, name)].replicas

    def set_replicas(self, plural: str, namespace: str, name: str, replicas: int, group: str = "apps") -> None:
        """Someone else (kubectl scale, an HPA) changes the object."""
        with self.lock:
            self.revision += 1
            obj = self.objects[(group, plural, namespace, name)]
            obj.replicas, obj.resource_version = replicas, self.revision

    def set_ready(self, namespace: str, name: str, ready_replicas: int = 1) -> None:
        """What the Deployment controller and kubelet report once a stored Deployment's pods pass their probes."""
        with self.lock:
            obj = self.stored.get(("deployments", namespace, name))
            if obj is None:
                return
            self.revision += 1
            obj["metadata"]["resourceVersion"] = str(self.revision)
            obj["status"] = {"observedGeneration": obj["metadata"]["generation"], "replicas": ready_replicas,
                             "readyReplicas": ready_replicas, "availableReplicas": ready_replicas,
                             "updatedReplicas": ready_replicas}

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] in ("PUT", "PATCH", "POST", "DELETE")]

    def scale_writes(self) -> list[tuple[str, str]]:
        return [r for r in self.writes() if r[1].endswith("/scale")]

    def inject(self, method: str | None = None, path: str = "", status: int | None = None, delay_s: float = 0.0,
               times: int | None = None, hook: Callable[[], None] | None = None) -> Fault:
        fault = Fault(method, path, status, delay_s, times, hook)
        with self.lock:
            self.faults.append(fault)
        return fault

    def _fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            fault = next((f for f in self.faults if f.matches(method, path)), None)
            if fault is not None:
                fault.fired += 1
            return fault

    # ------------------------------------------------------------------------------------------ server
    def start(self) -> FakeKube:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                return json.loads(raw) if raw else None

            def _send(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _handle(self) -> None:
                path = self.path.split("?", 1)[0]
                body = self._body() if self.command in ("PUT", "PATCH", "POST", "DELETE") else None
                fault = outer._fault(self.command, path)
                if fault is not None:
                    if fault.hook is not None:
                        fault.hook()
                    if fault.delay_s:
                        time.sleep(fault.delay_s)
                    if fault.status is not None:
                        with outer.lock:
                            outer.requests.append((self.command, path))
                        reason = REASONS.get(fault.status, "InternalError")
                        try:
                            self._send(*status_body(fault.status, reason, f"injected fault: {reason}"))
                        except OSError:
                            pass  # the client gave up waiting
                        return
                with outer.lock:
                    outer.requests.append((self.command, path))
                    outer.query = parse_qs(urlsplit(self.path).query)
                    status, reply = outer.dispatch(self.command, path, body,
                                                   self.headers.get("Content-Type", ""))
                try:
                    self._send(status, reply)
                except OSError:
                    pass  # the client gave up waiting (a delayed answer)

            do_GET = do_PUT = do_PATCH = do_POST = do_DELETE = _handle  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api_client(self, retries: int | None = None) -> Any:
        """``retries``: urllib3 retries (None: the client's default, as the official client ships)."""
        from kubernetes import client

        cfg = client.Configuration(host=self.url)
        if retries is not None:
            cfg.retries = retries
        return client.ApiClient(cfg)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------------------------------ API
    def dispatch(self, method: str, path: str, body: Any, content_type: str) -> tuple[int, dict[str, Any]]:
        m = SCALE_PATH.match(path)
        if m:
            return self._scale(method, m.groupdict(), body, content_type)
        m = WORKLOAD_PATH.match(path)
        if m and (m["group"] or "", m["plural"]) not in self.kinds:  # a kind given to define() is served there
            return self._workload(method, m["plural"], m["ns"], m["name"], body)
        m = LEASE_PATH.match(path)
        if m:
            return self._lease(method, m["ns"], m["name"], body)
        m = EVENTS_PATH.match(path)
        if m:
            return self._event(method, m["ns"], body)
        m = OBJECT_PATH.match(path)
        if m and (m["group"], m["plural"]) in self.kinds and self.kinds[(m["group"], m["plural"])].version == m["version"]:
            return self._custom(method, self.kinds[(m["group"], m["plural"])], m["ns"], m["name"],
                                bool(m["status"]), body, content_type)
        return status_body(404, "NotFound", f"the server could not find the requested resource ({path})")

    def _scale(self, method: str, p: dict[str, str], body: Any, content_type: str) -> tuple[int, dict]:
        group, plural, ns, name = p["group"], p["plural"], p["ns"], p["name"]
        resource = plural if group in ("", "core") else f"{plural}.{group}"
        verb = VERB.get(method, method.lower())
        if (f"{plural}/scale", verb) in self.forbidden or (plural, ns, name) in self.forbidden_objects:
            return status_body(403, "Forbidden", f'{resource} "{name}" is forbidden: User '
                               f'"system:serviceaccount:{ns}:planner" cannot {verb} resource "{plural}/scale" '
                               f'in API group "{group}" in the namespace "{ns}"',
                               {"name": name, "group": group, "kind": plural})
        obj = self.objects.get((group, plural, ns, name))
        if obj is None or obj.version != p["version"]:
            return status_body(404, "NotFound", f'{resource} "{name}" not found',
                               {"name": name, "group": group, "kind": plural})
        if method == "GET":
            return 200, scale_json(obj)
        if method not in ("PUT", "PATCH"):
            return status_body(405, "MethodNotAllowed", f"method {method} not allowed")
        if method == "PATCH" and not content_type.startswith(("application/merge-patch+json",
                                                              "application/strategic-merge-patch+json")):
            return status_body(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                               f"format - accepted media types include merge and strategic merge patch, "
                               f"got {content_type!r}")
        if not isinstance(body, dict):
            return status_body(400, "BadRequest", "request body must be a JSON object")
        meta = body.get("metadata") or {}
        want_rv = meta.get("resourceVersion")
        if self.conflicts_to_inject > 0:
            self.conflicts_to_inject -= 1
            self.revision += 1
            obj.resource_version = self.revision  # another writer got in first
        if want_rv is not None and str(want_rv) != str(obj.resource_version):
            return status_body(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the '
                               "object has been modified; please apply your changes to the latest version "
                               "and try again", {"name": name, "group": group, "kind": plural})
        spec = body.get("spec") or {}
        replicas = spec.get("replicas", obj.replicas if method == "PATCH" else 0)
        if not isinstance(replicas, int) or replicas < 0:
            return status_body(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: '
                               f"Invalid value: {replicas}: must be greater than or equal to 0",
                               {"name": name, "group": "autoscaling", "kind": "Scale"})
        self.revision += 1
        obj.replicas, obj.resource_version = replicas, self.revision
        return 200, scale_json(obj)

    def _lease(self, method: str, ns: str, name: str | None, body: Any) -> tuple[int, dict]:
        verb = VERB.get(method, method.lower())
        if ("leases", verb) in self.forbidden:
            return status_body(403, "Forbidden", f'leases.coordination.k8s.io "{name or ""}" is forbidden: '
                               f'cannot {verb} resource "leases" in API group "coordination.k8s.io" in the '
                               f'namespace "{ns}"')
        if method == "POST":
            if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
                return status_body(422, "Invalid", "Lease is invalid: metadata.name: Required value")
            lease_name = body["metadata"]["name"]
            if (ns, lease_name) in self.leases:
                return status_body(409, "AlreadyExists", f'leases.coordination.k8s.io "{lease_name}" already '
                                   "exists", {"name": lease_name, "kind": "leases"})
            return 201, self._store_lease(ns, lease_name, body)
        if name is None:
            return status_body(405, "MethodNotAllowed", "list is not implemented by the fake")
        current = self.leases.get((ns, name))
        if current is None:
            return status_body(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found',
                               {"name": name, "group": "coordination.k8s.io", "kind": "leases"})
        if method == "GET":
            return 200, current
        if method == "PUT":
            want_rv = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and str(want_rv) != current["metadata"]["resourceVersion"]:
                return status_body(409, "Conflict", f'Operation cannot be fulfilled on leases.coordination.k8s.io '
                                   f'"{name}": the object has been modified; please apply your changes to the '
                                   "latest version and try again", {"name": name, "kind": "leases"})
            return 200, self._store_lease(ns, name, body)
        return status_body(405, "MethodNotAllowed", f"method {method} not allowed")

    def _event(self, method: str, ns: str, body: Any) -> tuple[int, dict]:
        if method != "POST":
            return status_body(405, "MethodNotAllowed", "only create is implemented by the fake")
        if ("events", "create") in self.forbidden:
            return status_body(403, "Forbidden", f'events is forbidden: User "system:serviceaccount:{ns}:planner" '
                               f'cannot create resource "events" in API group "" in the namespace "{ns}"')
        meta = (body or {}).get("metadata") or {}
        if not meta.get("name") or not (body or {}).get("involvedObject"):
            return status_body(422, "Invalid", "Event is invalid: metadata.name, involvedObject: Required value")
        self.revision += 1
        stored = {**body, "metadata": {**meta, "namespace": ns, "resourceVersion": str(self.revision)}}
        self.events.append(stored)
        return 201, stored

    def _store_lease(self, ns: str, name: str, body: dict) -> dict:
        self.revision += 1
        stored = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                  "metadata": {**(body.get("metadata") or {}), "name": name, "namespace": ns,
                               "resourceVersion": str(self.revision)},
                  "spec": body.get("spec") or {}}
        self.leases[(ns, name)] = stored
        return stored


    def _workload(self, method: str, plural: str, ns: str, name: str | None, body: Any) -> tuple[int, dict]:
        resource = f"{plural}.apps" if plural == "deployments" else plural
        verb = VERB.get(method, method.lower())
        if (plural, verb) in self.forbidden:
            return status_body(403, "Forbidden", f'{resource} is forbidden: User "system:serviceaccount:{ns}:planner" '
                               f'cannot {verb} resource "{plural}" in the namespace "{ns}"')
        if method == "POST" and name is None:
            return self._workload_create(plural, resource, ns, body)
        if name is None:
            return status_body(405, "MethodNotAllowed", "list is not implemented by the fake")
        obj = self.stored.get((plural, ns, name))
        if obj is None:
            return status_body(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": plural})
        if method == "GET":
            return 200, obj
        if method == "DELETE":
            del self.stored[(plural, ns, name)]
            self.revision += 1
            if self.on_delete is not None:
                self.on_delete(plural, obj)
            if plural == "services":  # the API server answers a Service delete with the object
                return 200, obj
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "details": {"name": name, "kind": plural}}
        return status_body(405, "MethodNotAllowed", f"method {method} not allowed")

    def _workload_create(self, plural: str, resource: str, ns: str, body: Any) -> tuple[int, dict]:
        kind = "Deployment" if plural == "deployments" else "Service"
        name = ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
        if not name:
            return status_body(422, "Invalid", f"{kind} is invalid: metadata.name: Required value")
        if (plural, ns, name) in self.stored:
            return status_body(409, "AlreadyExists", f'{resource} "{name}" already exists',
                               {"name": name, "kind": plural})
        self.revision += 1
        obj = json.loads(json.dumps(body))
        obj["metadata"].update(namespace=ns, uid=f"uid-{name}", resourceVersion=str(self.revision), generation=1,
                               creationTimestamp="2026-01-01T00:00:00Z")
        obj.setdefault("status", {})
        self.stored[(plural, ns, name)] = obj
        if self.on_create is not None:
            self.on_create(plural, obj)
        return 201, obj


def scale_json(obj: ScaleObject) -> dict[str, Any]:
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": obj.name, "namespace": obj.namespace, "uid": obj.uid,
                         "resourceVersion": str(obj.resource_version),
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"replicas": obj.replicas},
            "status": {"replicas": obj.replicas, "selector": obj.selector}}


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return code, body


WORKLOAD_PATH = re.compile(r"^/(?:apis/(?P<group>apps)/v1|api/v1)/namespaces/(?P<ns>[^/]+)/"
                           r"(?P<plural>deployments|services)(?:/(?P<name>[^/]+)(?P<status>/status)?)?$")
