"""`planner observe`: one Observation from Prometheus."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.commands.console import out_console
from planner.errors import UserError
from planner.sources.dialects import dialect_names
from planner.sources.resolution import RESOLVED_MAX_RATIO


def register(app: typer.Typer) -> None:
    @app.command("observe")
    def observe_cmd(
        prometheus: Annotated[str | None, typer.Option("--prometheus", help="Prometheus base URL")] = None,
        dialect: Annotated[str | None, typer.Option(help=f"{' | '.join(dialect_names())} "
                                                          "(default: the policy's, else vllm)")] = None,
        selector: Annotated[str | None, typer.Option(help="label selector, e.g. '{role=\"prefill\"}'; alone it "
                                                          "defines the single pool 'aggregated', with --policy "
                                                          "it narrows every pool")] = None,
        policy: Annotated[Path | None, typer.Option(help="policy YAML: pools and selectors from "
                                                         "metrics.selectors")] = None,
        window_s: Annotated[float, typer.Option("--window-s", help="observation window (s)")] = 60.0,
        timeout_s: Annotated[float, typer.Option("--timeout-s", help="Prometheus request timeout (s)")] = 5.0,
        stale_after_s: Annotated[float | None, typer.Option("--stale-after-s", help="a pool whose newest "
                                                            "sample is older than this is stale")] = None,
        ttft_ms: Annotated[float | None, typer.Option("--ttft-ms", help="TTFT target (ms) whose histogram "
                                                      "resolution to report (default: the policy's sla)")] = None,
        itl_ms: Annotated[float | None, typer.Option("--itl-ms", help="ITL target (ms) whose histogram "
                                                     "resolution to report (default: the policy's sla)")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="print the contract JSON")] = False,
    ) -> None:
        """Read one Observation from Prometheus. Exit 0 ok, 3 no data, 2 bad arguments."""
        from planner.commands.observe_args import observation_json, resolve
        from planner.sources.auth import CredentialsError
        from planner.sources.prometheus import PrometheusSource
        from planner.types import NoData

        args = resolve(prometheus, dialect, selector, policy, window_s, timeout_s, stale_after_s, ttft_ms, itl_ms)
        try:
            source = PrometheusSource(args.url, args.dialect, args.selectors, timeout_s=args.timeout_s,
                                      stale_after_s=args.stale_after_s, targets_ms=args.targets_ms, auth=args.auth)
        except CredentialsError as exc:
            raise UserError(f"{policy}: {exc}") from None
        with source:
            result = source.read(args.window_s, time.time())
        out = out_console()
        err = Console(stderr=True, highlight=False)
        body = observation_json(result, args.window_s)
        if json_out:
            out.print_json(json.dumps(body))
        else:
            _render(out, body)
        if isinstance(result, NoData):
            err.print(f"[bold yellow]no data[/] ({result.reason.value}): {result.detail}", soft_wrap=True)
            raise typer.Exit(3)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):  # a bucket bracket (lower, upper] in ms
        return f"({_fmt(v[0])}, {_fmt(v[1])}]"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _render(console: Console, body: dict) -> None:
    if body["status"] != "ok":
        console.print(f"status: {body['status']} ({body['reason']}), window {body['window_s']:g}s")
        return
    table = Table(title=f"observation over {body['window_s']:g}s")
    pools = list(body["pools"])
    table.add_column("field")
    for p in pools:
        table.add_column(p, justify="right")
    for field in next(iter(body["pools"].values())):
        table.add_row(field, *(escape(_fmt(body["pools"][p][field])) for p in pools))
    console.print(table)
    for pool, fields in body["pools"].items():
        for signal in ("ttft", "itl"):
            if fields[f"{signal}_p95_resolved"] is False:
                ratio = fields[f"{signal}_p95_resolution"]
                width = "no bucket above it" if ratio == "inf" else f"{ratio:.0%} of the target"
                console.print(escape(f"{pool}: {signal} p95 is unresolved near its target: bucket "
                                     f"{_fmt(fields[f'{signal}_p95_bracket_ms'])} ms ({width}, over "
                                     f"{RESOLVED_MAX_RATIO:.0%}); the exact mean is "
                                     f"{_fmt(fields[f'{signal}_ms_mean'])} ms"), soft_wrap=True)
