"""`planner serve`: the profile-request API (POST/GET/DELETE /v1/profile-requests), and with
--watch-namespace the ProfileRequest controller of a cluster."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from planner.commands.guards import check_port_free
from planner.errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_cmd(
        results_dir: Annotated[Path, typer.Option("--results-dir", help="where requests, statuses and artifacts "
                                                  "are kept (they survive a restart)")] = Path("profile-requests"),
        port: Annotated[int, typer.Option(help="HTTP port (API, /openapi.json, /docs)")] = 8080,
        host: Annotated[str, typer.Option(help="bind address")] = "0.0.0.0",
        workers: Annotated[int, typer.Option(help="requests profiled at once")] = 1,
        watch_namespace: Annotated[str | None, typer.Option("--watch-namespace", help="also run the "
                                                            "ProfileRequest objects of this namespace")] = None,
        poll_s: Annotated[float, typer.Option("--poll-s", help="how often to list ProfileRequests")] = 5.0,
        log_level: Annotated[str, typer.Option("--log-level", help="DEBUG | INFO | WARNING")] = "INFO",
    ) -> None:
        """Serve profile requests over HTTP (and from ProfileRequest objects with --watch-namespace)."""
        from planner.requests.server import ProfileServer, ServeOptions

        level = logging.getLevelName(log_level.upper())
        if not isinstance(level, int):
            raise UserError(f"--log-level {log_level!r}: allowed DEBUG, INFO, WARNING, ERROR")
        if not 0 <= port < 65536:
            raise UserError(f"--port {port}: must be in 0..65535")
        if not 1 <= workers <= 64:
            raise UserError(f"--workers {workers}: must be in 1..64")
        if not poll_s > 0:
            raise UserError(f"--poll-s {poll_s:g}: must be > 0")
        check_port_free("--port", host, port)
        _check_results_dir(results_dir)
        api_client = _watch_client(watch_namespace)
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            server = ProfileServer(ServeOptions(results_dir, host, port, workers, watch_namespace, poll_s),
                                   api_client=api_client)
        except OSError as exc:
            raise UserError(f"--results-dir {results_dir}: {exc.strerror or exc}") from None
        server.serve_forever(log_level)


def _check_results_dir(path: Path) -> None:
    """A folder, or a path one can be made at: an existing file (or a file above it) is not one."""
    here = path
    while not here.exists() and here.parent != here:
        here = here.parent
    if here.exists() and not here.is_dir():
        where = "" if here == path else f" ({here} is a file)"
        raise UserError(f"--results-dir {path}: not a directory{where}")


def _watch_client(namespace: str | None) -> object | None:
    """With --watch-namespace, the Kubernetes API client (one line and exit 2 when there are no credentials)."""
    if namespace is None:
        return None
    from planner.actuators.factory import load_api_client

    client = load_api_client(required=False)
    if client is None:
        raise UserError(f"--watch-namespace {namespace}: watching ProfileRequest objects needs the Kubernetes API: "
                        "no in-cluster credentials and no kubeconfig; run inside the cluster or set KUBECONFIG "
                        "(without --watch-namespace only the HTTP API is served)")
    return client
