"""FastAPI app of the emulator: OpenAI /v1/completions and /v1/chat/completions (SSE or not), /metrics."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from planner.emulator.engine import EmulatedEngine, Sequence
from planner.emulator.text import count_prompt_tokens, output_word
from planner.emulator.vllm_metrics import VllmMetrics
from planner.perf.engine import EngineModel
from planner.profile import Profile
from planner.types import Pool

DEFAULT_MAX_TOKENS = 16
ROLES = tuple(Pool)


def engine_model_for(profile: Profile, role: str) -> EngineModel:
    """The profile's curves at the TP selected for ``role`` (aggregated runs at the decode TP)."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: allowed {', '.join(ROLES)}")
    tp = profile.selected_tp("prefill" if role == "prefill" else "decode")
    return EngineModel(prefill=profile.prefill_curve(tp), decode=profile.decode_curve(tp))


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class Parsed:
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool


def _parse(body: Any, chat: bool) -> Parsed:
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        words = 0
        for i, msg in enumerate(messages):
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):  # content parts: count the text ones
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                raise BadRequest(f"messages[{i}].content must be a string or a list of text parts")
            words += count_prompt_tokens(content)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest("'prompt' must be a string (or a list of one string)")
        words = count_prompt_tokens(prompt)
    if words < 1:
        raise BadRequest("the prompt is empty (prompt tokens are whitespace-separated words)")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", DEFAULT_MAX_TOKENS))
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= 1_000_000:
        raise BadRequest(f"'max_tokens' must be an integer in 1..1000000, got {max_tokens!r}")
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean")
    options = body.get("stream_options") or {}
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    return Parsed(words, max_tokens, stream, include_usage)


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                        status_code=status)


def create_app(engine_model: EngineModel, model_name: str = "emulated", time_scale: float = 1.0,
               max_model_len: int = 32768) -> FastAPI:
    metrics = VllmMetrics(model_name, max_model_len)
    holder: dict[str, EmulatedEngine] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = EmulatedEngine(engine_model, metrics, time_scale)
        engine.start()
        holder["engine"] = engine
        app.state.engine = engine
        yield
        await engine.stop()

    app = FastAPI(title="planner engine emulator", lifespan=lifespan)
    app.state.metrics = metrics

    def usage(seq: Sequence) -> dict[str, int]:
        return {"prompt_tokens": seq.prompt_tokens, "completion_tokens": seq.generated,
                "total_tokens": seq.prompt_tokens + seq.generated}

    async def serve(request: Request, chat: bool) -> Response:
        try:
            parsed = _parse(await request.json(), chat)
        except json.JSONDecodeError:
            return _error("request body is not valid JSON")
        except BadRequest as exc:
            return _error(str(exc))
        engine = holder["engine"]
        seq = engine.submit(parsed.prompt_tokens, parsed.max_tokens)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def choice(text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant"} if first else {}
                if text is not None:
                    delta["content"] = text
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

        if not parsed.stream:
            pieces = []
            try:
                while (token := await seq.tokens.get()) is not None:
                    pieces.append(output_word(seq.index, token))
            finally:
                engine.abort(seq)  # no-op once finished; frees the slot if the client went away
            text = "".join(pieces)
            body: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model_name,
                                    "usage": usage(seq)}
            if chat:
                body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "logprobs": None, "finish_reason": seq.finished_reason}]
            else:
                body["choices"] = [{"index": 0, "text": text, "logprobs": None,
                                    "finish_reason": seq.finished_reason}]
            return JSONResponse(body)

        chunk_obj = "chat.completion.chunk" if chat else "text_completion"

        def sse(payload: dict[str, Any]) -> str:
            return f"data: {json.dumps({'id': rid, 'object': chunk_obj, 'created': created, 'model': model_name, **payload})}\n\n"

        async def events() -> AsyncIterator[str]:
            first = True
            try:
                while (token := await seq.tokens.get()) is not None:
                    yield sse({"choices": [choice(output_word(seq.index, token), None, first)]})
                    first = False
                yield sse({"choices": [choice(None if chat else "", seq.finished_reason)]})
                if parsed.include_usage:
                    yield sse({"choices": [], "usage": usage(seq)})
                yield "data: [DONE]\n\n"
            finally:
                engine.abort(seq)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, chat=True)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "planner-emulator",
                                            "max_model_len": max_model_len}]}

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        # async: rendered on the event loop, between engine iterations, so one scrape is one instant.
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
