"""Requests longer than the profile serves: dropped, truncated, or named in an error (``planner backtest
--oversized``), checked on small traces whose every length is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.cli import run
from planner.errors import UserError
from planner.profile import load_profile
from planner.sim.cluster.cluster import SimConfig
from planner.sim.evaluate.backtest import check_trace, request_token_limit
from planner.sim.traces.oversized import fit_requests, oversized_mask
from planner.sim.traces.records import RequestTrace

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-32b.json"
EXAMPLE = REPO / "policies" / "example.yaml"


def _trace(isl: list[int], osl: list[int]) -> RequestTrace:
    return RequestTrace(np.arange(len(isl), dtype=np.float64), np.array(isl, dtype=np.int64),
                        np.array(osl, dtype=np.int64), "t.csv", "")


# (isl, osl, limit, mode) -> (kept isl, kept osl, oversized, dropped, truncated)
CASES = [
    ("all-fit", [10, 20, 30], [5, 5, 5], 100, "drop", [10, 20, 30], [5, 5, 5], 0, 0, 0),
    ("at-the-limit-fits", [95, 20], [5, 5], 100, "drop", [95, 20], [5, 5], 0, 0, 0),
    ("drop-one", [10, 200, 30], [5, 5, 5], 100, "drop", [10, 30], [5, 5], 1, 1, 0),
    ("drop-by-output", [10, 20], [5, 95], 100, "drop", [10], [5], 1, 1, 0),
    ("truncate-prompt", [10, 200, 30], [5, 40, 5], 100, "truncate", [10, 60, 30], [5, 40, 5], 1, 0, 1),
    ("truncate-drops-output-alone", [10, 20], [5, 100], 100, "truncate", [10], [5], 1, 1, 0),
    ("truncate-keeps-one-token", [10, 500], [5, 99], 100, "truncate", [10, 1], [5, 99], 1, 0, 1),
    ("error-unchanged", [10, 200], [5, 5], 100, "error", [10, 200], [5, 5], 1, 0, 0),
]


@pytest.mark.parametrize(("isl", "osl", "limit", "mode", "want_isl", "want_osl", "over", "dropped", "truncated"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fit_requests(isl, osl, limit, mode, want_isl, want_osl, over, dropped, truncated) -> None:
    tr = _trace(isl, osl)
    fitted = fit_requests(tr, limit, mode)
    assert fitted.trace.isl.tolist() == want_isl and fitted.trace.osl.tolist() == want_osl
    assert (fitted.oversized, fitted.dropped, fitted.truncated) == (over, dropped, truncated)
    if mode != "error":
        assert not oversized_mask(fitted.trace, limit).any()  # what is left fits
    # Arrivals are the kept requests' own, in order: nothing moves in time.
    kept = [i for i, (a, b) in enumerate(zip(isl, osl, strict=True)) if a + b <= limit
            or (mode == "truncate" and b < limit) or mode == "error"]
    assert fitted.trace.arrival_s.tolist() == [float(i) for i in kept]
    assert tr.isl.tolist() == isl  # the input is not changed in place
    assert (over and mode != "error") == bool(fitted.trace.notes)


def test_fit_requests_rejects_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="allowed: error, drop, truncate"):
        fit_requests(_trace([1], [1]), 10, "clip")


@pytest.fixture
def long_trace(tmp_path: Path) -> tuple[Path, int]:
    """A 10-minute Poisson trace at 4 req/s with three prompts past the profile's limit."""
    limit = request_token_limit(load_profile(PROFILE))
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(0.25, 2400))
    isl = rng.integers(200, 2000, len(t))
    isl[[100, 900, 2000]] = limit + 500
    path = tmp_path / "long.csv"
    path.write_text("ts,in,out\n" + "".join(f"{a:.3f},{i},50\n" for a, i in zip(t, isl, strict=True)))
    return path, limit


def _backtest(trace: Path, out: Path, *extra: str) -> list[str]:
    return ["backtest", "--trace", str(trace), "--format", "csv", "--columns", "arrival=ts,isl=in,osl=out",
            "--profile", str(PROFILE), "--policy", str(EXAMPLE), "--baselines", "", "--offline-simulations", "0",
            "--no-plots", "--out", str(out), *extra]


@pytest.mark.parametrize(("over", "words"), [(1, "; 1 such request in all"), (2, "; 2 such requests in all"),
                                             (1200, "; 1,200 such requests in all")])
def test_check_trace_counts_the_requests_that_do_not_fit(over: int, words: str) -> None:
    profile = load_profile(PROFILE)
    limit = request_token_limit(profile)
    isl = [100] * 5 + [limit + 1] * over
    with pytest.raises(UserError) as e:
        check_trace(_trace(isl, [1] * len(isl)), profile, SimConfig())
    assert str(e.value).startswith("t.csv: request #5 (arrival 5.000 s)") and str(e.value).endswith(words), e.value


def test_backtest_names_the_flag_when_a_request_does_not_fit(long_trace, tmp_path: Path, capsys) -> None:
    rc = run(_backtest(long_trace[0], tmp_path / "out"))
    err = capsys.readouterr().err
    assert rc == 2 and "3 such requests" in err and "--oversized drop" in err and "Traceback" not in err, err
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.parametrize(("mode", "requests", "dropped", "truncated"), [("drop", 2397, 3, 0),
                                                                         ("truncate", 2400, 0, 3)])
def test_backtest_drops_or_truncates_and_says_so(long_trace, tmp_path: Path, capsys, mode, requests, dropped,
                                                 truncated) -> None:
    trace, limit = long_trace
    rc = run(_backtest(trace, tmp_path / "out", "--oversized", mode))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"3 of 2,400 requests (0.12%) longer than {limit:,} tokens" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["trace"]["requests"] == requests
    assert report["trace"]["oversized"] == {"mode": mode, "limit_tokens": limit, "requests": 3, "dropped": dropped,
                                            "truncated": truncated}
    assert report["policies"]["planner"]["requests"] <= requests
    how = "3 dropped" if mode == "drop" else "3 prompts truncated"
    assert f"Prepared: 3 requests longer than {limit:,} tokens: {how}." in (tmp_path / "out" / "report.md").read_text()
