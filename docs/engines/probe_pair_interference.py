"""How much a busy decode server slows the prefill server beside it (the facts in docs/engines/vllm-cpu.md,
"VLLM_CPU_OMP_THREADS_BIND ... only in the multiprocess executor"); prints one JSON line per phase.

    PYTHONPATH=. python docs/engines/probe_pair_interference.py

Starts a prefill server (core 0) and a decode server (core 1) as `planner bench fidelity` does, with the
project's router in front. Each phase sends 12 prompts of 1,024 tokens (max_tokens 2, one after another,
0.5 s apart) straight to the prefill server and reports the client's TTFT and vLLM's own prefill and queue
means over the phase (exact, from its histograms' _sum/_count):
  A  nothing else running;
  B  3 streams looping on the decode server directly (64-token prompts, 200 tokens each);
  C  3 streams looping through the router (256-token prompts: prefill, hand-over, decode);
  A2 nothing else running again.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from planner.actuators.file_sd import Target, write_targets
from planner.bench.fidelity import ENGINE_ARGS, server_deltas, server_means
from planner.profiler.loadgen import (
    CONTINUOUS_USAGE,
    OPTIONAL_BODY,
    RequestShape,
    make_client,
    stream_completion,
)
from planner.router.app import create_router_app
from planner.service.background import BackgroundServer
from planner.testing.vllm_cpu import VllmServer, ensure_env, make_tiny_model
from planner.types import Mode

SHAPE = RequestShape("tiny", CONTINUOUS_USAGE, OPTIONAL_BODY)
rng = random.Random(7)


def prompt(n: int) -> list[int]:
    return [rng.randrange(300, 4000) for _ in range(n)]  # fresh token ids: no prefix-cache hit


async def probe(url: str, n: int = 12) -> list[float]:
    out = []
    async with make_client(url, 2, 120.0) as c:
        for _ in range(n):
            r = await stream_completion(c, SHAPE, prompt(1024), 2)
            out.append(round(r.ttft_s * 1e3, 1))
            await asyncio.sleep(0.5)
    return out


async def beside(probe_url: str, load_url: str, streams: int, isl: int) -> list[float]:
    stop = asyncio.Event()

    async def loop(c) -> None:  # type: ignore[no-untyped-def]
        while not stop.is_set():
            await stream_completion(c, SHAPE, prompt(isl), 200)

    async with make_client(load_url, streams + 1, 300.0) as c:
        load = asyncio.gather(*(loop(c) for _ in range(streams)))
        await asyncio.sleep(3)
        res = await probe(probe_url)
        stop.set()
        await load
    return res


def phase(name: str, url: str, run: Callable[[], list[float]]) -> None:
    before = server_means([url])
    ttft = sorted(run())
    (means,) = server_deltas(before, server_means([url]))
    print(json.dumps({"phase": name, "client_ttft_ms_median": ttft[len(ttft) // 2], "client_ttft_ms": ttft,
                      "prefill_mean_ms": means["request_prefill_time_seconds_mean_ms"],
                      "queue_mean_ms": means["request_queue_time_seconds_mean_ms"]}), flush=True)


def main() -> None:
    python = ensure_env(None)
    with tempfile.TemporaryDirectory(prefix="planner-pair-") as tmp_name:
        tmp = Path(tmp_name)
        model = make_tiny_model(tmp / "model", python)
        kv = tmp / "kv"
        kv.mkdir()
        pre = VllmServer(python, model, role="kv_producer", kv_path=kv, cpus="0", log_dir=tmp / "logs",
                         extra_args=[*ENGINE_ARGS, "--max-num-seqs", "1"])
        dec = VllmServer(python, model, role="kv_consumer", kv_path=kv, cpus="1", log_dir=tmp / "logs",
                         extra_args=list(ENGINE_ARGS))
        try:
            pre.launch()
            dec.launch()
            pre.wait_ready(600)
            dec.wait_ready(600)
            targets = tmp / "targets.json"
            write_targets(targets, [Target(f"127.0.0.1:{pre.port}", "prefill"),
                                    Target(f"127.0.0.1:{dec.port}", "decode")])
            with BackgroundServer(create_router_app(targets, Mode.DISAGGREGATED), port=0) as router:
                asyncio.run(probe(pre.url, 4))  # warm-up
                phase("A_alone", pre.url, lambda: asyncio.run(probe(pre.url)))
                phase("B_decode_server_busy", pre.url, lambda: asyncio.run(beside(pre.url, dec.url, 3, 64)))
                phase("C_router_busy", pre.url, lambda: asyncio.run(beside(pre.url, router.url, 3, 256)))
                phase("A2_alone", pre.url, lambda: asyncio.run(probe(pre.url)))
        finally:
            pre.stop()
            dec.stop()


if __name__ == "__main__":
    main()
