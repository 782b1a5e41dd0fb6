"""What an OpenAI-compatible server says about itself, and how it wants to be asked.

Read once before a sweep, each from where the engines expose it (absent ones become provenance notes):
- ``/v1/models``: the served model's id, ``root`` (its path) and ``max_model_len`` (vLLM, SGLang, emulator);
- ``/version``: vLLM's ``{"version": ...}``;
- ``/get_server_info``: SGLang's server arguments (tp_size, max_total_num_tokens, ...);
- ``/metrics``: vLLM's ``vllm:cache_config_info`` (num_gpu_blocks x block_size = KV capacity in tokens)
  and ``vllm:num_preemptions_total`` (read around each decode point: a point that preempted did not run
  its batch at once).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from planner.errors import UserError

SGLANG_FLAGS = ("version", "tp_size", "dp_size", "max_running_requests", "max_total_num_tokens",
                "chunked_prefill_size", "context_length", "disable_radix_cache", "attention_backend",
                "model_path", "mem_fraction_static")
PREEMPTIONS = "vllm:num_preemptions"
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")  # gauges
ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"


@dataclass
class ServerInfo:
    url: str
    served_model: str
    root: str | None = None
    max_model_len: int | None = None
    version: str | None = None
    kv_capacity_tokens: int | None = None
    kv_source: str = ""
    flags: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().rsplit("/", 1)[-1])


def names_match(model_name: str, served: dict[str, Any]) -> bool:
    """A catalog name (qwen3-32b) matches a served id or path (Qwen/Qwen3-32B, /models/qwen3-32b-instruct)."""
    want = _norm(model_name)
    return bool(want) and any(want in _norm(str(served.get(k) or "")) for k in ("id", "root"))


def choose_model(url: str, listed: list[dict[str, Any]], model_name: str, served_model: str | None) -> dict:
    ids = [str(m.get("id")) for m in listed]
    if not listed:
        raise UserError(f"url: {url} serves no model (/v1/models is empty)", key="url")
    if served_model is not None:
        for m in listed:
            if m.get("id") == served_model:
                return m
        raise UserError(f"served_model: {served_model!r} is not served at {url}; it serves: {', '.join(ids)}",
                        key="served_model")
    matching = [m for m in listed if names_match(model_name, m)]
    if len(matching) == 1:
        return matching[0]
    roots = {str(m.get("root") or m.get("id")) for m in matching}
    if len(matching) > 1 and len(roots) == 1:
        # One model served under several names (vLLM lists each --served-model-name as a card, one root):
        # any of them reaches the same weights.
        return matching[0]
    if len(listed) == 1 and not matching:
        raise UserError(f"model: {model_name} does not match the model served at {url} ({ids[0]!r}"
                        f"{', root ' + repr(listed[0]['root']) if listed[0].get('root') else ''}); pass "
                        "served_model to profile it with this model's shapes anyway", key="model",
                        mentions=("served_model",))
    raise UserError(f"served_model: {url} serves {', '.join(ids)}; say which one is {model_name}",
                    key="served_model")


async def _get(client: httpx.AsyncClient, path: str) -> httpx.Response | None:
    try:
        response = await client.get(path, timeout=10.0)
    except httpx.HTTPError:
        return None
    return response if response.status_code == 200 else None


async def list_models(client: httpx.AsyncClient, url: str) -> list[dict[str, Any]]:
    try:
        response = await client.get("/v1/models", timeout=10.0)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
        raise UserError(f"url: {url}: cannot connect ({type(exc).__name__}: {exc or 'no answer'}); is the "
                        "server running and is the URL right?", key="url") from None
    except httpx.HTTPError as exc:
        raise UserError(f"url: {url}: GET /v1/models failed ({type(exc).__name__}: {exc})", key="url") from None
    if response.status_code != 200:
        raise UserError(f"url: {url}: GET /v1/models answered HTTP {response.status_code}; expected an "
                        "OpenAI-compatible server (vLLM, SGLang, Dynamo)", key="url")
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError):
        data = None
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise UserError(f"url: {url}: /v1/models is not an OpenAI model list", key="url")
    return data


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


async def inspect_server(client: httpx.AsyncClient, url: str, model_name: str,
                         served_model: str | None) -> ServerInfo:
    chosen = choose_model(url, await list_models(client, url), model_name, served_model)
    info = ServerInfo(url=url, served_model=str(chosen["id"]), root=chosen.get("root"),
                      max_model_len=_int(chosen.get("max_model_len")))
    version = await _get(client, "/version")
    if version is not None:
        try:
            info.version = str(version.json().get("version"))
        except (ValueError, AttributeError):
            pass
    await _read_sglang(client, info)
    await _read_vllm_metrics(client, info)
    if info.version is None:
        info.notes.append("server version not exposed (no /version, no /get_server_info)")
    if info.max_model_len is None:
        info.notes.append("max_model_len not exposed by /v1/models; the model's context length was used")
    if info.kv_capacity_tokens is None:
        info.notes.append("KV capacity not exposed (no vllm:cache_config_info, no max_total_num_tokens); "
                          "recorded as the most tokens the server was seen to hold at once (a lower bound)")
    return info


async def _read_sglang(client: httpx.AsyncClient, info: ServerInfo) -> None:
    response = await _get(client, "/get_server_info")
    if response is None:
        return
    try:
        body = response.json()
    except ValueError:
        return
    if not isinstance(body, dict):
        return
    for key in SGLANG_FLAGS:
        if key in body:
            info.flags[f"sglang.{key}"] = str(body[key])
    info.version = info.version or (str(body["version"]) if "version" in body else None)
    if _int(body.get("max_total_num_tokens")):
        info.kv_capacity_tokens = _int(body["max_total_num_tokens"])
        info.kv_source = "sglang max_total_num_tokens"
    if info.max_model_len is None and _int(body.get("context_length")):
        info.max_model_len = _int(body["context_length"])


async def _read_vllm_metrics(client: httpx.AsyncClient, info: ServerInfo) -> None:
    response = await _get(client, "/metrics")
    if response is None:
        return
    try:
        families = list(text_string_to_metric_families(response.text))
    except ValueError:
        return
    for fam in families:
        if fam.name != "vllm:cache_config_info":
            continue
        for sample in fam.samples[:1]:
            labels = dict(sample.labels)
            info.flags.update({f"vllm.cache.{k}": v for k, v in sorted(labels.items())})
            blocks, block = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
            if blocks and block:
                info.kv_capacity_tokens = blocks * block
                info.kv_source = "vllm:cache_config_info num_gpu_blocks x block_size"


@dataclass(frozen=True)
class Counters:
    """vLLM's cumulative counters a decode run is checked against (None where the server does not export
    them): preemptions, and its inter-token-latency histogram's exact _sum (s) and _count."""

    preemptions: float | None = None
    itl_sum_s: float | None = None
    itl_count: float | None = None
    in_flight: float | None = None  # requests running or waiting in the engine now

    def itl_mean_s_since(self, before: Counters) -> float | None:
        """The server's own mean inter-token latency between ``before`` and these counters."""
        s1, n1, s0, n0 = self.itl_sum_s, self.itl_count, before.itl_sum_s, before.itl_count
        if s1 is None or n1 is None or s0 is None or n0 is None or n1 <= n0:
            return None
        return (s1 - s0) / (n1 - n0)


