"""The engines as Kubernetes objects: prefill/decode (or aggregated) Deployments, LeaderWorkerSets, or one
DynamoGraphDeployment, with the engine's TP flags and GPU requests filled in.

Every pod carries ``llm-d.ai/role`` (prefill | decode | both), which the shipped PodMonitors
(deploy/engines/) turn into the ``pool`` label the policy's selectors use; Dynamo's operator labels its
pods itself (nvidia.com/dynamo-*component-type) for its PodMonitor. A replica of TP t on nodes of g GPUs
spans ceil(t / g) nodes and requests t / nodes GPUs per pod. Every engine pod drains before SIGTERM: a
preStop hook waits for its requests in flight, within terminationGracePeriodSeconds (drain_hook.py);
Dynamo's workers drain on SIGTERM themselves, given the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.requests.checks import Resolved
from planner.requests.drain_hook import DRAIN_S, ENDPOINTS_DELAY_S, GRACE_S, pre_stop
from planner.requests.engines import (
    ENGINES,
    dynamo_image,
    dynamo_worker_args,
    gpu_resource,
    multinode_commands,
    serve_args,
)
from planner.sources.dialects import get_dialect
from planner.types import Mode, Pool

MANAGED_BY = {"app.kubernetes.io/managed-by": "planner"}
ROLE_LABEL = {Pool.PREFILL: "prefill", Pool.DECODE: "decode", Pool.AGGREGATED: "both"}
DGD_SERVICE = {Pool.PREFILL: "prefill", Pool.DECODE: "decode", Pool.AGGREGATED: "worker"}
STARTUP_PROBE_S = 1800  # weights and CUDA graphs: large models take many minutes to become ready


@dataclass(frozen=True)
class Layout:
    """What to render: the request, the mode, and per pool its TP and replicas."""

    resolved: Resolved
    mode: Mode
    tp: dict[Pool, int]
    replicas: dict[Pool, int]

    @property
    def pools(self) -> tuple[Pool, ...]:
        return self.mode.pools

    def gpus_per_pod(self, pool: Pool) -> int:
        return self.tp[pool] // self.resolved.nodes(self.tp[pool])


def scale_target(resolved: Resolved, pool: Pool) -> dict[str, str]:
    """The object the controller scales for ``pool`` (the policy's pools.<pool>.target)."""
    out = resolved.spec.output
    if out == "dynamo-graph":
        return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeploymentScalingAdapter",
                "namespace": resolved.namespace, "name": f"{resolved.name}-{DGD_SERVICE[pool]}"}
    kind, api = ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1") if out == "lws" else ("Deployment", "apps/v1")
    return {"apiVersion": api, "kind": kind, "namespace": resolved.namespace, "name": f"{resolved.name}-{pool}"}


