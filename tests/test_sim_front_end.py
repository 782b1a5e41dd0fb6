"""A client-observed profile (the endpoint backend times requests over HTTP) holds the API front end's latency
in its TTFT curve. The simulator takes that share out of the engine's iterations and adds it per request and
hop as a delay that occupies no engine; an engine-only profile is simulated as before. Checked against the
facts it models: a lone request reproduces the measured curve, simultaneous requests do not queue behind one
another's front end, a mixed step pays one fixed cost, and disaggregated requests pay the front end twice."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.perf.curves import DecodeCurve, PrefillCurve
from planner.perf.engine import EngineModel, client_front_end_s
from planner.profile import Profile, load_profile
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.traces.records import RequestTrace
from planner.types import Mode

REPO = Path(__file__).resolve().parent.parent

INTERCEPT_MS, SLOPE_MS_PER_TOKEN, STEP_MS = 40.0, 0.05, 10.0  # a CPU server's shape: TTFT(0) = 4 decode steps
FAST_LINK = 1e18


def _curves() -> tuple[PrefillCurve, DecodeCurve]:
    prefill = PrefillCurve.from_points([(n, INTERCEPT_MS + SLOPE_MS_PER_TOKEN * n) for n in (16, 512, 2048)], 1)
    decode = DecodeCurve.from_points([(b, c, STEP_MS) for b in (1, 16) for c in (256, 2048)], 1, 65536, 16)
    return prefill, decode


@pytest.fixture(scope="module")
def client_profile() -> Profile:
    """The shipped small profile with the curves above, as if the endpoint backend had measured them."""
    base = load_profile(REPO / "profiles/h200/qwen3-0.6b.json")
    tp = base.selected_tp("prefill")
    pre = base.prefill[[s.tp for s in base.prefill].index(tp)]
    dec = base.decode[[s.tp for s in base.decode].index(base.selected_tp("decode"))]
    points = [p.model_copy(update={"isl": n, "ttft_ms": INTERCEPT_MS + SLOPE_MS_PER_TOKEN * n})
              for n, p in zip((16, 512, 2048), [pre.points[0]] * 3, strict=True)]
    dpoints = [dec.points[0].model_copy(update={"batch": b, "context_tokens": c, "itl_ms": STEP_MS})
               for b in (1, 16) for c in (256, 2048)]
    return base.model_copy(update={
        "prefill": [pre.model_copy(update={"tp": tp, "points": points})],
        "decode": [dec.model_copy(update={"tp": base.selected_tp("decode"), "points": dpoints, "max_batch": 16,
                                          "kv_capacity_tokens": 65536})],
        "provenance": base.provenance.model_copy(update={"backend": "endpoint"})})


def _run(profile: Profile, mode: Mode, arrivals: list[float], isl: int, osl: int, gaps: bool = False,
         **cfg: float) -> Any:
    """Per-request results (or, with ``gaps``, every token gap) of a fixed one-replica-per-pool cluster."""
    trace = RequestTrace(np.asarray(arrivals, dtype=float), np.full(len(arrivals), isl, dtype=np.int64),
                         np.full(len(arrivals), osl, dtype=np.int64), "test")
    c = Cluster(trace, profile, SimConfig(mode=mode, chunk_tokens=2048, link_bytes_per_s=FAST_LINK, **cfg),
                {p: 1 for p in mode.pools})
    c.run_until(math.inf)
    return c.log.token_gaps_s() if gaps else c.results()


def test_front_end_share_is_the_intercept_less_one_step() -> None:
    prefill, decode = _curves()
    assert client_front_end_s(prefill, decode) == pytest.approx((INTERCEPT_MS - STEP_MS) / 1e3)
    engine = EngineModel(prefill, decode, front_end_s=client_front_end_s(prefill, decode))
    assert engine.iteration_overhead_s() == pytest.approx(STEP_MS / 1e3)
    # A curve whose intercept is below one decode step (an engine-only profile) has no front end share.
    quick = PrefillCurve.from_points([(16, 5.0), (512, 30.0)], 1)
    assert client_front_end_s(quick, decode) == 0.0


@pytest.mark.parametrize("isl", [100, 1500], ids=["short", "long"])
def test_a_lone_request_reproduces_the_measured_curve(client_profile: Profile, isl: int) -> None:
    r = _run(client_profile, Mode.AGGREGATED, [0.0], isl, 2)
    assert r["ttft_s"][0] == pytest.approx((INTERCEPT_MS + SLOPE_MS_PER_TOKEN * isl) / 1e3, rel=1e-6)


def test_simultaneous_requests_do_not_queue_behind_the_front_end(client_profile: Profile) -> None:
    """Four 400-token prompts at once: the first starts alone (continuous batching), the other three share the
    next step. Each sees the front end once, beside the engine, not one after another."""
    front_s, step_s, per_token_s = (INTERCEPT_MS - STEP_MS) / 1e3, STEP_MS / 1e3, SLOPE_MS_PER_TOKEN / 1e3
    r = _run(client_profile, Mode.AGGREGATED, [0.0] * 4, 400, 2)
    first = front_s + step_s + 400 * per_token_s
    assert r["ttft_s"] == pytest.approx([first] + [first + step_s + 3 * 400 * per_token_s] * 3, rel=1e-6)
    # The engine-only reading of the same profile charges the whole intercept to every iteration.
    r0 = _run(client_profile, Mode.AGGREGATED, [0.0] * 4, 400, 2, front_end_s=0.0)
    first0 = INTERCEPT_MS / 1e3 + 400 * per_token_s
    assert r0["ttft_s"] == pytest.approx([first0] + [first0 + INTERCEPT_MS / 1e3 + 1200 * per_token_s] * 3)


def test_a_mixed_step_pays_one_fixed_cost(client_profile: Profile) -> None:
    """A prompt arriving while another decodes: the step holding it costs the decode step plus the prompt's
    marginal time, so the decoding request's gap then is STEP + 500 x slope, not STEP + intercept + that."""
    r = _run(client_profile, Mode.AGGREGATED, [0.0, 0.2], 500, 100)
    gap_ms = r["itl_max_s"][0] * 1e3
    assert gap_ms == pytest.approx(STEP_MS + 500 * SLOPE_MS_PER_TOKEN, rel=1e-6)


