"""Which API endpoint scales which kind: the scale-subresource table of INTEGRATION.md §4.1."""

from __future__ import annotations

from dataclasses import dataclass

from planner.config import Policy
from planner.errors import UserError

# kind -> (group, plural). Built-in kinds go through AppsV1Api; the rest through CustomObjectsApi *_scale.
SCALABLE_KINDS: dict[str, tuple[str, str]] = {
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "DynamoGraphDeploymentScalingAdapter": ("nvidia.com", "dynamographdeploymentscalingadapters"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    "PodClique": ("grove.io", "podcliques"),
    "PodCliqueScalingGroup": ("grove.io", "podcliquescalinggroups"),
}

# Kinds whose pods a ReplicaSet removes, honouring controller.kubernetes.io/pod-deletion-cost: a scale-down
# of these marks the pods it should remove first (deletion_cost.py), which needs list and patch on pods.
MARKED_KINDS = frozenset({"Deployment"})


@dataclass(frozen=True)
class ScaleTarget:
    pool: str
    group: str  # "apps" for Deployment/StatefulSet
    version: str
    plural: str
    kind: str
    namespace: str
    name: str
    min_replicas: int

    @property
    def builtin(self) -> bool:
        return self.group == "apps"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({self.api_version}, pool {self.pool})"

    def rbac_hint(self, verbs: str = "get, update") -> str:
        return (f"the planner's ServiceAccount needs a Role rule in namespace {self.namespace}: "
                f"{{apiGroups: [\"{self.group}\"], resources: [\"{self.plural}/scale\"], verbs: [{verbs}], "
                f"resourceNames: [\"{self.name}\"]}} ({RBAC_FILE}: the rule for each kind)")


RBAC_FILE = "deploy/overlays/direct/rbac.yaml"  # the Role of actuator kind kubernetes (tests/test_rbac.py)


def resolve_target(pool: str, api_version: str, kind: str, namespace: str, name: str,
                   min_replicas: int) -> ScaleTarget:
    if kind not in SCALABLE_KINDS:
        raise UserError(f"policy: key 'pools.{pool}.target.kind' = {kind!r}: not a kind the planner can scale; "
                        f"allowed: {', '.join(SCALABLE_KINDS)}")
    group, plural = SCALABLE_KINDS[kind]
    if "/" not in api_version:
        raise UserError(f"policy: key 'pools.{pool}.target.apiVersion' = {api_version!r}: expected group/version, "
                        f"e.g. {group}/v1")
    got_group, version = api_version.split("/", 1)
    if got_group != group:
        raise UserError(f"policy: key 'pools.{pool}.target.apiVersion' = {api_version!r}: {kind} lives in API group "
                        f"{group!r}")
    return ScaleTarget(pool, group, version, plural, kind, namespace, name, min_replicas)


def targets_from_policy(policy: Policy, kind: str) -> dict[str, ScaleTarget]:
    """Each pool's scale target; ``kind``: the actuator kind that needs them (named in the error)."""
    out: dict[str, ScaleTarget] = {}
    for pool in policy.pool_names():
        spec = policy.pool(pool)
        if spec.target is None:
            raise UserError(f"policy {policy.name}: key 'pools.{pool}.target' is required by actuator kind "
                            f"{kind!r} (apiVersion, kind, namespace, name)")
        t = spec.target
        out[pool] = resolve_target(pool, t.api_version, t.kind, t.namespace, t.name, spec.min_replicas)
    return out
