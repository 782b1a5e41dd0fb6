"""`planner observe` argument handling and exit codes (the real-Prometheus path is in test_prometheus_e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import run
from planner.commands.observe_args import resolve
from planner.errors import UserError
from planner.testing.ports import free_port

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "policies" / "example.yaml"
SELECTORS = {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}


def _with_selectors(tmp_path: Path, selectors: dict[str, str] | None, **top: object) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["profile"] = str(REPO / "profiles" / "h200" / "qwen3-32b.json")
    if selectors is not None:
        data["metrics"]["selectors"] = selectors
    data.update(top)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def POLICY(tmp_path: Path) -> Path:  # noqa: N802 - the example policy, with the selectors a user gives
    return _with_selectors(tmp_path, SELECTORS)

BAD = [
    ("no-url", [], "--prometheus"),
    ("bad-url", ["--prometheus", "localhost:9090"], "http://"),
    ("bad-selector", ["--prometheus", "http://x", "--selector", "role=prefill"], "--selector"),
    ("bad-dialect", ["--prometheus", "http://x", "--dialect", "tgi"], "--dialect"),
    ("zero-window", ["--prometheus", "http://x", "--window-s", "0"], "--window-s"),
    ("nan-window", ["--prometheus", "http://x", "--window-s", "nan"], "--window-s"),
    ("timeout-too-long", ["--prometheus", "http://x", "--timeout-s", "1000"], "--timeout-s"),
    ("missing-policy", ["--policy", "/nonexistent.yaml"], "not found"),
    ("zero-ttft-target", ["--prometheus", "http://x", "--ttft-ms", "0"], "--ttft-ms"),
    ("nan-itl-target", ["--prometheus", "http://x", "--itl-ms", "nan"], "--itl-ms"),
]


@pytest.mark.parametrize(("args", "word"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_exit_2_with_a_one_line_message(args: list[str], word: str, capsys) -> None:
    assert run(["observe", *args]) == 2
    err = capsys.readouterr().err
    assert word in err and "Traceback" not in err


def test_unreachable_is_exit_3_with_contract_json(capsys) -> None:
    rc = run(["observe", "--prometheus", f"http://127.0.0.1:{free_port()}", "--json", "--window-s", "30"])
    captured = capsys.readouterr()
    assert rc == 3
    assert json.loads(captured.out) == {"status": "no_data", "reason": "unreachable", "window_s": 30.0, "pools": {}}
    assert "unreachable" in captured.err


def test_human_output_on_no_data(capsys) -> None:
    assert run(["observe", "--prometheus", f"http://127.0.0.1:{free_port()}"]) == 3
    assert "no_data (unreachable)" in capsys.readouterr().out


def test_policy_gives_pools_and_selector_narrows_them(POLICY: Path) -> None:  # noqa: N803
    args = resolve(None, None, '{namespace="llm"}', POLICY, 60, 5, None)
    assert args.selectors == {"prefill": '{pool="prefill",namespace="llm"}',
                              "decode": '{pool="decode",namespace="llm"}'}
    assert (args.url, args.dialect, args.stale_after_s) == ("http://prometheus:9090", "vllm", 90.0)


def test_selector_alone_is_the_aggregated_pool() -> None:
    args = resolve("http://p:9090", "sglang", '{role="x"}', None, 60, 5, None)
    assert args.selectors == {"aggregated": '{role="x"}'} and args.dialect == "sglang"


# (id, mode, selectors given, the pool the error names or None, the selectors read)
SELECTOR_CASES = [
    ("disaggregated-none", "disaggregated", None, "prefill", None),
    ("disaggregated-one-missing", "disaggregated", {"prefill": '{pool="prefill"}'}, "decode", None),
    ("disaggregated-both", "disaggregated", SELECTORS, None, SELECTORS),
    ("aggregated-none", "aggregated", None, None, {"aggregated": ""}),
    ("aggregated-given", "aggregated", {"aggregated": '{model_name="m"}'}, None, {"aggregated": '{model_name="m"}'}),
]


@pytest.mark.parametrize(("mode", "selectors", "missing", "read"), [c[1:] for c in SELECTOR_CASES],
                         ids=[c[0] for c in SELECTOR_CASES])
def test_selectors_assume_no_pool_label(mode: str, selectors: dict | None, missing: str | None, read: dict | None,
                                        tmp_path: Path, capsys) -> None:
    """Real engines have no pool label: no default may assume one. A disaggregated policy names its pools'
    series; an aggregated one reads every engine of its dialect when it names none."""
    from planner.policy_file import load_policy
    from planner.sources.prometheus import PrometheusSource

    pools = {"aggregated": {}} if mode == "aggregated" else {"prefill": {}, "decode": {}}
    path = _with_selectors(tmp_path, None, mode=mode, pools=pools, actuator={"kind": "dry-run"})
    data = yaml.safe_load(path.read_text())
    data["metrics"]["selectors"] = selectors or {}  # none given: not even the example's
    path.write_text(yaml.safe_dump(data))
    policy = load_policy(path)  # a policy for `plan` or a backtest needs no selectors: loading never fails
    if missing is None:
        with PrometheusSource.from_policy(policy, policy.metrics) as src:
            assert src.selectors == read
        assert resolve(None, None, None, path, 60, 5, None).selectors == read
        return
    needle = f"metrics.selectors.{missing}' is required"
    with pytest.raises(UserError, match=needle):
        PrometheusSource.from_policy(policy, policy.metrics)
    with pytest.raises(UserError, match=needle):
        resolve(None, None, None, path, 60, 5, None)
    assert run(["observe", "--policy", str(path)]) == 2
    assert run(["run", "--once", "--dry-run", "--policy", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count(needle) == 2 and '{pool="prefill"}' in err  # the example, as the user writes it


def test_source_from_policy_takes_pools_selectors_and_budgets(POLICY: Path) -> None:  # noqa: N803
    from planner.policy_file import load_policy
    from planner.sources.prometheus import PrometheusSource

    policy = load_policy(POLICY)
    with PrometheusSource.from_policy(policy, policy.metrics, url="http://127.0.0.1:1") as src:
        assert src.selectors == SELECTORS
        assert (src.url, src.dialect.name, src.timeout_s, src.stale_after_s) == ("http://127.0.0.1:1", "vllm", 5, 90)
        assert src.targets_ms == {"ttft": policy.sla.ttft_ms, "itl": policy.sla.itl_ms}
    with PrometheusSource.from_policy(policy, policy.metrics) as src:
        assert src.url == "http://prometheus:9090"


def test_targets_come_from_the_policy_sla_and_flags_override_them(POLICY: Path) -> None:  # noqa: N803
    from planner.policy_file import load_policy

    sla = load_policy(POLICY).sla
    assert resolve(None, None, None, POLICY, 60, 5, None).targets_ms == {"ttft": sla.ttft_ms, "itl": sla.itl_ms}
    assert resolve(None, None, None, POLICY, 60, 5, None, itl_ms=25.0).targets_ms == {"ttft": sla.ttft_ms,
                                                                                     "itl": 25.0}
    assert resolve("http://p:9090", None, None, None, 60, 5, None).targets_ms == {}  # nothing to judge against
    assert resolve("http://p:9090", None, None, None, 60, 5, None, ttft_ms=200.0).targets_ms == {"ttft": 200.0}


@pytest.mark.parametrize("targets", [{"e2e": 1.0}, {"itl": 0.0}, {"ttft": float("nan")}],
                         ids=["unknown-signal", "zero", "nan"])
def test_source_rejects_bad_targets(targets: dict) -> None:
    from planner.sources.prometheus import PrometheusSource

    with pytest.raises(ValueError, match="targets_ms"):
        PrometheusSource("http://127.0.0.1:1", "vllm", {"aggregated": ""}, targets_ms=targets)
