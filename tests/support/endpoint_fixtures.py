"""Helpers for the endpoint and kubernetes backend tests: `planner emulate` as a process, profiles to emulate."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from planner.catalog import load_hardware, load_model
from planner.profile import Profile, save_profile
from planner.profiler.analytical import profile_analytical
from planner.profiler.grids import SweepRequest
from planner.testing.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def analytical_profile(model: str, tp: tuple[int, ...], path: Path) -> Profile:
    """A real analytical profile (default grids) at the given TP sizes, saved to ``path``."""
    req = SweepRequest(model=model, gpu="h200", tp=tp, isl=2000, osl=200, ttft_ms=2000, itl_ms=100)
    profile = profile_analytical(load_model(model), load_hardware("h200"), req)
    save_profile(profile, path)
    return profile


class EmulatorProcess:
    """`planner emulate` in a subprocess (the real CLI), stopped by its pid."""

    def __init__(self, profile: Path, port: int | None = None, time_scale: float = 1.0,
                 model_name: str | None = None, max_model_len: int = 32768) -> None:
        self.port = port or free_port()
        args = [sys.executable, "-m", "planner.cli", "emulate", "--profile", str(profile), "--role", "aggregated",
                "--port", str(self.port), "--time-scale", str(time_scale), "--max-model-len", str(max_model_len)]
        if model_name:
            args += ["--model-name", model_name]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 60.0) -> EmulatorProcess:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                done = self.proc.poll() is not None and self.proc.stderr and not self.proc.stderr.closed
                err = self.proc.stderr.read().decode() if done and self.proc.stderr else ""
                self.stop()
                raise RuntimeError(f"planner emulate on port {self.port} did not start: {err[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()

    def __enter__(self) -> EmulatorProcess:
        return self.wait_ready()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def running_requests(url: str) -> float:
    """vllm:num_requests_running of an emulator (0 once every stream it served has ended)."""
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:num_requests_running in /metrics")


def relative_errors(reference: Profile, measured: Profile, time_scale: float = 1.0) -> dict[str, float]:
    """Each measured point's relative error against the reference profile's curves at the same point."""
    tp = measured.prefill[0].tp
    prefill, decode = reference.prefill_curve(tp), reference.decode_curve(tp)
    errors = {}
    for p in measured.prefill[0].points:
        errors[f"prefill isl {p.isl}"] = p.ttft_ms / (prefill.ttft_ms(p.isl).value * time_scale) - 1
    for d in measured.decode[0].points:
        expected = decode.itl_ms(d.batch, d.context_tokens).value * time_scale
        errors[f"decode batch {d.batch} context {d.context_tokens}"] = d.itl_ms / expected - 1
    return errors
