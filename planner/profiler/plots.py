"""PNG plots of a profile: TTFT vs ISL, ITL vs batch per context, throughput-latency frontier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.profile import Profile


def write_plots(profile: Profile, out_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{profile.model.name} on {profile.hardware.gpu} ({profile.provenance.backend})"
    paths = []
    for filename, draw in (("ttft_vs_isl.png", _ttft_vs_isl), ("itl_vs_batch.png", _itl_vs_batch),
                           ("throughput_vs_latency.png", _frontier)):
        fig = draw(plt, profile, name)
        fig.tight_layout()
        fig.savefig(out / filename, dpi=110)
        plt.close(fig)
        paths.append(out / filename)
    return paths


def _ttft_vs_isl(plt: Any, profile: Profile, name: str) -> Any:
    sel = profile.selection
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for sweep in profile.prefill:
        ax.plot([p.isl for p in sweep.points], [p.ttft_ms for p in sweep.points], marker="o", label=f"TP{sweep.tp}")
    if sel:
        ax.axhline(sel.workload.ttft_ms, color="red", ls="--", label="TTFT target")
        ax.axvline(sel.workload.isl, color="gray", ls=":", label="workload ISL")
    ax.set(xscale="log", yscale="log", xlabel="ISL (tokens)", ylabel="prefill TTFT (ms)", title=f"TTFT vs ISL - {name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def _contexts(profile: Profile) -> list[int]:
    return sorted({p.context_tokens for s in profile.decode for p in s.points})


def _itl_vs_batch(plt: Any, profile: Profile, name: str) -> Any:
    sel = profile.selection
    contexts = _contexts(profile)
    fig, axes = plt.subplots(1, len(profile.decode), figsize=(4.2 * len(profile.decode), 4), sharey=True,
                             squeeze=False)
    for ax, dsweep in zip(axes[0], profile.decode, strict=True):
        for ctx in contexts:
            pts = sorted((p.batch, p.itl_ms) for p in dsweep.points if p.context_tokens == ctx)
            if pts:
                ax.plot([b for b, _ in pts], [v for _, v in pts], marker=".", label=f"ctx {ctx}")
        if sel:
            ax.axhline(sel.workload.itl_ms, color="red", ls="--")
        ax.set(xscale="log", yscale="log", xlabel="batch", title=f"TP{dsweep.tp}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("ITL (ms)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"ITL vs batch per context - {name}")
    return fig


def _frontier(plt: Any, profile: Profile, name: str) -> Any:
    sel = profile.selection
    contexts = _contexts(profile)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for sweep in profile.prefill:
        ax1.plot([p.ttft_ms for p in sweep.points], [p.tokens_per_s_per_gpu for p in sweep.points], marker="o",
                 label=f"TP{sweep.tp}")
    ax1.set(xscale="log", xlabel="TTFT (ms)", ylabel="prefill tokens/s/GPU", title="prefill frontier")
    ctx_w = sel.decode.context_tokens if sel and sel.decode.context_tokens else contexts[len(contexts) // 2]
    for dsweep in profile.decode:
        curve = profile.decode_curve(dsweep.tp)
        batches = sorted({p.batch for p in dsweep.points})
        ax2.plot([curve.itl_ms(b, ctx_w).value for b in batches],
                 [curve.tokens_per_s_per_gpu(b, ctx_w) for b in batches], marker="o", label=f"TP{dsweep.tp}")
    if sel:
        ax1.axvline(sel.workload.ttft_ms, color="red", ls="--")
        ax2.axvline(sel.workload.itl_ms, color="red", ls="--")
    ax2.set(xlabel="ITL (ms)", ylabel="decode tokens/s/GPU", title=f"decode frontier at context {ctx_w}")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend()
    return fig
