"""`planner bench endpoint` and `planner bench fidelity`: the benchmarks that drive a real server (the
emulator's, or real vLLM's CPU build) rather than the simulator alone."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from planner.commands.args import at_least, seconds
from planner.commands.console import out_console
from planner.errors import UserError


def bench_endpoint(
    streams: Annotated[int, typer.Option(help="concurrent streams")] = 256,
    context: Annotated[int, typer.Option(help="context tokens per stream")] = 512,
    decode_tokens: Annotated[int, typer.Option(help="tokens each stream decodes with all of them running")] = 64,
    profile: Annotated[Path | None, typer.Option(help="profile the emulator serves "
                                                 "(default profiles/h200/qwen3-32b.json)")] = None,
    time_scale: Annotated[float, typer.Option("--time-scale", help="the emulator's time scale")] = 1.0,
) -> None:
    """The endpoint backend's load generator against `planner emulate`: client CPU per token, event-loop lag,
    and its timing against the emulator's own at many concurrent streams."""
    from planner.bench import endpoint

    for flag, value in (("--streams", streams), ("--context", context), ("--decode-tokens", decode_tokens)):
        if value < 1:
            raise UserError(f"{flag}: {value} must be >= 1")
    if not 0 < time_scale <= 100:
        raise UserError(f"--time-scale {time_scale:g}: must be in (0, 100]")
    endpoint.run(out_console(), profile, streams, context, decode_tokens, time_scale)


def bench_fidelity(
    trace: Annotated[Path | None, typer.Option(help="trace (default: the shipped Azure conv)")] = None,
    start_s: Annotated[float, typer.Option("--start-s", help="where in the trace the slice begins (s)")] = 600.0,
    duration_s: Annotated[float, typer.Option("--duration-s", help="replay length (s)")] = 180.0,
    rate: Annotated[float, typer.Option(help="mean request rate of the replay (req/s)")] = 1.0,
    max_isl: Annotated[int, typer.Option("--max-isl", help="prompts cut to this many tokens")] = 2048,
    max_osl: Annotated[int, typer.Option("--max-osl", help="outputs cut to this many tokens")] = 256,
    modes: Annotated[str, typer.Option(help="comma-separated: aggregated, disaggregated")] = "aggregated,disaggregated",
    out: Annotated[Path, typer.Option(help="JSON results")] = Path("fidelity.json"),
    iters: Annotated[int, typer.Option(help="timed runs per profile point")] = 4,
    decode_tokens: Annotated[int, typer.Option("--decode-tokens", help="tokens per stream in a decode "
                                               "profile point's window")] = 96,
) -> None:
    """Real vLLM (CPU build, tiny model) vs the simulator on the same trace slice: TTFT/ITL p50/p95 (the goal),
    the ITL tail beside them (each request's longest gap, every token's gap), and the engine's own speed
    before the profile and after the replay."""
    from planner.bench import fidelity
    from planner.bench.fidelity_load import PAUSE_S, SliceSpec
    from planner.bench.sim import DEFAULT_TRACE
    from planner.commands.progress import phase_progress

    chosen = tuple(m.strip() for m in modes.split(",") if m.strip())
    bad = [m for m in chosen if m not in fidelity.MODES]
    if bad or not chosen:
        raise UserError(f"--modes {modes!r}: allowed a comma-separated list of {', '.join(fidelity.MODES)}")
    if iters < 1:
        raise UserError(f"--iters: {iters} must be >= 1")
    if decode_tokens < 4:
        raise UserError(f"--decode-tokens: {decode_tokens} must be >= 4")
    _check_slice(start_s, duration_s, rate, max_isl, max_osl)
    path = trace or DEFAULT_TRACE
    if not path.exists():
        raise UserError(f"{path}: trace not found (pass --trace)")
    spec = SliceSpec(path, start_s, duration_s, rate, max_isl, max_osl)
    options = fidelity.FidelityOptions(spec, chosen, out, iters=iters, decode_tokens=decode_tokens)
    console = out_console()
    with phase_progress(console) as progress:
        results = fidelity.run(console, options, progress)
    console.print(fidelity.table(results))
    console.print(f"trade-off (ITL tail down, TTFT p50 up with disaggregation): {fidelity.tradeoff(results)}")
    for r in results:
        console.print(f"{r.mode}: {r.paused_requests} requests waited through a pause of the client's loop "
                      f"(>= {PAUSE_S * 1e3:.0f} ms); vLLM over the others: {r.real_unpaused}")
        console.print(f"{r.mode}: {r.failed} failed, load average {r.load_avg}, other jobs' CPU share "
                      f"{r.others_cpu} (hypervisor steal in the replay {r.replay_steal}), replay {r.wall_s} s, ready {r.servers_ready_s} s")
        if r.speed:
            console.print(f"{r.mode}: the engine alone, before the profile {r.speed['before']}, after the replay "
                          f"{r.speed['after']} (after / before {r.speed['drift']})")
        for note in r.notes:
            console.print(f"{r.mode}: {note}")
    console.print(f"wrote {out}")


def _check_slice(start_s: float, duration_s: float, rate: float, max_isl: int, max_osl: int) -> None:
    """`planner bench fidelity`'s slice of the trace, checked before any server starts."""
    seconds("--start-s", start_s, zero=True, most=366 * 86_400.0)
    seconds("--duration-s", duration_s, most=86_400.0)
    if not (math.isfinite(rate) and 0 < rate <= 1000):
        raise UserError(f"--rate: {rate:g} must be a finite number of req/s > 0 and <= 1000")
    at_least("--max-isl", max_isl, 1)
    at_least("--max-osl", max_osl, 2)
