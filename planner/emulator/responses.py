"""Response bodies and SSE chunks in vLLM 0.32's exact shapes (keys, order, nulls), as its server sends them.

Captured from the real server (tests/test_engine_vllm_api.py compares the shapes): the finish_reason rides
on the chunk of the last token (no separate empty chunk); the chat stream opens with a role chunk
(``{"role": "assistant", "content": ""}``); with ``include_usage`` a last chunk with no choices carries the
usage, and with ``continuous_usage_stats`` as well every chunk carries the running usage; the
system_fingerprint is on the stream's last JSON chunk. JSON is compact, as pydantic's model_dump_json.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from planner.emulator.vllm_metrics import EMULATED_VLLM_VERSION

SYSTEM_FINGERPRINT = f"vllm-{EMULATED_VLLM_VERSION}-emulated"


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def usage(prompt: int, completion: int, details: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            **{d: None for d in details}}


FULL_USAGE = ("prompt_tokens_details", "completion_tokens_details")


@dataclass
class Reply:
    """One request's reply: the non-streaming body or the SSE chunks, all with the same id and time."""

    chat: bool
    model: str
    prompt_tokens: int
    include_usage: bool = False
    continuous_usage: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.id = self.id or f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def body(self, text: str, finish_reason: str | None, completion_tokens: int) -> dict[str, Any]:
        common = {"logprobs": None, "finish_reason": finish_reason, "stop_reason": None, "token_ids": None}
        if self.chat:
            message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                       "function_call": None, "reasoning": None}
            choice = {"index": 0, "message": message, **common, "routed_experts": None}
        else:
            choice = {"index": 0, "text": text, **common, "prompt_logprobs": None, "prompt_token_ids": None,
                      "routed_experts": None}
        out = {**self._head("chat.completion" if self.chat else "text_completion"), "choices": [choice],
               "service_tier": None, "system_fingerprint": SYSTEM_FINGERPRINT,
               "usage": usage(self.prompt_tokens, completion_tokens, FULL_USAGE)}
        if self.chat:
            out.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
        return {**out, "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}

    def _chunk(self, choice: dict[str, Any], completion_tokens: int, last: bool) -> str:
        out = {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [choice]}
        if self.continuous_usage:
            out["usage"] = usage(self.prompt_tokens, completion_tokens,
                                 ("completion_tokens_details",) if self.chat else ())
        if last and not self.include_usage:
            out["system_fingerprint"] = SYSTEM_FINGERPRINT
        return f"data: {dumps(out)}\n\n"

    def role_chunk(self) -> str:
        """The chat stream's first chunk (vLLM sends it with the first output, before its text)."""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        out: dict[str, Any] = {**self._head("chat.completion.chunk"), "choices": [choice]}
        if self.continuous_usage:
            out["usage"] = usage(self.prompt_tokens, 0, ("completion_tokens_details",))
        return f"data: {dumps({**out, 'prompt_token_ids': None, 'prompt_text': None})}\n\n"

    def text_chunk(self, text: str, completion_tokens: int, finish_reason: str | None) -> str:
        """The tokens generated since the previous chunk; the last one carries the finish reason."""
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None,
                                      "finish_reason": finish_reason}
            if finish_reason is not None:
                choice["stop_reason"] = None
            choice["token_ids"] = None
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
        return self._chunk(choice, completion_tokens, finish_reason is not None)

    def usage_chunk(self, completion_tokens: int) -> str:
        out = {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [],
               "usage": usage(self.prompt_tokens, completion_tokens), "system_fingerprint": SYSTEM_FINGERPRINT}
        return f"data: {dumps(out)}\n\n"


def models_body(model: str, max_model_len: int, created: int, aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    """/v1/models with every key vLLM's has (owned_by says who serves it); one card per name, as vLLM lists
    every --served-model-name."""
    permission = {"id": f"modelperm-{uuid.uuid4().hex[:16]}", "object": "model_permission", "created": created,
                  "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                  "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                  "organization": "*", "group": None, "is_blocking": False}
    cards = [{"id": name, "object": "model", "created": created, "owned_by": "planner-emulator", "root": model,
              "parent": None, "max_model_len": max_model_len, "permission": [permission]} for name in (model, *aliases)]
    return {"object": "list", "data": cards}
