"""FastAPI app of the emulator: vLLM 0.32's OpenAI-compatible server as seen from outside.

/v1/completions and /v1/chat/completions (SSE or not, in vLLM's chunk shapes, protocol.py and
responses.py), /v1/models, /tokenize, /detokenize, /health, /ping, /version and /metrics (vllm_metrics.py
plus vLLM's HTTP families from prometheus-fastapi-instrumentator, configured as vLLM configures it).
Differences from a real server that remain are listed, with reasons, in tests/test_engine_vllm_api.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from planner.emulator.engine import EmulatedEngine, Sequence
from planner.emulator.protocol import ApiError, parse_request, tokenize
from planner.emulator.responses import Reply, models_body
from planner.emulator.text import VOCAB_SIZE, detokenize, output_word
from planner.emulator.vllm_metrics import EMULATED_VLLM_VERSION, VllmMetrics, cache_info
from planner.perf.engine import EngineModel
from planner.profile import Profile
from planner.types import Pool

ROLES = tuple(Pool)
# vLLM's front end leaves these out of its HTTP metrics (vllm/entrypoints/serve/instrumentator/metrics.py).
UNINSTRUMENTED = ["/metrics", "/health", "/load", "/ping", "/version", "/server_info"]


def engine_model_for(profile: Profile, role: str) -> EngineModel:
    """The profile's curves at the TP selected for ``role`` (aggregated runs at the decode TP)."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: allowed {', '.join(ROLES)}")
    tp = profile.selected_tp("prefill" if role == "prefill" else "decode")
    return EngineModel(prefill=profile.prefill_curve(tp), decode=profile.decode_curve(tp))


@dataclass
class Served:
    """What every route needs: the served model and the running engine (set by the app's lifespan)."""

    model_name: str
    max_model_len: int
    metrics: VllmMetrics
    created: int
    engine: EmulatedEngine | None = None
    aliases: tuple[str, ...] = ()  # more names requests may give (the profile's model name beside the served one)

    def running_engine(self) -> EmulatedEngine:
        if self.engine is None:
            raise RuntimeError("the emulated engine is not running (app used outside its lifespan)")
        return self.engine


def create_app(engine_model: EngineModel, model_name: str = "emulated", time_scale: float = 1.0,
               max_model_len: int = 32768, aliases: tuple[str, ...] = (), kv_from_prefill: bool = False) -> FastAPI:
    """``kv_from_prefill``: a disaggregated decode replica (its prompts' KV comes from prefill, engine.py)."""
    metrics = VllmMetrics(model_name, max_model_len, cache_labels=cache_info(engine_model.kv_capacity_tokens))
    served = Served(model_name, max_model_len, metrics, int(time.time()),
                    aliases=tuple(a for a in aliases if a != model_name))
    app = FastAPI(title="planner engine emulator",
                  lifespan=_lifespan(served, engine_model, time_scale, kv_from_prefill))
    app.state.metrics = metrics
    _instrument(app, metrics.registry)
    _add_generation_routes(app, served)
    _add_server_routes(app, served)
    return app


def _lifespan(served: Served, model: EngineModel, time_scale: float,
              kv_from_prefill: bool = False) -> Callable[[FastAPI], Any]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = EmulatedEngine(model, served.metrics, time_scale, kv_from_prefill)
        engine.start()
        served.engine = app.state.engine = engine
        yield
        await engine.stop()
        served.engine = None

    return lifespan


def _instrument(app: FastAPI, registry: CollectorRegistry) -> None:
    """http_requests_total, http_request_duration_seconds, ... exactly as vLLM's front end exports them."""
    from prometheus_fastapi_instrumentator import Instrumentator

    Instrumentator(excluded_handlers=UNINSTRUMENTED, registry=registry).add().instrument(app)


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError("request body is not valid JSON", param="body") from None


def _add_generation_routes(app: FastAPI, served: Served) -> None:
    async def serve(request: Request, chat: bool) -> Response:
        try:
            parsed = parse_request(await _json_body(request), chat, served.model_name, served.max_model_len,
                                   served.aliases)
        except ApiError as exc:
            return _error(exc)
        engine = served.running_engine()
        seq = engine.submit(parsed.prompt_tokens, parsed.max_tokens)
        reply = Reply(chat, served.model_name, parsed.prompt_tokens, parsed.include_usage, parsed.continuous_usage)
        if parsed.stream:
            return StreamingResponse(_events(engine, seq, reply), media_type="text/event-stream")
        return JSONResponse(await _whole(engine, seq, reply))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, chat=True)


async def _whole(engine: EmulatedEngine, seq: Sequence, reply: Reply) -> dict[str, Any]:
    pieces = []
    try:
        while (token := await seq.tokens.get()) is not None:
            pieces.append(output_word(seq.index, token))
    finally:
        engine.abort(seq)  # no-op once finished; frees the slot if the client went away
    return reply.body("".join(pieces), seq.finished_reason, seq.generated)


async def _next_tokens(queue: asyncio.Queue[int | None]) -> tuple[list[int], bool]:
    """Wait for a token, then take every token already queued (vLLM merges what piled up while the
    client was slow into one chunk); True once the end mark was taken. The engine queues a request's last
    token and its end mark in the same step, so the chunk with the last token knows it is the last."""
    tokens: list[int] = []
    item = await queue.get()
    while item is not None:
        tokens.append(item)
        if queue.empty():
            return tokens, False
        item = queue.get_nowait()
    return tokens, True


async def _events(engine: EmulatedEngine, seq: Sequence, reply: Reply) -> AsyncIterator[str]:
    sent = 0
    try:
        done = False
        while not done:
            tokens, done = await _next_tokens(seq.tokens)
            if reply.chat and sent == 0:
                yield reply.role_chunk()
            sent += len(tokens)
            text = "".join(output_word(seq.index, t) for t in tokens)
            yield reply.text_chunk(text, sent, seq.finished_reason if done else None)
        if reply.include_usage:
            yield reply.usage_chunk(sent)
        yield "data: [DONE]\n\n"
    finally:
        engine.abort(seq)


def _add_server_routes(app: FastAPI, served: Served) -> None:
    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return models_body(served.model_name, served.max_model_len, served.created, served.aliases)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.api_route("/ping", methods=["GET", "POST"])
    async def ping() -> Response:  # SageMaker's health check, served by vLLM as /health
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": EMULATED_VLLM_VERSION}

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> Response:
        try:
            ids = tokenize(await _json_body(request))
        except ApiError as exc:
            return _error(exc)
        return JSONResponse({"count": len(ids), "max_model_len": served.max_model_len, "tokens": ids,
                             "token_strs": None})

    @app.post("/detokenize")
    async def detokenize_route(request: Request) -> Response:
        try:
            raw = await _json_body(request)
        except ApiError as exc:
            return _error(exc)
        ids = raw.get("tokens") if isinstance(raw, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) and 0 <= i < VOCAB_SIZE for i in ids):
            return _error(ApiError(f"'tokens' must be a list of token ids in 0..{VOCAB_SIZE - 1}", param="tokens"))
        return JSONResponse({"prompt": detokenize(ids)})

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        # async: rendered on the event loop, between engine iterations, so one scrape is one instant.
        return Response(generate_latest(served.metrics.registry), media_type=CONTENT_TYPE_LATEST)

