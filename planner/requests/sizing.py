"""Replicas per pool for the stated load (the what-if sizing of ``planner plan``), and the policy that runs them.

The policy written for the controller is the one the sizing used: same profile, SLA, mode, link and
targets. Its floors are 1 per pool; its ceilings leave room for twice the stated load (or a trace's busiest
minute, if higher), within ``hardware.total_gpus``; that budget becomes ``budget.max_gpus``. A load that
needs more GPUs than the budget fails with the highest rate the budget serves (found by bisection over
the same sizing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.decide.whatif import plan
from planner.policy_file import PolicyFile, parse_policy
from planner.profile import Profile
from planner.requests.checks import Resolved
from planner.requests.engines import ENGINES
from planner.requests.manifests import scale_target
from planner.requests.status import FailReason
from planner.requests.sweep import RequestFailed
from planner.requests.workload import SteadyLoad
from planner.types import Decision, Mode, Pool, Reason

UNBOUNDED = 10_000  # PoolSpec's largest max_replicas
HEADROOM = 2.0  # ceilings hold this multiple of the stated load
BISECTION_STEPS = 30


@dataclass(frozen=True)
class Sizing:
    document: dict[str, Any]  # policy.yaml as data
    policy: PolicyFile
    decision: Decision  # at the stated load, under the written policy


def selectors(resolved: Resolved, mode: Mode) -> dict[str, str]:
    """PromQL selectors per pool: the ``pool`` label from deploy/engines' PodMonitors, and this model (or DGD)."""
    if resolved.spec.output == "dynamo-graph":
        return {p.value: f'{{pool="{p.value}",dgd="{resolved.name}"}}' for p in mode.pools}
    return {p.value: f'{{pool="{p.value}",model_name="{resolved.served_name}"}}' for p in mode.pools}


def link_gbps(resolved: Resolved) -> float:
    return resolved.spec.kv_link_gbps or resolved.hardware.nic_gbps


def document(resolved: Resolved, mode: Mode, bounds: dict[Pool, tuple[int, int]],
             max_gpus: int | None) -> dict[str, Any]:
    spec = resolved.spec
    sleeps = spec.scale_to_zero_after_s is not None  # every pool to zero together, or none (config.py)
    pools = {p.value: {"target": scale_target(resolved, p), "min_replicas": 0 if sleeps else bounds[p][0],
                       "max_replicas": bounds[p][1]} for p in mode.pools}
    zero = {"scale_to_zero_after_s": spec.scale_to_zero_after_s} if sleeps else {}
    return {
        "name": resolved.name, "mode": mode.value, "profile": "profile.json",
        "sla": {"ttft_ms": spec.sla.ttft_ms, "itl_ms": spec.sla.itl_ms, "percentile": spec.sla.percentile},
        "interval_s": 30, "startup_s": 120, "pools": pools, "budget": {"max_gpus": max_gpus},
        "kv_link": {"gbps": link_gbps(resolved)},
        "metrics": {"source": "prometheus", "url": "http://prometheus-operated.monitoring.svc:9090",
                    "dialect": ENGINES[spec.engine].dialect, "selectors": selectors(resolved, mode)},
        "actuator": {"kind": spec.actuator}, **zero,
    }


def _policy(doc: dict[str, Any]) -> PolicyFile:
    return parse_policy(doc, "policy.yaml")


def _unbounded(resolved: Resolved, mode: Mode) -> PolicyFile:
    return _policy(document(resolved, mode, {p: (1, UNBOUNDED) for p in mode.pools}, None))


def _check_feasible(decision: Decision, policy: PolicyFile, load: SteadyLoad) -> None:
    if Reason.SLA_INFEASIBLE not in decision.reasons:
        return
    pools = {p: d for p, d in decision.pools.items() if Reason.SLA_INFEASIBLE in d.reasons}
    detail = "; ".join(f"{p}: predicted TTFT {d.predicted_ttft_ms or 0:,.1f} ms / ITL {d.predicted_itl_ms or 0:,.2f} "
                       f"ms" for p, d in pools.items())
    raise RequestFailed(FailReason.SLA_INFEASIBLE,
                        f"at {load.rate_rps:g} req/s (ISL {load.isl}, OSL {load.osl}) no replica count meets TTFT "
                        f"{policy.sla.ttft_ms:g} ms / ITL {policy.sla.itl_ms:g} ms at p{policy.sla.percentile:g} "
                        f"({detail})",
                        {"pools": {p: {"replicas": d.replicas, "predicted_ttft_ms": d.predicted_ttft_ms,
                                       "predicted_itl_ms": d.predicted_itl_ms} for p, d in pools.items()}})


def _max_rate_within(policy: PolicyFile, profile: Profile, load: SteadyLoad, max_gpus: int) -> float:
    """The highest rate whose sizing fits ``max_gpus`` (0 when not even the floors fit)."""
    lo, hi = 0.0, load.rate_rps
    if plan(policy, profile, 0.0, load.isl, load.osl).gpus > max_gpus:
        return 0.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if plan(policy, profile, mid, load.isl, load.osl).gpus <= max_gpus:
            lo = mid
        else:
            hi = mid
    return lo


def _over_budget(decision: Decision, policy: PolicyFile, profile: Profile, load: SteadyLoad, max_gpus: int) -> None:
    pools = " + ".join(f"{p} {d.replicas} x {d.gpus_per_replica} GPUs" for p, d in decision.pools.items())
    fits = _max_rate_within(policy, profile, load, max_gpus)
    serves = (f"it serves at most {fits:.3g} req/s at this SLA" if fits > 0
              else "not even one replica per pool fits")
    raise RequestFailed(FailReason.OVER_BUDGET,
                        f"{load.rate_rps:g} req/s needs {decision.gpus} GPUs ({pools}); hardware.total_gpus is "
                        f"{max_gpus}: {serves}",
                        {"gpus_needed": decision.gpus, "total_gpus": max_gpus, "max_rate_rps": round(fits, 4),
                         "pools": decision.targets()})


def _bounds(resolved: Resolved, policy: PolicyFile, profile: Profile, load: SteadyLoad,
            decision: Decision) -> dict[Pool, tuple[int, int]]:
    peak = plan(policy, profile, max(HEADROOM * load.rate_rps, load.peak_rate_rps), load.isl, load.osl)
    total = resolved.spec.hardware.total_gpus
    out = {}
    for pool in policy.pool_names():
        need, at_peak = decision.pools[pool], peak.pools[pool]
        ceiling = max(need.replicas, at_peak.replicas, 1)
        if total is not None:  # what the budget leaves this pool once the others hold their stated size
            others = decision.gpus - need.gpus
            ceiling = min(ceiling, max(need.replicas, (total - others) // need.gpus_per_replica))
        out[pool] = (1, ceiling)
    return out


def size(resolved: Resolved, profile: Profile, load: SteadyLoad, mode: Mode) -> Sizing:
    """The what-if decision at the stated load, the checks on it, and the policy to run it with."""
    free = _unbounded(resolved, mode)
    decision = plan(free, profile, load.rate_rps, load.isl, load.osl)
    _check_feasible(decision, free, load)
    total = resolved.spec.hardware.total_gpus
    if total is not None and decision.gpus > total:
        _over_budget(decision, free, profile, load, total)
    doc = document(resolved, mode, _bounds(resolved, free, profile, load, decision), total)
    policy = _policy(doc)
    final = plan(policy, profile, load.rate_rps, load.isl, load.osl)
    assert final.targets() == decision.targets(), (final.targets(), decision.targets())
    return Sizing(doc, policy, final)

