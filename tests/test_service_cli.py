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
