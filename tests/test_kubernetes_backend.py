"""`planner profile --backend kubernetes`: workers rendered from a template, created through the official
client against the in-process fake API server (tests/support/fake_kube.py), with `planner emulate` processes
standing in for the pods; measured per TP, and always deleted: after success, a readiness timeout, a
cancel, a failed measurement, a forbidden create."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.catalog import load_hardware, load_model
from planner.cli import run
from planner.errors import UserError
from planner.profile import load_profile
from planner.profiler.grids import SweepCancelled, SweepRequest
from planner.profiler.k8s_worker import GPU_RESOURCE, WORKER_LABEL, render_worker, set_flag
from planner.profiler.kubernetes_backend import profile_kubernetes
from planner.testing.ports import free_port
from tests.support.endpoint_fixtures import EmulatorProcess, analytical_profile, relative_errors
from tests.support.fake_kube import FakeKube

TIME_SCALE = 0.5


def template(port: int, engine: str = "vllm", model: str = "qwen3-32b") -> dict[str, Any]:
    args = {"vllm": ["--model", "Qwen/Qwen3-32B", "--served-model-name", model, "--tensor-parallel-size", "8",
                     "--port", str(port)],
            "sglang": ["--model-path", "Qwen/Qwen3-32B", "--tp", "8", "--port", str(port)]}[engine]
    image = {"vllm": "vllm/vllm-openai:v0.11.0", "sglang": "lmsysorg/sglang:v0.5.4"}[engine]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "qwen3-32b-worker", "labels": {"app": "worker"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "worker"}},
                     "template": {"metadata": {"labels": {"app": "worker"}},
                                  "spec": {"containers": [{"name": "engine", "image": image, "args": args,
                                                           "ports": [{"containerPort": port}],
                                                           "resources": {"limits": {GPU_RESOURCE: "8"}}}]}}}}


class Pods:
    """Stands `planner emulate` processes in for the pods of the workers the fake API server is asked for."""

    def __init__(self, kube: FakeKube, profiles: dict[int, Path], start_tps: set[int], model_name: str | None,
                 warm: dict[int, EmulatorProcess] | None = None) -> None:
        self.kube, self.profiles, self.start_tps, self.model_name = kube, profiles, start_tps, model_name
        self.warm = dict(warm or {})  # already started (an image already pulled): ready at once
        self.running: dict[str, EmulatorProcess] = {}
        self.created: list[dict[str, Any]] = []
        kube.on_create, kube.on_delete = self.create, self.delete

    def create(self, plural: str, obj: dict[str, Any]) -> None:
        self.created.append(obj)
        if plural != "deployments":
            return
        container = obj["spec"]["template"]["spec"]["containers"][0]
        argv = container["args"]
        tp = int(argv[argv.index("--tensor-parallel-size") + 1])
        if tp not in self.start_tps:
            return  # stays Pending: no GPUs for it
        emu = self.warm.pop(tp, None) or EmulatorProcess(self.profiles[tp], port=container["ports"][0]["containerPort"],
                                                         time_scale=TIME_SCALE, model_name=self.model_name)
        self.running[obj["metadata"]["name"]] = emu
        threading.Thread(target=self._ready, args=(emu, obj["metadata"]["namespace"], obj["metadata"]["name"]),
                         daemon=True).start()

    def _ready(self, emu: EmulatorProcess, namespace: str, name: str) -> None:
        try:
            emu.wait_ready()
        except (RuntimeError, ValueError):  # deleted before it was ready
            return
        self.kube.set_ready(namespace, name)

    def delete(self, plural: str, obj: dict[str, Any]) -> None:
        emu = self.running.pop(obj["metadata"]["name"], None)
        if emu is not None:
            emu.stop()

    def stop_all(self) -> None:
        for emu in [*self.running.values(), *self.warm.values()]:
            emu.stop()


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("emulated")
    out = {}
    for tp in (1, 2):
        out[tp] = folder / f"qwen3-32b-tp{tp}.json"
        analytical_profile("qwen3-32b", (tp,), out[tp])
    return out


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


def kubeconfig(kube: FakeKube, path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "planner", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "planner", "namespace": "serving"}}]}))
    return path


def files(tmp_path: Path, kube: FakeKube, port: int) -> tuple[Path, Path]:
    tpl = tmp_path / "worker.yaml"
    tpl.write_text(yaml.safe_dump(template(port)))
    return tpl, kubeconfig(kube, tmp_path / "kubeconfig")


# Timing: which TP a worker emulated is told by its ITLs (TP 2 ~30 % faster at half speed: a few ms), which the
# other xdist worker's load once blurred (TP 2's batch-4 ITL read +135 %); .ci/run runs it in the quiet phase.
@pytest.mark.timing
def test_each_tp_gets_its_worker_is_measured_and_deleted(kube, profiles, tmp_path) -> None:
    port = free_port()
    tpl, cfg = files(tmp_path, kube, port)
    pods = Pods(kube, profiles, {1, 2}, None)
    out = tmp_path / "profile.json"
    try:
        rc = run(["profile", "--backend", "kubernetes", "--model", "qwen3-32b", "--tp", "1,2", "--template", str(tpl),
                  "--kubeconfig", str(cfg), "--namespace", "serving", "--service-url", "http://127.0.0.1:{port}",
                  "--isl-grid", "4096", "--batch-grid", "1,4", "--context-grid", "512", "--warmup", "0",
                  "--iters", "2", "--decode-tokens", "12", "--ready-timeout-s", "60", "--out", str(out)])
    finally:
        pods.stop_all()
    assert rc in (0, 3)
    deployments = [o for o in pods.created if o["kind"] == "Deployment"]
    services = [o for o in pods.created if o["kind"] == "Service"]
    assert len(deployments) == len(services) == 2 and kube.stored == {}  # both created, both deleted
    for dep, svc, tp in zip(deployments, services, (1, 2), strict=True):
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert container["args"].count("--tensor-parallel-size") == 1
        assert container["args"][container["args"].index("--tensor-parallel-size") + 1] == str(tp)
        assert container["resources"] == {"limits": {GPU_RESOURCE: str(tp)}, "requests": {GPU_RESOURCE: str(tp)}}
        assert dep["spec"]["replicas"] == 1 and dep["metadata"]["namespace"] == "serving"
        assert svc["spec"]["selector"] == {WORKER_LABEL: dep["metadata"]["name"]}
        assert svc["spec"]["ports"][0]["port"] == port
    deletes = [path for method, path in kube.requests if method == "DELETE"]
    assert len(deletes) == 4
    measured = load_profile(out)
    assert measured.provenance.backend == "kubernetes" and [s.tp for s in measured.decode] == [1, 2]
    # Each TP was measured on its own worker: its ITLs are nearer its own emulated curve than the other TP's
    # (TP 2 decodes ~30 % faster). Accuracy itself is test_endpoint_backend's.
    for tp, other in ((1, 2), (2, 1)):
        single = measured.model_copy(update={"prefill": [s for s in measured.prefill if s.tp == tp],
                                             "decode": [s for s in measured.decode if s.tp == tp]})
        own = relative_errors(load_profile(profiles[tp]), single, TIME_SCALE)
        theirs = relative_errors(load_profile(profiles[other]).model_copy(update={
            "prefill": [s.model_copy(update={"tp": tp}) for s in load_profile(profiles[other]).prefill],
            "decode": [s.model_copy(update={"tp": tp}) for s in load_profile(profiles[other]).decode]}),
            single, TIME_SCALE)
        decode = [k for k in own if k.startswith("decode")]
        assert decode and sum(abs(own[k]) for k in decode) < sum(abs(theirs[k]) for k in decode), (tp, own, theirs)
    assert "tp 1: worker qwen3-32b-worker-tp1-" in measured.provenance.notes


def sweep(kube: FakeKube, tmp_path: Path, port: int, **kw: Any) -> Any:
    tpl, cfg = files(tmp_path, kube, port)
    base: dict[str, Any] = dict(model="qwen3-32b", gpu="h200", tp=(1, 2), isl=2000, osl=200, ttft_ms=2000, itl_ms=100,
                isl_grid=(4096,), batch_grid=(1,), context_grid=(512,), warmup=0, iters=1, decode_tokens=8,
                template=str(tpl), kubeconfig=str(cfg), namespace="serving", ready_timeout_s=30,
                service_url="http://127.0.0.1:{port}")
    req = SweepRequest(**{**base, **kw})
    return profile_kubernetes(load_model("qwen3-32b"), load_hardware("h200"), req)


def test_a_worker_that_never_gets_ready_is_left_out_and_deleted(kube, profiles, tmp_path) -> None:
    port = free_port()
    warm = EmulatorProcess(profiles[1], port=port, time_scale=TIME_SCALE).wait_ready()
    pods = Pods(kube, profiles, {1}, None, warm={1: warm})  # TP 2 stays Pending
    try:
        profile = sweep(kube, tmp_path, port, ready_timeout_s=3)
    finally:
        pods.stop_all()
    assert [s.tp for s in profile.decode] == [1] and kube.stored == {}
    assert "tp 2: left out, worker qwen3-32b-worker-tp2-" in profile.provenance.notes
    assert "not ready after 3 s (waiting for 0/1 replicas ready)" in profile.provenance.notes


def test_cancel_while_a_worker_starts_deletes_it(kube, profiles, tmp_path) -> None:
    pods = Pods(kube, profiles, set(), None)
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    try:
        with pytest.raises(SweepCancelled, match="was starting; it was deleted"):
            sweep(kube, tmp_path, free_port(), cancel=cancel)
    finally:
        pods.stop_all()
    assert kube.stored == {} and len(pods.created) == 2


def test_a_failed_measurement_still_deletes_the_worker(kube, profiles, tmp_path) -> None:
    pods = Pods(kube, profiles, {1, 2}, model_name="other-model")  # the engine serves the wrong model
    try:
        with pytest.raises(UserError, match=r"^model: qwen3-32b does not match the model served at "):
            sweep(kube, tmp_path, free_port())
    finally:
        pods.stop_all()
    assert kube.stored == {} and pods.running == {}


@pytest.mark.parametrize("forbidden, created", [(("deployments", "create"), 0), (("services", "create"), 1)],
                         ids=["deployment", "service"])
def test_a_forbidden_create_is_one_line_and_leaves_nothing(kube, profiles, tmp_path, forbidden, created) -> None:
    kube.forbidden.add(forbidden)
    pods = Pods(kube, profiles, set(), None)
    with pytest.raises(UserError, match=r"^namespace: cannot create worker qwen3-32b-worker-tp1-\w+ in namespace "
                                        r"serving: HTTP 403 .*forbidden"):
        sweep(kube, tmp_path, free_port())
    assert kube.stored == {} and len(pods.created) == created


@pytest.mark.parametrize("text, message", [
    (None, "template: {path}: file not found"),
    ("kind: Service\n", "template: {path}: expected one Deployment (kind: Deployment), found 0"),
    ("kind: Deployment\nmetadata: {name: w}\nspec: {template: {spec: {containers: []}}}\n",
     "template: {path}: spec.template.spec.containers must list the engine's container"),
    ("kind: Deployment\nmetadata: {name: w}\nspec: {template: {spec: {containers: [{name: c, image: x}]}}}\n",
     "engine: cannot tell vLLM from SGLang"),
    ("a: [\n", "template: {path}: not valid YAML"),
], ids=["missing", "not-a-deployment", "no-containers", "unknown-engine", "bad-yaml"])
def test_bad_templates_are_named(text, message, tmp_path) -> None:
    path = tmp_path / "t.yaml"
    if text is not None:
        path.write_text(text)
    req = SweepRequest(model="qwen3-32b", gpu="h200", tp=(1,), isl=2000, osl=200, ttft_ms=2000, itl_ms=100,
                       template=str(path))
    with pytest.raises(UserError) as err:
        profile_kubernetes(load_model("qwen3-32b"), load_hardware("h200"), req, api_client=object())
    assert str(err.value).startswith(message.format(path=path))


@pytest.mark.parametrize("argv, names, expected", [
    (["--model", "m", "--tensor-parallel-size", "8"], ("--tensor-parallel-size", "-tp"),
     ["--model", "m", "--tensor-parallel-size", "2"]),
    (["--tensor-parallel-size=8", "--port", "1"], ("--tensor-parallel-size", "-tp"),
     ["--tensor-parallel-size=2", "--port", "1"]),
    (["-tp", "8", "--tensor-parallel-size", "4"], ("--tensor-parallel-size", "-tp"), ["-tp", "2"]),
    (["--model", "m"], ("--tensor-parallel-size", "-tp"), ["--model", "m", "--tensor-parallel-size", "2"]),
    (["--tp-size", "8"], ("--tp", "--tp-size", "--tensor-parallel-size"), ["--tp-size", "2"]),
    ([], ("--tp", "--tp-size"), ["--tp", "2"]),
], ids=["vllm-replace", "vllm-equals", "vllm-alias-and-duplicate", "vllm-append", "sglang-alias", "empty"])
def test_set_flag(argv, names, expected) -> None:
    assert set_flag(argv, names, "2") == expected


def test_an_inline_template_is_read_as_yaml_text(kube, profiles, tmp_path) -> None:
    port = free_port()
    warm = EmulatorProcess(profiles[1], port=port, time_scale=TIME_SCALE).wait_ready()
    pods = Pods(kube, profiles, {1}, None, warm={1: warm})
    try:
        profile = sweep(kube, tmp_path, port, tp=(1,), template=yaml.safe_dump(template(port)))
    finally:
        pods.stop_all()
    assert profile.provenance.software["template"] == "inline" and kube.stored == {}
    assert pods.created[0]["metadata"]["name"].startswith("qwen3-32b-worker-tp1-")


def test_sglang_worker_in_the_command_with_default_port() -> None:
    tpl = template(0, engine="sglang")
    container = tpl["spec"]["template"]["spec"]["containers"][0]
    container.pop("args")
    container.pop("ports")
    container["command"] = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "8"]
    worker = render_worker(tpl, 4, "ns")
    out = worker.deployment["spec"]["template"]["spec"]["containers"][0]
    assert out["command"] == ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "4"]
    assert worker.port == 30000 and worker.service["spec"]["ports"][0]["targetPort"] == 30000
    assert out["resources"]["limits"] == {GPU_RESOURCE: "4"} and tpl["spec"]["replicas"] == 3  # template untouched
