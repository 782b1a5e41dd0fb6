"""A real disaggregated pair (vLLM CPU build): a prefill server (kv_producer) and a decode server
(kv_consumer) sharing KV through files (ExampleConnector), routed in two steps by the test as a proxy
would: prefill with max_tokens=1, then stream from the decode server. The session's aggregated server
(conftest.py) is stopped before these two start (2 cores); module order runs it after its users."""

from __future__ import annotations

import os

import pytest

from planner.sources.dialects import VLLM
from planner.testing.vllm_cpu import TINY_MODEL_CONFIG, VllmServer
from planner.testing.vllm_server import group_alive
from tests.support.engine_fixtures import scrape, send, tokenize, total, words

pytestmark = pytest.mark.engine


def block_size(families: dict) -> int:
    (sample,) = [s for s in families["vllm:cache_config_info"].samples]
    return int(sample.labels["block_size"])


def test_disaggregated_pair_streams_and_the_decode_server_counts_the_request(vllm_engine, shared_vllm,
                                                                             tmp_path) -> None:
    shared_vllm.stop()  # the session's aggregated server would compete for the 2 cores with the pair
    kv_path = tmp_path / "kv"
    kv_path.mkdir()
    prefill = VllmServer(vllm_engine.python, vllm_engine.model_dir, role="kv_producer", kv_path=kv_path,
                         cpus="0", log_dir=tmp_path)
    decode = VllmServer(vllm_engine.python, vllm_engine.model_dir, role="kv_consumer", kv_path=kv_path,
                        cpus="1", log_dir=tmp_path)
    try:
        prefill.launch()
        decode.launch()  # both load at once: one start-up's wait for the pair
        prefill.wait_ready()
        decode.wait_ready()
        # Each engine core runs the model on its own core (vLLM's bind variable is not applied by the
        # uniprocess executor; VllmServer pins the engine core's model thread): the engines never share one.
        affinity = {s.cpus: {pid: os.sched_getaffinity(pid) for pid in s.pinned} for s in (prefill, decode)}
        text = words(160)
        n_prompt = tokenize(prefill.url, prompt=text)
        first = send(prefill.url, "completion", text, max_tokens=1, stream=False)
        stored = sorted(p.name for p in kv_path.rglob("*.safetensors"))
        reply = send(decode.url, "completion", text, max_tokens=16, temperature=0)
        dec_metrics = scrape(decode.url)
        # The prefill server continuing the same prompt itself, greedily: it too takes the prompt's
        # full blocks from its prefix cache, so the two paths differ only in where those blocks came from.
        itself = send(prefill.url, "completion", text, max_tokens=16, temperature=0)
        pre_metrics = scrape(prefill.url)
    finally:
        groups = [s.proc.pid for s in (prefill, decode) if s.proc is not None]
        decode.stop()
        prefill.stop()
    assert not any(group_alive(g) for g in groups), "a server's process group outlived stop()"

    assert [list(a.values()) for a in affinity.values()] == [[{0}], [{1}]], affinity
    bs = block_size(dec_metrics)
    assert n_prompt > 2 * bs  # at least one full block travels (the connector moves whole blocks only)
    assert (first.prompt_tokens, first.completion_tokens) == (n_prompt, 1)
    assert len(stored) == TINY_MODEL_CONFIG["num_hidden_layers"]  # one KV file per attention layer
    assert reply.saw_done and reply.finish_reason == "length"
    assert (reply.prompt_tokens, reply.completion_tokens) == (n_prompt, 16)
    assert len(reply.texts) >= 2 and reply.first_s is not None and reply.first_s < reply.done_s
    assert "".join(reply.texts) == "".join(itself.texts)  # transferred KV gives the same greedy tokens
    # The decode server served the request, and took its prompt's KV from the prefill server.
    assert total(dec_metrics, VLLM.completed_counter) == 1
    assert total(dec_metrics, VLLM.isl.numerator) == n_prompt
    assert total(dec_metrics, VLLM.osl.numerator) == 16
    transferred = (n_prompt - 2) // bs * bs  # ExampleConnector's align_to_block_size(n_prompt - 1)
    assert total(dec_metrics, "vllm:external_prefix_cache_hits_total") == transferred
    assert total(dec_metrics, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == transferred
    assert total(pre_metrics, VLLM.completed_counter) == 2
    assert total(pre_metrics, VLLM.osl.numerator) == 1 + 16
    assert total(pre_metrics, "vllm:prefix_cache_hits_total") == (n_prompt - 1) // bs * bs  # local blocks