def _total(families: list, name: str, suffix: str) -> float | None:
    values = [s.value for fam in families if fam.name == name for s in fam.samples if s.name.endswith(suffix)]
    return float(sum(values)) if values else None


async def counters(client: httpx.AsyncClient) -> Counters:
    """One read of the server's /metrics (empty Counters where it has none or they do not parse)."""
    response = await _get(client, "/metrics")
    if response is None or not any(name in response.text for name in (PREEMPTIONS, ITL_HISTOGRAM)):
        return Counters()
    try:
        families = list(text_string_to_metric_families(response.text))
    except ValueError:
        return Counters()
    gauges = [_total(families, name, "") for name in IN_FLIGHT]
    in_flight = None if any(g is None for g in gauges) else sum(g for g in gauges if g is not None)
    return Counters(_total(families, PREEMPTIONS, "_total"), _total(families, ITL_HISTOGRAM, "_sum"),
                    _total(families, ITL_HISTOGRAM, "_count"), in_flight)


async def wait_idle(client: httpx.AsyncClient, timeout_s: float, poll_s: float = 0.1) -> float | None:
    """Wait until the server runs and queues no request (its gauges), at most ``timeout_s``. Returns the
    requests still in flight then (0 when idle; None where the server does not export the gauges).

    A batch must start on an idle server: streams a previous run closed early are aborted by the server only
    when it notices, and at ``--max-num-seqs`` equal to the batch one of them left running queues the
    newest stream, so the point reads as "queued" (vLLM's CPU build does this)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        now = await counters(client)
        if now.in_flight is None or now.in_flight <= 0:
            return now.in_flight
        if asyncio.get_running_loop().time() >= deadline:
            return now.in_flight
        await asyncio.sleep(poll_s)
