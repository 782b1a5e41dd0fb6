"""A ProfileRequest object through `planner serve --watch-namespace` (a process, as deploy/profile-requests
runs it, with that Role) on a real kube-apiserver: the CRD installed from deploy/crds, the object created by
the admin, its status written back through the status subresource to Ready."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.requests.kube import GROUP, KIND, VERSION
from planner.testing.kube_apiserver import KubeAPIServer, service_account_user
from planner.testing.ports import free_port
from tests.support.kube_objects import RBAC_KINDS, apply, in_namespace, used
from tests.support.process_fixtures import wait_until
from tests.support.requests_support import spec_data
from tests.test_deploy import DEPLOY, REPO, by_kind, render

pytestmark = pytest.mark.kube


def test_a_profile_request_goes_to_ready(kube: KubeAPIServer, kube_namespace: str, tmp_path: Path) -> None:
    ns = kube_namespace
    objs = render(DEPLOY / "profile-requests")
    apply(kube, by_kind(objs, "CustomResourceDefinition"))
    kube.kubectl("wait", "--for=condition=Established", "crd/profilerequests.planner.dev", "--timeout=60s")
    rbac = in_namespace([o for o in objs if o["kind"] in RBAC_KINDS], ns)
    apply(kube, rbac)
    (sa,) = by_kind(rbac, "ServiceAccount")
    kubeconfig = kube.kubeconfig_for(ns, sa["metadata"]["name"])
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "serve", "--results-dir", str(tmp_path / "results"),
                             "--host", "127.0.0.1", "--port", str(free_port()), "--watch-namespace", ns,
                             "--poll-s", "0.5"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
                            env={**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(REPO)},
                            start_new_session=True)
    try:
        apply(kube, [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "qwen", "namespace": ns},
                      "spec": spec_data()}])

        def status() -> dict:
            out = kube.kubectl("-n", ns, "get", "profilerequests.planner.dev", "qwen", "-o", "yaml").stdout
            return yaml.safe_load(out).get("status") or {}

        wait_until(lambda: status().get("phase") in ("Ready", "Failed") or proc.poll() is not None, 120,
                   "the ProfileRequest to finish")
        final = status()
        assert final.get("phase") == "Ready", (final, log.read_text()[-3000:])
        assert any(c.get("type") == "Ready" and c.get("status") == "True" for c in final.get("conditions", [])), final
    finally:
        proc.terminate()
        proc.wait(20)
    done = used(kube, service_account_user(ns, sa["metadata"]["name"]), ns)
    assert ("planner.dev", "profilerequests", "list", "") in done
    assert ("planner.dev", "profilerequests/status", "patch", "qwen") in done
