"""A real kube-apiserver and etcd on loopback for tests, as controller-runtime's envtest runs them for Go operators.

``KUBEBUILDER_ASSETS`` names a folder holding ``kube-apiserver`` and ``etcd`` (envtest's convention; .ci/run
unpacks them from ../shared/kube into the cache, with the CRDs the manifests use in ``crds/`` beside them).
The server runs with RBAC, certificates made for this run (a CA, a serving certificate for 127.0.0.1, an
admin client certificate in ``system:masters``, a key pair for ServiceAccount tokens) and an audit log of
every request's metadata, so a test can read which identity called which verb on what, and when. No kubelet,
scheduler or controller-manager: Deployments never get pods, but ``spec.replicas`` and ``/scale`` work.

ServiceAccount identities get their tokens from the TokenRequest API (there is no token controller), and a
kubeconfig each (``kubeconfig_for``). Both processes are stopped by PID (``stop``), also when a test fails;
``pause``/``resume`` stop and continue the API server (SIGSTOP/SIGCONT: it accepts connections and answers
nothing, as a hung server does).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from planner.testing.ports import free_port

ISSUER = "https://kubernetes.default.svc.cluster.local"
HOW_TO_GET = ("kube tests need a kube-apiserver and etcd: set KUBEBUILDER_ASSETS to a folder holding both "
              "(.ci/run unpacks ../shared/kube/*.xz into ~/.cache/planner/kube-assets and sets it)")
# Every request's metadata (who, verb, resource, name, response code); writes of a /scale, of Leases and of
# pods also with their body, so that a test reads which replicas were written when, who renewed a Lease until
# when, and which pod was marked for deletion before which scale write.
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Request", "verbs": ["update", "patch", "create"],
                           "resources": [{"group": "apps", "resources": ["deployments/scale", "statefulsets/scale"]},
                                         {"group": "coordination.k8s.io", "resources": ["leases"]},
                                         {"group": "", "resources": ["pods"]}]},
                          {"level": "Metadata"}]}


def assets_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """The folder with kube-apiserver and etcd, or None where KUBEBUILDER_ASSETS is unset or incomplete."""
    value = env.get("KUBEBUILDER_ASSETS")
    if not value:
        return None
    path = Path(value)
    return path if all(os.access(path / b, os.X_OK) for b in ("kube-apiserver", "etcd")) else None


def crds_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """The KEDA and prometheus-operator CRDs: PLANNER_KUBE_CRDS, else ``crds/`` beside the binaries."""
    if env.get("PLANNER_KUBE_CRDS"):
        return Path(env["PLANNER_KUBE_CRDS"])
    assets = assets_dir(env)
    return assets / "crds" if assets is not None and (assets / "crds").is_dir() else None


# --------------------------------------------------------------------------------------------- certificates
def _certificates(out: Path) -> None:
    """ca.crt, apiserver.crt/key (127.0.0.1, localhost), admin.crt/key (O=system:masters), sa.key/sa.pub."""
    try:
        _certificates_cryptography(out)
    except ImportError:
        _certificates_openssl(out)


def _certificates_cryptography(out: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    def pem_key(key: Any) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    now = dt.datetime.now(dt.UTC)

    def cert(subject: x509.Name, key: Any, issuer: x509.Name, signer: Any, ca: bool = False,
             sans: list[x509.GeneralName] | None = None, client: bool = False) -> bytes:
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
             .not_valid_after(now + dt.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                              content_commitment=False, key_encipherment=False,
                                              data_encipherment=False, key_agreement=False,
                                              encipher_only=False, decipher_only=False), critical=True)
        else:
            usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
            b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "planner-test-ca")])
    (out / "ca.crt").write_bytes(cert(ca_name, ca_key, ca_name, ca_key, ca=True))
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    (out / "apiserver.crt").write_bytes(cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
                                             server_key, ca_name, ca_key, sans=sans))
    (out / "apiserver.key").write_bytes(pem_key(server_key))
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                       x509.NameAttribute(NameOID.COMMON_NAME, "admin")])
    (out / "admin.crt").write_bytes(cert(admin, admin_key, ca_name, ca_key, client=True))
    (out / "admin.key").write_bytes(pem_key(admin_key))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (out / "sa.key").write_bytes(pem_key(sa_key))
    (out / "sa.pub").write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                  serialization.PublicFormat.SubjectPublicKeyInfo))


def _certificates_openssl(out: Path) -> None:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=out, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
        "-out", "ca.crt", "-days", "2", "-subj", "/CN=planner-test-ca")
    for name, subj, ext in (("apiserver", "/CN=kube-apiserver", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                            ("admin", "/O=system:masters/CN=admin", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", subj)
        subprocess.run(["openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "/dev/stdin"],
                       cwd=out, check=True, capture_output=True, input=ext.encode())
    run("genrsa", "-out", "sa.key", "2048")
    run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")


# --------------------------------------------------------------------------------------------- the server
class KubeAPIServer:
    """etcd + kube-apiserver on free loopback ports; ``start()``, then ``stop()`` (by PID, also on failure)."""

    def __init__(self, assets: Path, workdir: Path | None = None) -> None:
        self.assets = Path(assets)
        self._own_dir = workdir is None
        self.dir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="kube-apiserver-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.etcd: subprocess.Popen[bytes] | None = None
        self.apiserver: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.audit_log = self.dir / "audit.log"
        self._tokens: dict[tuple[str, str], str] = {}

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    # ----------------------------------------------------------------------------------- lifecycle
    def start(self, timeout_s: float = 90.0) -> KubeAPIServer:
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        _certificates(self.dir)
        (self.dir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        etcd_port, peer_port, self.port = free_port(), free_port(), free_port()
        self.etcd = subprocess.Popen(
            [str(self.assets / "etcd"), "-data-dir", str(self.dir / "etcd-data"),
             "-listen-client", f"http://127.0.0.1:{etcd_port}", "-listen-peer", f"http://127.0.0.1:{peer_port}"],
            stdout=open(self.dir / "etcd.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        self._wait(lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"), deadline, "etcd", self.etcd)
        d = self.dir
        self.apiserver = subprocess.Popen(
            [str(self.assets / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
             "--bind-address=127.0.0.1", f"--secure-port={self.port}", "--advertise-address=127.0.0.1",
             "--endpoint-reconciler-type=none", f"--tls-cert-file={d / 'apiserver.crt'}",
             f"--tls-private-key-file={d / 'apiserver.key'}", f"--client-ca-file={d / 'ca.crt'}",
             f"--service-account-key-file={d / 'sa.pub'}", f"--service-account-signing-key-file={d / 'sa.key'}",
             f"--service-account-issuer={ISSUER}", f"--api-audiences={ISSUER}", "--authorization-mode=RBAC",
             "--service-cluster-ip-range=10.0.0.0/24", f"--audit-policy-file={d / 'audit-policy.yaml'}",
             f"--audit-log-path={self.audit_log}", "--audit-log-mode=blocking"],
            stdout=open(d / "kube-apiserver.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        ctx = self.ssl_context()
        self._wait(lambda: _http_ok(f"{self.url}/readyz", ctx), deadline, "kube-apiserver", self.apiserver)
        self._write_kubeconfig(self.admin_kubeconfig, {"client-certificate": str(d / "admin.crt"),
                                                       "client-key": str(d / "admin.key")})

    def _wait(self, ready: Any, deadline: float, what: str, proc: subprocess.Popen[bytes]) -> None:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}: {self.log_tail(what)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready in time: {self.log_tail(what)}")

    def log_tail(self, what: str = "kube-apiserver", chars: int = 2000) -> str:
        path = self.dir / f"{what}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def pause(self) -> None:
        assert self.apiserver is not None
        os.kill(self.apiserver.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.apiserver is not None
        os.kill(self.apiserver.pid, signal.SIGCONT)

    def stop(self) -> None:
        for proc in (self.apiserver, self.etcd):
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.kill(proc.pid, signal.SIGCONT)  # a paused server must be able to act on SIGTERM
                proc.terminate()
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.apiserver = self.etcd = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------------------------- clients
    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        ctx.load_cert_chain(str(self.dir / "admin.crt"), str(self.dir / "admin.key"))
        return ctx

    def _write_kubeconfig(self, path: Path, user: dict[str, str]) -> Path:
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
                  "clusters": [{"name": "test", "cluster": {"server": self.url,
                                                            "certificate-authority": str(self.dir / "ca.crt")}}],
                  "users": [{"name": "test", "user": user}],
                  "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}
        path.write_text(yaml.safe_dump(config))
        return path

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """An official-client ApiClient as the admin (or as whoever ``kubeconfig`` names)."""
        from kubernetes import config

        return config.new_client_from_config(str(kubeconfig or self.admin_kubeconfig))

    def kubectl(self, *args: str, kubeconfig: Path | None = None, input_text: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig or self.admin_kubeconfig), *args],
                              capture_output=True, text=True, input=input_text, timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[:2000]}")
        return proc

    def ensure_namespace(self, name: str) -> None:
        self.kubectl("create", "namespace", name, check=False)

    # ----------------------------------------------------------------------------------- identities
    def service_account_token(self, namespace: str, name: str, expiration_s: int = 3600) -> str:
        """A TokenRequest token for ServiceAccount ``namespace/name`` (created when missing)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        key = (namespace, name)
        if key in self._tokens:
            return self._tokens[key]
        self.ensure_namespace(namespace)
        core = client.CoreV1Api(self.api_client())
        try:
            core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
                metadata=client.V1ObjectMeta(name=name, namespace=namespace)))
        except ApiException as exc:
            if exc.status != 409:
                raise
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[ISSUER], expiration_seconds=expiration_s))
        status = core.create_namespaced_service_account_token(name, namespace, request).status
        if status is None or not status.token:
            raise RuntimeError(f"TokenRequest for {namespace}/{name} answered no token")
        self._tokens[key] = str(status.token)
        return self._tokens[key]

    def kubeconfig_for(self, namespace: str, name: str) -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/name``."""
        token = self.service_account_token(namespace, name)
        return self._write_kubeconfig(self.dir / f"sa-{namespace}-{name}.kubeconfig", {"token": token})

    # ----------------------------------------------------------------------------------- audit
    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        """The audit log's ResponseComplete/Panic events (optionally only those of ``user``), in order."""
        if not self.audit_log.exists():
            return []
        out = []
        for line in self.audit_log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if event.get("stage") not in ("ResponseComplete", "Panic"):
                continue
            if user is not None and event.get("user", {}).get("username") != user:
                continue
            out.append(event)
        return out


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def _http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return bool(r.status == 200)
    except Exception:  # noqa: BLE001 - not up yet
        return False
