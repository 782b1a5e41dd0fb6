"""`planner profile --backend kubernetes --template worker.yaml`: one worker per TP size, measured live.

For each TP candidate, in turn: render a worker from the template (planner.profiler.k8s_worker), create its
Deployment and Service, wait until the Deployment has a ready replica and the engine answers /v1/models
through the Service, run the endpoint backend against it, and delete both (foreground: the pods and their
GPUs are gone before the next TP starts). The delete runs whatever happened: a failure, a readiness
timeout, a cancel (``SweepRequest.cancel``), Ctrl-C. A TP whose worker never became ready (no GPUs left
for it, an image that does not start) is left out and named in the provenance; other errors end the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from planner.errors import UserError
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec
from planner.profile import Profile
from planner.profiler.assemble import assemble
from planner.profiler.endpoint import EndpointResult, measure_endpoint
from planner.profiler.grids import SweepCancelled, SweepRequest
from planner.profiler.k8s_worker import Worker, is_inline, load_template, render_worker

POLL_S = 1.0
DELETE_TIMEOUT_S = 300.0


class WorkerNotReady(Exception):
    """The worker did not become ready in time (the TP size is left out)."""


def load_client(kubeconfig: str | None) -> Any:
    """An ApiClient: the given kubeconfig, else in-cluster credentials, else ~/.kube/config."""
    from kubernetes import client, config

    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            return config.new_client_from_config()
    except (config.ConfigException, OSError, TypeError) as exc:
        raise UserError(f"kubeconfig: no usable Kubernetes credentials ({exc}); run in the cluster or pass "
                        "kubeconfig", key="kubeconfig", mentions=("kubeconfig",)) from None


def _api_error(exc: Any, what: str) -> UserError:
    reason = getattr(exc, "reason", "") or ""
    try:
        import json

        message = json.loads(exc.body).get("message", reason)
    except (TypeError, ValueError, AttributeError):
        message = reason
    return UserError(f"namespace: cannot {what}: HTTP {exc.status} {message}", key="namespace")


class Cluster:
    """The few API calls a worker needs, on the official client."""

    def __init__(self, api_client: Any, poll_s: float = POLL_S) -> None:
        from kubernetes import client

        self.apps: Any = client.AppsV1Api(api_client)  # manifests go in as dicts (the client serialises them)
        self.core: Any = client.CoreV1Api(api_client)
        self.poll_s = poll_s

    def create(self, w: Worker) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.apps.create_namespaced_deployment(w.namespace, w.deployment)
            self.core.create_namespaced_service(w.namespace, w.service)
        except ApiException as exc:
            raise _api_error(exc, f"create worker {w.name} in namespace {w.namespace}") from None

    def delete(self, w: Worker, timeout_s: float = DELETE_TIMEOUT_S) -> list[str]:
        """Delete both objects and wait for the Deployment to be gone; what could not be deleted."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        left: list[str] = []
        body = client.V1DeleteOptions(propagation_policy="Foreground")
        for kind, call in (("service", self.core.delete_namespaced_service),
                           ("deployment", self.apps.delete_namespaced_deployment)):
            try:
                call(w.name, w.namespace, body=body)
            except ApiException as exc:
                if exc.status != 404:
                    left.append(f"{kind}/{w.name} (HTTP {exc.status} {exc.reason})")
        deadline = time.monotonic() + timeout_s
        while not left and time.monotonic() < deadline:
            try:
                self.apps.read_namespaced_deployment(w.name, w.namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return left
            time.sleep(self.poll_s)
        return left or [f"deployment/{w.name} (still terminating after {timeout_s:g} s)"]

    def ready(self, w: Worker) -> tuple[bool, str]:
        """(ready, what it is waiting for); a rollout that gave up raises WorkerNotReady."""
        from kubernetes.client.exceptions import ApiException

        try:
            dep = self.apps.read_namespaced_deployment(w.name, w.namespace)  # status comes with the object
        except ApiException as exc:
            raise _api_error(exc, f"read worker {w.name} in namespace {w.namespace}") from None
        status = dep.status
        for cond in (status.conditions if status is not None else None) or []:
            if cond.type == "Progressing" and cond.status == "False":
                raise WorkerNotReady(f"rollout failed ({cond.reason}: {cond.message})")
        ready = (status.ready_replicas if status is not None else None) or 0
        observed = (status.observed_generation if status is not None else None) or 0
        generation = dep.metadata.generation or 0
        return ready >= 1 and observed >= generation, f"{ready}/1 replicas ready"


def _wait_ready(cluster: Cluster, w: Worker, url: str, req: SweepRequest) -> float:
    """Seconds until the Deployment is ready and the engine answers through the Service."""
    start = time.monotonic()
    deadline = start + req.ready_timeout_s
    waiting = "nothing yet"
    deployment_ready = False
    while True:
        if req.cancelled():
            raise SweepCancelled(f"sweep cancelled while worker {w.name} was starting; it was deleted")
        if not deployment_ready:
            deployment_ready, waiting = cluster.ready(w)
        if deployment_ready:
            try:
                if httpx.get(f"{url}/v1/models", timeout=5.0).status_code == 200:
                    return time.monotonic() - start
                waiting = "the engine's /v1/models"
            except httpx.HTTPError as exc:
                waiting = f"the engine at {url} ({type(exc).__name__})"
        if time.monotonic() > deadline:
            raise WorkerNotReady(f"not ready after {req.ready_timeout_s:g} s (waiting for {waiting})")
        time.sleep(cluster.poll_s)


@contextmanager
def running_worker(cluster: Cluster, w: Worker, req: SweepRequest) -> Iterator[tuple[str, float]]:
    """Create the worker, yield (its URL, seconds to ready), and delete it on the way out, however that is."""
    url = req.service_url.format(service=w.name, namespace=w.namespace, port=w.port, tp=w.tp)
    try:
        cluster.create(w)
        yield url, _wait_ready(cluster, w, url, req)
    finally:
        left = cluster.delete(w)
        if left:
            raise UserError(f"namespace: could not delete {', '.join(left)} in namespace {w.namespace}; delete it "
                            f"by hand (kubectl -n {w.namespace} delete deployment,service -l "
                            f"planner.profile/worker={w.name})", key="namespace")


def check_request(req: SweepRequest) -> dict[str, Any]:
    if not req.template:
        raise UserError("template: backend kubernetes needs a worker Deployment template (YAML)", key="template")
    if req.ready_timeout_s <= 0:
        raise UserError(f"ready_timeout_s: {req.ready_timeout_s:g} must be > 0", key="ready_timeout_s")
    try:
        example = req.service_url.format(service="w", namespace="ns", port=8000, tp=1)
    except (KeyError, IndexError, ValueError) as exc:
        raise UserError(f"service_url: {req.service_url!r}: only {{service}}, {{namespace}}, {{port}} and {{tp}} "
                        f"can be filled in ({type(exc).__name__}: {exc})", key="service_url") from None
    if not example.startswith(("http://", "https://")):
        raise UserError(f"service_url: {req.service_url!r} must start with http:// or https://", key="service_url")
    template = load_template(req.template)
    for tp in req.tp:
        render_worker(template, tp, req.namespace, req.engine)  # fails early on an unusable template
    return template


def profile_kubernetes(model: ModelSpec, hw: HardwareSpec, req: SweepRequest, api_client: Any = None) -> Profile:
    template = check_request(req)
    cluster = Cluster(api_client if api_client is not None else load_client(req.kubeconfig))
    results: list[EndpointResult] = []
    notes: list[str] = []
    for tp in req.tp:
        if req.cancelled():
            raise SweepCancelled("sweep cancelled between TP sizes; nothing was written")
        worker = render_worker(template, tp, req.namespace, req.engine)
        try:
            with running_worker(cluster, worker, req) as (url, ready_s):
                result = measure_endpoint(model, req, url=url, tp=tp)
        except WorkerNotReady as exc:
            notes.append(f"tp {tp}: left out, worker {worker.name} {exc}")
            continue
        results.append(result)
        notes.append(f"tp {tp}: worker {worker.name} ready in {ready_s:.0f} s")
    if not results:
        raise UserError(f"template: no worker became ready ({'; '.join(notes)}); nothing was written", key="template")
    return _assemble(model, hw, req, results, notes)


def _assemble(model: ModelSpec, hw: HardwareSpec, req: SweepRequest, results: list[EndpointResult],
              notes: list[str]) -> Profile:
    template = "inline" if req.template and is_inline(req.template) else str(req.template)
    software: dict[str, str] = {"template": template, "namespace": req.namespace}
    all_notes = list(notes)
    for r in results:
        tp = r.sweep.tp
        software.update({k if k in ("loadgen", "warmup", "iters", "decode_tokens") else f"tp{tp}.{k}": v
                         for k, v in r.software.items()})
        all_notes += [f"tp {tp}: {n}" for n in r.notes[1:]]
    all_notes.insert(0, results[0].notes[0])  # the method, once
    return assemble(model, hw, req, [r.sweep for r in results], backend="kubernetes", software=software,
                    notes="; ".join(all_notes))
