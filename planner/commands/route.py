"""`planner route`: the OpenAI-compatible router in front of the process actuator's replicas."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from planner.commands.guards import check_port_free
from planner.errors import UserError, not_utf8
from planner.router.defaults import HOLD_QUEUE, HOLD_TIMEOUT_S


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
        hold_queue: Annotated[int, typer.Option("--hold-queue", help="requests held at once while no replica is "
                                                "in rotation (a policy at zero waking); past it 503 with "
                                                "Retry-After; 0: 503 at once")] = HOLD_QUEUE,
        hold_timeout_s: Annotated[float, typer.Option("--hold-timeout-s", help="longest a request is held "
                                                      "waiting for a replica, then 503 with Retry-After")
                                  ] = HOLD_TIMEOUT_S,
        wake_url: Annotated[str | None, typer.Option("--wake-url", help="the controller's API (`planner run`'s "
                                                     "http://HOST:PORT): a held request makes the router POST "
                                                     "/v1/wake there, so a policy at zero wakes at once")] = None,
        wake_token_file: Annotated[Path | None, typer.Option("--wake-token-file", help="bearer token for "
                                                             "/v1/wake (the controller's --api-token-file)")
                                   ] = None,
    ) -> None:
        """Route OpenAI requests to the ready replicas (least outstanding; prefill then decode when disaggregated)."""
        import uvicorn

        from planner.actuators.file_sd import state_dir_of, targets_path
        from planner.policy_file import load_policy
        from planner.router.app import Hold, Wake, create_router_app

        level = logging.getLevelName(log_level.upper())
        if not isinstance(level, int):
            raise UserError(f"--log-level {log_level!r}: allowed DEBUG, INFO, WARNING, ERROR")
        if not 0 < port < 65536:
            raise UserError(f"--port {port}: must be in 1..65535")
        if not read_timeout_s > 0:
            raise UserError(f"--read-timeout-s {read_timeout_s:g}: must be > 0")
        if hold_queue < 0:
            raise UserError(f"--hold-queue {hold_queue}: must be >= 0 (0: no hold, 503 at once)")
        if not 0 < hold_timeout_s <= 86400:  # also refuses nan
            raise UserError(f"--hold-timeout-s {hold_timeout_s:g}: must be > 0 and <= 86400")
        if wake_url is not None and not wake_url.startswith(("http://", "https://")):
            raise UserError(f"--wake-url {wake_url!r}: must be an http:// or https:// URL (the controller's API)")
        token = _read_token(wake_token_file) if wake_token_file is not None else None
        pol = load_policy(policy)
        if pol.actuator.kind != "process":
            raise UserError(f"{policy}: key 'actuator.kind' = {pol.actuator.kind!r}: `planner route` serves the "
                            "replicas of actuator kind process (it reads their targets.json)")
        check_port_free("--port", host, port)
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        targets = targets_path(state_dir_of(pol.name, pol.actuator))
        app_ = create_router_app(targets, pol.mode, read_timeout_s=read_timeout_s,
                                 hold=Hold(hold_queue, hold_timeout_s) if hold_queue else None,
                                 wake=Wake(wake_url, pol.name, token) if wake_url else None)
        Console(stderr=True).print(f"routing {pol.mode.value} requests on http://{host}:{port} to the replicas "
                                   f"in {targets}" + (f"; holding up to {hold_queue} requests {hold_timeout_s:g} s "
                                                      "while none is in rotation" if hold_queue else "")
                                   + (f"; wake signal to {wake_url}" if wake_url else ""))
        uvicorn.run(app_, host=host, port=port, log_level="warning", access_log=False)


def _read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise UserError(f"--wake-token-file {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(f"--wake-token-file {path}", exc) from None
    if not token:
        raise UserError(f"--wake-token-file {path}: the file is empty")
    return token
