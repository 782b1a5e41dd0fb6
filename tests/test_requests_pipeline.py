"""One request through sweep, selection, sizing and rendering: every number traceable to `planner profile`
and `planner plan`, and every way it can end (Ready, infeasible, over budget, cancelled, no backend)."""

from __future__ import annotations

from typing import Any

import pytest

from planner.catalog import load_hardware, load_model
from planner.decide.whatif import plan
from planner.policy_file import parse_policy
from planner.profiler import backends
from planner.profiler.analytical import profile_analytical
from planner.profiler.grids import SweepRequest
from planner.requests import pipeline
from planner.requests.checks import check
from planner.requests.spec import parse_spec
from planner.requests.status import FailReason, Step
from planner.requests.sweep import Cancelled, RequestFailed
from planner.types import Mode, Pool
from tests.support.requests_support import spec_data


class Recorder:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.fractions: list[tuple[Step, float]] = []

    def step(self, step: Step, message: str) -> None:
        self.steps.append(step)

    def progress(self, fraction: float, message: str) -> None:
        self.fractions.append((self.steps[-1], fraction))


def run(**overrides: Any) -> tuple[pipeline.Outcome, Recorder]:
    rec = Recorder()
    return pipeline.run(check(parse_spec(spec_data(**overrides))), rec), rec


def test_steps_come_in_the_contract_order_with_progress_per_tp() -> None:
    _, rec = run()
    assert rec.steps == list(Step)
    sweeps = [f for s, f in rec.fractions if s is Step.SWEEPING_PREFILL]
    assert sweeps == [0.0, 0.25, 0.5, 0.75, 1.0]  # four TP candidates, one call each


def test_split_sweep_equals_one_full_sweep_of_planner_profile() -> None:
    outcome, _ = run()
    full = profile_analytical(load_model("qwen3-32b"), load_hardware("h200"),
                              SweepRequest("qwen3-32b", "h200", (1, 2, 4, 8), 1200, 220, 1000, 40))
    got = outcome.profile
    assert got.prefill == full.prefill and got.decode == full.decode
    assert got.selection == full.selection


def test_replicas_are_the_what_if_of_the_written_policy(tmp_path) -> None:
    outcome, _ = run()
    files = outcome.rendered.files
    (tmp_path / "profile.json").write_bytes(files["profile.json"])
    import yaml

    from planner.profile import load_profile

    policy = parse_policy(yaml.safe_load(files["policy.yaml"]), "policy.yaml", tmp_path)
    decision = plan(policy, load_profile(policy.profile), 20.0, 1200, 220)
    result = outcome.result
    assert {p: s.replicas for p, s in result.pools.items()} == decision.targets()
    assert result.gpus == decision.gpus and policy.budget.max_gpus == 64
    sel = outcome.profile.selection
    assert sel is not None
    assert (result.pools["prefill"].tp, result.pools["decode"].tp) == (sel.prefill.tp, sel.decode.tp)
    for pool in policy.pool_names():  # the ceiling holds twice the stated load
        assert policy.pool(pool).max_replicas >= plan(policy, load_profile(policy.profile), 40.0, 1200,
                                                      220).pools[pool].replicas


def test_advice_numbers_are_the_kv_bytes_over_the_link() -> None:
    outcome, _ = run()
    a = outcome.result.advice
    assert a.kv_bytes == 1200 * 262_144  # Qwen3-32B: 256 KiB per token
    assert a.transfer_ms == pytest.approx(1e3 * a.kv_bytes / (400e9 / 8), rel=1e-3)
    assert a.interference_itl_budgets == pytest.approx(a.prefill_ms / 40, rel=1e-3)
    assert outcome.result.mode is Mode.DISAGGREGATED is a.mode


def test_short_prompts_are_advised_aggregated_and_rendered_as_one_pool() -> None:
    outcome, _ = run(model={"name": "qwen3-8b"}, workload={"isl": 256, "osl": 128, "request_rate": 5})
    assert outcome.result.mode is Mode.AGGREGATED and list(outcome.result.pools) == ["aggregated"]
    assert "stalls decode for only" in outcome.result.advice.reason
    assert [n for n in outcome.rendered.files if n.startswith("manifests/")] == [
        "manifests/aggregated.yaml", "manifests/scaledobjects.yaml", "manifests/kustomization.yaml"]
    sel = outcome.profile.selection
    assert sel is not None and outcome.result.pools["aggregated"].tp == sel.decode.tp


def test_mode_can_be_forced_and_says_what_the_advice_was() -> None:
    outcome, _ = run(mode="aggregated")
    assert outcome.result.mode is Mode.AGGREGATED
    assert outcome.result.advice.mode is Mode.DISAGGREGATED
    assert outcome.result.advice.reason.startswith("mode aggregated as requested (the advice was disaggregated")


def test_an_sla_below_the_physical_floor_fails_with_the_closest_configuration() -> None:
    with pytest.raises(RequestFailed) as info:
        run(sla={"ttft_ms": 50, "itl_ms": 4}, **{"workload.isl": 4000})
    exc = info.value
    assert exc.reason is FailReason.SLA_INFEASIBLE and exc.closest is not None
    full = profile_analytical(load_model("qwen3-32b"), load_hardware("h200"),
                              SweepRequest("qwen3-32b", "h200", (1, 2, 4, 8), 4000, 220, 50, 4))
    assert full.selection is not None
    for stage in ("prefill", "decode"):
        chosen = getattr(full.selection, stage)
        assert exc.closest[stage]["tp"] == chosen.tp  # what `planner profile` names as closest (exit 3)
        assert exc.closest[stage]["miss_pct"] == pytest.approx(100 * (chosen.latency_ms / chosen.target_ms - 1),
                                                               abs=0.1)
    assert "below what h200 can do" in exc.message


