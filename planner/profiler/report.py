"""Rich tables for a profile: per-TP summary and the selection."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.perf.selection import decode_context
from planner.profile import Profile


def render(profile: Profile, console: Console) -> None:
    sel = profile.selection
    m = profile.model
    console.print(f"[bold]{m.name}[/] on [bold]{profile.hardware.gpu}[/] "
                  f"({m.params / 1e9:.2f} B params, {m.weight_bytes / 1e9:.1f} GB weights, "
                  f"KV {m.kv_bytes_per_token:,} B/token) - backend {profile.provenance.backend}")
    table = Table(title="Per tensor-parallel size", show_lines=False)
    for col in ("TP", "GPUs", "KV capacity (tok)", "TTFT@ISL ms", "prefill tok/s/GPU", "decode batch",
                "ITL ms", "decode tok/s/GPU"):
        table.add_column(col, justify="right")
    isl = sel.workload.isl if sel else 4000
    osl = sel.workload.osl if sel else 500
    itl_target = sel.workload.itl_ms if sel else 30.0
    ctx = decode_context(isl, osl)
    for pre, dec in zip(profile.prefill, profile.decode, strict=False):
        pc, dc = profile.prefill_curve(pre.tp), profile.decode_curve(dec.tp)
        ttft = pc.ttft_ms(isl)
        batch = dc.max_batch_meeting(itl_target, ctx)
        itl = dc.itl_ms(max(batch, 1), ctx).value
        chosen_p = sel is not None and sel.prefill.tp == pre.tp
        chosen_d = sel is not None and sel.decode.tp == dec.tp
        table.add_row(
            str(pre.tp), str(pre.gpus), f"{dec.kv_capacity_tokens:,}",
            f"{ttft.value:,.1f}{'*' if ttft.extrapolated else ''}",
            f"{'[green]' if chosen_p else ''}{pc.tokens_per_s_per_gpu(isl):,.0f}",
            str(batch) if batch else "[red]none", f"{itl:.2f}",
            f"{'[green]' if chosen_d else ''}{dc.tokens_per_s_per_gpu(batch, ctx) if batch else 0:,.0f}",
        )
    console.print(table)
    if sel is None:
        return
    w = sel.workload
    console.print(f"Workload: ISL {w.isl}, OSL {w.osl}, TTFT <= {w.ttft_ms:g} ms, ITL <= {w.itl_ms:g} ms "
                  f"(decode context {ctx}); * = extrapolated beyond the grid")
    for stage in ("prefill", "decode"):
        s = getattr(sel, stage)
        mark = "[green]meets[/]" if s.meets_sla else "[red]misses[/]"
        console.print(f"  {stage:<7} TP {s.tp} ({s.gpus} GPU/replica) {mark}: {s.reason}")
    if sel.disaggregation:
        d = sel.disaggregation
        console.print(f"  serve   [bold]{d.mode}[/]: KV {d.kv_bytes / 1e9:.2f} GB per request, "
                      f"{d.transfer_ms:.1f} ms over {d.link_bytes_per_s * 8 / 1e9:g} Gb/s - {d.reason}")
