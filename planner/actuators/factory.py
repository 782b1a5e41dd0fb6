"""The actuator for a policy's ``actuator.kind`` (``dry-run`` overrides it for ``planner run --dry-run``)."""

from __future__ import annotations

from typing import Any

from planner.actuators.desired import DesiredStore, PublishActuator
from planner.actuators.dry_run import DryRunActuator
from planner.telemetry import PlannerMetrics
from planner.types import Actuator


def make_actuator(policy, store: DesiredStore, metrics: PlannerMetrics | None = None,  # noqa: ANN001 - Policy
                  *, dry_run: bool = False, api_client: Any = None) -> Actuator:
    kind = "dry-run" if dry_run else policy.actuator.kind
    if kind == "dry-run":
        return DryRunActuator()
    if kind in ("keda", "hpa"):
        return PublishActuator(store, kind, metrics)
    from planner.actuators.kubernetes import KubernetesScaleActuator

    if api_client is None:
        api_client = load_api_client()
    return KubernetesScaleActuator.from_policy(policy, api_client)


def load_api_client() -> Any:
    """In-cluster ServiceAccount credentials, else the local kubeconfig (development)."""
    from kubernetes import client, config

    from planner.errors import UserError

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as exc:
            raise UserError(f"actuator kind 'kubernetes': no in-cluster credentials and no kubeconfig ({exc}); "
                            "run inside the cluster, set KUBECONFIG, or use --dry-run") from None
    return client.ApiClient()
