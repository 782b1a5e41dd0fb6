"""`planner bench fidelity`'s parts that need no engine: the trace slice it replays, and its bad input (one line,
exit code 2, before any engine starts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.bench import fidelity
from planner.bench.fidelity_load import SliceSpec, _measured, percentiles, trace_slice
from planner.errors import UserError
from planner.profiler.loadgen import StreamResult
from planner.sim.traces.loaders import load_requests
from planner.sim.traces.records import RequestTrace

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def conv(shipped: Path) -> Path:
    return shipped / "traces/azure2023/AzureLLMInferenceTrace_conv.csv"


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


def _stream(events_s: list[float], tokens: list[int]) -> StreamResult:
    r = StreamResult(0.0)
    r.events_s, r.tokens = events_s, tokens
    return r


@pytest.mark.parametrize("events_s, tokens, osl, stall_ms", [
    ([0.10, 0.11, 0.12, 0.13], [1, 2, 3, 4], 4, 10.0),  # steady steps: the stall is one step
    ([0.10, 0.11, 0.17, 0.18], [1, 2, 3, 4], 4, 60.0),  # a 60 ms step (a prefill run beside the decode)
    ([0.10, 0.11, 0.17], [1, 2, 4], 4, 30.0),  # two tokens in one chunk: the front end merged two 30 ms steps
    ([0.10, 0.11, 0.13, 0.19], [1, 2, 4, 5], 5, 60.0),  # a merged chunk, then one long step: the step
    ([0.10, 0.13], [1, 4], 4, 10.0),  # the rest of the output in one chunk: three steps of 10 ms
    ([0.10], [1], 1, None),  # one token: no gap
])
def test_the_stall_is_the_longest_gap_between_chunks(events_s: list[float], tokens: list[int], osl: int,
                                                    stall_ms: float | None) -> None:
    trace = RequestTrace(np.array([0.0]), np.array([16]), np.array([osl]), "t")
    m = _measured([_stream(events_s, tokens)], trace, 1.0)
    assert not m.failed[0]
    got = m.itl_max_s[0] * 1e3  # type: ignore[index]
    assert (np.isnan(got) if stall_ms is None else got == pytest.approx(stall_ms))


def test_stall_figures_are_reported_only_where_measured() -> None:
    ttft, mean = np.array([0.05, 0.06]), np.array([0.003, 0.004])
    assert "stall_p95_ms" not in percentiles(ttft, mean)
    got = percentiles(ttft, mean, np.array([0.010, 0.050]))
    assert got["stall_p95_ms"] == pytest.approx(np.percentile([10.0, 50.0], 95))
    assert got["stall_p50_ms"] == pytest.approx(30.0)


def _mode(mode: str, ttft_p50: float, itl_p95: float, stall_p95: float | None) -> fidelity.ModeResult:
    figures = {"ttft_p50_ms": ttft_p50, "ttft_p95_ms": 2 * ttft_p50, "itl_p50_ms": 2.0, "itl_p95_ms": itl_p95}
    if stall_p95 is not None:
        figures["stall_p95_ms"] = stall_p95
    return fidelity.ModeResult(mode, dict(figures), dict(figures), 0, [0.0, 0.0], 1.0, [1.0])


@pytest.mark.parametrize("agg_stall, dis_stall, expected", [
    (60.0, 5.0, {"itl_p95_down": False, "ttft_p50_up": True, "stall_p95_down": True}),
    (5.0, 6.0, {"itl_p95_down": False, "ttft_p50_up": True, "stall_p95_down": False}),
    (None, None, {"itl_p95_down": False, "ttft_p50_up": True}),  # a run recorded before stalls were measured
])
def test_the_trade_off_reads_the_stall_where_both_modes_have_it(agg_stall: float | None, dis_stall: float | None,
                                                                expected: dict[str, bool]) -> None:
    got = fidelity.tradeoff([_mode("aggregated", 36.0, 3.5, agg_stall), _mode("disaggregated", 77.0, 4.1, dis_stall)])
    assert got == {"real": expected, "sim": expected}
    assert fidelity.tradeoff([_mode("aggregated", 36.0, 3.5, agg_stall)]) is None


@pytest.mark.parametrize("events_s, tokens, gaps_ms", [
    ([0.10, 0.11, 0.17, 0.18], [1, 2, 3, 4], [10.0, 60.0, 10.0]),
    ([0.10, 0.11, 0.17], [1, 2, 4], [10.0, 30.0, 30.0]),  # a chunk of two tokens: two gaps of half its wait
    ([0.10], [1], []),
])
def test_every_token_after_the_first_has_one_gap(events_s: list[float], tokens: list[int],
                                                 gaps_ms: list[float]) -> None:
    from planner.bench.fidelity_load import per_token_gaps_s

    got = per_token_gaps_s(events_s, tokens) * 1e3
    assert got.tolist() == pytest.approx(gaps_ms)
    assert len(got) == tokens[-1] - 1


def test_the_token_level_tail_counts_every_gap_of_every_request() -> None:
    """One request of 99 steady 3 ms gaps and one with three 60 ms stalls among them: the stalls are 1.5 % of
    the gaps, so they are the p99 and not the p95; the requests' mean gaps hide them."""
    steady = np.full(99, 0.003)
    stalled = np.concatenate([np.full(96, 0.003), np.full(3, 0.060)])
    got = percentiles(np.array([0.05, 0.05]), np.array([steady.mean(), stalled.mean()]), None,
                      np.concatenate([steady, stalled]))
    assert got["itl_token_p95_ms"] == pytest.approx(3.0)
    assert got["itl_token_p99_ms"] == pytest.approx(60.0)
    assert got["itl_p95_ms"] < 5.0


def test_a_speed_probe_after_a_dead_server_is_a_note_not_a_lost_run() -> None:
    from planner.bench.fidelity_load import probe_speed_after, speed_drift
    from planner.testing.ports import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    after, note = probe_speed_after(url, url)
    assert after == {} and note is not None and "speed probe after the replay failed" in note
    drift = speed_drift({"prefill_ttft_ms": 40.0, "decode_step_ms": 3.0}, after)
    assert set(drift) == {"prefill_ttft_ms", "decode_step_ms"} and all(v != v for v in drift.values())
    assert speed_drift({"prefill_ttft_ms": 40.0}, {"prefill_ttft_ms": 50.0}) == {"prefill_ttft_ms": 1.25}
