"""The real kube-apiserver + etcd (planner/testing/kube_apiserver.py) as a pytest fixture, envtest-style.

One server per pytest session (per xdist worker): its start costs 5-15 s on 2 cores. Tests isolate
themselves by namespace (``kube_namespace``). Where ``KUBEBUILDER_ASSETS`` is unset the tests skip with one
line saying how to get the binaries; under CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from planner.testing.kube_apiserver import HOW_TO_GET, KubeAPIServer, assets_dir


def require_kube_assets():  # noqa: ANN201 - Path
    assets = assets_dir()
    if assets is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but KUBEBUILDER_ASSETS={os.environ.get('KUBEBUILDER_ASSETS')!r} holds no "
                        f"kube-apiserver and etcd: {HOW_TO_GET}")
        pytest.skip(HOW_TO_GET)
    return assets


@pytest.fixture(scope="session")
def kube_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer(require_kube_assets(), tmp_path_factory.mktemp("kube-apiserver"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(kube_server: KubeAPIServer) -> Iterator[KubeAPIServer]:
    """The session's server, resumed and checked after each test (a test that paused it must not leave it)."""
    yield kube_server
    kube_server.resume()


@pytest.fixture
def kube_namespace(kube: KubeAPIServer) -> str:
    """A namespace of its own for one test (namespaces are never finalised here, so they are not deleted)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(name)
    return name
