"""The actuator for a policy's ``actuator.kind`` (``dry-run`` overrides it for ``planner run --dry-run``)."""

from __future__ import annotations

import os
from typing import Any

from planner.actuators.desired import DesiredStore
from planner.actuators.registry import REGISTRY, ActuatorContext, KindActuator
from planner.actuators.settings import ActuatorSettings
from planner.config import Policy


def make_actuator(policy: Policy, settings: ActuatorSettings, store: DesiredStore, *, dry_run: bool = False,
                  api_client: Any = None, **context: Any) -> KindActuator:
    """``context``: the optional fields of ``ActuatorContext`` (metrics, may_write, on_conflict,
    request_timeout_s, in_flight_gauges)."""
    kind = REGISTRY["dry-run" if dry_run else settings.kind]
    if kind.needs_api and api_client is None:
        api_client = load_api_client()
    return kind.build(ActuatorContext(policy, settings, store, api_client, **context))


def needs_api(settings: ActuatorSettings, dry_run: bool) -> bool:
    """Whether running these settings writes the Kubernetes API (so credentials must be found first)."""
    return not dry_run and REGISTRY[settings.kind].needs_api


def load_api_client(required: bool = True, in_cluster_only: bool = False) -> Any:
    """In-cluster ServiceAccount credentials, else the local kubeconfig (development).

    No urllib3 retries: every call carries its own timeout and the control loop retries next tick, so a
    hung API server costs one timeout per call, not four (urllib3 retries reads of GET/PUT three times by
    default), and a failure is one log line, not a burst of retry warnings. ``required=False``: None when
    there are no credentials (a kind that only *may* read the cluster); ``in_cluster_only``: no kubeconfig
    (a developer's kubeconfig names some cluster, not necessarily the one the policy's targets run in)."""
    from kubernetes import client, config

    from planner.errors import UserError

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        if in_cluster_only:
            return None
        try:
            # KUBECONFIG as it is now (the client reads it once, at import).
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None, client_configuration=cfg)
        except (config.ConfigException, OSError) as exc:
            if not required:
                return None
            raise UserError(f"actuator kind 'kubernetes' and leader_elect need the Kubernetes API: no in-cluster "
                            f"credentials and no kubeconfig ({exc}); "
                            "run inside the cluster, set KUBECONFIG, or use dry_run",
                            mentions=("leader_elect", "dry_run")) from None
    cfg.retries = 0
    return client.ApiClient(cfg)
