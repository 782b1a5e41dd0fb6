"""The decode load run beside the prefill server's profile (planner/bench/fidelity_background.py): it sends
the slice's requests at their arrival times, cycle after cycle, with their output lengths, and at the end of
its block cancels what is in flight, so the profile that follows it does not share the server with leftovers.
Checked against `planner emulate` (the real CLI), which counts what it served."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from endpoint_fixtures import EmulatorProcess, analytical_profile, running_requests

from planner.bench.fidelity_background import DecodeBackground
from planner.sim.traces import RequestTrace


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
