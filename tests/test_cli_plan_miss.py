"""`planner plan` says when the policy's ceilings or GPU budget make it miss the SLA, by how much, and exits 3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.cli import run
from planner.decide.whatif import plan, sla_misses
from planner.policy_file import load_policy
from planner.profile import load_profile

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "policies" / "example.yaml"


def _policy(tmp_path: Path, max_gpus: int | None) -> Path:
    text = EXAMPLE.read_text().replace("profiles/h200/qwen3-32b.json", str(REPO / "profiles/h200/qwen3-32b.json"))
    if max_gpus is not None:
        text = text.replace("max_gpus: null", f"max_gpus: {max_gpus}")
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


# (id, rate req/s, GPU budget, pools that miss, what holds them, prefill over capacity)
CASES = [
    ("ceiling-over-capacity", 400, None, {"prefill"}, "its ceiling", True),
    ("ceiling-just-past", 105, None, {"prefill"}, "its ceiling", False),
    ("budget", 100, 20, {"prefill", "decode"}, "the GPU budget", True),
]


@pytest.mark.parametrize(("rate", "budget", "pools", "limit", "unbounded"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_capped_plan_names_the_miss_and_exits_3(rate: float, budget: int | None, pools: set[str], limit: str,
                                                unbounded: bool, tmp_path: Path, capsys) -> None:
    path = _policy(tmp_path, budget)
    rc = run(["plan", "--policy", str(path), "--rate-rps", str(rate), "--isl", "1200", "--osl", "220", "--json"])
    captured = capsys.readouterr()
    decision = json.loads(captured.out)
    assert rc == 3
    err = " ".join(captured.err.split())
    for pool in pools:
        replicas = decision["pools"][pool]["replicas"]
        needed = int(-(-decision["pools"][pool]["desired_unclamped"] // 1))
        assert needed > replicas
        assert f"{pool}: {needed} replicas needed, {replicas} allowed by {limit}" in err
    assert bool(re.search(r"prefill: [^;]*; predicted TTFT p95 at \d+: unbounded: queue grows", err)) == unbounded
    pol = load_policy(path)
    for signal, target in re.findall(r"predicted (TTFT|ITL) p95 at \d+: ([^;]*)", err):
        assert target.startswith("unbounded: queue grows") or float(target.split()[0].replace(",", "")) > (
            pol.sla.ttft_ms if signal == "TTFT" else pol.sla.itl_ms)


def test_over_capacity_says_unbounded_in_the_table(capsys) -> None:
    rc = run(["plan", "--policy", str(EXAMPLE), "--rate-rps", "400", "--isl", "1200", "--osl", "220"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 3 and "predicted TTFT p95 unbounded (queue grows)" in out and "- ms" not in out


def test_plan_within_limits_exits_0(capsys) -> None:
    rc = run(["plan", "--policy", str(EXAMPLE), "--rate-rps", "60", "--isl", "1200", "--osl", "220"])
    assert rc == 0 and "infeasible" not in capsys.readouterr().err


@pytest.mark.parametrize("rate", [1.0, 60.0, 100.0, 400.0], ids=["1", "60", "100", "400"])
def test_a_miss_is_reported_exactly_when_a_capped_pool_misses(rate: float) -> None:
    pol = load_policy(EXAMPLE)
    decision = plan(pol, load_profile(pol.profile), rate, 1200, 220)
    misses = {m.pool for m in sla_misses(pol, decision)}
    prefill = decision.pools["prefill"]
    capped = prefill.replicas < prefill.desired_unclamped - 1e-9
    late = prefill.predicted_ttft_ms is None or prefill.predicted_ttft_ms > pol.sla.ttft_ms
    assert ("prefill" in misses) == (capped and late)
