"""Start and stop a real Prometheus (the Debian ``prometheus`` binary) on loopback, for tests and benches.

Targets are fixed when it starts: Prometheus' discovery manager throttles target updates to one every 5 s,
so a test that adds targets later waits for nothing but that throttle. Callers instead reserve ports
up front (``Target``) and bring servers up on them whenever they like; until then the scrape fails and
produces no series.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml


def prometheus_binary() -> str | None:
    return os.environ.get("PLANNER_PROMETHEUS_BIN") or shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Target:
    port: int
    labels: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class LocalPrometheus:
    def __init__(self, targets: list[Target], *, scrape_interval_s: float = 1.0, binary: str | None = None,
                 workdir: Path | None = None, port: int | None = None, file_sd: list[Path] | None = None,
                 rule_files: list[Path] | None = None) -> None:
        found = binary or prometheus_binary()
        if found is None:
            raise FileNotFoundError("prometheus binary not found (apt-get install -y prometheus, or set "
                                    "PLANNER_PROMETHEUS_BIN)")
        self.binary: str = found
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="planner-prom-"))
        self.port = port or free_port()
        self.file_sd = list(file_sd or [])  # file_sd JSON files (job "file-sd"), e.g. the process actuator's
        self.rule_files = list(rule_files or [])  # evaluated every scrape interval (alerts: GET /api/v1/alerts)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _config(self) -> dict:
        interval = f"{max(1, round(self.scrape_interval_s * 1000))}ms"
        jobs: list[dict] = [{
            "job_name": "planner-local",
            "static_configs": [{"targets": [t.address], "labels": dict(t.labels)} for t in self.targets],
        }]
        if self.file_sd:
            jobs.append({"job_name": "file-sd",
                         "file_sd_configs": [{"files": [str(p) for p in self.file_sd], "refresh_interval": "1s"}]})
        config: dict = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": jobs,
        }
        if self.rule_files:
            config["rule_files"] = [str(p) for p in self.rule_files]
        return config

    def start(self, timeout_s: float = 30.0) -> LocalPrometheus:
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config()))
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h",
             "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if self._scraping_all():
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"prometheus not ready after {timeout_s:g}s: {self.log_tail()}")

    def _scraping_all(self) -> bool:
        """Ready *and* every target has been scraped once (the first discovery update takes ~5 s)."""
        if not self.targets:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return r.status == 200
        query = urllib.parse.urlencode({"query": 'count(up{job="planner-local"})'})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=1) as r:
            result = json.loads(r.read())["data"]["result"]
        return bool(result) and int(float(result[0]["value"][1])) >= len(self.targets)

    def log_tail(self, chars: int = 2000) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def shutdown(self) -> None:
        """Stop the process (SIGTERM) and keep its data and port: ``start`` again is a Prometheus restart."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): the port stays open but nothing answers - a hung Prometheus."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
