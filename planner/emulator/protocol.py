"""Requests of the OpenAI-compatible API as vLLM 0.32 reads them: what it accepts, coerces and rejects.

pydantic's lax mode coerces as vLLM's own pydantic models do (``"5"`` is 5, ``"yes"`` is true); the checks
and their messages follow vLLM's (prompt present, max_tokens in 1..max_model_len, the prompt inside the
context, stream_options only with stream). A prompt is text, a list of one text, a list of token ids or a
list of one token-id list; the emulator counts one token per word of text. Where the emulator serves less
than vLLM (several prompts or ``n`` > 1 in one request) it answers 400 naming the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.emulator.text import count_prompt_tokens, token_ids

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for /v1/completions (chat: the rest of the context)

TokenId = Annotated[int, Field(ge=0)]


class ApiError(Exception):
    """An error answer in vLLM's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = {400: "BadRequestError", 404: "NotFoundError"}.get(self.status, "InternalServerError")
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.status}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")  # sampling parameters the emulator does not model are accepted
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None


class CompletionRequest(_Request):
    prompt: str | list[TokenId] | list[str] | list[list[TokenId]] | None = None


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "text"
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[ContentPart] | None = None


class ChatRequest(_Request):
    messages: list[Message]


@dataclass(frozen=True)
class Parsed:
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool  # usage on every chunk (vLLM: only together with include_usage)


def _invalid(exc: ValidationError) -> ApiError:
    """Every validation error, each with where it is (a union type reports one per member, as in vLLM)."""
    errors = [(".".join(str(p) for p in ("body", *e["loc"])), e["msg"]) for e in exc.errors()]
    detail = "; ".join(f"{where}: {msg}" for where, msg in errors)
    return ApiError(f"{len(errors)} validation error{'s' if len(errors) > 1 else ''}: {detail}", param=errors[0][0])


def parse_request(raw: Any, chat: bool, served_model: str, max_model_len: int, aliases: tuple[str, ...] = ()) -> Parsed:
    """The request's token counts and streaming options, or ApiError with vLLM's status and message.
    ``aliases``: more names the model answers to (vLLM's --served-model-name A B: every name is accepted)."""
    try:
        req: _Request = (ChatRequest if chat else CompletionRequest).model_validate(raw)
    except ValidationError as exc:
        raise _invalid(exc) from None
    if req.model is not None and req.model != served_model and req.model not in aliases:
        raise ApiError(f"The model `{req.model}` does not exist.", 404, "model")
    if req.stream_options is not None and not req.stream:
        raise ApiError("Stream options can only be defined when `stream=True`.", param="stream_options")
    if (req.n or 1) != 1:
        raise ApiError(f"n={req.n}: the emulator serves one sequence per request (n=1)", param="n")
    prompt = _chat_tokens(req) if isinstance(req, ChatRequest) else _completion_tokens(req)  # type: ignore[arg-type]
    if prompt >= max_model_len:
        raise ApiError(f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
                       f"contains {prompt} input tokens, which exceeds this limit even without any output tokens. "
                       "Please reduce the length of the input prompt.", param="input_tokens")
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:
        max_tokens = max_model_len - prompt if chat else COMPLETION_DEFAULT_MAX_TOKENS
    if max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    if max_tokens > max_model_len:
        raise ApiError(f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. "
                       "Please request fewer output tokens.", param="max_tokens")
    options = req.stream_options or StreamOptions()
    include_usage = bool(req.stream and options.include_usage)
    return Parsed(prompt, min(max_tokens, max_model_len - prompt), bool(req.stream), include_usage,
                  include_usage and bool(options.continuous_usage_stats))


def _completion_tokens(req: CompletionRequest) -> int:
    prompt = req.prompt
    if isinstance(prompt, list):
        if not prompt:
            raise ApiError("You must pass at least one prompt")
        if isinstance(prompt[0], int):  # token ids
            return len(prompt)
        if len(prompt) > 1:
            raise ApiError(f"{len(prompt)} prompts: the emulator serves one prompt per request", param="prompt")
        prompt = prompt[0]
        if isinstance(prompt, list):
            tokens = len(prompt)
            if tokens:
                return tokens
    words = count_prompt_tokens(prompt) if isinstance(prompt, str) else 0
    if words < 1:  # vLLM tokenises whitespace into tokens; the emulator counts words and has none
        raise ApiError("Either prompt or prompt_embeds must be provided and non-empty.", param="prompt")
    return words


def _message_text(msg: Message) -> str:
    if isinstance(msg.content, list):  # content parts: the text ones
        return " ".join(p.text or "" for p in msg.content if p.type == "text")
    return msg.content or ""


def _chat_tokens(req: ChatRequest) -> int:
    if not req.messages:
        raise ApiError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    words = sum(count_prompt_tokens(_message_text(m)) for m in req.messages)
    if words < 1:
        raise ApiError("the messages have no words (the emulator counts one prompt token per word)",
                       param="messages")
    return words


def tokenize(raw: Any) -> list[int]:
    """/tokenize: the ids of ``prompt`` (text: one stable id per word; token ids: themselves) or of the
    ``messages``' text; ApiError if the body has neither or they have the wrong type."""
    try:
        if isinstance(raw, dict) and "messages" in raw:
            return token_ids(" ".join(_message_text(m) for m in ChatRequest.model_validate(raw).messages))
        if not isinstance(raw, dict) or "prompt" not in raw:
            raise ApiError("Field required: body.prompt or body.messages", param="body.prompt")
        prompt = CompletionRequest.model_validate(raw).prompt
    except ValidationError as exc:
        raise _invalid(exc) from None
    if not isinstance(prompt, list):
        return token_ids(prompt or "")
    return [i for p in prompt for i in (token_ids(p) if isinstance(p, str) else p if isinstance(p, list) else [p])]
