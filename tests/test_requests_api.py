"""`planner serve`'s HTTP API over a real uvicorn server and httpx: submit, follow, artifacts, cancel, restart."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from planner.policy_file import parse_policy
from planner.requests.server import ProfileServer, ServeOptions
from planner.service.background import BackgroundServer
from planner.testing.clock import FakeClock
from tests.support.requests_support import blocking_backend, spec_data

URL = "/v1/profile-requests"


class Running:
    def __init__(self, results: Path, workers: int = 1) -> None:
        self.clock = FakeClock(1_780_000_000.0)
        self.server = ProfileServer(ServeOptions(results, workers=workers), clock=self.clock)
        self.http = BackgroundServer(self.server.app).start()
        self.client = httpx.Client(base_url=self.http.url, timeout=30)

    def wait(self, request_id: str, phases: tuple[str, ...] = ("Ready", "Failed"), timeout_s: float = 30) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            body = self.client.get(f"{URL}/{request_id}").json()
            if body["status"]["phase"] in phases:
                return body
            time.sleep(0.02)
        raise AssertionError(f"{request_id} never reached {phases}: {body['status']}")

    def close(self) -> None:
        self.client.close()
        self.http.stop()
        self.server.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Running]:
    running = Running(tmp_path / "results")
    yield running
    running.close()


def test_submit_follow_and_fetch_artifacts(api: Running, tmp_path: Path) -> None:
    reply = api.client.post(URL, json=spec_data())
    assert reply.status_code == 202 and reply.headers["location"] == f"{URL}/{reply.json()['id']}"
    rid = reply.json()["id"]
    body = api.wait(rid)
    status = body["status"]
    assert status["phase"] == "Ready" and status["progress"] == 1.0
    assert [s["step"] for s in status["steps"]] == ["SweepingPrefill", "SweepingDecode", "SelectingConfig",
                                                    "BuildingCurves", "Rendering"]
    assert all(s["finished_at"] for s in status["steps"])
    assert status["created_at"] == "2026-05-28T20:26:40.000Z"  # the injected clock, not the wall clock
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Accepted": "True", "Ready": "True"}
    names = api.client.get(f"{URL}/{rid}/artifacts").json()["artifacts"]
    assert {"profile.json", "policy.yaml", "result.json", "manifests/kustomization.yaml"} <= set(names)
    assert names == status["result"]["artifacts"]
    policy_text = api.client.get(f"{URL}/{rid}/artifacts/policy.yaml")
    assert policy_text.headers["content-type"].startswith("application/yaml")
    (tmp_path / "profile.json").write_bytes(api.client.get(f"{URL}/{rid}/artifacts/profile.json").content)
    policy = parse_policy(yaml.safe_load(policy_text.text), "policy.yaml", tmp_path)
    assert {p: policy.pool(p).target.name for p in policy.pool_names()} == {  # type: ignore[union-attr]
        "prefill": "qwen3-32b-prefill", "decode": "qwen3-32b-decode"}
    for bad in ("../request.json", "artifacts/../../x", "nope.yaml"):
        assert api.client.get(f"{URL}/{rid}/artifacts/{bad}").status_code == 404
    assert [r["id"] for r in api.client.get(URL).json()] == [rid]


@pytest.mark.parametrize("body,field,words", [
    (spec_data(**{"sla.ttft_ms": -1}), "sla.ttft_ms", "greater than 0"),
    (spec_data(colour="blue"), "colour", "unknown field"),
    (spec_data(model={"name": "qwen3-33b"}), "model.name", "unknown model"),
    (spec_data(auto_apply=True), "auto_apply", "ProfileRequest objects in a cluster"),
    (spec_data(**{"workload.request_rate": None}), "workload.request_rate", "exactly one"),
    # pydantic's lax mode would read true as 1: a 1 ms target
    (spec_data(**{"sla.ttft_ms": True}), "sla.ttft_ms", "true is a boolean, not a number"),
    # it goes into the policy's PromQL selectors (model_name="...") that `planner observe` then rejected
    (spec_data(model={"name": "qwen3-32b", "served_name": 'Qwen/"x"'}), "model.served_name", "without spaces, quotes"),
    (spec_data(tp=[1, True]), "tp", "item 1: true is a boolean, not a number"),
], ids=["range", "extra", "unknown-model", "auto-apply-over-http", "no-rate", "bool-as-number", "quote-in-name",
        "bool-in-a-list"])
def test_bad_requests_get_422_with_field_messages(api: Running, body: dict, field: str, words: str) -> None:
    reply = api.client.post(URL, json=body)
    assert reply.status_code == 422
    detail = {d["field"]: d["msg"] for d in reply.json()["detail"]}
    assert field in detail and words in detail[field], detail
    assert api.client.get(URL).json() == []  # nothing was queued or stored


AZURE_HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
CSV_COLUMNS = {"arrival": "t", "isl": "i", "osl": "o"}


@pytest.mark.parametrize("content,trace,words", [
    (AZURE_HEADER + b"2023-11-16 18:15:46.68,\xff100,44\n", {}, "not UTF-8 text (byte 0xff)"),
    (AZURE_HEADER + b"2023-11-16 18:15:46.68,99999999999999999999,44\n", {}, "more tokens than any model's context"),
    (b"t,i,o\n0,100,10\n1,100,10\n", {"format": "csv", "columns": {**CSV_COLUMNS, "bogus": "x"}},
     "unknown key 'bogus'"),
    (b"window_start_s,window_s,total_rate_rps\n0,600,abc\n", {"format": "servegen"}, "'abc' is not a number"),
], ids=["not-utf8", "int64-overflow", "unknown-column-key", "servegen-rates"])
def test_a_trace_the_run_could_not_read_is_a_422_not_a_failed_run(api: Running, tmp_path: Path, content: bytes,
                                                                   trace: dict, words: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(content)
    body = spec_data(**{"workload.request_rate": None, "workload.isl": None, "workload.osl": None})
    body["workload"]["trace"] = {"path": str(path), "format": "azure", **trace}
    reply = api.client.post(URL, json=body)
    assert reply.status_code == 422, reply.text
    detail = {d["field"]: d["msg"] for d in reply.json()["detail"]}
    assert "workload.trace" in detail and words in detail["workload.trace"], detail
    assert api.client.get(URL).json() == []


@pytest.mark.parametrize("template,words", [
    ("a: [1,", "read as inline YAML it is not valid either"),  # taken for a path: "file not found" alone misled
    ("apiVersion: apps/v1\nkind: Deployment\n", "spec.template.spec.containers must list the engine's container"),
    ("apiVersion: v1\nkind: Service\n", "expected one Deployment"),
], ids=["one-line-broken-yaml", "no-containers", "no-deployment"])
def test_a_template_the_sweep_could_not_deploy_is_a_422(api: Running, template: str, words: str) -> None:
    reply = api.client.post(URL, json=spec_data(search="thorough", deployment_template=template))
    assert reply.status_code == 422, reply.text  # it was accepted, and Failed when the sweep began
    detail = {d["field"]: d["msg"] for d in reply.json()["detail"]}
    assert words in detail["deployment_template"], detail


def test_a_servegen_rate_file_is_parsed_at_submit_and_synthesised_by_the_run(api: Running, tmp_path: Path) -> None:
    path = tmp_path / "rates.csv"
    path.write_text("window_start_s,window_s,total_rate_rps\n0,600,2\n600,600,3\n")
    body = spec_data(**{"workload.request_rate": None, "workload.isl": None, "workload.osl": None})
    body["workload"]["trace"] = {"path": str(path), "format": "servegen"}
    reply = api.client.post(URL, json=body)
    assert reply.status_code == 202, reply.text
    status = api.wait(reply.json()["id"])["status"]
    assert status["phase"] == "Ready", status


def test_a_trace_path_that_is_a_directory_says_so(api: Running, tmp_path: Path) -> None:
    body = spec_data(**{"workload.request_rate": None, "workload.isl": None, "workload.osl": None})
    body["workload"]["trace"] = {"path": str(tmp_path), "format": "azure"}
    reply = api.client.post(URL, json=body)
    assert reply.status_code == 422
    assert {d["field"]: d["msg"] for d in reply.json()["detail"]} == {
        "workload.trace.path": f"{tmp_path}: a directory, not a trace file"}


def test_an_infeasible_request_fails_with_the_closest_configuration_and_no_artifacts(api: Running) -> None:
    rid = api.client.post(URL, json=spec_data(sla={"ttft_ms": 50, "itl_ms": 4}, **{"workload.isl": 4000})).json()["id"]
    status = api.wait(rid)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "SLAInfeasible")
    assert status["closest"]["decode"]["tp"] == 8 and status["closest"]["decode"]["miss_pct"] > 0
    assert api.client.get(f"{URL}/{rid}/artifacts").status_code == 409
    assert not (api.server.opts.results_dir / rid / "artifacts").exists()


def test_cancel_mid_sweep_leaves_nothing_behind(api: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    with blocking_backend(monkeypatch) as backend:
        rid = api.client.post(URL, json=spec_data()).json()["id"]
        assert backend.started.wait(10)
        assert api.wait(rid, ("Profiling",))["status"]["step"] == "SweepingPrefill"
        reply = api.client.delete(f"{URL}/{rid}")
        assert reply.status_code == 202 and reply.json()["status"]["phase"] == "Profiling"
        backend.release.set()
        status = api.wait(rid)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Cancelled")
    assert backend.calls == 1  # stopped before the next TP
    folder = api.server.opts.results_dir / rid
    assert sorted(p.name for p in folder.iterdir()) == ["request.json", "status.json"]


def test_delete_of_a_finished_request_removes_it(api: Running) -> None:
    rid = api.client.post(URL, json=spec_data()).json()["id"]
    api.wait(rid)
    assert api.client.delete(f"{URL}/{rid}").json() == {"id": rid, "deleted": True}
    assert api.client.get(f"{URL}/{rid}").status_code == 404
    assert not (api.server.opts.results_dir / rid).exists()


def test_results_survive_a_restart_running_ones_are_interrupted_queued_ones_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = Running(tmp_path / "results")
    snapshot = tmp_path / "snapshot"
    try:
        done = first.client.post(URL, json=spec_data()).json()["id"]
        first.wait(done)
        with blocking_backend(monkeypatch) as backend:
            running = first.client.post(URL, json=spec_data()).json()["id"]
            queued = first.client.post(URL, json=spec_data(name="second")).json()["id"]
            assert backend.started.wait(10)
            first.wait(running, ("Profiling",))
            shutil.copytree(tmp_path / "results", snapshot)  # what a killed server leaves on disk
    finally:
        first.close()
    second = Running(snapshot)
    try:
        assert second.client.get(f"{URL}/{done}/artifacts/policy.yaml").status_code == 200
        status = second.client.get(f"{URL}/{running}").json()["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "Interrupted")
        assert "SweepingPrefill" in status["message"]
        assert second.wait(queued)["status"]["phase"] == "Ready"
    finally:
        second.close()


def test_openapi_documents_the_api(api: Running) -> None:
    doc = api.client.get("/openapi.json").json()
    assert {URL, URL + "/{request_id}", URL + "/{request_id}/artifacts",
            URL + "/{request_id}/artifacts/{name}"} <= set(doc["paths"])
    assert set(doc["paths"][URL + "/{request_id}"]) == {"get", "delete"}
    spec = doc["components"]["schemas"]["ProfileRequestSpec"]
    assert {"model", "hardware", "workload", "sla", "search", "engine", "tp", "endpoint", "deployment_template",
            "output", "auto_apply"} <= set(spec["properties"])


