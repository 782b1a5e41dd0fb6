"""Actuators by ``actuator.kind``: what the policy schema accepts, and how each is built.

Adding an actuator: write it in its own file under planner/actuators/ (a ``KindActuator``: an
``apply(targets) -> Applied`` that is idempotent and safe to retry, and a ``read_replicas()`` that says what the
targets hold), put its settings in planner/actuators/settings.py, and add one ``ActuatorKind`` line to
``REGISTRY`` below. Constructors import their module when called, so reading this registry (the policy file
does, to check ``actuator.kind``) loads no client library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from planner.actuators.settings import ActuatorSettings
from planner.config import Policy
from planner.types import Actuator


class KindActuator(Actuator, Protocol):
    """What every kind builds: ``apply`` and ``read_replicas`` - what the targets hold, None when the kind
    cannot tell (the control loop seeds the controller with it and names it by ``replicas_source``)."""

    @property
    def replicas_source(self) -> str: ...

    def read_replicas(self) -> dict[str, int] | None: ...


@dataclass(frozen=True)
class ActuatorContext:
    policy: Policy  # the pools (targets, floors) and the policy's name
    settings: ActuatorSettings
    store: Any  # planner.actuators.desired.DesiredStore: what KEDA and the HPA read
    api_client: Any = None  # kubernetes.client.ApiClient, for kinds that write (or may read) the cluster
    metrics: Any = None  # planner.telemetry.PlannerMetrics, for kinds that export their own state
    may_write: Callable[[], str | None] | None = None  # leader election: None to write, else why not
    on_conflict: Callable[[str], None] | None = None  # a 409 on a pool's write (counted by telemetry)
    request_timeout_s: float = 10.0  # every Kubernetes API call of the actuator
    # The metrics dialect's gauges of requests in the system: what a process replica's drain waits on, and
    # a replica's load when a scale-down chooses which one goes.
    in_flight_gauges: tuple[str, ...] = ("vllm:num_requests_running", "vllm:num_requests_waiting")


@dataclass(frozen=True)
class ActuatorKind:
    name: str
    help: str
    build: Callable[[ActuatorContext], KindActuator]
    needs_api: bool = False  # writes the Kubernetes API (credentials needed unless --dry-run)
    publishes: bool = False  # serves desired replicas to KEDA / the HPA (/v1/desired, gRPC, the gauge)


def _kubernetes(ctx: ActuatorContext) -> KindActuator:
    from planner.actuators.kubernetes import KubernetesScaleActuator

    return KubernetesScaleActuator.from_policy(ctx.policy, ctx.api_client, ctx.settings.kind,
                                               may_write=ctx.may_write,
                                               on_conflict=ctx.on_conflict,
                                               request_timeout_s=ctx.request_timeout_s,
                                               in_flight_gauges=ctx.in_flight_gauges)


def _reader(ctx: ActuatorContext) -> Any:
    """What KEDA/the HPA set is the targets' spec.replicas: readable with credentials and targets, else None."""
    if ctx.api_client is None or any(ctx.policy.pool(p).target is None for p in ctx.policy.pool_names()):
        return None
    from planner.actuators.kubernetes import KubernetesScaleActuator

    return KubernetesScaleActuator.from_policy(ctx.policy, ctx.api_client, ctx.settings.kind,
                                               request_timeout_s=ctx.request_timeout_s)


def _publish(kind: str) -> Callable[[ActuatorContext], KindActuator]:
    def build(ctx: ActuatorContext) -> KindActuator:
        from planner.actuators.desired import PublishActuator

        return PublishActuator(ctx.store, kind, reader=_reader(ctx))

    return build


def _process(ctx: ActuatorContext) -> KindActuator:
    from planner.actuators.process import ProcessActuator

    return ProcessActuator.from_policy(ctx.policy, ctx.settings, ctx.in_flight_gauges, ctx.metrics)


def _dry_run(ctx: ActuatorContext) -> KindActuator:
    from planner.actuators.dry_run import DryRunActuator

    return DryRunActuator()


REGISTRY: dict[str, ActuatorKind] = {k.name: k for k in (
    ActuatorKind("kubernetes", "writes each pool's scale subresource (Deployment, StatefulSet, LWS, DGDSA, Grove)",
                 _kubernetes, needs_api=True),
    ActuatorKind("keda", "publishes desired replicas for KEDA (metrics-api /v1/desired, external scaler gRPC)",
                 _publish("keda"), publishes=True),
    ActuatorKind("hpa", "publishes desired replicas as planner_desired_replicas for an HPA (External metric)",
                 _publish("hpa"), publishes=True),
    ActuatorKind("process", "starts, drains and stops local engine processes (file_sd for Prometheus and the router)",
                 _process),
    ActuatorKind("dry-run", "logs what it would do, changes nothing", _dry_run),
)}


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)
