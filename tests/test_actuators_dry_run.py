"""The dry-run actuator and its test twin: idempotent, record what they would do, never raise."""

from __future__ import annotations

import logging

import pytest

from planner.actuators.desired import DesiredStore
from planner.actuators.dry_run import DryRunActuator
from planner.actuators.factory import make_actuator
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.policy_file import parse_policy
from planner.testing.actuator import RecordingActuator
from planner.types import Applied


def test_dry_run_logs_and_is_idempotent(caplog: pytest.LogCaptureFixture) -> None:
    act = DryRunActuator()
    with caplog.at_level(logging.INFO, logger="planner.actuators"):
        first = act.apply({"prefill": 2, "decode": 3})
        second = act.apply({"prefill": 2, "decode": 3})
    assert first == Applied(before={"prefill": None, "decode": None}, after={"prefill": 2, "decode": 3},
                            changed=True, detail="dry-run")
    assert second.changed is False and act.history == [{"prefill": 2, "decode": 3}]
    assert [r.getMessage() for r in caplog.records] == ["dry-run: would scale prefill ?->2, decode ?->3"]


def test_recording_actuator_records_and_fails_on_demand() -> None:
    act = RecordingActuator({"decode": 1})
    act.fail_next = 1
    with pytest.raises(RuntimeError):
        act.apply({"decode": 2})
    assert act.apply({"decode": 2}).before == {"decode": 1}
    act.apply({"decode": 2})
    assert act.calls == [{"decode": 2}] * 3 and act.writes == [{"decode": 2}]


POLICY = {"name": "p", "profile": "x.json",
          "pools": {"prefill": {"target": {"name": "a"}}, "decode": {"target": {"name": "b"}}}}


@pytest.mark.parametrize("kind,dry,expected", [
    ("kubernetes", True, "DryRunActuator"), ("dry-run", False, "DryRunActuator"),
    ("keda", False, "PublishActuator"), ("hpa", False, "PublishActuator"),
    ("kubernetes", False, "KubernetesScaleActuator"),
], ids=["dry-flag", "dry-kind", "keda", "hpa", "kubernetes"])
def test_factory(kind: str, dry: bool, expected: str) -> None:
    from kubernetes import client

    policy = parse_policy({**POLICY, "actuator": {"kind": kind}})
    act = make_actuator(policy, policy.actuator, DesiredStore("p", policy.pool_names()), dry_run=dry,
                        api_client=client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    assert type(act).__name__ == expected
    if isinstance(act, KubernetesScaleActuator):
        assert {p: t.name for p, t in act.targets.items()} == {"prefill": "a", "decode": "b"}
