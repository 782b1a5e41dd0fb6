"""Client helpers for tests against a real vLLM server (OpenAI-compatible HTTP API and /metrics).

A test module uses them with ``from tests.support.engine_fixtures import ...``.
Every request goes through ``Ledger`` so that a test can compare the server's cumulative metrics with
exactly what all tests of the module sent.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

MODEL = "tiny"  # VllmServer's default --served-model-name


@dataclass
class Reply:
    """One request's outcome as the client saw it (times from time.monotonic())."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    texts: list[str] = field(default_factory=list)  # one entry per content-bearing SSE chunk (or the whole text)
    sent_s: float = 0.0
    first_s: float | None = None  # first content chunk (streaming only)
    done_s: float = 0.0
    saw_done: bool = False  # the stream ended with "data: [DONE]"


class Ledger:
    """Every reply a module's server gave; thread-safe."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self._lock = threading.Lock()

    def add(self, reply: Reply) -> Reply:
        with self._lock:
            self.replies.append(reply)
        return reply


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{k % 1000} token" for k in range(start, start + n))


def body(kind: str, text: str, max_tokens: int, stream: bool, **extra: object) -> dict:
    """A completions or chat request; ignore_eos makes the output length exactly max_tokens."""
    out: dict = {"model": MODEL, "max_tokens": max_tokens, "ignore_eos": True, "stream": stream, **extra}
    if kind == "chat":
        out["messages"] = [{"role": "user", "content": text}]
    else:
        out["prompt"] = text
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


def send(url: str, kind: str, text: str, max_tokens: int, stream: bool = True, timeout_s: float = 120,
         **extra: object) -> Reply:
    """One request; ``extra`` goes into the body (``temperature=0`` for greedy decoding)."""
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    sent = time.monotonic()
    with httpx.Client(timeout=timeout_s) as client:
        if not stream:
            r = client.post(url + path, json=body(kind, text, max_tokens, False, **extra))
            assert r.status_code == 200, r.text
            data = r.json()
            choice = data["choices"][0]
            text_out = choice["message"]["content"] if kind == "chat" else choice["text"]
            return Reply(data["usage"]["prompt_tokens"], data["usage"]["completion_tokens"],
                         choice["finish_reason"], [text_out], sent, None, time.monotonic())
        reply = Reply(-1, -1, None, sent_s=sent)
        with client.stream("POST", url + path, json=body(kind, text, max_tokens, True, **extra)) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                _on_line(line, kind, reply)
        reply.done_s = time.monotonic()
        return reply


def _on_line(line: str, kind: str, reply: Reply) -> None:
    if not line.startswith("data: "):
        return
    data = line[len("data: "):]
    if data == "[DONE]":
        reply.saw_done = True
        return
    chunk = json.loads(data)
    if chunk.get("usage"):
        reply.prompt_tokens = chunk["usage"]["prompt_tokens"]
        reply.completion_tokens = chunk["usage"]["completion_tokens"]
    for choice in chunk.get("choices", []):
        text = (choice.get("delta") or {}).get("content") if kind == "chat" else choice.get("text")
        if text:
            reply.texts.append(text)
            if reply.first_s is None:
                reply.first_s = time.monotonic()
        if choice.get("finish_reason"):
            reply.finish_reason = choice["finish_reason"]


def tokenize(url: str, *, prompt: str | None = None, messages: list[dict] | None = None) -> int:
    """The prompt's token count by the server's own tokenizer (and chat template)."""
    payload: dict = {"model": MODEL}
    if messages is not None:
        payload.update(messages=messages, add_generation_prompt=True)
    else:
        payload["prompt"] = prompt
    r = httpx.post(f"{url}/tokenize", json=payload, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["count"])


def scrape(url: str) -> dict:
    """/metrics as prometheus_client families, by family name (a counter's name has no ``_total``)."""
    r = httpx.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def total(families: dict, sample_name: str, **labels: str) -> float:
    """Sum of the samples named ``sample_name`` whose labels include ``labels``."""
    family = sample_name
    for suffix in ("_total", "_sum", "_count", "_bucket"):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in families:
            family = sample_name[: -len(suffix)]
    return sum(s.value for s in families[family].samples
               if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()))
