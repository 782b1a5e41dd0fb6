"""The process actuator's policy fields: what is required, what is allowed, one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.actuators.file_sd import state_dir_of
from planner.actuators.process import ProcessSettings
from planner.errors import UserError
from planner.policy_file import load_policy, parse_policy

REPO = Path(__file__).resolve().parent.parent
CMD = ["engine", "--port", "{port}"]


def data(mode: str = "aggregated", **actuator: object) -> dict:
    pools = {"aggregated": {}} if mode == "aggregated" else {"prefill": {}, "decode": {}}
    return {"name": "p", "mode": mode, "profile": "x.json", "pools": pools, "actuator": actuator}


@pytest.mark.parametrize("mode, actuator, needles", [
    pytest.param("aggregated", {"kind": "process", "command": CMD}, ["actuator.port_range is required"],
                 id="no-port-range"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9000, 9001]},
                 ["actuator.command is required for kind process", "actuator.pools.aggregated.command"],
                 id="no-command"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9000, 9001], "command": ["engine", "--port", "80"]},
                 ["actuator.command", "no {port} in it"], id="no-port-placeholder"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9000, 9001], "command": []},
                 ["actuator.command", "non-empty list"], id="empty-command"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9002, 9001], "command": CMD},
                 ["actuator.port_range", "first port 9002 must be <= last port 9001"], id="reversed-range"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9000, 70000], "command": CMD},
                 ["actuator.port_range.1", "70000", "le 65535"], id="port-too-high"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9000], "command": CMD},
                 ["actuator.port_range"], id="one-port"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9000, 9001], "command": CMD, "drain_s": -1},
                 ["actuator.drain_s", "-1", "ge 0"], id="negative-drain"),
    pytest.param("disaggregated", {"kind": "process", "port_range": [9000, 9009],
                                   "pools": {"prefill": {"command": CMD}}},
                 ["actuator.pools.decode.command"], id="one-pool-without-command"),
    pytest.param("aggregated", {"kind": "process", "port_range": [9000, 9001], "command": CMD,
                                "pools": {"decode": {"command": CMD}}},
                 ["actuator.pools.decode: not a pool of mode aggregated", "allowed: aggregated"], id="foreign-pool"),
    pytest.param("aggregated", {"kind": "kubernetes", "command": CMD},
                 ["actuator.command is used only by kind process", "'kubernetes'"], id="process-field-other-kind"),
    pytest.param("aggregated", {"kind": "dry-run", "drain_s": 5},
                 ["actuator.drain_s is used only by kind process"], id="drain-other-kind"),
])
def test_bad_process_settings_are_one_line_naming_the_key(mode: str, actuator: dict, needles: list[str]) -> None:
    with pytest.raises(UserError) as err:
        parse_policy(data(mode, **actuator), "p.yaml")
    msg = str(err.value)
    assert msg.startswith("p.yaml: ") and "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_per_pool_commands_and_env_layer_over_the_shared_ones() -> None:
    kv = '{"kv_connector":"ExampleConnector","kv_role":"kv_consumer"}'
    policy = parse_policy(data("disaggregated", kind="process", port_range=[9000, 9009], command=CMD,
                               env={"A": "1", "B": "1"},
                               pools={"decode": {"command": [*CMD, "--kv", kv], "env": {"B": "2"}}}), "p.yaml")
    settings = ProcessSettings.from_policy(policy, policy.actuator, ("vllm:num_requests_running", "vllm:num_requests_waiting"))
    assert settings.pools["prefill"].command == tuple(CMD) and dict(settings.pools["prefill"].env) == {"A": "1", "B": "1"}
    assert settings.pools["decode"].command == (*CMD, "--kv", kv) and dict(settings.pools["decode"].env) == {
        "A": "1", "B": "2"}
    assert settings.port_range == (9000, 9009) and settings.in_flight_gauges == (
        "vllm:num_requests_running", "vllm:num_requests_waiting")


def test_state_dir_is_relative_to_the_policy_file_and_defaults_to_a_temp_dir(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    text = (REPO / "policies" / "workstation.yaml").read_text().replace("profiles/h200/qwen3-0.6b.json",
                                                                         str(REPO / "profiles/h200/qwen3-0.6b.json"))
    (folder / "w.yaml").write_text(text)
    loaded = load_policy(folder / "w.yaml")
    assert state_dir_of(loaded.name, loaded.actuator) == tmp_path / "run"  # "../run" from conf/
    default = parse_policy(data(kind="process", port_range=[9000, 9001], command=CMD), "p.yaml")
    assert state_dir_of(default.name, default.actuator).name == "planner-p"


def test_the_shipped_workstation_policy_loads() -> None:
    policy = load_policy(REPO / "policies" / "workstation.yaml")
    assert policy.actuator.kind == "process" and "{port}" in policy.actuator.command
    assert policy.metrics.selectors["aggregated"] == '{pool="aggregated"}'
