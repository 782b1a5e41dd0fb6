"""Trace loaders, rate scaling, synthesis and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import UserError
from planner.sim.traces import loaders, records, synthetic


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


AZURE_OK = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:46.6805900,374,44\n"
            "2023-11-16 18:15:50.9951690,396,109\n"
            "2023-11-16 18:15:51.2224670,879,55\n")


def test_azure_loads_relative_seconds(tmp_path: Path) -> None:
    tr = loaders.load_requests(_write(tmp_path, "a.csv", AZURE_OK), "azure")
    assert tr.arrival_s.dtype == np.float64 and tr.isl.dtype == np.int64
    np.testing.assert_allclose(tr.arrival_s, [0.0, 4.314579, 4.541876], atol=1e-6)
    assert tr.isl.tolist() == [374, 396, 879] and tr.osl.tolist() == [44, 109, 55]


def test_mooncake_jsonl_ms(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]},
            {"timestamp": 1500, "input_length": 20, "output_length": 4, "hash_ids": []}]
    p = _write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    tr = loaders.load_requests(p, "mooncake")
    assert tr.arrival_s.tolist() == [0.0, 1.5] and tr.isl.tolist() == [10, 20]


def test_generic_csv_with_mapping(tmp_path: Path) -> None:
    p = _write(tmp_path, "g.csv", "t,inp,out\n100,5,6\n2100,7,8\n")
    tr = loaders.load_requests(p, "csv", columns={"arrival": "t", "isl": "inp", "osl": "out", "time_unit": "ms"})
    assert tr.arrival_s.tolist() == [0.0, 2.0] and tr.osl.tolist() == [6, 8]


BAD = [
    ("unsorted", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.0,1,1\n2023-11-16 18:15:46.0,1,1\n",
     "a.csv:3"),
    ("negative", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.0,-4,1\n", "a.csv:2"),
    ("non-numeric", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.0,abc,1\n", "'abc'"),
    ("empty-row", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.0,1,1\n,,\n", "a.csv:3: empty row"),
    ("bad-time", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "'yesterday'"),
    ("no-rows", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
    ("missing-col", "TIME,ContextTokens,GeneratedTokens\n1,1,1\n", "missing column 'TIMESTAMP'"),
]


@pytest.mark.parametrize("text,needle", [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_bad_rows_name_file_line_value(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(UserError, match=None) as exc:
        loaders.load_requests(_write(tmp_path, "a.csv", text), "azure")
    assert needle in str(exc.value)
    assert "a.csv" in str(exc.value)


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a known trace format"):
        loaders.load_requests(tmp_path / "x", "parquet")
    with pytest.raises(UserError, match="not found"):
        loaders.load_requests(tmp_path / "x.csv", "azure")


def test_servegen_windows_and_synthesis(tmp_path: Path) -> None:
    p = _write(tmp_path, "s.csv", "window_start_s,window_s,total_rate_rps,requests_per_min,active_clients\n"
                                  "0,100,10,600,1\n100,100,0,0,0\n200,100,20,1200,1\n")
    w = loaders.load_rate_windows(p)
    assert w.rate_rps.tolist() == [10.0, 0.0, 20.0]
    tr = synthetic.synthesise_from_rates(w, records.LengthDist("fixed", 100.0), records.LengthDist("fixed", 10.0), cv=1.0, seed=3)
    counts = np.histogram(tr.arrival_s, bins=[0, 100, 200, 300])[0]
    assert counts[1] == 0
    assert 800 < counts[0] < 1200 and 1700 < counts[2] < 2300
    bursty = synthetic.synthesise_from_rates(w, cv=3.0, seed=3)
    gaps = np.diff(bursty.window(200, 300).arrival_s)
    assert gaps.std() / gaps.mean() > 1.8  # Gamma arrivals keep (most of) their CV


@pytest.mark.parametrize("name,args,expected_rps", [
    ("constant", (5.0, 400.0), 5.0),
    ("step", (2.0, 8.0, 200.0, 400.0), 5.0),
    ("ramp", (0.0, 10.0, 400.0), 5.0),
    ("sinusoid", (5.0, 4.0, 100.0, 400.0), 5.0),
    ("spike", (4.0, 24.0, 100.0, 20.0, 400.0), 5.0),
    ("on_off", (10.0, 50.0, 50.0, 400.0), 5.0),
], ids=lambda x: x if isinstance(x, str) else None)
def test_synthetic_generators_mean_rate(name: str, args: tuple, expected_rps: float) -> None:
    tr = synthetic.SYNTHETIC[name](*args, seed=1)
    assert np.all(np.diff(tr.arrival_s) >= 0)
    assert abs(len(tr) / 400.0 - expected_rps) < 0.6


def test_step_changes_rate_at_the_step() -> None:
    tr = synthetic.step(2.0, 20.0, 100.0, 200.0, seed=2)
    assert len(tr.window(0, 100)) < 300 < len(tr.window(100, 200))


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(0.2, 6.0), seed=st.integers(0, 10))
def test_superpose_scales_count_keeps_span_and_order(scale: float, seed: int) -> None:
    base = synthetic.constant(20.0, 100.0, seed=seed)
    out = loaders.scale_rate(base, scale, "superpose", seed)
    assert np.all(np.diff(out.arrival_s) >= 0)
    assert out.arrival_s.max() <= base.duration_s + 1e-6
    assert abs(len(out) - scale * len(base)) <= 4 * np.sqrt(len(base)) + 2
    assert scale == 1.0 or "superpos" in out.notes


def test_compress_divides_time_and_same_seed_same_trace() -> None:
    base = synthetic.constant(10.0, 100.0, seed=1)
    c = loaders.scale_rate(base, 4.0, "compress")
    np.testing.assert_allclose(c.arrival_s, base.arrival_s / 4)
    a, b = loaders.scale_rate(base, 2.5, seed=7), loaders.scale_rate(base, 2.5, seed=7)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.isl, b.isl)


@pytest.mark.parametrize("value,mode,key", [(0.0, "superpose", "rate_scale"), (2.0, "stretch", "scale_mode")],
                         ids=["zero-scale", "bad-mode"])
def test_bad_scaling(value: float, mode: str, key: str) -> None:
    with pytest.raises(UserError, match=f"^{key}: ") as info:
        loaders.scale_rate(synthetic.constant(1.0, 10.0), value, mode)
    assert info.value.key == key


def test_real_azure_conv(shipped: Path) -> None:
    tr = loaders.load_requests(shipped / "traces/azure2023/AzureLLMInferenceTrace_conv.csv")
    assert len(tr) == 19366
    assert 1150 < tr.isl.mean() < 1160 and 210 < tr.osl.mean() < 212


def test_servegen_real_file_needs_a_cut(shipped: Path) -> None:
    path = shipped / "traces/servegen/aggregate_rate_language_m-large.csv"
    with pytest.raises(UserError, match="cut the span with start_s/duration_s") as info:
        loaders.load_requests(path, "servegen")
    assert info.value.mentions == ("start_s", "duration_s")
    tr = loaders.load_requests(path, "servegen", start_s=0, duration_s=1200, rate_scale=0.05)
    assert 0 < tr.duration_s <= 1200 and 500 < len(tr) < 50_000


def test_servegen_scale_applies_to_the_rates_before_synthesis(shipped: Path) -> None:
    path = shipped / "traces/servegen/aggregate_rate_language_m-large.csv"
    windows = loaders.load_rate_windows(path)
    first_hour = windows.window_start_s < 3600
    expected = float(np.sum(windows.rate_rps[first_hour] * windows.window_s[first_hour])) * 0.02
    tr = loaders.load_requests(path, "servegen", start_s=0, duration_s=3600, rate_scale=0.02)
    assert abs(len(tr) - expected) < 5 * np.sqrt(expected)  # Poisson at the scaled rate
    assert "rates x0.02 before synthesis" in tr.notes
    # 14 days at the full rate (~250 M requests) is refused, but at x0.02 it fits the synthesis limit
    assert loaders.MAX_SYNTH_REQUESTS > float(np.sum(windows.rate_rps * windows.window_s)) * 0.02


def test_default_synthetic_lengths_stay_within_the_azure_maxima() -> None:
    rng = np.random.default_rng(0)
    isl = synthetic.DEFAULT_ISL.sample(rng, 2_000_000)
    osl = synthetic.DEFAULT_OSL.sample(rng, 2_000_000)
    assert isl.max() <= 14050 and osl.max() <= 1000
    assert abs(isl.mean() - 1155) < 0.02 * 1155  # the cap trims a tail that carries almost no mass


def test_servegen_compress_mode_still_squeezes_time(shipped: Path) -> None:
    path = shipped / "traces/servegen/aggregate_rate_language_m-large.csv"
    tr = loaders.load_requests(path, "servegen", start_s=0, duration_s=3600, rate_scale=2.0, scale_mode="compress")
    assert tr.duration_s <= 1800.0 + 1e-6 and "compressing time" in tr.notes
