"""Policy format: the documented example equals the defaults; errors name the key, the value and the range."""

from __future__ import annotations

import pytest

from planner.cli import run
from planner.config import Policy
from planner.errors import UserError
from planner.policy_file import PolicyFile, load_policy, parse_policy
from tests.support.decide_support import EXAMPLE, REPO, example_data


def test_example_yaml_parses_to_the_defaults() -> None:
    data = example_data()
    parsed = parse_policy(data, str(EXAMPLE))
    # Only the required fields (a disaggregated policy's selectors too): everything else must come out equal to
    # the schema defaults.
    minimal = PolicyFile.model_validate({**{k: data[k] for k in ("name", "profile", "pools")},
                                         "metrics": {"selectors": data["metrics"]["selectors"]}})
    assert parsed == minimal
    assert parsed.model_dump() == minimal.model_dump()


def test_example_selects_the_pool_label_the_shipped_podmonitors_set() -> None:
    """`planner run --policy policies/example.yaml` needs a selector per pool (issue 29); the example's are the
    `pool` values deploy/engines/*-podmonitor.yaml relabel the engines' series to."""
    import yaml

    from planner.sources.settings import pool_selectors

    p = load_policy(EXAMPLE)
    assert pool_selectors(p, p.metrics) == {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}
    for monitor in sorted((REPO / "deploy" / "engines").glob("*-podmonitor.yaml")):
        relabel = yaml.safe_load(monitor.read_text())["spec"]["podMetricsEndpoints"][0]["relabelings"]
        kept = [r["regex"] for r in relabel if r.get("action") == "keep" and r.get("sourceLabels") == ["pool"]]
        assert len(kept) == 1 and {"prefill", "decode"} <= set(kept[0].split("|")), monitor


@pytest.mark.parametrize("over, needles", [
    pytest.param({"sla": {"ttft_ms": -5}}, ["sla.ttft_ms", "-5", "gt 0"], id="negative-ttft"),
    pytest.param({"sla": {"percentile": 100}}, ["sla.percentile", "100", "le 99.9"], id="percentile-too-high"),
    pytest.param({"forecast": {"quantile": 0.3}}, ["forecast.quantile", "0.3", "ge 0.5"], id="quantile-low"),
    pytest.param({"interval_s": 0}, ["interval_s", "ge 1"], id="interval-zero"),
    pytest.param({"behavior": {"tolerance": 1.5}}, ["behavior.tolerance", "1.5", "lt 1"], id="tolerance"),
    pytest.param({"budget": {"max_gpus": 0}}, ["budget.max_gpus", "ge 1"], id="budget-zero"),
    pytest.param({"sla": {"ttft": 1}}, ["unknown key", "sla.ttft"], id="unknown-key"),
    pytest.param({"mode": "hybrid"}, ["mode", "hybrid"], id="bad-mode"),
    pytest.param({"pools": {"prefill": {"min_replicas": 5, "max_replicas": 2}}},
                 ["p.yaml: key 'pools.prefill': min_replicas 5 must be <= max_replicas 2"], id="floor-above-ceiling"),
    pytest.param({"behavior": {"scale_up": {"policies": [{"type": "pct", "value": 1, "period_s": 1}]}}},
                 ["behavior.scale_up.policies.0.type", "pct"], id="bad-policy-type"),
])
def test_bad_policy_errors_name_key_value_and_range(over, needles) -> None:
    from tests.support.decide_support import merge

    data = merge(example_data(), over)
    with pytest.raises(UserError) as err:
        parse_policy(data, "p.yaml")
    msg = str(err.value)
    assert msg.startswith("p.yaml: ") and "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_aggregated_mode_needs_its_pool() -> None:
    data = example_data()
    data["mode"] = "aggregated"
    with pytest.raises(UserError, match="pools.aggregated"):
        parse_policy(data, "p.yaml")


def test_cli_reports_a_bad_policy_in_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("ttft_ms: 1000", "ttft_ms: -1"))
    rc = run(["plan", "--policy", str(bad), "--rate-rps", "10", "--isl", "1000", "--osl", "200"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "sla.ttft_ms" in err and "-1" in err and "Traceback" not in err


def test_cli_reports_invalid_yaml_with_its_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsla: {ttft_ms: [1,\n")
    rc = run(["plan", "--policy", str(bad), "--rate-rps", "10", "--isl", "1000", "--osl", "200"])
    assert rc == 2
    assert "not valid YAML (line" in capsys.readouterr().err


def test_the_file_composes_the_decision_policy_and_each_adapters_settings() -> None:
    from planner.actuators.settings import ActuatorSettings
    from planner.sources.settings import MetricsSettings

    pf = load_policy(EXAMPLE)
    assert isinstance(pf.metrics, MetricsSettings) and isinstance(pf.actuator, ActuatorSettings)
    decision = pf.decision()
    assert type(decision) is Policy and not hasattr(decision, "metrics") and not hasattr(decision, "actuator")
    assert decision.model_dump() == {k: v for k, v in pf.model_dump().items() if k not in ("metrics", "actuator")}
    assert decision.decision() is decision


def test_the_decider_spec_carries_the_decision_and_the_staleness_it_is_given() -> None:
    from planner.decide.demand import Hold, check_data
    from planner.decide.spec import DeciderSpec
    from planner.profile import load_profile
    from planner.types import Observation

    pf = load_policy(EXAMPLE)
    assert pf.stale_after_s == pf.metrics.stale_after_intervals * pf.interval_s == 90.0
    spec = DeciderSpec.build(pf, load_profile(pf.profile), stale_after_s=45.0)
    assert type(spec.policy) is Policy and spec.stale_after_s == 45.0
    obs = Observation(at_s=1000.0, window_s=60.0, pools={})
    # 50 s old: stale under the 45 s the spec was given, though the policy file's own window is 90 s.
    assert isinstance(check_data(spec, obs, 1050.0), Hold)
    assert check_data(spec, obs, 1040.0) is obs
