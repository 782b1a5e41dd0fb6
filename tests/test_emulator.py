"""Engine emulator: OpenAI API (SSE and not), usage counts, vLLM metrics, continuous batching."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from planner.cli import run
from planner.emulator.app import create_app, engine_model_for
from planner.emulator.engine import EmulatedEngine
from planner.emulator.vllm_metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S, VllmMetrics, buckets_1_2_5
from planner.perf.curves import DecodeCurve, PrefillCurve
from planner.perf.engine import EngineModel
from planner.profile import load_profile
from planner.service.background import BackgroundServer

PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "h200" / "qwen3-0.6b.json"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    app = create_app(engine_model_for(load_profile(PROFILE), "aggregated"), "qwen3-0.6b", time_scale=0.05)
    with BackgroundServer(app) as s:
        s.app = app  # type: ignore[attr-defined]
        yield s


def metrics(url: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{url}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(url: str, name: str, **labels: str) -> float:
    return sum(v for (n, lab), v in metrics(url).items() if n == name and labels.items() <= dict(lab).items())


def sse(url: str, path: str, body: dict) -> list[str]:
    with httpx.stream("POST", f"{url}{path}", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]


def test_completion_usage_and_text(server: BackgroundServer) -> None:
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "one two  three\nfour", "max_tokens": 6})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "text_completion" and body["model"] == "qwen3-0.6b"
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (4, 6, 10)
    assert len(body["choices"][0]["text"].split()) == 6 and body["choices"][0]["finish_reason"] == "length"


def test_chat_completion_counts_every_message(server: BackgroundServer) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi there you"}]}]
    body = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": msgs, "max_tokens": 3}).json()
    assert body["object"] == "chat.completion" and body["usage"]["prompt_tokens"] == 5
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert len(body["choices"][0]["message"]["content"].split()) == 3


def chunk_texts(chunks: list[dict]) -> list[str]:
    return [c["choices"][0].get("text") or c["choices"][0].get("delta", {}).get("content") or ""
            for c in chunks if c["choices"]]


@pytest.mark.parametrize("usage", [True, False], ids=["with-usage", "without-usage"])
def test_completion_stream(server: BackgroundServer, usage: bool) -> None:
    body = {"prompt": "a b c", "max_tokens": 4, "stream": True, "stream_options": {"include_usage": usage}}
    events = sse(server.url, "/v1/completions", body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = [c for c in chunks if c["choices"]]
    # Tokens that queue up while the client is slow share a chunk (as in vLLM): count words, not chunks.
    assert len("".join(chunk_texts(content)).split()) == 4 and all(chunk_texts(content))
    # The finish reason rides on the last token's chunk: no extra empty chunk after it.
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * (len(content) - 1) + ["length"]
    usage_chunks = [c["usage"] for c in chunks if "usage" in c]
    assert usage_chunks == ([{"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4}] if usage else [])
    assert ("system_fingerprint" in chunks[-1]) and sum("system_fingerprint" in c for c in chunks) == 1


def test_continuous_usage_counts_every_chunk(server: BackgroundServer) -> None:
    body = {"prompt": [11, 12, 13, 14, 15], "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chunks = [json.loads(e) for e in sse(server.url, "/v1/completions", body)[:-1]]
    running = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    words = [len(t.split()) for t in chunk_texts(chunks)]
    assert running == [sum(words[: i + 1]) for i in range(len(words))] and running[-1] == 6
    assert all(c["usage"]["prompt_tokens"] == 5 for c in chunks)  # a token-id prompt counts its ids


def test_chat_stream_deltas(server: BackgroundServer) -> None:
    events = sse(server.url, "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "x y"}], "max_tokens": 3, "stream": True})
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:])
    assert len("".join(chunk_texts(chunks)).split()) == 3 and chunks[-1]["choices"][0]["finish_reason"] == "length"


BAD = [
    ("no-prompt", "/v1/completions", {"max_tokens": 3}, 400, "prompt"),
    ("empty-prompt", "/v1/completions", {"prompt": "   "}, 400, "prompt"),
    ("empty-id-list", "/v1/completions", {"prompt": []}, 400, "at least one prompt"),
    ("negative-token-id", "/v1/completions", {"prompt": [3, -1]}, 400, "greater than or equal to 0"),
    ("two-prompts", "/v1/completions", {"prompt": ["a", "b"]}, 400, "one prompt per request"),
    ("zero-max-tokens", "/v1/completions", {"prompt": "a", "max_tokens": 0}, 400, "at least 1"),
    ("max-tokens-over-context", "/v1/completions", {"prompt": "a", "max_tokens": 40_000}, 400, "max_model_len"),
    ("prompt-over-context", "/v1/completions", {"prompt": list(range(32768))}, 400, "maximum context length"),
    ("n-2", "/v1/completions", {"prompt": "a", "n": 2}, 400, "n=1"),
    ("stream-options-without-stream", "/v1/completions", {"prompt": "a", "stream_options": {}}, 400, "stream=True"),
    ("unknown-model", "/v1/completions", {"prompt": "a", "model": "other"}, 404, "does not exist"),
    ("no-messages", "/v1/chat/completions", {"messages": []}, 400, "empty conversation"),
    ("bad-content", "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400, "content"),
    ("not-an-object", "/v1/completions", [1, 2], 400, "body"),
]


@pytest.mark.parametrize(("path", "body", "status", "word"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_requests_answer_vllm_errors(server: BackgroundServer, path: str, body: object, status: int,
                                         word: str) -> None:
    r = httpx.post(f"{server.url}{path}", json=body)
    error = r.json()["error"]
    assert r.status_code == status == error["code"] and word in error["message"], error
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_lax_types_are_coerced_as_vllm_does(server: BackgroundServer) -> None:
    body = httpx.post(f"{server.url}/v1/completions", json={"prompt": "a", "max_tokens": "5"}).json()
    assert body["usage"]["completion_tokens"] == 5
    default = httpx.post(f"{server.url}/v1/completions", json={"prompt": "a b"}).json()
    assert default["usage"]["completion_tokens"] == 16  # the completions API's default


def test_invalid_json_is_400(server: BackgroundServer) -> None:
    r = httpx.post(f"{server.url}/v1/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400


def test_vllm_metric_names_labels_and_buckets(server: BackgroundServer) -> None:
    text = httpx.get(f"{server.url}/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert fams[name].type == "gauge"
    for name in ("vllm:request_success", "vllm:prompt_tokens", "vllm:generation_tokens"):
        assert fams[name].type == "counter"
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}  # every one of vLLM's, from the start
    httpx.get(f"{server.url}/v1/models")
    fams = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)}
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_info", "python_gc_collections",
            "http_requests", "http_request_duration_seconds", "http_request_duration_highr_seconds",
            "http_request_size_bytes", "http_response_size_bytes"} <= set(fams)
    handlers = {s.labels["handler"] for s in fams["http_requests"].samples}
    assert "/v1/models" in handlers and "/metrics" not in handlers  # vLLM leaves /metrics, /health, ... out
    for name, bounds in (("vllm:time_to_first_token_seconds", TTFT_BUCKETS_S),
                         ("vllm:inter_token_latency_seconds", ITL_BUCKETS_S)):
        les = [float(s.labels["le"]) for s in fams[name].samples if s.name.endswith("_bucket")]
        assert les == [*bounds, float("inf")]
        assert all(s.labels["model_name"] == "qwen3-0.6b" and s.labels["engine"] == "0" for s in fams[name].samples)


def test_counters_follow_what_was_served() -> None:
    app = create_app(engine_model_for(load_profile(PROFILE), "decode"), "m", time_scale=0.05)
    with BackgroundServer(app) as s:
        sizes = [(3, 2), (5, 7), (1, 1)]
        for words, out in sizes:
            httpx.post(f"{s.url}/v1/completions", json={"prompt": "w " * words, "max_tokens": out}, timeout=30)
        assert value(s.url, "vllm:request_success_total", finished_reason="length") == 3
        assert value(s.url, "vllm:prompt_tokens_total") == 9
        assert value(s.url, "vllm:generation_tokens_total") == 10
        assert value(s.url, "vllm:request_prompt_tokens_sum") == 9
        assert value(s.url, "vllm:time_to_first_token_seconds_count") == 3
        assert value(s.url, "vllm:inter_token_latency_seconds_count") == 10 - 3  # gaps between tokens
        assert value(s.url, "vllm:num_requests_running") == 0
        # The families the emulator has no model for stay at their idle values, as vLLM's would.
        assert value(s.url, "vllm:prefix_cache_queries_total") == 9 and value(s.url, "vllm:prefix_cache_hits_total") == 0
        assert value(s.url, "vllm:prompt_tokens_by_source_total", source="local_compute") == 9
        assert value(s.url, "vllm:prompt_tokens_cached_total") == 0 and value(s.url, "vllm:num_preemptions_total") == 0
        # One observation per finished request, whatever phases it reached (vLLM's update_from_finished_request).
        for hist in ("request_time_per_output_token_seconds", "request_num_preemptions", "request_params_max_tokens",
                     "request_prefill_kv_computed_tokens", "request_decode_time_seconds", "request_params_n"):
            assert value(s.url, f"vllm:{hist}_count") == 3, hist
        assert value(s.url, "vllm:request_params_max_tokens_sum") == 10
        assert value(s.url, "vllm:engine_sleep_state", sleep_state="awake") == 1


def test_client_disconnect_aborts() -> None:
    app = create_app(engine_model_for(load_profile(PROFILE), "aggregated"), "m", time_scale=0.05)
    with BackgroundServer(app) as s:
        body = {"prompt": "a b", "max_tokens": 30_000, "stream": True}
        with httpx.stream("POST", f"{s.url}/v1/completions", json=body, timeout=30) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 5:
                    break
        deadline = time.monotonic() + 10
        while value(s.url, "vllm:request_success_total", finished_reason="abort") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert value(s.url, "vllm:request_success_total", finished_reason="abort") == 1
        assert value(s.url, "vllm:num_requests_running") == 0


# ------------------------------------------------------------------------------ scheduler, no HTTP
def tiny_model(chunk_tokens: int = 8192, kv_capacity_tokens: int = 10**6, max_batch: int = 256) -> EngineModel:
    prefill = PrefillCurve.from_points([(1, 0.01), (10_000, 0.02)], 1)
    decode = DecodeCurve.from_points([(1, 100, 0.01), (256, 100, 0.02)], 1, kv_capacity_tokens, max_batch)
    return EngineModel(prefill, decode, chunk_tokens)


def run_engine(model: EngineModel, requests: list[tuple[int, int]], kv_from_prefill: bool = False,
               time_scale: float = 1e-3) -> EmulatedEngine:
    async def main() -> EmulatedEngine:
        engine = EmulatedEngine(model, VllmMetrics("m", 4096), time_scale=time_scale, kv_from_prefill=kv_from_prefill)
        engine.start()
        seqs = [engine.submit(p, o) for p, o in requests]  # one synchronous block: all arrive together
        for seq in seqs:
            while await seq.tokens.get() is not None:
                pass
        await engine.stop()
        return engine

    return asyncio.run(main())


CASES = [
    # (model, requests (prompt, max_tokens), iterations): batching shares iterations, never adds them
    ("one-request", tiny_model(), [(10, 5)], 5),
    ("continuous-batching", tiny_model(), [(10, 5)] * 4, 5),  # sequentially it would be 20
    ("chunked-prefill", tiny_model(chunk_tokens=8), [(20, 1)], 3),  # 8 + 8 + 4 prompt tokens
    ("max-batch", tiny_model(max_batch=2), [(10, 5)] * 3, 10),  # third waits for a slot
    ("kv-capacity", tiny_model(kv_capacity_tokens=30), [(10, 5)] * 3, 10),  # 2 x 15 tokens fill the KV
]


@pytest.mark.parametrize(("model", "requests", "iterations"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_scheduler_iterations(model: EngineModel, requests: list[tuple[int, int]], iterations: int) -> None:
    engine = run_engine(model, requests)
    assert engine.iterations == iterations
    assert [s.generation_tokens for s in engine.served] == [o for _, o in requests]
    assert all(s.finished_reason == "length" for s in engine.served)


DECODE_ROLE_CASES = [
    # A disaggregated decode replica: the prompt's KV comes from prefill, so no iteration computes a prompt and
    # the first token comes with the first step (the same requests on an engine that prefills: 5, 3 and 10).
    ("one-request", tiny_model(), [(10, 5)], 5),
    ("long-prompt-no-chunks", tiny_model(chunk_tokens=8), [(20, 1)], 1),
    ("max-batch", tiny_model(max_batch=2), [(10, 5)] * 3, 10),
]


@pytest.mark.parametrize(("model", "requests", "iterations"), [c[1:] for c in DECODE_ROLE_CASES],
                         ids=[c[0] for c in DECODE_ROLE_CASES])
def test_a_decode_replica_computes_no_prompt(model: EngineModel, requests: list[tuple[int, int]],
                                            iterations: int) -> None:
    engine = run_engine(model, requests, kv_from_prefill=True)
    assert engine.iterations == iterations
    assert [s.generation_tokens for s in engine.served] == [o for _, o in requests]
    by_source = engine.metrics.prompt_tokens_by_source
    assert by_source["external_kv_transfer"]._value.get() == sum(p for p, _ in requests)
    assert by_source["local_compute"]._value.get() == 0


def test_a_decode_replicas_steps_carry_no_prefill_time() -> None:
    # 9,000 prompt tokens arrive beside a decoding sequence: an engine that prefills them spends the profile's
    # prefill time (0.9 s, scaled to 45 ms) in the step they share; a decode replica's steps stay decode steps
    # (10-20 ms, scaled to 0.5-1 ms).
    prefill = PrefillCurve.from_points([(1, 10.0), (10_000, 1000.0)], 1)  # ms
    decode = DecodeCurve.from_points([(1, 100, 10.0), (256, 100, 20.0)], 1, 10**6, 256)
    model = EngineModel(prefill, decode, 16384)

    async def late_long_prompt(kv_from_prefill: bool) -> list[float]:
        engine = EmulatedEngine(model, VllmMetrics("m", 16384), time_scale=0.05, kv_from_prefill=kv_from_prefill)
        engine.start()
        first = engine.submit(10, 20)
        for _ in range(3):  # decoding by now
            await first.tokens.get()
        late = engine.submit(9000, 2)
        for seq in (first, late):
            while await seq.tokens.get() is not None:
                pass
        await engine.stop()
        return engine.itl_s

    prefilling, decoding = (asyncio.run(late_long_prompt(kv)) for kv in (False, True))
    assert max(prefilling) > 0.04
    assert max(decoding) < 0.01


def test_prefill_takes_at_least_the_profile_time() -> None:
    model = engine_model_for(load_profile(PROFILE), "prefill")
    engine = asyncio.run(_one(model, prompt=2000))
    # a lower bound implied by the model (sleeps never end early by more than the timer resolution)
    assert engine.ttft_s[0] >= model.prefill_s(2000) * 0.5 - 0.002


async def _one(model: EngineModel, prompt: int) -> EmulatedEngine:
    engine = EmulatedEngine(model, VllmMetrics("m", 4096), time_scale=0.5)
    engine.start()
    seq = engine.submit(prompt, 1)
    while await seq.tokens.get() is not None:
        pass
    await engine.stop()
    return engine


def test_roles_use_the_profile_curves_at_the_selected_tp() -> None:
    profile = load_profile(PROFILE)
    pre, dec = engine_model_for(profile, "prefill"), engine_model_for(profile, "decode")
    assert pre.prefill == profile.prefill_curve(profile.selected_tp("prefill"))
    assert dec.decode == profile.decode_curve(profile.selected_tp("decode"))
    with pytest.raises(ValueError, match="role"):
        engine_model_for(profile, "both")


def test_token_buckets_are_1_2_5() -> None:
    assert buckets_1_2_5(100) == (1, 2, 5, 10, 20, 50, 100)
    assert buckets_1_2_5(4) == (1, 2)


@pytest.mark.parametrize(("args", "word"), [
    (["--role", "both"], "--role"),
    (["--time-scale", "0"], "--time-scale"),
    (["--port", "70000"], "--port"),
], ids=["bad-role", "zero-time-scale", "bad-port"])
def test_emulate_bad_arguments_exit_2(args: list[str], word: str, capsys) -> None:
    assert run(["emulate", "--profile", str(PROFILE), *args]) == 2
    assert word in capsys.readouterr().err


def test_emulate_missing_profile_exit_2(capsys) -> None:
    assert run(["emulate", "--profile", "/nonexistent/p.json"]) == 2
    assert "not found" in capsys.readouterr().err


def test_planner_emulate_serves_over_http() -> None:
    import subprocess
    import sys

    from planner.testing.ports import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "emulate", "--profile", str(PROFILE), "--role",
                             "decode", "--port", str(port), "--time-scale", "0.05", "--model-name", "tiny"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "a b", "max_tokens": 2})
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.1)
        assert (r.json()["usage"]["prompt_tokens"], r.json()["usage"]["completion_tokens"]) == (2, 2)
        assert r.json()["model"] == "tiny"
        assert 'model_name="tiny"' in httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ------------------------------------------------------------------------------ vLLM's other endpoints
def test_server_endpoints_answer_as_vllm_does(server: BackgroundServer) -> None:
    from planner.testing.vllm_cpu import VLLM_CPU_VERSION

    assert httpx.get(f"{server.url}/version").json() == {"version": VLLM_CPU_VERSION}  # the vLLM it copies
    for method in ("GET", "POST"):
        r = httpx.request(method, f"{server.url}/ping")
        assert (r.status_code, r.content) == (200, b"")
    (card,) = httpx.get(f"{server.url}/v1/models").json()["data"]
    assert (card["id"], card["max_model_len"], card["object"]) == ("qwen3-0.6b", 32768, "model")


def test_tokenize_counts_as_the_completions_do(server: BackgroundServer) -> None:
    text = "count these five words please"
    got = httpx.post(f"{server.url}/tokenize", json={"prompt": text}).json()
    served = httpx.post(f"{server.url}/v1/completions", json={"prompt": text, "max_tokens": 1}).json()
    assert got["count"] == len(got["tokens"]) == served["usage"]["prompt_tokens"] == 5
    assert got["tokens"] == httpx.post(f"{server.url}/tokenize", json={"prompt": text}).json()["tokens"]  # stable
    assert httpx.post(f"{server.url}/tokenize", json={"prompt": [7, 8, 9]}).json()["tokens"] == [7, 8, 9]
    chat = httpx.post(f"{server.url}/tokenize", json={"messages": [{"role": "user", "content": "a b"}]}).json()
    assert chat["count"] == 2
    back = httpx.post(f"{server.url}/detokenize", json={"tokens": got["tokens"]}).json()["prompt"]
    assert httpx.post(f"{server.url}/tokenize", json={"prompt": back}).json()["count"] == 5
    assert httpx.post(f"{server.url}/tokenize", json={"model": "x"}).status_code == 400
    assert httpx.post(f"{server.url}/detokenize", json={"tokens": [-1]}).status_code == 400


def test_stream_chunks_take_every_token_already_queued() -> None:
    from planner.emulator.app import _next_tokens

    async def main() -> list[tuple[list[int], bool]]:
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        for item in (0, 1, 2):  # three tokens piled up while the client was slow: one chunk
            queue.put_nowait(item)
        first = await _next_tokens(queue)
        for item in (3, None):  # the last token and the end mark arrive in the same engine step
            queue.put_nowait(item)
        second = await _next_tokens(queue)
        queue.put_nowait(None)  # aborted before any token: an empty, finishing chunk
        return [first, second, await _next_tokens(queue)]

    assert asyncio.run(main()) == [([0, 1, 2], False), ([3], True), ([], True)]


# ------------------------------------------------------------------------------ the served model name
@pytest.mark.parametrize(("profile_model", "given", "served", "aliases"), [
    ("qwen3-32b", None, "Qwen/Qwen3-32B", ("qwen3-32b",)),  # as `planner init` writes --served-model-name
    ("Qwen3-0.6B", None, "Qwen/Qwen3-0.6B", ("Qwen3-0.6B",)),
    ("llama-3.1-8b", None, "meta-llama/Llama-3.1-8B-Instruct", ("llama-3.1-8b",)),
    ("my-own-model", None, "my-own-model", ()),  # no known repository: the profile's name alone
    ("qwen3-32b", "tiny", "tiny", ()),  # --model-name given: that name alone
])
def test_served_names(profile_model: str, given: str | None, served: str, aliases: tuple[str, ...]) -> None:
    from planner.commands.emulate import served_names

    assert served_names(profile_model, given) == (served, aliases)


def test_an_alias_is_served_beside_the_name_and_a_third_name_is_not() -> None:
    app = create_app(engine_model_for(load_profile(PROFILE), "aggregated"), "Qwen/Qwen3-0.6B", time_scale=0.05,
                     aliases=("qwen3-0.6b",))
    with BackgroundServer(app) as s:
        for name in ("Qwen/Qwen3-0.6B", "qwen3-0.6b", None):
            body = {"prompt": "a b", "max_tokens": 2, **({"model": name} if name else {})}
            r = httpx.post(f"{s.url}/v1/completions", json=body)
            assert r.status_code == 200 and r.json()["model"] == "Qwen/Qwen3-0.6B", (name, r.text)
        r = httpx.post(f"{s.url}/v1/completions", json={"prompt": "a", "max_tokens": 1, "model": "Qwen3-0.6B"})
        assert r.status_code == 404 and "does not exist" in r.text
        assert [m["id"] for m in httpx.get(f"{s.url}/v1/models").json()["data"]] == ["Qwen/Qwen3-0.6B", "qwen3-0.6b"]
        assert 'model_name="Qwen/Qwen3-0.6B"' in httpx.get(f"{s.url}/metrics").text
