"""Logs an operator can use: JSON lines on request, and one line per outage, not per signal or per retry."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from planner.controller import make_planner_controller
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.logs import setup_logging
from planner.service.loop import ControlLoop, source_name
from planner.sources.prometheus import PrometheusSource
from planner.telemetry import PlannerMetrics
from planner.testing.actuator import RecordingActuator
from planner.testing.clock import FakeClock
from planner.testing.ports import free_port

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-8b.json"


def test_json_lines() -> None:
    stream = io.StringIO()
    setup_logging(logging.INFO, "json", stream)
    logging.getLogger("planner.loop").warning("policy %s: %s", "p", "held")
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"], record["message"]) == ("WARNING", "planner.loop", "policy p: held")
    assert "time" in record


def test_httpx_request_lines_are_left_out_and_its_warnings_kept() -> None:
    stream = io.StringIO()
    setup_logging(logging.INFO, "text", stream)
    logging.getLogger("httpx").info('HTTP Request: GET http://127.0.0.1:1/health "HTTP/1.1 200 OK"')
    logging.getLogger("httpx").warning("a warning")
    logging.getLogger("planner.loop").info("tick")
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["a warning", "tick"]


def test_bad_log_format_is_exit_2(capsys: pytest.CaptureFixture) -> None:
    from planner.cli import run

    rc = run(["run", "--policy", str(REPO / "policies" / "example.yaml"), "--once", "--log-format", "xml"])
    assert rc == 2 and "--log-format 'xml': allowed text, json" in capsys.readouterr().err


def test_one_line_per_outage_not_per_signal_or_retry() -> None:
    """A real Prometheus source (urllib3 retries connection errors once) against a port nobody listens on."""
    stream = io.StringIO()
    setup_logging(logging.INFO, "text", stream)
    pol = parse_policy({"name": "p", "profile": str(PROFILE), "pools": {"prefill": {}, "decode": {}},
                        "metrics": {"url": f"http://127.0.0.1:{free_port()}", "timeout_s": 1,
                                    "stale_after_intervals": 2,
                                    "selectors": {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}}})
    source = PrometheusSource.from_policy(pol, pol.metrics)
    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), source,
                       RecordingActuator({"prefill": 2, "decode": 2}), PlannerMetrics(), FakeClock())
    assert source_name(source) == "Prometheus"
    for _ in range(6):  # three intervals: every signal goes missing
        loop.tick()
        loop.clock.advance(30)  # type: ignore[attr-defined]
    lines = [ln for ln in stream.getvalue().splitlines() if "WARNING" in ln or "ERROR" in ln]
    assert len(lines) == 1, lines
    assert "policy p: Prometheus unreachable" in lines[0] and "holding" in lines[0]
    assert not loop.monitor.ready and len(loop.monitor.status().missing) == 7  # type: ignore[union-attr]
