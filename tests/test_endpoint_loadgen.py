"""The endpoint backend's pieces on their own: the steady-state window, SSE chunk accounting, prompts of an
exact length, model matching, and the load generator against a real in-process server."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from planner.emulator.app import create_app, engine_model_for
from planner.errors import UserError
from planner.profile import load_profile
from planner.profiler.endpoint_server import choose_model, names_match
from planner.profiler.loadgen import (
    PLAIN_USAGE,
    RequestShape,
    StreamResult,
    _take_chunk,
    error_message,
    make_client,
    run_streams,
)
from planner.profiler.prompts import TEXT, TOKEN_IDS, PromptMaker, close_enough, token_id_range
from planner.profiler.steady import steady_window
from planner.service.background import BackgroundServer


def stream(first_s: float, gap_s: float, tokens: int, per_chunk: int = 1) -> StreamResult:
    """A stream whose first token came at ``first_s`` and then one chunk of ``per_chunk`` tokens every
    ``gap_s * per_chunk`` seconds."""
    times = [first_s + i * gap_s * per_chunk for i in range(tokens // per_chunk)]
    return StreamResult(0.0, events_s=times, tokens=[(i + 1) * per_chunk for i in range(len(times))])


def test_window_is_latest_first_token_to_earliest_last() -> None:
    # Three streams at 20 ms/token starting 0, 30, 60 ms apart: the last starter's first token opens the
    # window, the first finisher's last token closes it.
    streams = [stream(0.100, 0.020, 50), stream(0.130, 0.020, 50), stream(0.160, 0.020, 50)]
    w = steady_window(streams, [100, 100, 100])
    assert w is not None
    assert (w.start_s, w.end_s) == (0.160, 0.100 + 49 * 0.020)
    assert w.itl_s == pytest.approx(0.020)
    assert w.tokens_before == 3  # the first stream's tokens at 0.10, 0.12, 0.14 s came before the window
    assert w.steps == 45  # the middle starter, out of step with the window: 0.17 .. 1.07 s, 45 gaps


def test_a_late_timestamp_at_the_window_edge_barely_moves_the_itl() -> None:
    # The client was busy when the first tokens came: they were stamped 100 ms late, all at once (the
    # two-point estimate (last - first) / tokens would read 20 ms as 17.5 ms).
    late = stream(0.0, 0.020, 41)
    late.events_s[:6] = [0.100] * 6
    w = steady_window([late], [100])
    assert w is not None and w.itl_s == pytest.approx(0.020)


def test_merged_chunks_count_their_tokens() -> None:
    w = steady_window([stream(0.0, 0.010, 40, per_chunk=4)], [64])
    assert w is not None and w.itl_s == pytest.approx(0.010) and w.steps == 36


@pytest.mark.parametrize("streams", [
    [stream(0.0, 0.01, 10), stream(0.5, 0.01, 10)],  # the second started after the first had finished
    [stream(0.0, 0.01, 1)],  # one token: no gap to time
], ids=["queued", "single-token"])
def test_no_window_when_the_streams_never_decode_together(streams) -> None:
    assert steady_window(streams, [10] * len(streams)) is None


@pytest.mark.parametrize("chunks, tokens, completion, per_chunk", [
    ([{"choices": [{"text": " a"}]}, {"choices": [{"text": " b"}]}, {"choices": [{"text": "", "finish_reason":
      "length"}]}, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}], [1, 2], 2, False),
    ([{"choices": [{"text": " a b"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
      {"choices": [{"text": " c", "finish_reason": "length"}], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
      {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}], [2, 3], 3, True),
], ids=["counted-chunks", "usage-per-chunk"])
def test_chunk_accounting(chunks, tokens, completion, per_chunk) -> None:
    res = StreamResult(0.0)
    for i, chunk in enumerate(chunks):
        _take_chunk(res, chunk, float(i))
    assert (res.tokens, res.completion_tokens, res.prompt_tokens, res.usage_per_chunk) == (tokens, completion, 5,
                                                                                          per_chunk)


def test_error_messages_are_the_servers() -> None:
    assert error_message('{"error": {"message": "too  long", "code": 400}}') == "too long"
    assert error_message('{"detail": "Not Found"}') == "Not Found"
    assert error_message("<html>bad gateway</html>") == "<html>bad gateway</html>"


def test_text_prompts_converge_on_the_count_the_server_gives() -> None:
    # A tokenizer with a BOS token whose tokens per word grow with the text (longer words further in):
    # the two-probe fit misses 1000 tokens by ~10 %, and what the server counts steers it within 2 %.
    def server_count(text: str) -> int:
        words = len(text.split())
        return 1 + round(1.5 * words) + words * words // 2000

    maker = PromptMaker(TEXT, seed=3)
    maker.fit([(w, server_count(" ".join(["x"] * w))) for w in (32, 256)])
    counts = [server_count(str(maker.make(1000)))]
    while not close_enough(1000, counts[-1]) and len(counts) < 5:
        maker.observe(1000, [counts[-1]])
        counts.append(server_count(str(maker.make(1000))))
    assert not close_enough(1000, counts[0]) and close_enough(1000, counts[-1]), counts


def test_token_id_prompts_are_exact_unique_and_clear_of_special_tokens() -> None:
    maker = PromptMaker(TOKEN_IDS, vocab=151936, seed=1)
    a, b = maker.make(300), maker.make(300)
    assert len(a) == len(b) == 300 and a[:16] != b[:16]  # no shared prefix block for a prefix cache
    low, high = token_id_range(151936)
    assert all(low <= t < high < 151643 for t in a)
    assert token_id_range(4096)[1] <= 4096 - 512


@pytest.mark.parametrize("model, listed, served, expect", [
    ("qwen3-32b", [{"id": "Qwen/Qwen3-32B"}], None, "Qwen/Qwen3-32B"),
    ("llama-3.1-70b", [{"id": "llama", "root": "/models/meta-llama/Llama-3.1-70B-Instruct"}], None, "llama"),
    ("qwen3-8b", [{"id": "qwen3-32b"}, {"id": "qwen3-8b"}], None, "qwen3-8b"),
    ("qwen3-8b", [{"id": "x"}, {"id": "y"}], "y", "y"),
    # one model under two served names (vLLM: one card per --served-model-name, the same root)
    ("qwen3-32b", [{"id": "Qwen/Qwen3-32B", "root": "Qwen/Qwen3-32B"}, {"id": "qwen3-32b", "root": "Qwen/Qwen3-32B"}],
     None, "Qwen/Qwen3-32B"),
], ids=["hf-name", "root-path", "several", "explicit", "aliases"])
def test_model_matching(model, listed, served, expect) -> None:
    assert choose_model("http://u", listed, model, served)["id"] == expect


def test_model_matching_refuses_what_it_cannot_tell() -> None:
    with pytest.raises(UserError, match=r"^served_model: http://u serves a, b; say which one is qwen3-8b$"):
        choose_model("http://u", [{"id": "a"}, {"id": "b"}], "qwen3-8b", None)
    with pytest.raises(UserError, match=r"^url: http://u serves no model"):
        choose_model("http://u", [], "qwen3-8b", None)
    with pytest.raises(UserError, match=r"say which one is qwen3-8b$"):  # two models that both match: not aliases
        choose_model("http://u", [{"id": "qwen3-8b", "root": "/a/qwen3-8b"}, {"id": "qwen3-8b-fp8", "root": "/b/x"}],
                     "qwen3-8b", None)
    assert not names_match("qwen3-8b", {"id": "qwen3-32b"}) and not names_match("", {"id": "x"})


def test_run_streams_against_the_emulator() -> None:
    profile = load_profile(Path(__file__).resolve().parent.parent / "profiles/h200/qwen3-0.6b.json")
    with BackgroundServer(create_app(engine_model_for(profile, "aggregated"), "m", time_scale=0.05)) as server:
        async def go() -> list[StreamResult]:
            async with make_client(server.url, 8, 30) as client:
                return await run_streams(client, RequestShape("m", PLAIN_USAGE, {}), ["a b c"] * 3 + ["d e"], 5)

        results = asyncio.run(go())
    assert [r.prompt_tokens for r in results] == [3, 3, 3, 2]
    assert all(r.ok and r.tokens == [1, 2, 3, 4, 5] and r.completion_tokens == 5 for r in results)
    assert all(r.finish_reason == "length" and r.ttft_s > 0 for r in results)


def test_a_batch_the_server_queues_is_closed_early() -> None:
    # KV for two requests of 20 + 100 tokens only: the engine runs two, queues two. At real speed (time_scale
    # 1) the two running streams take ~100 ITLs, far longer than a busy client takes to see the first end
    # (at 0.05 a loaded CI machine saw all four end before it looked).
    profile = load_profile(Path(__file__).resolve().parent.parent / "profiles/h200/qwen3-0.6b.json")
    model = engine_model_for(profile, "aggregated")
    small = replace(model, decode=replace(model.decode, kv_capacity_tokens=2 * (20 + 100)))
    with BackgroundServer(create_app(small, "m", time_scale=1.0)) as server:
        async def go() -> list[StreamResult]:
            async with make_client(server.url, 8, 30) as client:
                return await run_streams(client, RequestShape("m", PLAIN_USAGE, {}), [" ".join(["w"] * 20)] * 4,
                                         100, stop_if_queued=True)

        results = asyncio.run(go())
    finished = [r for r in results if not r.closed_early]
    assert len(finished) >= 1 and all(r.tokens[-1] == 100 for r in finished)
    closed = [r for r in results if r.closed_early]
    # The queued ones: closed, not waited for. (A running stream closed with them may already hold its last
    # token and wait only for the closing chunk, so not every closed one is short.)
    assert closed and any(r.tokens[-1:] != [100] for r in closed)
    assert steady_window(results, [20] * 4) is None
