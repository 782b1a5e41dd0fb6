"""The actuator for a policy's ``actuator.kind`` (``dry-run`` overrides it for ``planner run --dry-run``)."""

from __future__ import annotations

from typing import Any

from planner.actuators.desired import DesiredStore
from planner.actuators.registry import REGISTRY, ActuatorContext
from planner.types import Actuator


def make_actuator(policy, store: DesiredStore, *, dry_run: bool = False,  # noqa: ANN001 - Policy
                  api_client: Any = None, metrics: Any = None) -> Actuator:
    kind = REGISTRY["dry-run" if dry_run else policy.actuator.kind]
    if kind.needs_api and api_client is None:
        api_client = load_api_client()
    return kind.build(ActuatorContext(policy, store, api_client, metrics))


def needs_api(policy, dry_run: bool) -> bool:  # noqa: ANN001 - Policy
    """Whether running ``policy`` writes the Kubernetes API (so credentials must be found first)."""
    return not dry_run and REGISTRY[policy.actuator.kind].needs_api


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
                            "run inside the cluster, set KUBECONFIG, or use dry_run", mentions=("dry_run",)) from None
    return client.ApiClient()
