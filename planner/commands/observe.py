"""`planner observe`, `planner emulate` and `planner bench observe`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from planner.errors import UserError


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command("observe")
    def observe_cmd(
        prometheus: Annotated[str | None, typer.Option("--prometheus", help="Prometheus base URL")] = None,
        dialect: Annotated[str | None, typer.Option(help="vllm | sglang | dynamo | trtllm "
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
        json_out: Annotated[bool, typer.Option("--json", help="print the contract JSON")] = False,
    ) -> None:
        """Read one Observation from Prometheus. Exit 0 ok, 3 no data, 2 bad arguments."""
        from planner.sources.cli_support import observation_json, resolve
        from planner.sources.prometheus import PrometheusSource
        from planner.types import NoData

        args = resolve(prometheus, dialect, selector, policy, window_s, timeout_s, stale_after_s)
        with PrometheusSource(args.url, args.dialect, args.selectors, timeout_s=args.timeout_s,
                              stale_after_s=args.stale_after_s) as source:
            result = source.read(args.window_s, time.time())
        out = Console()
        err = Console(stderr=True, highlight=False)
        body = observation_json(result, args.window_s)
        if json_out:
            out.print_json(json.dumps(body))
        else:
            _render(out, body)
        if isinstance(result, NoData):
            err.print(f"[bold yellow]no data[/] ({result.reason.value}): {result.detail}", soft_wrap=True)
            raise typer.Exit(3)

    @app.command("emulate")
    def emulate_cmd(
        profile: Annotated[Path, typer.Option(help="profile JSON (planner profile)")],
        role: Annotated[str, typer.Option(help="prefill | decode | aggregated")] = "aggregated",
        port: Annotated[int, typer.Option(help="TCP port")] = 8000,
        host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
        time_scale: Annotated[float, typer.Option("--time-scale", help="wall seconds per profile second "
                                                  "(0.1 = ten times faster)")] = 1.0,
        model_name: Annotated[str | None, typer.Option("--model-name", help="served model name "
                                                       "(default: the profile's model)")] = None,
        max_model_len: Annotated[int, typer.Option("--max-model-len", help="context limit (token "
                                                   "histogram buckets)")] = 32768,
    ) -> None:
        """Serve an OpenAI-compatible engine whose timing comes from a profile, with vLLM metrics."""
        import uvicorn

        from planner.emulator.app import ROLES, create_app, engine_model_for
        from planner.profile import load_profile

        if role not in ROLES:
            raise UserError(f"--role {role!r}: allowed {', '.join(ROLES)}")
        if not 0 < port < 65536:
            raise UserError(f"--port {port}: must be in 1..65535")
        if not 0 < time_scale <= 100:
            raise UserError(f"--time-scale {time_scale:g}: must be in (0, 100]")
        if max_model_len < 1:
            raise UserError(f"--max-model-len {max_model_len}: must be >= 1")
        prof = load_profile(profile)
        try:
            model = engine_model_for(prof, role)
        except KeyError as exc:
            raise UserError(f"{profile}: {exc.args[0]}") from None
        app_ = create_app(model, model_name or prof.model.name, time_scale, max_model_len)
        Console(stderr=True).print(f"emulating {prof.model.name} ({role}) on http://{host}:{port} "
                                   f"(time scale {time_scale:g})")
        uvicorn.run(app_, host=host, port=port, log_level="warning", access_log=False)

    @bench_app.command("observe")
    def bench_observe(
        prometheus: Annotated[str | None, typer.Option("--prometheus", help="existing Prometheus; default: "
                                                       "start one with two emulated pools")] = None,
        policy: Annotated[Path | None, typer.Option(help="policy YAML (pools, selectors, dialect)")] = None,
        reads: Annotated[int, typer.Option(help="reads to time")] = 200,
        window_s: Annotated[float, typer.Option("--window-s")] = 60.0,
    ) -> None:
        """Observation read latency (p50/p99) for one policy against a real Prometheus."""
        from planner.sources.bench import run_bench

        if reads < 1:
            raise UserError(f"--reads {reads}: must be >= 1")
        run_bench(Console(), prometheus, policy, reads, window_s)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
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
        table.add_row(field, *(_fmt(body["pools"][p][field]) for p in pools))
    console.print(table)
