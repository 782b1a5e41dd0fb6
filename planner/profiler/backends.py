"""Backend registry: name -> function(model, hw, request, progress) -> Profile."""

from __future__ import annotations

from collections.abc import Callable

from planner.errors import UserError
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec
from planner.profile import Profile
from planner.profiler.analytical import profile_analytical
from planner.profiler.grids import SweepRequest

Backend = Callable[[ModelSpec, HardwareSpec, SweepRequest], Profile]


def _analytical(model: ModelSpec, hw: HardwareSpec, req: SweepRequest) -> Profile:
    return profile_analytical(model, hw, req)


def _torch(model: ModelSpec, hw: HardwareSpec, req: SweepRequest) -> Profile:
    try:
        from planner.profiler import torch_backend
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("planner"):
            raise UserError("backend torch: not available in this build", key="backend") from None
        raise
    return torch_backend.profile_torch(model, hw, req)


def _endpoint(model: ModelSpec, hw: HardwareSpec, req: SweepRequest) -> Profile:
    from planner.profiler.endpoint import profile_endpoint

    return profile_endpoint(model, hw, req)


def _kubernetes(model: ModelSpec, hw: HardwareSpec, req: SweepRequest) -> Profile:
    from planner.profiler.kubernetes_backend import profile_kubernetes

    return profile_kubernetes(model, hw, req)


BACKENDS: dict[str, Backend] = {"analytical": _analytical, "torch": _torch, "endpoint": _endpoint,
                                "kubernetes": _kubernetes}
PLANNED: tuple[str, ...] = ()


def get_backend(name: str) -> Backend:
    if name in BACKENDS:
        return BACKENDS[name]
    if name in PLANNED:
        raise UserError(f"backend {name!r} is not implemented yet; available: {', '.join(BACKENDS)}", key="backend")
    raise UserError(f"backend {name!r}: unknown; allowed: {', '.join(BACKENDS)}", key="backend")
