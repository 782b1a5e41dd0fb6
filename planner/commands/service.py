"""`planner run`: the long-running controller (one control loop per --policy, or per policy of --fleet on one
GPU budget, + /metrics, /healthz, /readyz, /v1/desired, /v1/policies, /v1/decisions, /v1/fleet, POST /v1/plan,
the KEDA external scaler, optional leader election)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from planner.commands.console import out_console
from planner.commands.guards import check_port_free
from planner.errors import UserError, not_utf8


def _check_metrics_url(url: str | None) -> None:
    """The check metrics.url gets (planner/sources/settings.py), for the flag that overrides it."""
    from planner.sources.settings import http_url

    if url is None:
        return
    try:
        http_url(url)
    except ValueError as exc:
        raise UserError(f"--metrics-url {url!r}: {exc}") from None


def _check_args(log_level: str, log_format: str, ports: dict[str, int]) -> int:
    from planner.service.logs import FORMATS

    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        raise UserError(f"--log-level {log_level!r}: allowed DEBUG, INFO, WARNING, ERROR")
    if log_format not in FORMATS:
        raise UserError(f"--log-format {log_format!r}: allowed {', '.join(FORMATS)}")
    for flag, value in ports.items():
        if not 0 <= value < 65536:
            raise UserError(f"{flag} {value}: must be in 0..65535")
    busy = [flag for flag, value in ports.items() if value and list(ports.values()).count(value) > 1]
    if busy:
        raise UserError(f"{busy[1]} {ports[busy[1]]}: the same port as {busy[0]}; give each its own")
    return level


def read_token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise UserError(f"--api-token-file {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(f"--api-token-file {path}", exc) from None
    if not token or any(c.isspace() for c in token):
        raise UserError(f"--api-token-file {path}: must hold one token (no spaces), got "
                        f"{'nothing' if not token else 'whitespace inside'}")
    return token


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        policy: Annotated[list[Path] | None, typer.Option(help="policy YAML (policies/example.yaml documents every "
                                                          "field); repeat to run several policies in one process")] = None,
        fleet: Annotated[Path | None, typer.Option(help="fleet YAML: its policies on one GPU budget, with "
                                                   "priorities (instead of --policy)")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="decide and log, never scale anything")] = False,
        once: Annotated[bool, typer.Option("--once", help="one tick, print the decision as JSON, exit "
                                           "(no servers); non-zero when nothing could be applied")] = False,
        port: Annotated[int, typer.Option(help="HTTP port: /metrics /healthz /readyz /v1/*")] = 8080,
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
        lease_duration_s: Annotated[float | None, typer.Option("--lease-duration-s", help="how long a Lease "
                                                               "holds without renewal (default: 3 intervals, at "
                                                               "least 15 s)")] = None,
        renew_deadline_s: Annotated[float | None, typer.Option("--renew-deadline-s", help="a leader that could "
                                                               "not renew for this long stops acting (default: 2/3 "
                                                               "of the lease)")] = None,
        retry_period_s: Annotated[float | None, typer.Option("--retry-period-s", help="at most one Lease "
                                                             "renewal per this period; calls happen on the ticks "
                                                             "(default: half an interval)")] = None,
        log_level: Annotated[str, typer.Option("--log-level", help="DEBUG | INFO | WARNING")] = "INFO",
        log_format: Annotated[str, typer.Option("--log-format", help="text | json (one object a line)")] = "text",
        api_token_file: Annotated[Path | None, typer.Option("--api-token-file", help="bearer token every "
                                                            "non-GET API request must carry")] = None,
    ) -> None:
        """Run the controller: every interval read Prometheus, decide, scale, export telemetry."""
        from planner.service.logs import setup_logging
        from planner.service.runner import RunOptions, serve

        level = _check_args(log_level, log_format, {"--port": port, "--grpc-port": grpc_port})
        _check_lease_flags(leader_elect, lease_duration_s, renew_deadline_s, retry_period_s)
        _check_metrics_url(metrics_url)
        paths = _policy_paths(policy or [], fleet)
        _check_leader(leader_elect, dry_run, paths, lease_duration_s, renew_deadline_s, retry_period_s)
        token = read_token(api_token_file)
        setup_logging(level, log_format)
        opts = RunOptions(paths[0], dry_run=dry_run, once=once, host=host, port=port, grpc_port=grpc_port,
                          metrics_url=metrics_url, leader_elect=leader_elect, lease_name=lease_name,
                          lease_namespace=lease_namespace, identity=identity, more_policies=tuple(paths[1:]),
                          api_token=token, fleet_path=fleet, lease_duration_s=lease_duration_s,
                          renew_deadline_s=renew_deadline_s, retry_period_s=retry_period_s)
        if not once:
            check_port_free("--port", host, port)
            check_port_free("--grpc-port", host, grpc_port)
            serve(opts)
            return
        _run_once(opts)


def _run_once(opts: Any) -> None:
    """`planner run --once`: one tick of every policy (the fleet's, with --fleet), printed as JSON."""
    from planner.service.runner import build_fleet_loop, build_loops

    loops = build_loops(opts)
    fleet_loop = build_fleet_loop(opts, loops)
    if fleet_loop is None:
        _report_once([_tick_once(loop) for loop in loops])
        return
    try:
        results = fleet_loop.tick()
    finally:
        for loop in loops:
            close = getattr(loop.actuator, "close", None)
            if close is not None:
                close()
    _report_once(results, fleet_loop.summary())


def _policy_paths(policy: list[Path], fleet: Path | None) -> list[Path]:
    """--policy (repeatable) or the fleet file's policies."""
    if fleet is None:
        if not policy:
            raise UserError("--policy: required (or --fleet)")
        return policy
    if policy:
        raise UserError("--fleet and --policy: give one (the fleet file names its policies)")
    from planner.fleet_file import load_fleet

    return [m.path for m in load_fleet(fleet).members]


def _check_lease_flags(leader_elect: bool, lease_duration_s: float | None, renew_deadline_s: float | None,
                       retry_period_s: float | None) -> None:
    """The Lease's timing flags mean nothing without --leader-elect: say so instead of ignoring them."""
    timing = {"--lease-duration-s": lease_duration_s, "--renew-deadline-s": renew_deadline_s,
              "--retry-period-s": retry_period_s}
    given = [flag for flag, value in timing.items() if value is not None]
    if given and not leader_elect:
        raise UserError(f"{given[0]}: only with --leader-elect (there is no Lease without it)")


def _check_leader(leader_elect: bool, dry_run: bool, paths: list[Path], lease_duration_s: float | None,
                  renew_deadline_s: float | None, retry_period_s: float | None) -> None:
    """With --leader-elect, before anything starts: the Lease's timings, then the credentials to hold it."""
    if leader_elect:
        _check_lease(paths, lease_duration_s, renew_deadline_s, retry_period_s)
        _check_lease_api(dry_run)


def _check_lease(paths: list[Path], lease_duration_s: float | None, renew_deadline_s: float | None,
                 retry_period_s: float | None) -> None:
    """The Lease's timings against the slowest policy's interval (one Lease for all), before the credentials:
    the runner checks them again where it builds the elector (service/leader.py ``timing_problem``)."""
    from planner.policy_file import load_policy
    from planner.service.leader import timing_problem

    interval_s = max(load_policy(path).interval_s for path in paths)
    problem = timing_problem(interval_s, lease_duration_s, renew_deadline_s, retry_period_s)
    if problem is not None:
        raise UserError(problem)


def _check_lease_api(dry_run: bool) -> None:
    """--leader-elect writes a Lease, --dry-run or not: credentials for the Kubernetes API are needed."""
    from planner.actuators.factory import load_api_client

    if load_api_client(required=False) is None:
        raise UserError("--leader-elect: the Lease is held in the Kubernetes API: no in-cluster credentials and "
                        "no kubeconfig; run inside the cluster or set KUBECONFIG"
                        + (" (--dry-run scales nothing but still takes the Lease)" if dry_run else ""))


def _report_once(results: list, fleet: dict | None = None) -> None:  # list[service.loop.TickResult]
    """Print the tick(s) as JSON (with --fleet: {"fleet": GET /v1/fleet's answer, "policies": [ticks]}); exit 1
    when something could not be applied, 3 when there was no data (as `planner observe` does), 0 otherwise."""
    from planner.types import NoData

    out = [tick_json(r) for r in results]
    shown = {"fleet": fleet, "policies": out} if fleet is not None else out[0] if len(out) == 1 else out
    out_console().print_json(json.dumps(shown))
    err = Console(stderr=True, highlight=False)
    failed = [r for r in results if r.error or not r.leader]
    for r in failed:
        why = r.error or "not the leader: another candidate holds the Lease"
        err.print(f"[bold red]not applied:[/] {escape(why)}", soft_wrap=True)
    if failed:
        raise typer.Exit(1)
    no_data = [r.observation for r in results if isinstance(r.observation, NoData)]
    for obs in no_data:
        err.print(f"[bold yellow]no data:[/] {obs.reason.value}: {escape(obs.detail)}; every pool held",
                  soft_wrap=True)
    if no_data:
        raise typer.Exit(3)


def _tick_once(loop):  # noqa: ANN001, ANN202 - service.loop.ControlLoop, TickResult
    try:
        return loop.tick()
    finally:
        close = getattr(loop.actuator, "close", None)
        if close is not None:  # the process actuator's engines do not outlive one tick
            close()


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
