"""Deterministic token accounting: one token per whitespace-separated word, in and out."""

from __future__ import annotations

_WORDS = ("the", "model", "answers", "with", "tokens", "that", "arrive", "one", "step", "at", "a", "time",
          "while", "batches", "grow", "and", "shrink", "under", "load")


def count_prompt_tokens(text: str) -> int:
    return len(text.split())


def output_word(request_index: int, token_index: int) -> str:
    """Token ``token_index`` of a response, as text with its leading space (like a BPE continuation)."""
    return " " + _WORDS[(request_index * 7 + token_index) % len(_WORDS)]