def test_disaggregated_requests_pay_the_front_end_on_both_hops(client_profile: Profile) -> None:
    front_s = (INTERCEPT_MS - STEP_MS) / 1e3
    r = _run(client_profile, Mode.DISAGGREGATED, [0.0], 1000, 2)
    prefill_s = (INTERCEPT_MS + SLOPE_MS_PER_TOKEN * 1000) / 1e3  # hop 1: the curve, front end included
    assert r["ttft_s"][0] == pytest.approx(prefill_s + front_s + STEP_MS / 1e3, rel=1e-6)


def test_a_measured_hand_over_replaces_the_decode_front_end(client_profile: Profile) -> None:
    r = _run(client_profile, Mode.DISAGGREGATED, [0.0], 1000, 2, kv_handoff_s=0.07)
    prefill_s = (INTERCEPT_MS + SLOPE_MS_PER_TOKEN * 1000) / 1e3
    assert r["ttft_s"][0] == pytest.approx(prefill_s + 0.07 + STEP_MS / 1e3, rel=1e-6)


def test_the_decode_engines_admission_work_delays_the_first_token_and_stalls_the_batch(
        client_profile: Profile) -> None:
    """vLLM's ExampleConnector: the decode server loads the KV and recomputes the last partial block inside
    its own step. A lone request's TTFT gains that work once; a request decoding when another is admitted
    waits for it too (its mean gap grows by the stall over its gaps), and without it nothing changes."""
    admit_s, osl = 0.03, 101
    alone = _run(client_profile, Mode.DISAGGREGATED, [0.0], 1000, 2, kv_handoff_s=0.07)
    stalled = _run(client_profile, Mode.DISAGGREGATED, [0.0], 1000, 2, kv_handoff_s=0.07, decode_admit_s=admit_s)
    assert stalled["ttft_s"][0] == pytest.approx(alone["ttft_s"][0] + admit_s, rel=1e-6)
    # Two requests: the second is admitted while the first decodes (100 gaps of STEP_MS each alone).
    pair = _run(client_profile, Mode.DISAGGREGATED, [0.0, 0.3], 1000, osl, kv_handoff_s=0.07)
    pair_stalled = _run(client_profile, Mode.DISAGGREGATED, [0.0, 0.3], 1000, osl, kv_handoff_s=0.07,
                        decode_admit_s=admit_s)
    assert pair["itl_mean_s"][0] == pytest.approx(STEP_MS / 1e3, rel=1e-6)
    # The first request's own admission stall came before its first token; only the second one's is a gap.
    assert pair_stalled["itl_mean_s"][0] == pytest.approx(STEP_MS / 1e3 + admit_s / (osl - 1), rel=1e-6)
    # The stall is one gap of the first request (a step plus the admission work), not spread over its
    # segment; the newcomer's own gaps are plain steps: the stall came before its first token.
    assert pair_stalled["itl_max_s"][0] == pytest.approx(STEP_MS / 1e3 + admit_s, rel=1e-6)
    assert pair["itl_max_s"][0] == pytest.approx(STEP_MS / 1e3, rel=1e-6)
    assert pair_stalled["itl_max_s"][1] == pytest.approx(STEP_MS / 1e3, rel=1e-6)
    # What an ITL histogram counts: one token gap of a step plus the stall, every other gap a plain step.
    gaps = _run(client_profile, Mode.DISAGGREGATED, [0.0, 0.3], 1000, osl, kv_handoff_s=0.07,
                decode_admit_s=admit_s, gaps=True)
    assert len(gaps) == 2 * (osl - 1)
    assert np.sort(gaps)[-1] == pytest.approx(STEP_MS / 1e3 + admit_s, rel=1e-6)
    assert np.sort(gaps)[:-1] == pytest.approx(np.full(len(gaps) - 1, STEP_MS / 1e3), rel=1e-6)
    assert pair_stalled["ttft_s"][1] == pytest.approx(pair["ttft_s"][1] + admit_s, abs=STEP_MS / 1e3)


