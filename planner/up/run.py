"""`planner up`'s course: check, start the stack, wait for the floor replicas, replay the load, show it live,
stop everything, summarize."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from planner.errors import UserError
from planner.testing.local_prometheus import prometheus_binary
from planner.types import Mode
from planner.up.loadgen import LoadGenerator
from planner.up.policy import DRAIN_S, Engines, emulated_engines
from planner.up.stack import Stack
from planner.up.summary import GpuMeter, measured_attainment, summarize, write_dashboards
from planner.up.traces import COMPRESS, RAMP_SHARE, default_trace_path, load_schedule
from planner.up.view import DecisionLog, render, snapshot

SAMPLE_S = 1.0
INSTALL_PROMETHEUS = ("prometheus not found: install the Debian package (`apt-get install -y prometheus`, with "
                      "sudo where you are not root) or set PLANNER_PROMETHEUS_BIN to its binary")


@dataclass(frozen=True)
class Options:
    duration_s: float | None
    trace: Path | None
    rate_scale: float
    load_s: float
    engine: str
    json_out: bool
    out: Path


def run_up(opts: Options) -> int:
    trace = opts.trace if opts.trace is not None else default_trace_path()
    schedule = load_schedule(trace, opts.load_s, opts.rate_scale)
    binary = prometheus_binary()
    if binary is None or not os.access(binary, os.X_OK):
        raise UserError(INSTALL_PROMETHEUS if binary is None else f"PLANNER_PROMETHEUS_BIN {binary}: not an "
                        "executable file (unset it to use the Debian package's /usr/bin/prometheus)")
    engines = _engines(opts)
    opts.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=opts.out / "controller.log", level=logging.INFO, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console(stderr=opts.json_out)
    stop, cut = threading.Event(), threading.Event()  # the first Ctrl-C ends the run, a second one the wait

    def on_signal(*_: object) -> None:
        (cut if stop.is_set() else stop).set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    notes = [f"load: {trace.name}, its first {opts.load_s * COMPRESS:g} s compressed {COMPRESS:g}x into "
             f"{opts.load_s:g} s, rate x{opts.rate_scale:g}, ramped up over its first {opts.load_s * RAMP_SHARE:.0f} s "
             f"({len(schedule)} requests), then quiet",
             f"engines: {engines.kind} ({engines.mode}), profile {engines.profile.name}"]
    stack = Stack(opts.out, engines)
    run = _Run(stack, schedule, opts, console)
    try:
        stack.start()
        run.go(stop, cut)
    finally:
        if run.load is not None:
            run.load.stop(timeout_s=1)
        summary = run.summary(notes)
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    (opts.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    _print_summary(summary, opts, console)
    return 0


def _engines(opts: Options) -> Engines:
    if opts.engine == "vllm":
        from planner.up.vllm import vllm_engines

        return vllm_engines(opts.out)
    return emulated_engines()


class _Run:
    def __init__(self, stack: Stack, schedule: Any, opts: Options, console: Console) -> None:  # noqa: ANN401
        self.stack, self.schedule, self.opts, self.console = stack, schedule, opts, console
        self.load: LoadGenerator | None = None
        self.started_s = time.time()
        self.load_started_s: float | None = None
        self.decisions = DecisionLog(self.started_s)
        self.gpus: GpuMeter | None = None
        self.last: dict[str, Any] | None = None
        mode = Mode(stack.engines.mode)
        self.ttft_pool, self.itl_pool = mode.ttft_pool.value, mode.itl_pool.value

    def go(self, stop: threading.Event, cut: threading.Event) -> None:
        header = f"planner up ({self.stack.engines.kind} engines)"
        live = nullcontext() if self.opts.json_out else Live(console=self.console, refresh_per_second=2,
                                                            transient=False)
        self.gpus = GpuMeter(self._gpus_per_replica())
        with live:
            while not stop.is_set():
                snap = self.sample()
                if self.load is None and all(p["ready"] >= 1 for p in snap["pools"].values()):
                    self.load = LoadGenerator(self.stack.router.url, self.schedule,  # type: ignore[union-attr]
                                              self.stack.engines.max_model_len).start()
                    self.load_started_s = time.time()
                if self.opts.json_out:
                    print(json.dumps(snap), flush=True)
                else:
                    live.update(render(snap, header))  # type: ignore[union-attr]
                if self._done():
                    break
                stop.wait(SAMPLE_S)
            self._finish(cut, live)

    def _finish(self, cut: threading.Event, live: Any) -> None:  # noqa: ANN401 - rich Live or nullcontext
        """Send nothing more and wait for the requests in flight (as the engines' drain would), showing them."""
        if self.load is None:
            return
        self.load.stop_sending()
        deadline = time.monotonic() + DRAIN_S
        while self.load.in_flight and time.monotonic() < deadline and not cut.is_set():
            snap = self.sample()
            snap["controller"] += f"; stopping: {self.load.in_flight} requests in flight (Ctrl-C again: cut them)"
            if self.opts.json_out:
                print(json.dumps(snap), flush=True)
            else:
                live.update(render(snap, f"planner up ({self.stack.engines.kind} engines)"))
            cut.wait(SAMPLE_S)

    def _done(self) -> bool:
        return (self.opts.duration_s is not None and self.load_started_s is not None
                and time.time() - self.load_started_s >= self.opts.duration_s)

    def _gpus_per_replica(self) -> dict[str, int]:
        policy = self.stack.policy
        from planner.profile import load_profile

        profile = load_profile(policy.profile)
        return {p: profile.selected_tp("prefill" if p == "prefill" else "decode") for p in policy.pool_names()}

    def sample(self) -> dict[str, Any]:
        service = self.stack.service
        assert service is not None
        self.decisions.update(self.stack.recorded())
        now = time.time()
        policy = self.stack.policy
        snap = snapshot(now, self.started_s, self.load or _NoLoad(), self.stack.actuator.snapshot(),
                        service.loop.last, self.decisions,
                        {"ttft_ms": policy.sla.ttft_ms, "itl_ms": policy.sla.itl_ms}, self.ttft_pool, self.itl_pool)
        if self.load_started_s is None:
            snap["controller"] += "; starting the floor replicas, no load yet"
        if self.gpus is not None:
            self.gpus.add(now, snap["pools"])
        self.last = snap
        return snap

    def summary(self, notes: list[str]) -> dict[str, Any]:
        if self.stack.service is None or self.gpus is None:
            return {"notes": notes + ["stopped before the controller started"]}
        final = self.sample()
        if self.opts.json_out:
            print(json.dumps(final), flush=True)  # the state the summary reports, as the last line before it
        span = time.time() - (self.load_started_s or self.started_s)
        policy = self.stack.policy
        attained = measured_attainment(self.stack.query, span, {"ttft_ms": policy.sla.ttft_ms,
                                                                "itl_ms": policy.sla.itl_ms},
                                       self.ttft_pool, self.itl_pool)
        grafana = write_dashboards(self.opts.out, self.stack.prom.url if self.stack.prom else "")
        load = self.load or _NoLoad()
        out = summarize(duration_s=span, load=load, decisions=self.decisions, gpus=self.gpus,
                        final_pools=final["pools"], attained=attained, notes=notes)
        out["files"] = {"policy": str(self.stack.policy_path), "grafana": str(grafana),
                        "prometheus_data": str(self.opts.out / "prometheus" / "data"),
                        "engine_logs": str(self.stack.state_dir / "logs")}
        return out


class _NoLoad:
    outcomes: list = []

    def rate_rps(self) -> float:
        return 0.0

    def counts(self) -> dict[str, int]:
        return {"sent": 0, "in_flight": 0, "ok": 0, "failed": 0}


def _print_summary(summary: dict[str, Any], opts: Options, console: Console) -> None:
    if opts.json_out:
        print(json.dumps({"summary": summary}), flush=True)
        return
    req = summary.get("requests", {})
    console.print(f"\n[bold]planner up: {summary.get('duration_s', 0):g} s[/]  requests sent {req.get('sent', 0)}, "
                  f"ok {req.get('ok', 0)}, failed {req.get('failed', 0)}; GPU-seconds "
                  f"{summary.get('gpu_seconds', 0):g}")
    for key, what in (("ttft", "TTFT"), ("itl", "ITL")):
        a = (summary.get("attainment") or {}).get(key)
        if a:
            unit = "requests" if key == "ttft" else "token gaps"
            console.print(f"  {what} within {a['target_ms']:g} ms: {a['within_sla_pct']:g} % of {a['counted']} "
                          f"{unit} ({a['pool']} pool's histogram)")
            if a.get("interpolated"):
                lo, hi = a["bucket_ms"]
                console.print(f"    interpolated in the histogram's ({lo:g}, {hi:g}] ms bucket: the truth is between "
                              f"{a['within_lower_pct']:g} % (within {lo:g} ms) and {a['within_upper_pct']:g} % "
                              f"(within {hi:g} ms)")
    table = Table(title="scale events", title_justify="left")
    for col in ("pool", "up", "down", "max ready", "final ready"):
        table.add_column(col)
    for pool, e in (summary.get("scale_events") or {}).items():
        table.add_row(pool, str(e["up"]), str(e["down"]), str(e["max_ready"]), str(e["final_ready"]))
    console.print(table)
    for note in summary.get("notes", []):
        console.print(f"  {note}")
    for what, path in (summary.get("files") or {}).items():
        console.print(f"  {what}: {path}")
    console.print(f"  summary: {opts.out / 'summary.json'}")
