"""Sweep the TP candidates through a profiler backend: the prefill grid first, then the decode grid.

A backend (``get_backend(name)(model, hw, SweepRequest) -> Profile``) measures both stages per call. The
request sweeps them as two steps, as Dynamo's profiler does: each call is one TP, and the other stage's
grid is cut to one point (prefill call: batch 1 at the shortest context; decode call: the shortest prompt),
so the lifecycle can report SweepingPrefill and SweepingDecode with progress per TP, and a cancel takes
effect between TPs. The points kept are the same a single full sweep would measure (a test checks that
the merged profile equals ``planner profile``'s for the analytical backend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from planner.errors import UserError
from planner.profile import Profile
from planner.profiler.assemble import with_selection
from planner.profiler.backends import get_backend
from planner.profiler.grids import SweepRequest, measure_defaults
from planner.requests.checks import Resolved
from planner.requests.status import FailReason
from planner.requests.workload import SteadyLoad
from planner.types import Pool

Progress = Callable[[float, str], None]  # (fraction of the step done, message)


class RequestFailed(Exception):
    """The request ends Failed: ``reason``, a message with numbers, and the closest configuration if any."""

    def __init__(self, reason: FailReason, message: str, closest: dict | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.closest = closest


class Cancelled(Exception):
    pass


def sweep_request(resolved: Resolved, load: SteadyLoad) -> SweepRequest:
    spec = resolved.spec
    warmup, iters = measure_defaults(resolved.backend)  # a live server's points cost seconds, not a kernel's
    return SweepRequest(model=resolved.model.name, gpu=resolved.hardware.name, tp=resolved.tp, isl=load.isl,
                        osl=load.osl, ttft_ms=spec.sla.ttft_ms, itl_ms=spec.sla.itl_ms,
                        kv_link_gbps=spec.kv_link_gbps, url=spec.endpoint, template=spec.deployment_template,
                        namespace=resolved.namespace, warmup=warmup, iters=iters)


def stage_request(req: SweepRequest, stage: Pool, tp: int, max_context: int) -> SweepRequest:
    isl_grid, batch_grid, ctx_grid = req.grids(max_context)
    if stage is Pool.PREFILL:
        return replace(req, tp=(tp,), isl_grid=isl_grid, batch_grid=(1,), context_grid=(min(ctx_grid),))
    return replace(req, tp=(tp,), isl_grid=(min(isl_grid),), batch_grid=batch_grid, context_grid=ctx_grid)


def _call(resolved: Resolved, req: SweepRequest) -> Profile:
    try:
        backend = get_backend(resolved.backend)
    except UserError as exc:
        raise RequestFailed(FailReason.BACKEND_UNAVAILABLE, f"search {resolved.spec.search}: {exc}") from None
    try:
        return backend(resolved.model, resolved.hardware, req)
    except UserError as exc:
        raise RequestFailed(FailReason.BACKEND_ERROR, f"backend {resolved.backend}: {exc}") from None


def sweep_stage(resolved: Resolved, req: SweepRequest, stage: Pool, progress: Progress,
                cancelled: Callable[[], bool]) -> list[Profile]:
    """One backend call per TP candidate for ``stage``, checking for a cancel before each."""
    out = []
    for i, tp in enumerate(req.tp):
        if cancelled():
            raise Cancelled()
        progress(i / len(req.tp), f"{stage.value}: TP {tp} ({i + 1} of {len(req.tp)}) on {resolved.backend}")
        out.append(_call(resolved, stage_request(req, stage, tp, resolved.model.max_context_tokens)))
    progress(1.0, f"{stage.value}: swept TP {', '.join(map(str, req.tp))}")
    return out


def merge(prefill: list[Profile], decode: list[Profile], req: SweepRequest, resolved: Resolved) -> Profile:
    """One profile: each stage's sweeps from its own calls, selected at the request's workload."""
    first = decode[0]
    provenance = first.provenance.model_copy(update={
        "notes": (first.provenance.notes + "; " if first.provenance.notes else "")
        + "profile request: prefill and decode swept in separate calls per TP"})
    merged = first.model_copy(update={"prefill": [s for p in prefill for s in p.prefill],
                                      "decode": [s for p in decode for s in p.decode],
                                      "provenance": provenance, "selection": None})
    return with_selection(Profile.model_validate(merged.model_dump(by_alias=True)), req, resolved.hardware)
