"""The profile request's contract: fields, defaults, and a clear error naming one field for each bad input."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from planner.requests.checks import check
from planner.requests.spec import ENGINES, OUTPUTS, TRACE_FORMATS, RequestInvalid, parse_spec
from planner.requests.workload import from_concurrency, steady_load
from planner.sim.traces.loaders import FORMATS
from tests.support.requests_support import DROP, spec_data

CONV = str(Path(__file__).resolve().parent.parent / "profiles" / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv")
BAD = [  # (overrides, field named, words the message must contain)
    ({"sla.ttft_ms": -5}, "sla.ttft_ms", "greater than 0"),
    ({"sla.percentile": 100}, "sla.percentile", "less than or equal to 99.9"),
    ({"colour": "blue"}, "colour", "unknown field"),
    ({"sla": {"itl_ms": 40}}, "sla.ttft_ms", "required"),
    ({"engine": "tgi"}, "engine", "'vllm', 'sglang', 'trtllm' or 'dynamo'"),
    ({"output": "helm"}, "output", "'deployments', 'dynamo-graph' or 'lws'"),
    ({"name": "Qwen_32B"}, "name", "should match pattern"),
    ({"endpoint": "localhost:8000", "search": "thorough"}, "endpoint", "should match pattern"),
]
SEMANTIC = [
    ({"model": {"name": "qwen3-33b"}}, "model.name", "unknown model"),
    ({"model": {}}, "model", "exactly one of model.name"),
    ({"model": {"config": "/nonexistent/config.json"}}, "model.config", "not found"),
    ({"hardware.gpu": "h300"}, "hardware.gpu", "unknown GPU"),
    ({"model": {"name": "llama-3.1-70b"}, "hardware": {"gpu": "a100", "gpus_per_node": 1}}, "model",
     "fits from TP 4"),
    ({"tp": [3]}, "tp", "does not divide the 64 attention heads"),
    ({"tp": [16]}, "tp", "one replica is one pod on one node"),
    ({"tp": [1, 1]}, "tp", "duplicate"),
    ({"hardware.total_gpus": 2, "tp": [4]}, "tp", "hardware.total_gpus is 2"),
    ({"workload.request_rate": DROP}, "workload.request_rate", "exactly one of request_rate and concurrency"),
    ({"workload.concurrency": 8}, "workload.request_rate", "exactly one of request_rate and concurrency"),
    ({"workload.isl": DROP}, "workload.isl", "required"),
    ({"workload": {"trace": {"path": "/nonexistent.csv"}}}, "workload.trace.path", "file not found"),
    ({"workload": {"trace": {"path": CONV}, "isl": 10}}, "workload.isl",
     "either workload.trace"),
    ({"search": "thorough"}, "search", "exactly one of endpoint"),
    ({"search": "thorough", "endpoint": "http://x:8000", "tp": [1, 2]}, "tp", "exactly one tp"),
    ({"endpoint": "http://x:8000"}, "endpoint", "only by search thorough"),
    ({"engine": "dynamo"}, "engine", "output dynamo-graph"),
    ({"engine": "trtllm", "output": "lws"}, "output", "MPI"),
    ({"engine": "trtllm", "mode": "disaggregated"}, "mode", "through Dynamo"),
    ({"auto_apply": True, "actuator": "kubernetes"}, "auto_apply", "does not grant RBAC"),
]


def _ids(cases: list) -> list[str]:
    return [f"{field}-{i}" for i, (_, field, _) in enumerate(cases)]


@pytest.mark.parametrize("overrides,field,words", BAD, ids=_ids(BAD))
def test_structural_errors_name_the_field(overrides: dict, field: str, words: str) -> None:
    with pytest.raises(RequestInvalid) as info:
        parse_spec(spec_data(**overrides))
    fields = {e.field: e.message for e in info.value.errors}
    assert field in fields and words in fields[field], fields
    assert info.value.detail()[0]["loc"][0] == "body"


@pytest.mark.parametrize("overrides,field,words", SEMANTIC, ids=_ids(SEMANTIC))
def test_semantic_errors_name_the_field(overrides: dict, field: str, words: str) -> None:
    spec = parse_spec(spec_data(**overrides))
    with pytest.raises(RequestInvalid) as info:
        check(spec)
    fields = {e.field: e.message for e in info.value.errors}
    assert field in fields and words in fields[field], fields


def test_a_valid_request_resolves_with_documented_defaults() -> None:
    r = check(parse_spec(spec_data()))
    assert (r.tp, r.served_name, r.name, r.namespace, r.backend) == ((1, 2, 4, 8), "Qwen/Qwen3-32B", "qwen3-32b",
                                                                      "default", "analytical")
    assert (r.spec.search, r.spec.engine, r.spec.output, r.spec.actuator, r.spec.mode) == (
        "rapid", "vllm", "deployments", "keda", "auto")
    small = check(parse_spec(spec_data(**{"hardware.gpus_per_node": 2})))
    assert small.tp == (1, 2)  # default candidates stop at what one pod may use
    lws = check(parse_spec(spec_data(**{"hardware.gpus_per_node": 2, "output": "lws", "tp": [8]})))
    assert lws.tp == (8,) and lws.nodes(8) == 4


def test_an_accepted_spec_is_immutable() -> None:
    spec = parse_spec(spec_data())
    with pytest.raises(pydantic.ValidationError):
        spec.sla.ttft_ms = 5  # type: ignore[misc]


def test_literals_match_the_registries_they_name() -> None:
    assert set(TRACE_FORMATS) == set(FORMATS)
    from planner.requests.engines import ENGINES as ENGINE_TABLE

    assert set(ENGINES) == set(ENGINE_TABLE)
    assert OUTPUTS == ("deployments", "dynamo-graph", "lws")


def test_concurrency_is_littles_law_over_the_decode_time() -> None:
    spec = parse_spec(spec_data(**{"workload.request_rate": DROP, "workload.concurrency": 64}))
    load = steady_load(spec.workload, spec.sla)
    # C in flight, each decoding OSL tokens at the ITL target: C = rate x OSL x ITL.
    assert load.rate_rps * 220 * 40 / 1e3 == pytest.approx(64)
    assert load.rate_rps == from_concurrency(64, 220, 40.0) and "Little" in load.source


def test_a_trace_gives_its_mean_lengths_rate_and_busiest_minute() -> None:
    from planner.sim.traces.loaders import load_requests

    path = CONV
    spec = parse_spec(spec_data(workload={"trace": {"path": path}}))
    load = steady_load(spec.workload, spec.sla)
    trace = load_requests(path, "azure")
    assert load.isl == round(float(trace.isl.mean())) and load.osl == round(float(trace.osl.mean()))
    assert load.rate_rps == pytest.approx(len(trace) / trace.duration_s)
    per_minute = [((trace.arrival_s >= m * 60) & (trace.arrival_s < (m + 1) * 60)).sum() / 60
                  for m in range(int(trace.duration_s // 60) + 1)]
    assert load.peak_rate_rps == pytest.approx(max(per_minute)) and load.peak_rate_rps > load.rate_rps
