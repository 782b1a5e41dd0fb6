"""The policy `planner up` runs, written where the user can read it and run it again with `planner run`.

It is the example policy's model and hardware (the shipped Qwen3-32B on H200 profile) with intervals and windows
short enough that a loop turns in seconds: decisions every second from a 6 s window, scale-down after 10 s of
lower recommendations, replicas drained before they stop. Calibration is off: the emulated engines are the
profile, so there is no model error to correct, and their latencies on a busy laptop drift with its CPU, which
the controller should not chase.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.catalog import data_dir

PROFILE = Path("h200") / "qwen3-32b.json"
# The example's TTFT target; ITL 18 ms rather than its 40 ms: at 40 ms one decode replica (TP2) carries ~28 req/s
# of conversation traffic, more than a laptop replays; at 18 ms the decode pool needs a second one from ~14 req/s.
SLA = {"ttft_ms": 1000, "itl_ms": 18, "percentile": 95, "window_s": 600}
POOLS = ("prefill", "decode")
MAX_REPLICAS = 4
INTERVAL_S = 1
WINDOW_S = 6
SCALE_DOWN_WINDOW_S = 10
DRAIN_S = 60  # in-flight requests finish (a 2,000-token answer at 40 ms a token is 80 s at worst)
# Emulated engines run at the profile's own speed: the load generator does not stream, so no per-token work
# lands on the laptop's CPU and the engines' latencies are the profile's (read against the SLA as written).
EMULATOR_TIME_SCALE = 1.0


@dataclass(frozen=True)
class Engines:
    """How the replicas are started: ``pools`` pool -> command (with "{port}"), ``env`` for all of them,
    ``profile`` the profile the controller sizes with, ``mode`` aggregated or disaggregated."""

    kind: str
    mode: str
    profile: Path
    pools: Mapping[str, list[str]]
    env: Mapping[str, str]
    startup_s: float
    ready_timeout_s: float
    max_model_len: int | None = None
    max_replicas: int = MAX_REPLICAS
    sla: Mapping[str, float] = field(default_factory=lambda: dict(SLA))  # a real small model's context: the load cuts prompts to fit


def emulated_engines(profile: Path | None = None, time_scale: float = EMULATOR_TIME_SCALE) -> Engines:
    prof = profile or data_dir() / PROFILE
    commands = {pool: [sys.executable, "-m", "planner.cli", "emulate", "--profile", str(prof), "--role", pool,
                       "--port", "{port}", "--time-scale", f"{time_scale:g}"] for pool in POOLS}
    return Engines("emulate", "disaggregated", prof, commands, {}, startup_s=10, ready_timeout_s=120)


def up_policy(engines: Engines, *, prometheus_url: str, router_url: str, state_dir: Path,
              port_range: tuple[int, int], name: str = "up") -> dict[str, Any]:
    behavior = {"scale_up": {"stabilization_window_s": 0, "policies": [{"type": "pods", "value": 100, "period_s": 1}]},
                "scale_down": {"stabilization_window_s": SCALE_DOWN_WINDOW_S,
                               "policies": [{"type": "pods", "value": 100, "period_s": 1}]}}
    pools = list(engines.pools)
    return {
        "name": name, "mode": engines.mode, "profile": str(engines.profile), "sla": dict(engines.sla),
        "interval_s": INTERVAL_S, "startup_s": engines.startup_s,
        "pools": {p: {"min_replicas": 1, "max_replicas": engines.max_replicas} for p in pools},
        "forecast": {"model": "last-value", "history_s": 300},
        "behavior": behavior, "calibration": {"enabled": False},
        "metrics": {"url": prometheus_url, "window_s": WINDOW_S, "stale_after_intervals": 5,
                    "selectors": {p: f'{{pool="{p}"}}' for p in pools}},
        "actuator": {"kind": "process", "port_range": list(port_range), "env": dict(engines.env),
                     "pools": {p: {"command": list(c)} for p, c in engines.pools.items()},
                     "drain_s": DRAIN_S, "stop_grace_s": 10, "ready_timeout_s": engines.ready_timeout_s,
                     "state_dir": str(state_dir), "router_url": router_url},
    }
