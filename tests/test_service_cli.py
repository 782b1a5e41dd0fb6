"""`planner run` from the command line: --once prints one tick; bad input is a one-line error (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import run

REPO = Path(__file__).resolve().parent.parent


def write_policy(tmp_path: Path, **over: object) -> Path:
    data = yaml.safe_load((REPO / "policies" / "example.yaml").read_text())
    data["profile"] = str(REPO / "profiles" / "h200" / "qwen3-32b.json")
    data["metrics"]["selectors"] = {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}
    data.update(over)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_once_dry_run_holds_on_unreachable_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = run(["run", "--policy", str(write_policy(tmp_path)), "--once", "--dry-run",
              "--metrics-url", "http://127.0.0.1:9"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3  # no data, as `planner observe` exits
    assert out["observation"]["no_data"] == "unreachable"
    assert out["decision"]["reasons"] == ["no_data_hold"] and out["applied"]["changed"] is False


@pytest.mark.parametrize("args,over,message", [
    (["--port", "70000"], {}, "--port 70000: must be in 0..65535"),
    (["--log-level", "LOUD"], {}, "--log-level 'LOUD'"),
    ([], {"metrics": {"source": "sim"}}, "key 'metrics.source' = 'sim'"),
    ([], {"interval_s": 0}, "key 'interval_s' = 0"),
    ([], {"pools": {"prefill": {"target": {"name": "p", "kind": "Pod"}}, "decode": {"target": {"name": "d"}}},
          "actuator": {"kind": "kubernetes"}}, "not a kind the planner can scale"),
], ids=["port", "log-level", "sim-source", "interval", "bad-kind"])
def test_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], over: dict,
                             message: str) -> None:
    path = write_policy(tmp_path, **over)
    rc = run(["run", "--policy", str(path), "--once", "--metrics-url", "http://127.0.0.1:9", *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


# interval_s 30 (policies/example.yaml): (flags, the one-line error)
LEASE_TIMINGS = [
    (["--lease-duration-s", "20", "--renew-deadline-s", "30"], "--renew-deadline-s 30: must be less than "
     "--lease-duration-s 20"),
    (["--lease-duration-s", "60", "--renew-deadline-s", "40", "--retry-period-s", "40"],
     "--retry-period-s 40: must be less than --renew-deadline-s 40 / 1.2"),
    (["--lease-duration-s", "40"], "--lease-duration-s 40: too short for the policy's interval_s 30"),
    (["--lease-duration-s", "0"], "--lease-duration-s 0: must be > 0"),
    (["--retry-period-s", "-1"], "--retry-period-s -1: must be > 0"),
]


@pytest.mark.parametrize(("flags", "message"), LEASE_TIMINGS, ids=["deadline>=lease", "retry>=deadline",
                                                                   "deadline<=interval+retry", "zero", "negative"])
def test_lease_timings_that_cannot_work_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, flags: list[str],
                                                   message: str) -> None:
    rc = run(["run", "--policy", str(write_policy(tmp_path)), "--once", "--leader-elect", "--metrics-url",
              "http://127.0.0.1:9", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err


def test_lease_timings_need_leader_election(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = run(["run", "--policy", str(write_policy(tmp_path)), "--once", "--metrics-url", "http://127.0.0.1:9",
              "--renew-deadline-s", "20"])
    err = capsys.readouterr().err
    assert rc == 2 and "--renew-deadline-s: only with --leader-elect" in err
