"""`planner bench prefill`: flags parsed and checked here, the harness in planner/bench/prefill.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from planner.commands.args import int_list, positive
from planner.commands.args import seed as seed_at_least_0
from planner.commands.console import out_console
from planner.commands.guards import check_writable
from planner.errors import UserError


def _rates(text: str) -> tuple[float, ...]:
    out = []
    for item in (t.strip() for t in text.split(",")):
        try:
            value = float(item)
        except ValueError:
            raise UserError(f"--rates: {item!r} is not a number; expected e.g. 80,113") from None
        positive("--rates", value)
        out.append(value)
    return tuple(out)


def bench_prefill(
    profile: Annotated[Path | None, typer.Option(help="profile (default profiles/h200/qwen3-8b.json)")] = None,
    policy: Annotated[Path | None, typer.Option(help="policy for the SLA (default policies/example.yaml)")] = None,
    isl: Annotated[float, typer.Option(help="mean prompt length, tokens (exponential)")] = 1150.0,
    rates: Annotated[str, typer.Option(help="arrival rates, req/s, comma-separated")] = "80,113",
    replicas: Annotated[str, typer.Option(help="prefill pool sizes, comma-separated")] = "3,4,5",
    duration_s: Annotated[float, typer.Option("--duration-s", help="simulated seconds per point")] = 900.0,
    warmup_s: Annotated[float, typer.Option("--warmup-s", help="unscored seconds at the start")] = 120.0,
    seed: Annotated[int, typer.Option(help="seed of the arrivals and prompt lengths")] = 0,
    out: Annotated[Path | None, typer.Option(help="JSON of the points")] = None,
) -> None:
    """Fixed prefill pools in the simulator against the sizing model's TTFT: where its queue is pessimistic."""
    from planner.bench import prefill

    seed_at_least_0("--seed", seed)
    positive("--isl", isl)
    positive("--duration-s", duration_s)
    if not 0 <= warmup_s < duration_s:
        raise UserError(f"--warmup-s: {warmup_s:g} must be >= 0 and below --duration-s ({duration_s:g})")
    sizes = int_list("--replicas", replicas) or ()
    for path, flag in ((profile, "--profile"), (policy, "--policy")):
        if path is not None and not path.is_file():
            raise UserError(f"{flag}: {path} not found")
    if out is not None:
        check_writable("--out", out)
    points = prefill.run(out_console(), profile, policy, isl, _rates(rates), sizes, duration_s, warmup_s, seed)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(prefill.as_json(points), indent=1) + "\n")
        out_console().print(f"wrote {out}")
