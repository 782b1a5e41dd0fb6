"""The engine emulator against a real vLLM 0.32 server (the session's shared CPU server, conftest.py): the
/metrics family sets (name, type, label names, bucket bounds, enumerated label values), the metrics'
semantics under one workload, and the API's behaviours (status codes, JSON shapes, SSE chunk sequences).

The diff must be empty except for DIFFERENT, each listed with its reason; a listed difference that goes
away fails too, so the list stays true. Every request the real server completes goes into the session's
ledger (test_engine_vllm.py checks its cumulative metrics against all of them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from planner.emulator.app import create_app, engine_model_for
from planner.profile import load_profile
from planner.service.background import BackgroundServer
from tests.support.engine_fixtures import MODEL, Ledger, Reply, scrape, tokenize

pytestmark = pytest.mark.engine
PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "h200" / "qwen3-0.6b.json"
MAX_MODEL_LEN = 4096  # VllmServer's DEFAULT_ARGS
GEN = {"model": MODEL, "max_tokens": 12, "ignore_eos": True}  # ignore_eos: every request ends by "length"
CHAT = {**GEN, "messages": [{"role": "user", "content": "how are you"}]}
USAGE = {"include_usage": True}
CASES: list[tuple[str, str, str, Any]] = [
    ("completion", "POST", "/v1/completions", {**GEN, "prompt": "one two three"}),
    ("completion-token-ids", "POST", "/v1/completions", {**GEN, "prompt": [5, 6, 7, 8]}),
    ("completion-one-text-in-a-list", "POST", "/v1/completions", {**GEN, "prompt": ["one two"]}),
    ("completion-one-id-list-in-a-list", "POST", "/v1/completions", {**GEN, "prompt": [[9, 10, 11]]}),
    ("completion-lax-max-tokens", "POST", "/v1/completions", {**GEN, "prompt": "a", "max_tokens": "3"}),
    ("chat", "POST", "/v1/chat/completions", CHAT),
    ("chat-content-parts", "POST", "/v1/chat/completions",
     {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]}),
    ("stream", "POST", "/v1/completions", {**GEN, "prompt": [5, 6], "stream": True}),
    ("stream-usage", "POST", "/v1/completions", {**GEN, "prompt": [5, 6], "stream": True, "stream_options": USAGE}),
    ("stream-continuous-usage", "POST", "/v1/completions", {**GEN, "prompt": [5, 6], "stream": True,
                                                            "stream_options": {**USAGE, "continuous_usage_stats": True}}),
    ("stream-continuous-without-usage", "POST", "/v1/completions",
     {**GEN, "prompt": [5, 6], "stream": True, "stream_options": {"continuous_usage_stats": True}}),
    ("chat-stream", "POST", "/v1/chat/completions", {**CHAT, "stream": True}),
    ("chat-stream-usage", "POST", "/v1/chat/completions", {**CHAT, "stream": True, "stream_options": USAGE}),
    ("chat-stream-continuous-usage", "POST", "/v1/chat/completions",
     {**CHAT, "stream": True, "stream_options": {**USAGE, "continuous_usage_stats": True}}),
    ("no-prompt", "POST", "/v1/completions", {"model": MODEL}),
    ("empty-prompt", "POST", "/v1/completions", {"model": MODEL, "prompt": ""}),
    ("empty-prompt-list", "POST", "/v1/completions", {"model": MODEL, "prompt": []}),
    ("negative-token-id", "POST", "/v1/completions", {"model": MODEL, "prompt": [-1]}),
    ("zero-max-tokens", "POST", "/v1/completions", {**GEN, "prompt": "a", "max_tokens": 0}),
    ("max-tokens-over-context", "POST", "/v1/completions", {**GEN, "prompt": "a", "max_tokens": 5000}),
    ("prompt-over-context", "POST", "/v1/completions", {**GEN, "prompt": [5] * 5000}),
    ("stream-options-without-stream", "POST", "/v1/completions", {**GEN, "prompt": "a", "stream_options": USAGE}),
    ("unknown-model", "POST", "/v1/completions", {**GEN, "prompt": "a", "model": "nope"}),
    ("no-messages", "POST", "/v1/chat/completions", {**CHAT, "messages": []}),
    ("bad-content", "POST", "/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": 3}]}),
    ("not-an-object", "POST", "/v1/completions", [1, 2]),
    ("invalid-json", "POST", "/v1/completions", b"{nope"),
    ("health", "GET", "/health", None),
    ("ping", "GET", "/ping", None),
    ("ping-post", "POST", "/ping", None),
    ("version", "GET", "/version", None),
    ("models", "GET", "/v1/models", None),
    ("tokenize-prompt", "POST", "/tokenize", {"model": MODEL, "prompt": "hello there"}),
    ("tokenize-messages", "POST", "/tokenize", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    ("tokenize-nothing", "POST", "/tokenize", {"model": MODEL}),
    ("detokenize", "POST", "/detokenize", {"model": MODEL, "tokens": [5, 6, 7]}),
    ("unknown-path", "GET", "/nope", None),
    ("wrong-method", "GET", "/v1/completions", None),
    # Listed in DIFFERENT:
    ("two-prompts", "POST", "/v1/completions", {**GEN, "prompt": [[5, 6, 7], [8, 9]]}),
    ("n-2", "POST", "/v1/completions", {**GEN, "prompt": [5, 6, 7], "n": 2}),
    ("out-of-vocabulary-id", "POST", "/v1/completions", {**GEN, "prompt": [999_999]}),
]
DIFFERENT = {
    "two-prompts": "the emulator serves one prompt per request (400); vLLM answers one choice per prompt. Load "
                   "generators send one prompt per request.",
    "n-2": "the emulator serves one sequence per request (400); vLLM samples n choices.",
    "out-of-vocabulary-id": "the emulator has no vocabulary: any id >= 0 is one token (200); vLLM answers 400.",
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[BackgroundServer]:
    app = create_app(engine_model_for(load_profile(PROFILE), "aggregated"), MODEL, time_scale=0.05,
                     max_model_len=MAX_MODEL_LEN)
    with BackgroundServer(app) as s:
        yield s


@pytest.fixture
def real(shared_vllm) -> tuple[str, Ledger]:
    return shared_vllm.get().url, shared_vllm.ledger


def shape(obj: Any) -> Any:
    """Keys (in order) and value types, recursively; a list is the distinct shapes of its items."""
    if isinstance(obj, dict):
        return tuple((k, shape(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return ("list", tuple(dict.fromkeys(shape(v) for v in obj)))
    return type(obj).__name__


def signature(r: httpx.Response) -> Any:
    """What a client can rely on: status, media type and body shape; a stream's chunk shapes in order,
    its middle chunks (text, no finish reason) as one set since vLLM merges them when the client lags."""
    media = r.headers.get("content-type", "").split(";")[0]
    if media == "text/event-stream":
        events = [line[len("data: "):] for line in r.text.splitlines() if line.startswith("data: ")]
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        middle = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None
                  and "role" not in c["choices"][0].get("delta", {})]
        return r.status_code, media, [shape(c) for c in chunks if c not in middle], {shape(c) for c in middle}, events[-1]
    return r.status_code, media, shape(r.json()) if media == "application/json" else r.text


def call(url: str, method: str, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if content is not None else {}
    return httpx.request(method, url + path, content=content, headers=headers, timeout=60)


def record(ledger: Ledger, url: str, body: Any, r: httpx.Response) -> None:
    """Ledger entries for the engine requests a real-server reply stands for (one per prompt and choice)."""
    if r.status_code != 200 or not isinstance(body, dict) or "max_tokens" not in body:
        return
    prompts = body.get("prompt")
    if isinstance(prompts, list) and prompts and isinstance(prompts[0], list):
        sizes = [len(p) for p in prompts]
    elif isinstance(prompts, list) and prompts and isinstance(prompts[0], int):
        sizes = [len(prompts)]
    elif "messages" in body:
        sizes = [tokenize(url, messages=body["messages"])]
    else:
        sizes = [tokenize(url, prompt=prompts[0] if isinstance(prompts, list) else prompts)]
    for n_prompt in sizes * int(body.get("n", 1)):
        ledger.add(Reply(n_prompt, int(body["max_tokens"]), "length"))


@pytest.mark.parametrize(("method", "path", "body"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_api_behaviour(real: tuple[str, Ledger], emulator: BackgroundServer, request: pytest.FixtureRequest,
                       method: str, path: str, body: Any) -> None:
    case = request.node.callspec.id
    url, ledger = real
    vllm = call(url, method, path, body)
    record(ledger, url, body, vllm)
    ours = call(emulator.url, method, path, body)
    if case in DIFFERENT:
        assert signature(ours) != signature(vllm), f"{case} now matches vLLM: drop it from DIFFERENT"
        return
    got, want = signature(ours), signature(vllm)
    if len(want) == 5 and not (want[3] and got[3]):  # a stream vLLM (or we) merged into one chunk: no middle
        got, want = got[:3] + got[4:], want[:3] + want[4:]
    assert got == want, f"{case}: emulator {got}\nvLLM {want}"


def families(url: str) -> dict[str, tuple[str, frozenset[str]]]:
    """/metrics as family name -> (type, label names); ``le`` and ``quantile`` are the type's own."""
    return {name: (f.type, frozenset(k for s in f.samples for k in s.labels if k not in ("le", "quantile")))
            for name, f in scrape(url).items()}


