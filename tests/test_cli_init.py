"""`planner init` as a user runs it: one command writes profile.json, policy.yaml and manifests/ that
`planner plan`, `planner run`'s deploy/ base and `kubectl kustomize` take as they are; bad input exits 2
naming the flag; an infeasible SLA exits 3 with the closest configuration and writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from planner.cli import run
from planner.policy_file import load_policy, parse_policy
from tests.test_deploy import REPO, by_kind, render

BASE = ["init", "--model", "qwen3-32b", "--gpu", "h200", "--isl", "1200", "--osl", "220", "--rate-rps", "20",
        "--ttft-ms", "1000", "--itl-ms", "40", "--total-gpus", "64", "--namespace", "llm"]


def test_one_command_writes_what_plan_and_kubectl_take(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "qwen"
    assert run([*BASE, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "why TP 1 for prefill" in text and "why disaggregated" in text and "6 GPUs of the 64 budgeted" in text
    assert sorted(p.name for p in out.iterdir()) == ["manifests", "policy.yaml", "profile.json", "result.json"]
    result = json.loads((out / "result.json").read_text())
    policy = load_policy(out / "policy.yaml")  # as `planner run` loads it
    assert policy.profile == str(out / "profile.json") and policy.budget.max_gpus == 64
    assert run(["plan", "--policy", str(out / "policy.yaml"), "--rate-rps", "20", "--isl", "1200", "--osl", "220",
                "--json"]) == 0
    decision = json.loads(capsys.readouterr().out)
    assert {p: d["replicas"] for p, d in decision["pools"].items()} == {
        p: s["replicas"] for p, s in result["pools"].items()}
    objs = render(out / "manifests")
    assert sorted(o["kind"] for o in objs) == ["Deployment", "Deployment", "ScaledObject", "ScaledObject"]
    from planner.service.runner import RunOptions, build_loop

    loop = build_loop(RunOptions(out / "policy.yaml", dry_run=True))  # what `planner run` builds from it
    assert loop.name == policy.name and loop.actuator_kind == "dry-run"


@pytest.mark.parametrize(("argv", "min_replicas", "window_s"), [
    ([], 1, None),
    (["--scale-to-zero-after-s", "600"], 0, 600.0),
], ids=["never-sleeps", "scales-to-zero"])
def test_scale_to_zero_renders_keda_min_zero_with_an_activation_threshold(tmp_path: Path, argv: list[str],
                                                                          min_replicas: int,
                                                                          window_s: float | None) -> None:
    from tests.test_deploy import validate

    out = tmp_path / "qwen"
    assert run([*BASE, *argv, "--out", str(out)]) == 0
    policy = load_policy(out / "policy.yaml")
    assert {policy.pool(p).min_replicas for p in policy.pool_names()} == {min_replicas}
    assert policy.scales_to_zero() is (window_s is not None)
    if window_s is not None:
        assert policy.scale_to_zero_after_s == window_s
    objs = render(out / "manifests")  # kubectl kustomize
    scaled = by_kind(objs, "ScaledObject")
    assert len(scaled) == 2
    for so in scaled:
        validate(so)  # the ScaledObject schema (tests/test_deploy.py)
        assert so["spec"]["minReplicaCount"] == min_replicas
        trigger = so["spec"]["triggers"][0]["metadata"]
        # KEDA is active while the planner's desired replicas exceed the activation value: 0 sleeps, 1 wakes
        assert trigger["activationTargetValue"] == "0" and trigger["targetValue"] == "1"
        assert so["spec"]["fallback"]["replicas"] == min_replicas  # unreachable planner: keep what runs


def test_the_policy_runs_in_deploy_base_with_the_actuator_component(tmp_path: Path) -> None:
    out = tmp_path / "qwen"
    assert run([*BASE, "--out", str(out)]) == 0
    repo = tmp_path / "repo"  # docs/profile-requests.md's overlay, on a copy of deploy/
    shutil.copytree(REPO / "deploy", repo / "deploy")
    shutil.copytree(REPO / "dashboards", repo / "dashboards")
    overlay = repo / "deploy" / "overlays" / "qwen"
    overlay.mkdir()
    for name in ("policy.yaml", "profile.json"):
        shutil.copy(out / name, overlay / name)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["../../base"],
        "components": ["../../components/monitoring", "../../components/actuator-keda",
                       "../../components/namespace"],
        "configMapGenerator": [{"name": "planner-policy", "behavior": "merge",
                                "files": ["policy.yaml", "profile.json"]}]}))
    objs = render(overlay)
    cm = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("planner-policy"))
    (tmp_path / "mounted").mkdir()
    (tmp_path / "mounted" / "profile.json").write_text(cm["data"]["profile.json"])
    mounted = parse_policy(yaml.safe_load(cm["data"]["policy.yaml"]), "policy.yaml", tmp_path / "mounted")
    assert mounted.model_dump(exclude={"profile"}) == load_policy(out / "policy.yaml").model_dump(exclude={"profile"})
    assert {o["metadata"].get("namespace") for o in objs} == {"llm"}


@pytest.mark.parametrize("change,flag", [
    ({"--ttft-ms": "-1"}, "--ttft-ms"),
    ({"--model": "qwen3-33b"}, "--model"),
    ({"--rate-rps": None}, "--rate-rps"),
    ({"--tp": "3"}, "--tp"),
    ({"--tp": "4", "--total-gpus": "2"}, "--tp"),
    ({"--search": "thorough"}, "--search"),
    ({"--engine": "dynamo"}, "--engine"),
    ({"--model": "llama-3.1-70b", "--gpu": "a100", "--gpus-per-node": "1"}, "--model"),
    ({"--scale-to-zero-after-s": "-1"}, "--scale-to-zero-after-s"),
    ({"--scale-to-zero-after-s": "600", "--actuator": "hpa"}, "--scale-to-zero-after-s"),
], ids=["range", "unknown-model", "no-rate", "tp-divides", "tp-budget", "thorough-no-target", "dynamo-output",
        "fits-nowhere", "negative-idle-window", "hpa-cannot-sleep"])
def test_bad_input_exits_2_with_one_line_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                         change: dict, flag: str) -> None:
    argv = list(BASE)
    for key, value in change.items():
        if key in argv:
            i = argv.index(key)
            del argv[i:i + 2]
        if value is not None:
            argv += [key, value]
    out = tmp_path / "x"
    assert run([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {flag}") and "\n" not in err and "Traceback" not in err, err
    assert not out.exists()


def test_an_infeasible_sla_exits_3_with_the_closest_configuration(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "x"
    argv = [a if a != "1200" else "4000" for a in BASE]
    rc = run([*argv, "--ttft-ms", "50", "--itl-ms", "4", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 3 and "closest configuration" in captured.out and "miss_pct" in captured.out
    assert "infeasible: the SLA is below" in captured.err and not out.exists()
    rc = run([*BASE[:BASE.index("--rate-rps")], "--rate-rps", "2000", *BASE[BASE.index("--rate-rps") + 2:],
              "--out", str(out)])
    assert rc == 3 and "--total-gpus is 64" in capsys.readouterr().err and not out.exists()


def test_a_rerun_replaces_the_manifests_and_keeps_other_files(tmp_path: Path) -> None:
    out = tmp_path / "qwen"
    assert run([*BASE, "--out", str(out)]) == 0
    (out / "notes.txt").write_text("mine")
    assert run([*BASE, "--output", "dynamo-graph", "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "manifests").iterdir()) == [
        "dynamographdeployment.yaml", "kustomization.yaml", "scaledobjects.yaml"]
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging left over
