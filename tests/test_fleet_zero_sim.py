"""Scale to zero in the simulator: a sparse policy sleeps between busy windows, the first requests after it
wait for the cold start (counted in their TTFT, never dropped), and the fleet report counts the wakes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.fleet_file import load_fleet
from planner.sim.evaluate.fleet_backtest import run_fleet_backtest
from planner.sim.traces.loaders import load_requests
from planner.sim.traces.records import RequestTrace
from tests.support.fleet_support import member, write_fleet

TRACE = Path(__file__).resolve().parents[1] / "profiles" / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
ZERO = {"pools": {"prefill": {"min_replicas": 0}, "decode": {"min_replicas": 0}}, "scale_to_zero_after_s": 60,
        "startup_s": 60}


def _busy_gap_busy() -> RequestTrace:
    base = load_requests(TRACE, "azure", rate_scale=0.5, duration_s=1500)
    keep = (base.arrival_s < 300) | (base.arrival_s >= 900)
    return RequestTrace(base.arrival_s[keep], base.isl[keep], base.osl[keep], base.source)


def test_a_sparse_policy_sleeps_and_its_first_requests_wait_for_the_cold_start(tmp_path: Path) -> None:
    fleet = load_fleet(write_fleet(tmp_path, [member("sparse", 0, **ZERO)], max_gpus=16))
    trace = _busy_gap_busy()
    result = run_fleet_backtest(fleet, {"sparse": trace}, compare=False)
    p = result.report["policies"]["sparse"]
    slept = result.shared.asleep["sparse"]
    assert len(slept) == 1 and 300 < slept[0][0] < 900 <= slept[0][1]  # asleep in the gap, woken by the traffic
    assert p["cold_starts"]["wakes"] == 1 and result.report["fleet"]["cold_starts"] == 1
    assert p["failed_requests"] == 0 and p["requests"] == len(trace)  # the wait is counted, nothing dropped
    warm = result.shared.replays["sparse"].results
    first = warm["arrival_s"] < 300
    assert p["cold_starts"]["ttft_ms_p95"] > 60_000 > float(np.nanpercentile(warm["ttft_s"][first] * 1e3, 95))
