"""Deterministic token accounting: one token per whitespace-separated word, in and out."""

from __future__ import annotations

import zlib

VOCAB_SIZE = 4096  # /tokenize's ids lie in 0..VOCAB_SIZE-1

_WORDS = ("the", "model", "answers", "with", "tokens", "that", "arrive", "one", "step", "at", "a", "time",
          "while", "batches", "grow", "and", "shrink", "under", "load")


def count_prompt_tokens(text: str) -> int:
    return len(text.split())


def output_word(request_index: int, token_index: int) -> str:
    """Token ``token_index`` of a response, as text with its leading space (like a BPE continuation)."""
    return " " + _WORDS[(request_index * 7 + token_index) % len(_WORDS)]


def token_ids(text: str) -> list[int]:
    """Stable ids for /tokenize: one per word (crc32, so the same word always has the same id)."""
    return [zlib.crc32(word.encode()) % VOCAB_SIZE for word in text.split()]


def detokenize(ids: list[int]) -> str:
    """Text with one word per id (so that it counts as ``len(ids)`` prompt tokens again)."""
    return " ".join(f"t{i}" for i in ids)
