"""Prometheus as users run it: basic auth, TLS with its own CA, a path prefix (a real Prometheus started with
--web.config.file and --web.route-prefix), a bearer token from a rotated file and a tenant header (a small
reverse proxy in front of a real Prometheus, since Prometheus itself checks no bearer tokens).

Wrong or missing credentials are one line naming the key, never the secret, and the loop holds."""

from __future__ import annotations

import datetime as dt
import http.client
import ipaddress
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from planner.controller import make_planner_controller
from planner.emulator.app import create_app, engine_model_for
from planner.errors import UserError
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.background import BackgroundServer
from planner.service.loop import ControlLoop
from planner.sources.prometheus import PrometheusSource
from planner.telemetry import PlannerMetrics
from planner.testing.actuator import RecordingActuator
from planner.testing.clock import FakeClock
from planner.testing.local_prometheus import LocalPrometheus, Target, WebOptions
from planner.testing.ports import free_port
from planner.types import NoData, Observation, Reason
from tests.support.prom_fixtures import require_prometheus

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-0.6b.json"
USER, PASSWORD = "planner", "s3cret-Passw0rd"
ENV_VAR = "PLANNER_TEST_PROM_PASSWORD"
SELECTOR = '{pool="aggregated"}'


def _pki(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 that it signed (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def cert(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(
                ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    files = {"ca": cert("planner test CA", ca_key, "planner test CA", ca_key, True),
             "cert": cert("127.0.0.1", server_key, "planner test CA", ca_key, False)}
    out = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key")}
    for name, c in files.items():
        out[name].write_bytes(c.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    return out


@pytest.fixture(scope="module")
def engine() -> Iterator[int]:
    port = free_port()
    app = create_app(engine_model_for(load_profile(PROFILE), "aggregated"), "qwen3-0.6b", 1.0)
    server = BackgroundServer(app, port=port).start()
    yield port
    server.stop()


@pytest.fixture(scope="module")
def secure(engine: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalPrometheus, dict[str, Path]]]:
    """A Prometheus behind basic auth and TLS, under the path /prom, scraping one emulated engine."""
    bcrypt = pytest.importorskip("bcrypt")
    require_prometheus()
    folder = tmp_path_factory.mktemp("pki")
    pki = _pki(folder)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()  # checked on every request
    web = WebOptions(config={"basic_auth_users": {USER: hashed},
                             "tls_server_config": {"cert_file": str(pki["cert"]), "key_file": str(pki["key"])}},
                     route_prefix="/prom", probe_auth=(USER, PASSWORD))
    (folder / "password").write_text(PASSWORD + "\n")
    (folder / "wrong").write_text("not-the-password\n")
    with LocalPrometheus([Target(engine, {"pool": "aggregated"})], web=web) as prom:
        yield prom, {**pki, "password": folder / "password", "wrong": folder / "wrong"}


def _source(url: str, **metrics: Any) -> PrometheusSource:
    policy = parse_policy({"name": "p", "mode": "aggregated", "profile": str(PROFILE),
                           "pools": {"aggregated": {}}, "actuator": {"kind": "dry-run"},
                           "metrics": {"url": url, "selectors": {"aggregated": SELECTOR}, "timeout_s": 5,
                                       **metrics}})
    return PrometheusSource.from_policy(policy, policy.metrics)


def _read(source: PrometheusSource) -> Observation | NoData:
    with source:
        return source.read(30.0, time.time())


def _ok(result: Observation | NoData) -> None:
    assert isinstance(result, Observation), result
    assert result.pools["aggregated"].ready_replicas == 1


BASIC_FILE = {"username": USER, "password_file": "{password}"}
CA = {"ca_file": "{ca}"}
# (id, metrics fields ("{name}" = a file of the fixture), use the /prom prefix, None = reads, else
# (NoData reason, words the one line holds))
SECURE_CASES = [
    ("basic-password-file-ca", {"basic_auth": BASIC_FILE, "tls": CA}, True, None),
    ("basic-password-env-ca", {"basic_auth": {"username": USER, "password_env": ENV_VAR}, "tls": CA}, True, None),
    ("insecure-skip-verify", {"basic_auth": BASIC_FILE, "tls": {"insecure_skip_verify": True}}, True, None),
    ("wrong-password", {"basic_auth": {"username": USER, "password_file": "{wrong}"}, "tls": CA}, True,
     ("bad_response", ["HTTP 401 unauthorized", "metrics.basic_auth", f"username '{USER}'", "{wrong}"])),
    ("no-credentials", {"tls": CA}, True, ("bad_response", ["HTTP 401", "metrics.bearer_token_file or metrics.basic_auth"])),
    ("password-env-unset", {"basic_auth": {"username": USER, "password_env": "PLANNER_TEST_UNSET"}, "tls": CA}, True,
     ("bad_response", ["metrics.basic_auth.password_env", "PLANNER_TEST_UNSET"])),
    ("unknown-ca", {"basic_auth": BASIC_FILE}, True, ("unreachable", ["TLS", "metrics.tls.ca_file"])),
    ("no-path-prefix", {"basic_auth": BASIC_FILE, "tls": CA}, False, ("bad_response", ["HTTP 404"])),
]


def _fill(value: Any, files: dict[str, Path]) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, files) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("{") and value.strip("{}") in files:
        return str(files[value.strip("{}")])
    return value


@pytest.mark.parametrize(("metrics", "prefixed", "fails"), [c[1:] for c in SECURE_CASES],
                         ids=[c[0] for c in SECURE_CASES])
def test_basic_auth_tls_and_path_prefix(secure, metrics: dict, prefixed: bool, fails: tuple | None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    prom, files = secure
    monkeypatch.setenv(ENV_VAR, PASSWORD)
    url = prom.url if prefixed else prom.url.removesuffix("/prom")
    result = _read(_source(url, **_fill(metrics, files)))
    if fails is None:
        _ok(result)
        return
    reason, words = fails
    assert isinstance(result, NoData) and result.reason.value == reason, result
    for word in words:
        assert _fill(word, files) in result.detail, result.detail
    assert PASSWORD not in result.detail and "\n" not in result.detail


def test_wrong_credentials_hold_the_loop_with_one_line(secure, caplog: pytest.LogCaptureFixture) -> None:
    prom, files = secure
    source = _source(prom.url, basic_auth={"username": USER, "password_file": str(files["wrong"])},
                     tls={"ca_file": str(files["ca"])})
    policy = parse_policy({"name": "p", "mode": "aggregated", "profile": str(PROFILE),
                           "pools": {"aggregated": {"min_replicas": 1, "max_replicas": 8}},
                           "actuator": {"kind": "dry-run"}, "metrics": {"selectors": {"aggregated": SELECTOR}}})
    actuator = RecordingActuator({"aggregated": 5})
    loop = ControlLoop(policy, make_planner_controller(policy, load_profile(PROFILE)), source, actuator,
                       PlannerMetrics(), FakeClock())
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            result = loop.tick()
            loop.clock.advance(30)  # type: ignore[attr-defined]
    assert isinstance(result.observation, NoData)
    assert result.decision is not None and Reason.NO_DATA_HOLD in result.decision.reasons
    assert actuator.current == {"aggregated": 5} and actuator.writes == []  # never a scale-down
    said = [r.getMessage() for r in caplog.records if "metrics.basic_auth" in r.getMessage()]
    assert len(said) == 1 and "HTTP 401" in said[0] and PASSWORD not in said[0]


class _TenantProxy(BaseHTTPRequestHandler):
    """Mimir-like gate: a bearer token and an X-Scope-OrgID header, then on to the real Prometheus."""

    upstream = ""
    token = ""
    tenant = "tenant-a"
    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append(dict(self.headers))
        if self.headers.get("X-Scope-OrgID") != self.tenant:
            return self._answer(401, b"no org id")
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            return self._answer(401, b"bad token")
        conn = http.client.HTTPConnection(self.upstream, timeout=5)
        conn.request("POST", self.path.removeprefix("/tenant"), body,
                     {"Content-Type": self.headers.get("Content-Type", "")})
        resp = conn.getresponse()
        self._answer(resp.status, resp.read())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def proxied(engine: int) -> Iterator[str]:
    """The URL (with a path) of a tenant proxy in front of a plain Prometheus."""
    require_prometheus()
    with LocalPrometheus([Target(engine, {"pool": "aggregated"})]) as prom:
        _TenantProxy.upstream = prom.url.removeprefix("http://")
        server = ThreadingHTTPServer(("127.0.0.1", 0), _TenantProxy)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}/tenant"
        server.shutdown()


def test_bearer_token_is_re_read_when_the_file_changes(proxied: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("token-1\n")
    _TenantProxy.token = "token-1"
    source = _source(proxied, bearer_token_file=str(token_file), headers={"X-Scope-OrgID": "tenant-a"})
    with source:
        _ok(source.read(30.0, time.time()))
        _TenantProxy.token = "token-2"  # the server rotates first: the old token is refused ...
        refused = source.read(30.0, time.time())
        assert isinstance(refused, NoData) and "HTTP 401" in refused.detail
        assert "metrics.bearer_token_file" in refused.detail and "token-1" not in refused.detail
        token_file.write_text("token-2\n")  # ... then the Secret's file follows: no restart needed
        _ok(source.read(30.0, time.time()))
        assert source.client.headers["Authorization"] == "Bearer token-2"  # ad-hoc queries too
    assert _TenantProxy.seen[-1]["Authorization"] == "Bearer token-2"


@pytest.mark.parametrize(("metrics", "words"), [
    pytest.param({"headers": {"X-Scope-OrgID": "tenant-b"}}, ["HTTP 401", "metrics.bearer_token_file"],
                 id="wrong-tenant"),
    pytest.param({"headers": {}}, ["HTTP 401"], id="no-tenant-header"),
    pytest.param({"headers": {"X-Scope-OrgID": "tenant-a"}, "bearer_token_file": "/nonexistent/token"},
                 ["metrics.bearer_token_file /nonexistent/token: cannot read it"], id="token-file-missing"),
])
def test_tenant_gate_refusals_are_one_line(proxied: str, tmp_path: Path, metrics: dict, words: list[str]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("token-x")
    _TenantProxy.token = "token-x"
    result = _read(_source(proxied, **{"bearer_token_file": str(token_file), **metrics}))
    assert isinstance(result, NoData)
    assert all(w in result.detail for w in words) and "token-x" not in result.detail, result.detail


# (id, metrics fields, what the one-line config error holds)
CONFIG_ERRORS = [
    ("both-auths", {"bearer_token_file": "/t", "basic_auth": {"username": "u", "password_env": "P"}},
     "exclude each other"),
    ("password-inline", {"basic_auth": {"username": "u", "password": "hunter2"}}, "unknown key"),
    ("no-password-source", {"basic_auth": {"username": "u"}}, "exactly one of password_file and password_env"),
    ("authorization-header", {"headers": {"Authorization": "Bearer x"}}, "no Authorization header"),
    ("ca-and-skip", {"tls": {"ca_file": "/ca.pem", "insecure_skip_verify": True}}, "exclude each other"),
    ("url-without-scheme", {"url": "prometheus:9090"}, "http:// or https://"),
]


@pytest.mark.parametrize(("metrics", "needle"), [c[1:] for c in CONFIG_ERRORS], ids=[c[0] for c in CONFIG_ERRORS])
def test_auth_config_errors_are_one_line(metrics: dict, needle: str) -> None:
    with pytest.raises(UserError, match=needle) as info:
        parse_policy({"name": "p", "profile": str(PROFILE), "pools": {"prefill": {}, "decode": {}},
                      "metrics": metrics}, "policy.yaml")
    assert "hunter2" not in str(info.value) and "\n" not in str(info.value)


def test_missing_ca_file_is_a_config_error() -> None:
    with pytest.raises(UserError, match="metrics.tls.ca_file /nonexistent/ca.pem: no such file"):
        _source("https://127.0.0.1:1", tls={"ca_file": "/nonexistent/ca.pem"})
