"""`planner up`: the whole loop on 127.0.0.1, live - engines under the process actuator, the router,
Prometheus, the controller and a trace-replaying load - stopped on Ctrl-C or after --duration-s."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from planner.errors import UserError

ENGINES = ("emulate", "vllm")
# ~16 req/s at the peak for the emulated Qwen3-32B pools (both need a second replica), ~1 req/s for the tiny
# vLLM model on a CPU (its hand-made profile needs two replicas from 0.5 req/s).
DEFAULT_RATE_SCALE = {"emulate": 0.35, "vllm": 0.02}
MAX_LOAD_S = 60.0


def _check(engine: str, rate_scale: float | None, duration_s: float | None, load_s: float | None) -> float:
    """The load phase's length (s); every flag checked before anything starts."""
    if engine not in ENGINES:
        raise UserError(f"--engine {engine!r}: allowed {', '.join(ENGINES)}")
    if rate_scale is not None and (not math.isfinite(rate_scale) or rate_scale <= 0):
        raise UserError(f"--rate-scale {rate_scale:g}: must be a finite number > 0")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise UserError(f"--duration-s {duration_s:g}: must be a finite number > 0")
    if load_s is not None:
        if not (math.isfinite(load_s) and load_s > 0):
            raise UserError(f"--load-s {load_s:g}: must be a finite number > 0")
        if duration_s is not None and load_s > duration_s:
            raise UserError(f"--load-s {load_s:g}: longer than --duration-s {duration_s:g}")
        return load_s
    return min(MAX_LOAD_S, duration_s / 2) if duration_s is not None else MAX_LOAD_S


def register(app: typer.Typer) -> None:
    @app.command("up")
    def up_cmd(
        duration_s: Annotated[float | None, typer.Option("--duration-s", help="stop after this many seconds of "
                                                         "load and quiet (counted from the first ready "
                                                         "replicas); default: until Ctrl-C")] = None,
        trace: Annotated[Path | None, typer.Option(help="Azure 2023 CSV to replay (default: the embedded "
                                                   "conversation trace)")] = None,
        rate_scale: Annotated[float | None, typer.Option("--rate-scale", help="multiply the trace's request rate "
                                                         "(after its time is compressed ten times); default: "
                                                         f"{DEFAULT_RATE_SCALE['emulate']:g} emulated, "
                                                         f"{DEFAULT_RATE_SCALE['vllm']:g} vllm")] = None,
        load_s: Annotated[float | None, typer.Option("--load-s", help="seconds of load before the quiet that "
                                                     "lets the pools scale down (default: half of "
                                                     "--duration-s, at most 60)")] = None,
        engine: Annotated[str, typer.Option(help=" | ".join(ENGINES) + ": emulated engines from the shipped "
                                            "Qwen3-32B H200 profile, or real vLLM (CPU build, tiny model)")]
        = "emulate",
        json_out: Annotated[bool, typer.Option("--json", help="one JSON object a second on stdout, then the "
                                               "summary")] = False,
        out: Annotated[Path, typer.Option(help="folder for the policy, engine logs, Prometheus data, the "
                                          "summary and the Grafana dashboards")] = Path("out/up"),
    ) -> None:
        """Run the controller live on 127.0.0.1: engines, router, Prometheus, `planner run`, a trace's load."""
        from planner.up.run import Options, run_up

        load = _check(engine, rate_scale, duration_s, load_s)
        scale = rate_scale if rate_scale is not None else DEFAULT_RATE_SCALE[engine]
        raise typer.Exit(run_up(Options(duration_s=duration_s, trace=trace, rate_scale=scale, load_s=load,
                                        engine=engine, json_out=json_out, out=out)))
