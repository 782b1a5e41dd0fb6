"""Default sweep grids and the sweep request shared by every backend."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from planner.errors import UserError

DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_ISL_GRID = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
DEFAULT_BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXT_GRID = (512, 1024, 2048, 4096, 8192, 16384, 32768)
# (untimed, timed) runs per point when the caller does not say: a kernel is cheap to time 20 times, a
# decode point on a live server (B streams, their prefill, then steady decode) is not.
MEASURE_DEFAULTS = {"torch": (3, 20), "endpoint": (1, 3), "kubernetes": (1, 3)}
DEFAULT_K8S_URL = "http://{service}.{namespace}.svc:{port}"


class SweepCancelled(Exception):  # noqa: N818 - a cancellation, not an error of the caller's input
    """The caller set ``SweepRequest.cancel``; the backend stopped and cleaned up (nothing was written)."""

    exit_code = 130


def measure_defaults(backend: str) -> tuple[int, int]:
    """(warmup, iters) a measuring backend uses when the caller gives none."""
    return MEASURE_DEFAULTS.get(backend, (3, 20))


@dataclass(frozen=True)
class SweepRequest:
    model: str
    gpu: str
    tp: tuple[int, ...]
    isl: int
    osl: int
    ttft_ms: float
    itl_ms: float
    isl_grid: tuple[int, ...] | None = None
    batch_grid: tuple[int, ...] | None = None
    context_grid: tuple[int, ...] | None = None
    kv_link_gbps: float | None = None
    # Measuring backends only (torch, endpoint): where to run, and how many untimed / timed repetitions per
    # point (see MEASURE_DEFAULTS for what each backend's command line uses).
    device: str = "cuda"
    warmup: int = 3
    iters: int = 20
    # torch backend: run the LM head (logits GEMM) in both stages, as a serving engine does. The shared
    # measurements (profiles/measurements) left it out; set False to reproduce their shapes like-for-like.
    include_lm_head: bool = True
    # Measuring backends that sweep a serving system (planner profile, profile requests with search
    # "thorough"). endpoint backend: the OpenAI-compatible server at ``url``, the model name it serves
    # (default: the one it lists), the most concurrent streams to open (larger batches are skipped and
    # noted), the steady-state tokens each stream must produce in a decode run, one request's time limit,
    # and a bearer token if it wants one.
    url: str | None = None
    served_model: str | None = None
    concurrency_limit: int | None = None
    decode_tokens: int = 32
    request_timeout_s: float = 600.0
    api_key: str | None = field(default=None, repr=False)
    # kubernetes backend: a Deployment template (YAML text, as a profile request carries it, or a file's
    # path) with one container running vLLM or SGLang, deployed at each TP; where to put it, which engine's TP
    # flag to set (default: read from the template's command), how long a worker may take to become ready,
    # the kubeconfig (default: in-cluster, then ~/.kube/config) and how the profiler reaches the worker's
    # Service ({service}, {namespace}, {port}, {tp}).
    template: str | None = None
    namespace: str = "default"
    engine: str | None = None
    ready_timeout_s: float = 900.0
    kubeconfig: str | None = None
    service_url: str = DEFAULT_K8S_URL
    # Set by the caller to stop a sweep: the backend ends its requests, deletes what it created, and raises
    # SweepCancelled.
    cancel: threading.Event | None = field(default=None, compare=False, repr=False)

    def grids(self, max_context: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Explicit grids are used exactly; default grids stop at the model's context length. A grid left
        empty (given empty, or no default point fits ``max_context``) is an error naming it."""
        isl = self.isl_grid if self.isl_grid is not None else tuple(x for x in DEFAULT_ISL_GRID if x <= max_context)
        batch = self.batch_grid if self.batch_grid is not None else DEFAULT_BATCH_GRID
        ctx = (self.context_grid if self.context_grid is not None
               else tuple(x for x in DEFAULT_CONTEXT_GRID if x <= max_context))
        for key, grid in (("isl_grid", isl), ("batch_grid", batch), ("context_grid", ctx)):
            if not grid:
                given = "given empty" if getattr(self, key) is not None else f"no default point fits {max_context} tokens"
                raise UserError(f"{key}: no points ({given}); give at least one positive integer", key=key)
            if any(x <= 0 for x in grid):
                raise UserError(f"{key}: {','.join(map(str, grid))}: every point must be > 0", key=key)
        return isl, batch, ctx

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()
