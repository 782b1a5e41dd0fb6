"""The decode load run beside the prefill server's profile (planner/bench/fidelity_background.py): it sends
the slice's requests at their arrival times, cycle after cycle, with their output lengths, and at the end of
its block cancels what is in flight, so the profile that follows it does not share the server with leftovers.
Checked against `planner emulate` (the real CLI), which counts what it served."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from planner.bench.fidelity_background import DecodeBackground
from planner.sim.traces.records import RequestTrace
from tests.support.endpoint_fixtures import EmulatorProcess, analytical_profile, running_requests


def _served(url: str) -> tuple[float, float]:
    """The emulator's finished requests and generated tokens (its vLLM counters)."""
    import httpx

    got = {"vllm:request_success_total": 0.0, "vllm:generation_tokens_total": 0.0}
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in got:
            got[name] += float(line.rsplit(" ", 1)[1])
    return got["vllm:request_success_total"], got["vllm:generation_tokens_total"]


def test_the_slice_is_sent_in_cycles_and_cut_when_the_block_ends(tmp_path: Path) -> None:
    profile_path = tmp_path / "p.json"
    analytical_profile("qwen3-0.6b", (1,), profile_path)
    short = RequestTrace(np.array([0.0, 0.1, 0.2]), np.full(3, 512, dtype=np.int64),
                         np.array([3, 5, 7], dtype=np.int64), "test")
    long = RequestTrace(np.array([0.0]), np.array([512]), np.array([3000]), "test")
    with EmulatorProcess(profile_path, time_scale=5.0, model_name="tiny", max_model_len=4096) as emu:
        emu.wait_ready()
        with DecodeBackground(emu.url, short) as bg:
            deadline = time.monotonic() + 30
            while bg.cycles < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        served, tokens = _served(emu.url)
        assert bg.cycles >= 2 and bg.failed == 0
        # Every request the server finished was one of the slice's: counted by the client, or in flight at the
        # cut (the server may finish one the client was cancelled before reading to its end).
        assert bg.sent >= 6 and bg.sent <= served <= bg.sent + len(short)
        assert tokens >= 2 * (3 + 5 + 7)  # at their own output lengths: whole cycles at least
        # A request that would stream for minutes is cut when the block ends, and the server sees it end.
        with DecodeBackground(emu.url, long) as bg:
            deadline = time.monotonic() + 30
            while running_requests(emu.url) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert running_requests(emu.url) == 1
        started = time.monotonic()
        while running_requests(emu.url) > 0 and time.monotonic() - started < 10:
            time.sleep(0.05)
        assert running_requests(emu.url) == 0 and bg.sent == 0
        assert not bg._thread.is_alive()


@pytest.mark.timing  # holds the emulator's latency to a tolerance: on a quiet machine (.ci/run's phase 2)
def test_the_speed_probe_reads_the_engines_own_speed_and_its_drift(tmp_path: Path) -> None:
    """probe_speed, the same probe before the profile and after the replay: against the emulator run at two
    speeds (``--time-scale`` 1 and 2: every step twice as long), the drift it reports is the ratio of the two,
    and each figure is the emulated one (the profile's prefill at 1,024 tokens, its batch-1 step)."""
    from planner.bench.fidelity_load import SPEED_ISL, probe_speed, speed_drift

    profile_path = tmp_path / "p.json"
    profile = analytical_profile("qwen3-32b", (1,), profile_path)
    prefill_ms = profile.prefill_curve(1).ttft_ms(SPEED_ISL).value
    step_ms = profile.decode_curve(1).itl_ms(1, SPEED_ISL // 64).value
    got = {}
    for scale in (1.0, 2.0):
        with EmulatorProcess(profile_path, time_scale=scale, model_name="tiny", max_model_len=4096) as emu:
            emu.wait_ready()
            got[scale] = probe_speed(emu.url, emu.url)
    assert got[1.0]["prefill_ttft_ms"] >= prefill_ms and got[1.0]["prefill_ttft_ms"] < prefill_ms * 1.5 + 10
    assert got[1.0]["decode_step_ms"] >= step_ms * 0.9 and got[1.0]["decode_step_ms"] < step_ms * 1.5 + 2
    drift = speed_drift(got[1.0], got[2.0])
    assert 1.6 < drift["prefill_ttft_ms"] < 2.4 and 1.6 < drift["decode_step_ms"] < 2.4
    assert speed_drift(got[1.0], got[1.0]) == {"prefill_ttft_ms": 1.0, "decode_step_ms": 1.0}