def enumerations(url: str) -> dict[tuple[str, str], frozenset[str]]:
    """The values of every closed label of the vllm:* families (finished_reason, reason, source, ...)."""
    out: dict[tuple[str, str], set[str]] = {}
    for name, f in scrape(url).items():
        if name.startswith("vllm:") and name != "vllm:cache_config_info":
            for s in f.samples:
                for k, v in s.labels.items():
                    if k not in ("model_name", "engine", "le"):
                        out.setdefault((name, k), set()).add(v)
    return {k: frozenset(v) for k, v in out.items()}


def bucket_bounds(url: str) -> dict[str, tuple[float, ...]]:
    return {name: tuple(sorted({float(s.labels["le"]) for s in f.samples if s.name == f"{name}_bucket"}))
            for name, f in scrape(url).items() if f.type == "histogram"}


def test_metric_families_match(real: tuple[str, Ledger], emulator: BackgroundServer) -> None:
    url, ledger = real
    for base in (url, emulator.url):  # the HTTP families show the handlers that answered; the same on both
        body = {**GEN, "prompt": [5, 6, 7]}
        r = call(base, "POST", "/v1/completions", body)
        if base == url:
            record(ledger, url, body, r)
        call(base, "GET", "/v1/models", None)
    want, got = families(url), families(emulator.url)
    assert {n: (want.get(n), got.get(n)) for n in set(want) | set(got) if want.get(n) != got.get(n)} == {}
    assert bucket_bounds(emulator.url) == bucket_bounds(url)
    assert enumerations(emulator.url) == enumerations(url)
    assert call(emulator.url, "GET", "/version", None).json() == call(url, "GET", "/version", None).json()