@pytest.mark.parametrize(("gaps_ms", "line"), [
    ({256: 20.0, 1024: 28.0, 2048: 40.0}, (16.918919, 0.011190878)),  # grows: the least-squares line
    ({256: 20.0, 2048: 20.0}, (20.0, 0.0)),                          # flat
    ({256: 30.0, 1024: 24.0, 2048: 21.0}, (25.0, 0.0)),              # shrinking is noise: the mean, no slope
    ({1024: 25.0}, (25.0, 0.0)),                                     # one length: no slope to fit
])
def test_the_hand_over_line(gaps_ms: dict[int, float], line: tuple[float, float]) -> None:
    from planner.bench.fidelity_load import handoff_line

    intercept_s, slope_s = handoff_line({isl: g / 1e3 for isl, g in gaps_ms.items()})
    assert (intercept_s * 1e3, slope_s * 1e3) == pytest.approx(line, rel=1e-5, abs=1e-9)


def test_a_hand_over_that_grows_with_the_prompt_is_simulated_at_every_length(client_profile: Profile) -> None:
    """The probe's gaps (TTFT through the router less TTFT at the prefill server) on a line: the fitted
    SimConfig gives a lone request the same gap at each length (the slope as the KV link, the intercept as the
    hand-over's latency, the decode engine's admission work and first step inside it)."""
    from planner.bench.fidelity_load import handoff_config

    kv_bytes_per_token = float(client_profile.model.kv_bytes_per_token)
    gaps_s = {isl: 0.015 + 10e-6 * isl for isl in (256, 1024, 2048)}
    cfg = handoff_config(gaps_s, STEP_MS / 1e3, 0.004, kv_bytes_per_token)
    assert cfg["link_bytes_per_s"] == pytest.approx(kv_bytes_per_token / 10e-6)
    assert cfg["kv_handoff_s"] == pytest.approx(0.015 - STEP_MS / 1e3 - 0.004)
    for isl in (128, 1024, 2000):
        trace = RequestTrace(np.zeros(1), np.array([isl]), np.array([2]), "test")
        c = Cluster(trace, client_profile, SimConfig(mode=Mode.DISAGGREGATED, chunk_tokens=2048, **cfg),
                    {p: 1 for p in Mode.DISAGGREGATED.pools})
        c.run_until(math.inf)
        direct_s = (INTERCEPT_MS + SLOPE_MS_PER_TOKEN * isl) / 1e3  # TTFT at the prefill server alone
        assert c.results()["ttft_s"][0] - direct_s == pytest.approx(0.015 + 10e-6 * isl, rel=1e-6)
