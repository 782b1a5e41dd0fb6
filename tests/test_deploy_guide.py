"""docs/deploy.md: every command block runs, in order, as pasted, and what it would apply is valid.

The blocks (```sh) run with bash -euo pipefail in a copy of the repository. ``kubectl kustomize`` is the
real one; every other kubectl call, and helm, docker, python3 and uv, are recorders (no cluster here):
they log their arguments, and ``kubectl apply`` keeps what it was given. The test then checks the commands
(no sudo, one namespace, the image built is the image deployed) and validates every applied object the way
tests/test_deploy.py does, RBAC included (tests/test_rbac.py): the guide's own Dynamo overlay must be as
least-privilege as the shipped ones.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.test_deploy import NAMESPACE, REPO, by_kind, kubectl, validate
from tests.test_rbac import granted_permissions, required_permissions

GUIDE = REPO / "docs" / "deploy.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
REGISTRY = "registry.example.com/ml"  # the guide's example value

KUBECTL_SHIM = r"""#!/usr/bin/env bash
printf '%s\n' "kubectl $*" >> "$GUIDE_LOG"
if [ "$1" = kustomize ]; then exec "$REAL_KUBECTL" "$@"; fi
args=" $* "
if [[ "$args" == *" create namespace "* && "$args" == *" -o yaml "* ]]; then
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$3"
  exit 0
fi
if [[ "$args" == *" apply "* ]]; then
  n=$(ls "$GUIDE_APPLIED" | wc -l)
  prev=""
  for a in "$@"; do
    if [ "$prev" = -f ]; then
      if [ "$a" = - ]; then cat > "$GUIDE_APPLIED/$n.yaml"; else cp "$a" "$GUIDE_APPLIED/$n.yaml"; fi
    fi
    prev="$a"
  done
fi
exit 0
"""
RECORDER = """#!/usr/bin/env bash
printf '%s\\n' "$(basename "$0") $*" >> "$GUIDE_LOG"
"""


@pytest.fixture(scope="module")
def guide_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[list[dict]], str]:
    tmp = tmp_path_factory.mktemp("guide")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    repo = tmp / "repo"
    for f in files:
        if (REPO / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, repo / f)
    bin_dir, applied, log = tmp / "bin", tmp / "applied", tmp / "calls.log"
    bin_dir.mkdir()
    applied.mkdir()
    (bin_dir / "kubectl").write_text(KUBECTL_SHIM)
    for tool in ("helm", "docker", "python3", "uv"):
        (bin_dir / tool).write_text(RECORDER)
    for shim in bin_dir.iterdir():
        shim.chmod(0o755)
    script = "\n".join(BLOCK.findall(GUIDE.read_text()))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp), "GUIDE_LOG": str(log),
           "GUIDE_APPLIED": str(applied), "REAL_KUBECTL": kubectl()}
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    batches = [[d for d in yaml.safe_load_all(p.read_text()) if d]
               for p in sorted(applied.iterdir(), key=lambda p: int(p.stem))]
    return log.read_text().splitlines(), batches, script


def test_commands_need_no_sudo_and_use_one_namespace(guide_run: tuple[list[str], list[list[dict]], str]) -> None:
    calls, _, script = guide_run
    assert "sudo" not in script
    assert f"kubectl create namespace {NAMESPACE} --dry-run=client -o yaml" in calls
    namespaces = {m for c in calls if c.startswith("kubectl") for m in re.findall(r"(?:-n|--namespace) (\S+)", c)}
    assert namespaces == {NAMESPACE, "monitoring"}
    helm = [shlex.split(c) for c in calls if c.startswith("helm upgrade --install")]
    releases = {h[3]: h for h in helm}
    assert releases["kube-prometheus-stack"][4] == "prometheus-community/kube-prometheus-stack"
    assert "grafana.sidecar.dashboards.searchNamespace=ALL" in releases["kube-prometheus-stack"]
    assert releases["keda"][4] == "kedacore/keda"


def test_the_image_built_is_the_image_deployed(guide_run: tuple[list[str], list[list[dict]], str]) -> None:
    calls, batches, _ = guide_run
    image = f"{REGISTRY}/planner:0.1.0"
    assert f"docker build -t {image} ." in calls and f"docker push {image}" in calls
    deployments = [d for batch in batches for d in by_kind(batch, "Deployment")]
    assert deployments and all(d["spec"]["template"]["spec"]["containers"][0]["image"] == image
                               for d in deployments)
    lock_cmd = next(c for c in calls if c.startswith("uv pip compile"))
    assert lock_cmd in (REPO / "Dockerfile").read_text()


def test_applied_objects_validate_and_follow_the_story(guide_run: tuple[list[str], list[list[dict]], str],
                                                       tmp_path: Path) -> None:
    _, batches, _ = guide_run
    actuators = []
    for i, batch in enumerate(batches):
        for obj in batch:
            validate(obj)
            assert obj["kind"] == "Namespace" or obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE
        for deploy in by_kind(batch, "Deployment"):
            actuators.append(deploy["metadata"]["annotations"]["planner/actuator"])
            (tmp_path / str(i)).mkdir()
            assert granted_permissions(batch) == required_permissions(batch, tmp_path / str(i))
    # advisory, then KEDA, then direct, the KEDA migration, then Dynamo advisory and Dynamo direct.
    assert actuators == ["dry-run", "keda", "kubernetes", "keda", "dry-run", "kubernetes"]
    dynamo = [b for b in batches if by_kind(b, "Role") and any(
        "dynamographdeploymentscalingadapters/scale" in r["resources"] for role in by_kind(b, "Role")
        for r in role["rules"])]
    assert len(dynamo) == 1
    monitors = {o["metadata"]["name"] for b in batches for o in by_kind(b, "PodMonitor")}
    assert monitors == {"vllm-engines", "dynamo-workers"}
