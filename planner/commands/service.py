"""`planner run`: the long-running controller (control loop + /metrics, /healthz, /readyz, /v1/desired,
KEDA external scaler, optional leader election)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from planner.errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        policy: Annotated[Path, typer.Option(help="policy YAML (policies/example.yaml documents every field)")],
        dry_run: Annotated[bool, typer.Option("--dry-run", help="decide and log, never scale anything")] = False,
        once: Annotated[bool, typer.Option("--once", help="one tick, print the decision as JSON, exit "
                                           "(no servers)")] = False,
        port: Annotated[int, typer.Option(help="HTTP port: /metrics /healthz /readyz /v1/desired")] = 8080,
        grpc_port: Annotated[int, typer.Option("--grpc-port", help="KEDA external scaler gRPC port "
                                               "(0: off)")] = 9090,
        host: Annotated[str, typer.Option(help="bind address")] = "0.0.0.0",
        metrics_url: Annotated[str | None, typer.Option("--metrics-url", help="Prometheus URL (overrides "
                                                        "metrics.url)")] = None,
        leader_elect: Annotated[bool, typer.Option("--leader-elect", help="act only while holding a "
                                                   "coordination.k8s.io Lease")] = False,
        lease_name: Annotated[str, typer.Option("--lease-name")] = "planner",
        lease_namespace: Annotated[str | None, typer.Option("--lease-namespace", help="default: the pod's "
                                                            "namespace")] = None,
        identity: Annotated[str | None, typer.Option(help="leader-election identity (default: "
                                                     "hostname)")] = None,
        log_level: Annotated[str, typer.Option("--log-level", help="DEBUG | INFO | WARNING")] = "INFO",
    ) -> None:
        """Run the controller: every interval read Prometheus, decide, scale, export telemetry."""
        from planner.service.runner import RunOptions, build_loop, serve

        level = logging.getLevelName(log_level.upper())
        if not isinstance(level, int):
            raise UserError(f"--log-level {log_level!r}: allowed DEBUG, INFO, WARNING, ERROR")
        for flag, value in (("--port", port), ("--grpc-port", grpc_port)):
            if not 0 <= value < 65536:
                raise UserError(f"{flag} {value}: must be in 0..65535")
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        opts = RunOptions(policy, dry_run=dry_run, once=once, host=host, port=port, grpc_port=grpc_port,
                          metrics_url=metrics_url, leader_elect=leader_elect, lease_name=lease_name,
                          lease_namespace=lease_namespace, identity=identity)
        if once:
            loop = build_loop(opts)
            try:
                result = loop.tick()
            finally:
                close = getattr(loop.actuator, "close", None)
                if close is not None:  # the process actuator's engines do not outlive one tick
                    close()
            Console().print_json(json.dumps(tick_json(result)))
            if result.error:
                raise typer.Exit(1)
            return
        serve(opts)


def tick_json(result) -> dict:  # noqa: ANN001 - service.loop.TickResult
    from planner.types import NoData

    obs = result.observation
    out: dict = {"at_s": result.at_s, "leader": result.leader, "error": result.error,
                 "observation": ({"no_data": obs.reason.value, "detail": obs.detail} if isinstance(obs, NoData)
                                 else {p: {"rate_rps": o.rate_rps, "ready_replicas": o.ready_replicas}
                                       for p, o in obs.pools.items()})}
    if result.decision is not None:
        d = result.decision
        out["decision"] = {"targets": d.targets(), "reasons": [r.value for r in d.reasons],
                           "pools": {p: {"replicas": pd.replicas, "reasons": [r.value for r in pd.reasons]}
                                     for p, pd in d.pools.items()}}
    if result.applied is not None:
        out["applied"] = {"before": dict(result.applied.before), "after": dict(result.applied.after),
                          "changed": result.applied.changed}
    return out
