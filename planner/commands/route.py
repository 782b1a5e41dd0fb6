"""`planner route`: the OpenAI-compatible router in front of the process actuator's replicas."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from planner.commands.guards import check_port_free
from planner.errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("route")
    def route_cmd(
        policy: Annotated[Path, typer.Option(help="policy YAML with actuator kind process (the same file "
                                             "`planner run` reads)")],
        port: Annotated[int, typer.Option(help="TCP port")] = 8000,
        host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
        read_timeout_s: Annotated[float, typer.Option("--read-timeout-s", help="longest silence from a "
                                                      "replica mid-answer before the request fails")] = 600.0,
        log_level: Annotated[str, typer.Option("--log-level", help="DEBUG | INFO | WARNING")] = "INFO",
    ) -> None:
        """Route OpenAI requests to the ready replicas (least outstanding; prefill then decode when disaggregated)."""
        import uvicorn

        from planner.actuators.file_sd import state_dir_of, targets_path
        from planner.policy_file import load_policy
        from planner.router.app import create_router_app

        level = logging.getLevelName(log_level.upper())
        if not isinstance(level, int):
            raise UserError(f"--log-level {log_level!r}: allowed DEBUG, INFO, WARNING, ERROR")
        if not 0 < port < 65536:
            raise UserError(f"--port {port}: must be in 1..65535")
        if not read_timeout_s > 0:
            raise UserError(f"--read-timeout-s {read_timeout_s:g}: must be > 0")
        pol = load_policy(policy)
        if pol.actuator.kind != "process":
            raise UserError(f"{policy}: key 'actuator.kind' = {pol.actuator.kind!r}: `planner route` serves the "
                            "replicas of actuator kind process (it reads their targets.json)")
        check_port_free("--port", host, port)
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        targets = targets_path(state_dir_of(pol.name, pol.actuator))
        app_ = create_router_app(targets, pol.mode, read_timeout_s=read_timeout_s)
        Console(stderr=True).print(f"routing {pol.mode.value} requests on http://{host}:{port} to the replicas "
                                   f"in {targets}")
        uvicorn.run(app_, host=host, port=port, log_level="warning", access_log=False)
