"""Start and stop a real Prometheus (the Debian ``prometheus`` binary) on loopback, for tests and benches.

Targets are fixed when it starts: Prometheus' discovery manager throttles target updates to one every 5 s,
so a test that adds targets later waits for nothing but that throttle. Callers instead reserve ports
up front (``Target``) and bring servers up on them whenever they like; until then the scrape fails and
produces no series.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from planner.procfs import die_with_parent
from planner.testing.ports import free_port


def prometheus_binary() -> str | None:
    return os.environ.get("PLANNER_PROMETHEUS_BIN") or shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)



@dataclass(frozen=True)
class WebOptions:
    """Prometheus' own web settings, as users run it: ``config`` is its --web.config.file (basic_auth_users,
    tls_server_config), ``route_prefix`` serves everything under a path (as behind Thanos or a proxy);
    ``probe_auth`` the (user, password) its readiness probe sends."""

    config: dict | None = None
    route_prefix: str = ""
    probe_auth: tuple[str, str] | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.config and "tls_server_config" in self.config else "http"


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
                 rule_files: list[Path] | None = None,
                 web: WebOptions | None = None, die_with_parent: bool = False) -> None:
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
        self.web = web or WebOptions()
        self.die_with_parent = die_with_parent  # SIGTERM when the starting thread dies (`planner up` killed)

    @property
    def url(self) -> str:
        return f"{self.web.scheme}://127.0.0.1:{self.port}{self.web.route_prefix}"

    def _web_flags(self) -> list[str]:
        flags = []
        if self.web.config:
            path = self.workdir / "web.yml"
            path.write_text(yaml.safe_dump(self.web.config))
            flags.append(f"--web.config.file={path}")
        if self.web.route_prefix:
            flags += [f"--web.route-prefix={self.web.route_prefix}", f"--web.external-url={self.url}"]
        return flags

    def _get(self, path_query: str) -> bytes:
        """GET on this Prometheus as its web options require (credentials, TLS without verification)."""
        request = urllib.request.Request(f"{self.url}{path_query}")
        if self.web.probe_auth is not None:
            pair = base64.b64encode(":".join(self.web.probe_auth).encode()).decode()
            request.add_header("Authorization", f"Basic {pair}")
        context = ssl._create_unverified_context() if self.web.scheme == "https" else None  # noqa: S323 - own test CA
        with urllib.request.urlopen(request, timeout=1, context=context) as r:
            return bytes(r.read())

    def _config(self) -> dict:
        # Paths absolute: Prometheus reads a relative one from the config file's folder, not our working
        # directory (`planner up` with its default `--out out/up` once scraped no engine: file_sd pointed at
        # out/up/prometheus/out/up/state/targets.json).
        interval = f"{max(1, round(self.scrape_interval_s * 1000))}ms"
        jobs: list[dict] = [{
            "job_name": "planner-local",
            "static_configs": [{"targets": [t.address], "labels": dict(t.labels)} for t in self.targets],
        }]
        if self.file_sd:
            jobs.append({"job_name": "file-sd",
                         "file_sd_configs": [{"files": [str(p.resolve()) for p in self.file_sd],
                                              "refresh_interval": "1s"}]})
        config: dict = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": jobs,
        }
        if self.rule_files:
            config["rule_files"] = [str(p.resolve()) for p in self.rule_files]
        return config

    def start(self, timeout_s: float = 30.0) -> LocalPrometheus:
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config()))
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h",
             "--log.level=warn", *self._web_flags()],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent if self.die_with_parent else None)
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
            self._get("/-/ready")  # raises (an OSError) until it answers 200
            return True
        query = urllib.parse.urlencode({"query": 'count(up{job="planner-local"})'})
        result = json.loads(self._get(f"/api/v1/query?{query}"))["data"]["result"]
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
