"""`planner bench fidelity`'s parts that need no engine: the trace slice it replays, and its bad input (one line,
exit code 2, before any engine starts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.bench.fidelity_load import SliceSpec, trace_slice
from planner.errors import UserError
from planner.sim.traces import load_requests

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def conv(shared: Path) -> Path:
    return shared / "traces/azure2023/AzureLLMInferenceTrace_conv.csv"


def test_slice_keeps_order_and_lengths_at_the_asked_rate(conv: Path) -> None:
    spec = SliceSpec(conv, start_s=600.0, duration_s=120.0, rate_rps=1.5, max_isl=2048, max_osl=256)
    tr = trace_slice(spec)
    full = load_requests(conv)
    lo = int(np.searchsorted(full.arrival_s, 600.0))
    assert len(tr) == 180 and tr.arrival_s[0] == 0.0
    assert len(tr) / (tr.arrival_s[-1] + (tr.arrival_s[-1] / (len(tr) - 1))) == pytest.approx(1.5)
    gaps, source_gaps = np.diff(tr.arrival_s), np.diff(full.arrival_s[lo:lo + 180])
    assert np.allclose(gaps / gaps.sum(), source_gaps / source_gaps.sum())  # the burstiness is the trace's
    assert np.array_equal(tr.isl, np.minimum(full.isl[lo:lo + 180], 2048))
    assert np.array_equal(tr.osl, np.clip(full.osl[lo:lo + 180], 2, 256))


@pytest.mark.parametrize("field,value,says", [("rate_rps", 0.0, "rate_rps: 0.0 must be > 0"),
                                              ("start_s", 1e9, "requests after start"),
                                              ("max_osl", 1, "max_osl")], ids=["rate", "start", "osl"])
def test_bad_slice_is_one_clear_error(conv: Path, field: str, value: float, says: str) -> None:
    spec = SliceSpec(conv, **{field: value})  # type: ignore[arg-type]
    with pytest.raises(UserError, match=says):
        trace_slice(spec)


@pytest.mark.parametrize("args,says", [(["--modes", "both"], "--modes 'both'"), (["--iters", "0"], "--iters: 0"),
                                       (["--trace", "/nonexistent.csv"], "trace not found")],
                         ids=["modes", "iters", "trace"])
def test_cli_rejects_bad_flags_before_starting_anything(args: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "bench", "fidelity", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