def test_a_load_above_the_gpu_budget_fails_with_the_rate_that_fits() -> None:
    with pytest.raises(RequestFailed) as info:
        run(**{"workload.request_rate": 2000, "hardware.total_gpus": 64})
    exc = info.value
    assert exc.reason is FailReason.OVER_BUDGET and exc.closest is not None
    assert exc.closest["gpus_needed"] > 64
    fits = exc.closest["max_rate_rps"]
    policy = parse_policy(pipeline_policy_doc(), "p")
    outcome, _ = run(**{"workload.request_rate": fits, "hardware.total_gpus": 64})
    assert outcome.result.gpus <= 64
    profile = outcome.profile
    assert plan(policy, profile, fits * 1.02, 1200, 220).gpus > 64  # the bisection found the edge
    assert f"{fits:.3g} req/s" in exc.message


def pipeline_policy_doc() -> dict:
    """The unbounded what-if policy sizing uses (no ceilings, no budget)."""
    from planner.requests.sizing import document

    r = check(parse_spec(spec_data()))
    return document(r, Mode.DISAGGREGATED, {p: (1, 10_000) for p in Mode.DISAGGREGATED.pools}, None)


def test_a_cancel_stops_between_backend_calls() -> None:
    rec = Recorder()
    with pytest.raises(Cancelled):  # asked to stop once the first TP's call reported
        pipeline.run(check(parse_spec(spec_data())), rec, cancelled=lambda: len(rec.fractions) >= 2)
    assert rec.steps == [Step.SWEEPING_PREFILL] and [f for _, f in rec.fractions] == [0.0, 0.25]


def test_thorough_calls_the_endpoint_backend_with_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the pipeline hands the registry's backend (tests/test_init_thorough.py runs the real one)."""
    seen: list[SweepRequest] = []

    def endpoint(model: Any, hw: Any, req: SweepRequest) -> Any:
        seen.append(req)
        prof = profile_analytical(model, hw, req)
        return prof.model_copy(update={"provenance": prof.provenance.model_copy(update={"backend": "endpoint"})})

    monkeypatch.setitem(backends.BACKENDS, "endpoint", endpoint)
    outcome, rec = run(search="thorough", endpoint="http://10.0.0.5:8000", tp=[2])
    assert {r.url for r in seen} == {"http://10.0.0.5:8000"} and {r.tp for r in seen} == {(2,)}
    assert len(seen) == 2 and rec.steps == list(Step)  # one call per stage
    assert outcome.result.backend == "endpoint" and outcome.profile.provenance.backend == "endpoint"


def test_thorough_without_its_backend_fails_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(backends.BACKENDS, "kubernetes", raising=False)
    with pytest.raises(RequestFailed) as info:
        run(search="thorough", deployment_template="apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: engine}\n"
                                                   "spec: {template: {spec: {containers: [{name: e, image: vllm}]}}}\n")
    assert info.value.reason is FailReason.BACKEND_UNAVAILABLE and "kubernetes" in info.value.message


def test_trtllm_disaggregated_outside_dynamo_is_refused_with_the_advice() -> None:
    with pytest.raises(RequestFailed) as info:
        run(engine="trtllm")
    assert info.value.reason is FailReason.UNSUPPORTED and "output dynamo-graph" in info.value.message
    assert run(engine="trtllm", output="dynamo-graph")[0].result.mode is Mode.DISAGGREGATED


def test_replicas_and_tp_reach_the_manifests() -> None:
    import yaml

    outcome, _ = run()
    for pool in (Pool.PREFILL, Pool.DECODE):
        (dep,) = list(yaml.safe_load_all(outcome.rendered.files[f"manifests/{pool.value}.yaml"]))
        stage = outcome.result.pools[pool.value]
        container = dep["spec"]["template"]["spec"]["containers"][0]
        args = container["args"]
        assert args[args.index("--tensor-parallel-size") + 1] == str(stage.tp)
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(stage.tp)
        assert dep["spec"]["replicas"] == stage.replicas


def test_artifacts_appear_all_at_once_or_not_at_all(tmp_path) -> None:
    from planner.requests import artifacts

    dest = tmp_path / "out"
    artifacts.commit(dest, {"policy.yaml": b"a", "manifests/x.yaml": b"x"})
    with pytest.raises(ValueError, match="relative path"):
        artifacts.commit(dest, {"policy.yaml": b"b", "manifests/y.yaml": b"y", "../escape": b"!"})
    assert (dest / "policy.yaml").read_bytes() == b"a" and artifacts.names(dest) == ["manifests/x.yaml",
                                                                                     "policy.yaml"]
    assert not (tmp_path / "escape").exists() and [p.name for p in tmp_path.iterdir()] == ["out"]
    artifacts.commit(dest, {"policy.yaml": b"c", "manifests/y.yaml": b"y"})
    assert artifacts.names(dest) == ["manifests/y.yaml", "policy.yaml"]  # the folder is swapped whole
