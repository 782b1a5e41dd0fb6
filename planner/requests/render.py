"""Render a Ready request's artifacts in memory: profile.json, policy.yaml, result.json, manifests/.

Nothing is written here: the caller commits the whole set at once (planner.requests.artifacts), so a
failure or a cancel leaves no half-written files behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from planner import __version__
from planner.profile import Profile
from planner.requests.checks import Resolved
from planner.requests.manifests import Layout, engine_objects
from planner.requests.scalers import actuator_objects, dump, dump_all, kustomization
from planner.requests.sizing import Sizing
from planner.requests.status import Result
from planner.requests.workload import SteadyLoad


@dataclass(frozen=True)
class Rendered:
    files: dict[str, bytes]  # relative path -> content
    objects: list[dict[str, Any]]  # every manifest object, in the order kubectl would apply them


def _policy_header(resolved: Resolved, sizing: Sizing, load: SteadyLoad) -> str:
    d = sizing.decision
    pools = ", ".join(f"{p} {x.replicas} x TP{x.gpus_per_replica}" for p, x in d.pools.items())
    return (f"# Controller policy from a profile request (planner {__version__}): {resolved.model.name} on "
            f"{resolved.hardware.name}, {sizing.policy.mode.value}: {pools} for {load.rate_rps:.4g} req/s "
            f"(ISL {load.isl}, OSL {load.osl}).\n"
            "# Run it: planner run --policy policy.yaml   What-if: planner plan --policy policy.yaml "
            f"--rate-rps {load.rate_rps:.4g} --isl {load.isl} --osl {load.osl}\n"
            "# Every field and its default: policies/example.yaml. The profile is profile.json beside this file.\n")


def _manifest_header(resolved: Resolved) -> str:
    return (f"# Rendered by planner {__version__} from a profile request for {resolved.model.name} "
            f"({resolved.served_name}) on {resolved.hardware.name}; engine {resolved.spec.engine}.\n")


def render(resolved: Resolved, profile: Profile, layout: Layout, sizing: Sizing, load: SteadyLoad,
           result: Result) -> Rendered:
    groups = {**engine_objects(layout), **actuator_objects(sizing.policy)}
    files: dict[str, bytes] = {
        "profile.json": (profile.to_json() + "\n").encode(),
        "policy.yaml": (_policy_header(resolved, sizing, load)
                        + dump(sizing.document)).encode(),
    }
    objects: list[dict[str, Any]] = []
    for name, objs in groups.items():
        files[f"manifests/{name}"] = dump_all(objs, _manifest_header(resolved)).encode()
        objects += objs
    files["manifests/kustomization.yaml"] = dump(kustomization(resolved.namespace, list(groups))).encode()
    with_names = result.model_copy(update={"artifacts": sorted([*files, "result.json"])})
    files["result.json"] = (json.dumps(with_names.model_dump(mode="json"), indent=1) + "\n").encode()
    return Rendered(files, objects)