WORKLOAD = [  # token-id prompts, shorter than a 128-token KV block: the same tokens and no prefix-cache hit
    {**GEN, "prompt": [5 + i] * (3 + 11 * i), "max_tokens": 2 + 3 * i, "stream": i % 2 == 1} for i in range(6)
]
SAME_DELTA = [  # series whose increase under WORKLOAD must be equal: they count tokens and requests
    ("vllm:request_success_total", {"finished_reason": "length"}), ("vllm:prompt_tokens_total", {}),
    ("vllm:generation_tokens_total", {}), ("vllm:num_preemptions_total", {}), ("vllm:prefix_cache_queries_total", {}),
    ("vllm:prefix_cache_hits_total", {}), ("vllm:prompt_tokens_cached_total", {}),
    *(("vllm:prompt_tokens_by_source_total", {"source": s}) for s in
       ("local_compute", "local_cache_hit", "external_kv_transfer")),
    *((f"vllm:{h}_{stat}", {}) for h in ("request_prompt_tokens", "request_generation_tokens",
                                         "request_params_max_tokens", "request_params_n",
                                         "request_max_num_generation_tokens", "request_num_preemptions",
                                         "request_prefill_kv_computed_tokens") for stat in ("sum", "count")),
    *((f"vllm:{h}_count", {}) for h in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                                        "request_time_per_output_token_seconds", "e2e_request_latency_seconds",
                                        "request_queue_time_seconds", "request_prefill_time_seconds",
                                        "request_decode_time_seconds", "request_inference_time_seconds")),
    ("http_requests_total", {"handler": "/v1/completions", "method": "POST", "status": "2xx"}),
]


def values(url: str) -> list[float]:
    fams = scrape(url)
    out = []
    for sample_name, labels in SAME_DELTA:
        family = next(n for n in (sample_name, *(sample_name.removesuffix(s) for s in ("_total", "_sum", "_count")))
                      if n in fams)
        out.append(sum(s.value for s in fams[family].samples
                       if s.name == sample_name and labels.items() <= s.labels.items()))
    return out


def test_metrics_count_the_same_workload_the_same(real: tuple[str, Ledger], emulator: BackgroundServer) -> None:
    url, ledger = real
    deltas = []
    for base in (url, emulator.url):
        before = values(base)
        for body in WORKLOAD:
            r = call(base, "POST", "/v1/completions", body)
            assert r.status_code == 200, r.text
            if base == url:
                record(ledger, url, body, r)
        deadline = time.monotonic() + 15  # the engine's stats (and the HTTP middleware) land just after replies
        while (delta := [a - b for a, b in zip(values(base), before, strict=True)])[0] < len(WORKLOAD):
            assert time.monotonic() < deadline, delta
            time.sleep(0.1)
        deltas.append(dict(zip([f"{n}{labels or ''}" for n, labels in SAME_DELTA], delta, strict=True)))
    vllm, ours = deltas
    assert {k: (vllm[k], ours[k]) for k in vllm if vllm[k] != ours[k]} == {}
    assert vllm["vllm:request_success_total{'finished_reason': 'length'}"] == len(WORKLOAD)
