"""`planner init --search thorough --url URL` end to end: the real endpoint backend measures a running server
(an in-process `planner emulate` of a known profile, time-scaled), and the one command writes a profile whose
provenance and curves come from that server, a policy `planner plan` takes, and manifests `kubectl kustomize`
renders. Only the grids and the decode windows are cut (the defaults take minutes); everything else is
what a user runs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.cli import run
from planner.policy_file import load_policy
from planner.profile import Profile, load_profile
from planner.profiler import backends
from planner.profiler.grids import SweepRequest
from tests.support.endpoint_fixtures import EmulatorProcess, analytical_profile, relative_errors
from tests.test_deploy import by_kind, render

# Times a live emulator: .ci/run runs it in its quiet phase, with the engines (pyproject.toml, "timing").
pytestmark = pytest.mark.timing
REPO = Path(__file__).resolve().parent.parent
TIME_SCALE = 1.0  # the emulator at the profile's own speed: a few ms of HTTP stay small against each point
# test_endpoint_backend.py holds the backend to 10 % on these grids; here the whole command is under test.
SMALL = {"isl_grid": (2048, 4096, 8192), "batch_grid": (1, 4, 16), "context_grid": (512, 1024)}
# 12 steady-state tokens per decode stream instead of 32 (the backend's own recovery test holds that to 10 %).
PASSES = {"decode_tokens": 12}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Profile]:
    path = tmp_path_factory.mktemp("served") / "qwen3-32b-tp1.json"
    return path, analytical_profile("qwen3-32b", (1,), path)


@pytest.fixture(scope="module")
def server(reference: tuple[Path, Profile]) -> Iterator[EmulatorProcess]:
    """A process of its own, as a server is: in this process the load generator would share its GIL."""
    with EmulatorProcess(reference[0], time_scale=TIME_SCALE) as emu:
        yield emu


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[SweepRequest]:
    """The real endpoint backend on smaller grids; records each request it was given."""
    seen: list[SweepRequest] = []
    real = backends.BACKENDS["endpoint"]

    def endpoint(model, hw, req: SweepRequest):  # noqa: ANN001, ANN202
        seen.append(req)
        return real(model, hw, dataclasses.replace(req, **SMALL, **PASSES))

    monkeypatch.setitem(backends.BACKENDS, "endpoint", endpoint)
    return seen


@pytest.mark.slow
def test_thorough_init_measures_the_server_and_writes_what_to_deploy(server, reference, calls, tmp_path,
                                                                    capsys) -> None:
    out = tmp_path / "qwen"
    rc = run(["init", "--model", "qwen3-32b", "--gpu", "h200", "--isl", "1000", "--osl", "200", "--rate-rps", "4",
              "--ttft-ms", "2000", "--itl-ms", "60", "--search", "thorough", "--url", server.url, "--tp", "1",
              "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert calls and {r.url for r in calls} == {server.url} and {r.tp for r in calls} == {(1,)}
    profile = load_profile(out / "profile.json")
    prov = profile.provenance
    assert prov.backend == "endpoint" and prov.software["server_url"] == server.url
    prefill = [p.ttft_ms for p in profile.prefill[0].points]
    assert [p.isl for p in profile.prefill[0].points] == list(SMALL["isl_grid"])
    assert prefill == sorted(prefill)  # longer prompts take longer
    for ctx in SMALL["context_grid"]:
        itl = [p.itl_ms for p in profile.decode[0].points if p.context_tokens == ctx]
        # Bigger batches do not step faster. At batch 1 and 4 the served profile's steps are within 0.1 % of each
        # other (memory-bound), so measurement noise may swap them: 2 % is allowed (CI, 19.665 then 19.655 ms).
        assert len(itl) == len(SMALL["batch_grid"]) and all(b >= 0.98 * a for a, b in zip(itl, itl[1:], strict=False)), itl
        assert itl[-1] > itl[0], itl
    # Measured, not copied: the curves are the served profile's, within 15 % (test_endpoint_backend.py holds
    # the backend itself to 10 %; a loaded 2-core machine adds a few ms of HTTP to each point).
    errors = relative_errors(reference[1], profile, time_scale=TIME_SCALE)
    worst = max(errors, key=lambda k: abs(errors[k]))
    assert abs(errors[worst]) <= 0.15, f"worst {worst}: {errors[worst]:+.1%}; all: {errors}"
    policy = load_policy(out / "policy.yaml")
    assert policy.profile == str(out / "profile.json")
    result = json.loads((out / "result.json").read_text())
    assert {s["tp"] for s in result["pools"].values()} == {1}
    assert run(["plan", "--policy", str(out / "policy.yaml"), "--rate-rps", "4", "--isl", "1000", "--osl", "200",
                "--json"]) == 0
    deployments = by_kind(render(out / "manifests"), "Deployment")
    gpus = [c["resources"]["limits"]["nvidia.com/gpu"] for d in deployments
            for c in d["spec"]["template"]["spec"]["containers"] if "nvidia.com/gpu" in c.get("resources", {}).get(
                "limits", {})]
    assert deployments and gpus and {int(g) for g in gpus} == {1}  # the measured TP's GPUs, per replica