def _meta(layout: Layout, name: str, pool: Pool | None = None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": layout.resolved.name, **MANAGED_BY}
    if pool is not None:
        labels["app.kubernetes.io/component"] = pool.value
    return {"name": name, "namespace": layout.resolved.namespace, "labels": labels}


def _image(layout: Layout) -> str:
    spec = layout.resolved.spec
    return spec.image or ENGINES[spec.engine].image


def _container(layout: Layout, pool: Pool, command: list[str], args: list[str] | None,
               serves: bool = True) -> dict[str, Any]:
    engine = ENGINES[layout.resolved.spec.engine]
    gauges = get_dialect(engine.dialect).in_system_gauges
    gpus = str(layout.gpus_per_pod(pool))
    resource = gpu_resource(layout.resolved.hardware.vendor)
    container: dict[str, Any] = {
        "name": "engine", "image": _image(layout), "command": command, **({"args": args} if args is not None else {}),
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token-secret", "key": "HF_TOKEN",
                                                                    "optional": True}}}],
        "resources": {"requests": {resource: gpus}, "limits": {resource: gpus}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if serves:
        probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10}
        container["ports"] = [{"name": "http", "containerPort": engine.port, "protocol": "TCP"}]
        container["startupProbe"] = {**probe, "failureThreshold": STARTUP_PROBE_S // 10}
        container["readinessProbe"] = probe
    # Drain before SIGTERM (drain_hook.py): a serving container waits for its own requests; an LWS worker
    # waits for its leader's, so that the group outlives the leader's drain.
    container["lifecycle"] = pre_stop(engine.port, gauges, host_env="" if serves else "LWS_LEADER_ADDRESS")
    return container


def _pod(layout: Layout, pool: Pool, container: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"labels": labels},
            "spec": {"terminationGracePeriodSeconds": GRACE_S,  # the preStop drain and the engine's stop
                     "containers": [container],
                     # NCCL needs more shared memory than a container's default 64 MiB once TP > 1.
                     "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]}}


def _selector(layout: Layout, pool: Pool) -> dict[str, str]:
    return {"app.kubernetes.io/name": layout.resolved.name, "app.kubernetes.io/component": pool.value}


def deployment(layout: Layout, pool: Pool) -> dict[str, Any]:
    r = layout.resolved
    command, args = serve_args(r.spec.engine, r.served_name, layout.tp[pool], pool)
    labels = {**_selector(layout, pool), "llm-d.ai/role": ROLE_LABEL[pool]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(layout, f"{r.name}-{pool}", pool),
            "spec": {"replicas": layout.replicas[pool], "selector": {"matchLabels": _selector(layout, pool)},
                     "template": _pod(layout, pool, _container(layout, pool, command, args), labels)}}


def leader_worker_set(layout: Layout, pool: Pool) -> dict[str, Any]:
    """One group per replica; a replica over several nodes gets a leader (serves) and workers (join)."""
    r = layout.resolved
    tp, nodes = layout.tp[pool], r.nodes(layout.tp[pool])
    serving = {**_selector(layout, pool), "llm-d.ai/role": ROLE_LABEL[pool]}
    template: dict[str, Any] = {"size": nodes, "restartPolicy": "RecreateGroupOnPodRestart"}
    if nodes == 1:
        command, args = serve_args(r.spec.engine, r.served_name, tp, pool)
        template["workerTemplate"] = _pod(layout, pool, _container(layout, pool, command, args), serving)
    else:
        leader, worker = multinode_commands(r.spec.engine, r.served_name, tp, pool)
        template["leaderTemplate"] = _pod(layout, pool, _container(layout, pool, leader, None), serving)
        template["workerTemplate"] = _pod(layout, pool, _container(layout, pool, worker, None, serves=False),
                                          _selector(layout, pool))  # no role: the PodMonitor skips workers
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": _meta(layout, f"{r.name}-{pool}", pool),
            "spec": {"replicas": layout.replicas[pool], "leaderWorkerTemplate": template}}


def _dgd_worker(layout: Layout, pool: Pool, backend: str, image: str) -> dict[str, Any]:
    r = layout.resolved
    tp, nodes = layout.tp[pool], r.nodes(layout.tp[pool])
    service: dict[str, Any] = {
        "envFromSecret": "hf-token-secret", "componentType": "worker", "replicas": layout.replicas[pool],
        "resources": {"limits": {"gpu": str(layout.gpus_per_pod(pool))}},
        # The planner scales each worker service through its DynamoGraphDeploymentScalingAdapter.
        "scalingAdapter": {"enabled": r.spec.actuator != "dry-run"},
        # Dynamo drains on SIGTERM itself (docs/drain.md): it leaves discovery at once, then waits for in-flight
        # requests up to DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT; a preStop would only delay leaving discovery.
        "extraPodSpec": {"terminationGracePeriodSeconds": GRACE_S,
                         "mainContainer": {"image": image, "command": ["python3", "-m", f"dynamo.{backend}"],
                                           "args": dynamo_worker_args(backend, r.served_name, tp, pool),
                                           "env": [{"name": "DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT",
                                                    "value": str(DRAIN_S + ENDPOINTS_DELAY_S)}]}}}
    if pool is not Pool.AGGREGATED:
        service["subComponentType"] = pool.value
    if nodes > 1:
        service["multinode"] = {"nodeCount": nodes}
    return service


def dynamo_graph(layout: Layout) -> dict[str, Any]:
    r = layout.resolved
    backend = ENGINES[r.spec.engine].dynamo_backend
    image = r.spec.image or dynamo_image(backend)
    services: dict[str, Any] = {"Frontend": {"componentType": "frontend", "replicas": 1,
                                             "extraPodSpec": {"mainContainer": {"image": image}}}}
    for pool in layout.pools:
        services[DGD_SERVICE[pool]] = _dgd_worker(layout, pool, backend, image)
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": _meta(layout, r.name),
            "spec": {"backendFramework": backend, "services": services}}


def engine_objects(layout: Layout) -> dict[str, list[dict[str, Any]]]:
    """File name -> the engine objects in it."""
    out = layout.resolved.spec.output
    if out == "dynamo-graph":
        return {"dynamographdeployment.yaml": [dynamo_graph(layout)]}
    build = leader_worker_set if out == "lws" else deployment
    return {f"{pool.value}.yaml": [build(layout, pool)] for pool in layout.pools}
