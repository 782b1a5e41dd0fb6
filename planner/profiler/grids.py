"""Default sweep grids and the sweep request shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_ISL_GRID = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
DEFAULT_BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXT_GRID = (512, 1024, 2048, 4096, 8192, 16384, 32768)


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
    # Measuring backends only (torch): where to run, and how many untimed / timed repetitions per point.
    device: str = "cuda"
    warmup: int = 3
    iters: int = 20
    # torch backend: run the LM head (logits GEMM) in both stages, as a serving engine does. The shared
    # measurements (shared/measurements) left it out; set False to reproduce their shapes like-for-like.
    include_lm_head: bool = True
    # Measuring backends that sweep a serving system (profile requests with search "thorough"): the endpoint
    # backend measures the OpenAI-compatible server at ``url``; the kubernetes backend deploys ``template``
    # (a manifest, YAML text) at each TP.
    url: str | None = None
    template: str | None = None

    def grids(self, max_context: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Explicit grids are used exactly; default grids stop at the model's context length."""
        isl = self.isl_grid or tuple(x for x in DEFAULT_ISL_GRID if x <= max_context)
        batch = self.batch_grid or DEFAULT_BATCH_GRID
        ctx = self.context_grid or tuple(x for x in DEFAULT_CONTEXT_GRID if x <= max_context)
        return isl, batch, ctx
