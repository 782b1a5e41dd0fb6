"""The simulator held to a real engine (`planner bench fidelity`, short form): a slice of the Azure conv trace
replayed against vLLM's CPU build with the tiny model, and simulated with a profile the endpoint backend
measured from that same server. The full form (both modes, 3 minutes of trace) is in docs/fidelity.md.

Short form: aggregated only (a disaggregated pair alone takes ~100 s to start), 60 s of trace, a coarser
profile. Its tolerances are the issue's goal (p50 within 25 %, p95 within 40 %) for TTFT and ITL p50; the ITL
p95 of 60 requests is one or two requests' mean ITL, so it gets 60 % (documented in docs/fidelity.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.bench import fidelity
from planner.bench.fidelity_load import SliceSpec

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SHORT_FORM_TOLERANCE = {"ttft_p50_ms": 0.25, "ttft_p95_ms": 0.40, "itl_p50_ms": 0.25, "itl_p95_ms": 0.60}


def test_simulator_matches_vllm_on_a_trace_slice(vllm_engine, shared: Path, tmp_path: Path) -> None:
    trace = shared / "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
    out = tmp_path / "fidelity.json"
    options = fidelity.FidelityOptions(SliceSpec(trace, start_s=600.0, duration_s=60.0, rate_rps=1.0),
                                       modes=("aggregated",), out=out, isl_grid=(16, 512, 2048),
                                       batch_grid=(1, 4, 16), context_grid=(256, 1024), iters=2)
    (result,) = fidelity.run_with(vllm_engine.python, vllm_engine.model_dir, options, lambda *a: None)
    assert result.failed == 0, result.notes
    ratios = result.ratios()
    off = {m: ratios[m] for m, tol in SHORT_FORM_TOLERANCE.items() if not abs(ratios[m] - 1.0) <= tol}
    assert not off, f"sim/vLLM outside tolerance: {off}; real {result.real}, sim {result.sim}, load {result.load_avg}"
    written = json.loads(out.read_text())
    assert written["modes"][0]["real"] == result.real and written["slice"]["requests"] == 60
