"""`planner run` as a process against the real API server (tests/test_kube_leader.py): a steady light load
through a real Prometheus, a stalling TCP proxy (a partition), and the audit log read as scale writes and
Lease renewals over time."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.testing.kube_apiserver import KubeAPIServer, service_account_user
from planner.testing.ports import free_port
from tests.support.prom_fixtures import FakeHTTP, vllm_exposition

REPO = Path(__file__).resolve().parents[2]


class LightLoad:
    """An exporter whose counters grow at ``rate_rps`` light requests: every policy sizes it at the floor."""

    def __init__(self, server: FakeHTTP, rate_rps: float = 0.5) -> None:
        self.server, self.rate_rps = server, rate_rps
        self.started_s = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> LightLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            n = 1 + int((time.monotonic() - self.started_s) * self.rate_rps)
            self.server.text = vllm_exposition(success=n, prompt_sum=100 * n, prompt_count=n, ttft=(0.05,) * n,
                                               itl=(0.005,) * min(n * 10, 2000), running=1)
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()


def write_policy(path: Path, ns: str, prom_url: str, selectors: dict[str, str], window_s: int, period_s: int) -> Path:
    data = {"name": "kube", "profile": str(REPO / "profiles" / "h200" / "qwen3-8b.json"), "interval_s": 1,
            "startup_s": 0,
            "pools": {"prefill": {"target": {"name": "pre", "namespace": ns}, "min_replicas": 1, "max_replicas": 8},
                      "decode": {"target": {"name": "dec", "namespace": ns}, "min_replicas": 1, "max_replicas": 8}},
            "forecast": {"model": "last-value"}, "actuator": {"kind": "kubernetes"},
            "metrics": {"source": "prometheus", "url": prom_url, "selectors": selectors, "timeout_s": 1},
            "behavior": {"scale_down": {"stabilization_window_s": window_s,
                                        "policies": [{"type": "pods", "value": 1, "period_s": period_s}]}}}
    path.write_text(yaml.safe_dump(data))
    return path


class Planner:
    """One `planner run` process with its own ServiceAccount (so the audit log tells the replicas apart)."""

    def __init__(self, kube: KubeAPIServer, ns: str, identity: str, policy: Path, log_dir: Path,
                 extra: list[str] = (), server: str | None = None) -> None:  # type: ignore[assignment]
        self.kube, self.ns, self.identity = kube, ns, identity
        self.user = service_account_user(ns, identity)
        self.kubeconfig = kube.kubeconfig_for(ns, identity)
        if server is not None:  # through a proxy: the same credentials, another address
            config = yaml.safe_load(self.kubeconfig.read_text())
            config["clusters"][0]["cluster"]["server"] = server
            config["clusters"][0]["cluster"]["tls-server-name"] = "127.0.0.1"
            self.kubeconfig = self.kubeconfig.with_name(f"{identity}-proxied.kubeconfig")
            self.kubeconfig.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.argv = [sys.executable, "-m", "planner.cli", "run", "--policy", str(policy), "--host", "127.0.0.1",
                     "--port", str(self.port), "--grpc-port", "0", "--identity", identity, *extra]
        self.log = log_dir / f"{identity}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Planner:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONPATH": str(REPO), "POD_NAMESPACE": self.ns}
        self.proc = subprocess.Popen(self.argv, env=env, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"),
                                     cwd=REPO, start_new_session=True)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def metric(self, name: str) -> float | None:
        import urllib.request

        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2).read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None


def bind_scale_role(kube: KubeAPIServer, ns: str, identities: list[str]) -> None:
    """deploy/overlays/direct's rules (scale, Lease, Events) bound to each identity's ServiceAccount."""
    from tests.support.kube_objects import RBAC_KINDS, apply, in_namespace
    from tests.test_deploy import DEPLOY, render

    rbac = in_namespace([o for o in render(DEPLOY / "overlays" / "direct") if o["kind"] in RBAC_KINDS[1:]], ns)
    for o in rbac:
        if o["kind"] == "RoleBinding":
            o["subjects"] = [{"kind": "ServiceAccount", "name": i, "namespace": ns} for i in identities]
        if o["kind"] == "Role":  # the overlay's targets are qwen-prefill/qwen-decode; these tests scale pre/dec
            for rule in o["rules"]:
                if rule.get("resources") == ["deployments/scale"]:
                    rule["resourceNames"] = ["pre", "dec"]
    for i in identities:
        kube.service_account_token(ns, i)
    apply(kube, rbac)


# ----------------------------------------------------------------------------------------- the audit log
def _t(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Write:
    at_s: float  # when the server received it
    user: str
    name: str
    replicas: int
    code: int


@dataclass(frozen=True)
class Renewal:
    at_s: float
    user: str
    holder: str
    code: int


def scale_writes(kube: KubeAPIServer, ns: str) -> list[Write]:
    out = []
    for e in kube.audit_events():
        ref = e.get("objectRef") or {}
        if ref.get("namespace") == ns and ref.get("subresource") == "scale" and e["verb"] == "update":
            out.append(Write(_t(e["requestReceivedTimestamp"]), e["user"]["username"], ref["name"],
                             int(e["requestObject"]["spec"]["replicas"]), int(e["responseStatus"]["code"])))
    return out


def lease_writes(kube: KubeAPIServer, ns: str) -> list[Renewal]:
    out = []
    for e in kube.audit_events():
        ref = e.get("objectRef") or {}
        if ref.get("namespace") == ns and ref.get("resource") == "leases" and e["verb"] in ("create", "update"):
            spec: dict[str, Any] = (e.get("requestObject") or {}).get("spec") or {}
            out.append(Renewal(_t(e["requestReceivedTimestamp"]), e["user"]["username"],
                               str(spec.get("holderIdentity")), int(e["responseStatus"]["code"])))
    return out


def first_read_after(kube: KubeAPIServer, ns: str, user: str, after_s: float) -> float:
    """When ``user`` first read a target's /scale after ``after_s`` (a fresh controller's seeding read)."""
    reads = [_t(e["requestReceivedTimestamp"]) for e in kube.audit_events(user)
             if (e.get("objectRef") or {}).get("namespace") == ns and e["verb"] == "get"
             and (e.get("objectRef") or {}).get("subresource") == "scale"
             and e["responseStatus"]["code"] == 200 and _t(e["requestReceivedTimestamp"]) > after_s]
    return min(reads)


def unsafe_writes(kube: KubeAPIServer, ns: str, lease_s: float) -> list[str]:
    """Scale writes the server accepted from a controller that did not hold the Lease at that moment: its
    own last accepted renewal older than the lease, or someone else's accepted renewal newer than its own."""
    renewals = [r for r in lease_writes(kube, ns) if r.code in (200, 201)]
    bad = []
    for w in scale_writes(kube, ns):
        if w.code != 200:
            continue
        before = [r for r in renewals if r.at_s <= w.at_s]
        if not before:
            bad.append(f"{w}: no Lease taken before it")
            continue
        last = before[-1]
        if last.user != w.user:
            bad.append(f"{w}: the Lease was last taken by {last.user} at {last.at_s:.3f}")
        elif w.at_s - last.at_s >= lease_s:
            bad.append(f"{w}: {w.at_s - last.at_s:.2f} s after its last renewal (lease {lease_s} s)")
    return bad


# ----------------------------------------------------------------------------------------- a partition
class StallingProxy:
    """TCP proxy to the API server that, once stalled, forwards nothing in either direction and accepts new
    connections without connecting them (a partition as the client sees it: calls hang until their timeout).
    What was sent while stalled is dropped, never delivered late."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.stalled = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", free_port()))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self._closing = False
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(client)
            if self.stalled.is_set():
                continue  # held open, never connected
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._conns.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self.stalled.is_set():
                    continue  # dropped: a partition loses packets, it does not queue them
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closing = True
        self.sock.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
