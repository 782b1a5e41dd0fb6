"""Prompts of an exact length in tokens, each one unique (no prefix-cache hits between requests).

Where the server takes token-id prompts (vLLM, SGLang: ``"prompt": [ids]``), a prompt is ``n`` random ids
and is exactly ``n`` tokens. Otherwise it is text of random common words, and the word count is calibrated
against the server's own ``usage.prompt_tokens``: a linear fit ``tokens = a + b * words`` from two probes,
then a per-length correction learned from every answered request (the warm-up runs settle it).
Random from the first token, so a prefix cache never shortens a measured prefill.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

TOKEN_IDS = "token-ids"
TEXT = "text"
# Short, frequent English words: one token each in the usual BPE vocabularies, so the fit is near exact.
WORDS = ("the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "with", "as", "at",
         "be", "this", "have", "from", "or", "one", "had", "by", "but", "not", "what", "all", "were", "we",
         "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their",
         "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her")


def token_id_range(vocab: int) -> tuple[int, int]:
    """Ids to draw from: clear of the low ids some tokenizers reserve and of the special tokens that
    vocabularies put at their end (Qwen from 151643, Llama 3 from 128000)."""
    if vocab <= 0:
        return 1000, 30000
    low = min(1000, vocab // 4)
    high = max(low + 1, min(vocab - vocab // 8, 30000))
    return low, high


@dataclass
class PromptMaker:
    mode: str  # TOKEN_IDS or TEXT
    vocab: int = 0
    seed: int = 0
    tokens_at_zero_words: float = 0.0  # text: the fit's a (BOS and the like)
    tokens_per_word: float = 1.0  # text: the fit's b
    corrections: dict[int, int] = field(default_factory=dict)  # target tokens -> extra words
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in (TOKEN_IDS, TEXT):
            raise ValueError(f"mode {self.mode!r}: allowed {TOKEN_IDS}, {TEXT}")
        self._rng = random.Random(self.seed)

    def words_for(self, tokens: int) -> int:
        guess = round((tokens - self.tokens_at_zero_words) / max(self.tokens_per_word, 1e-6))
        return max(1, guess + self.corrections.get(tokens, 0))

    def make(self, tokens: int) -> str | list[int]:
        if self.mode == TOKEN_IDS:
            low, high = token_id_range(self.vocab)
            return [self._rng.randrange(low, high) for _ in range(tokens)]
        return " ".join(self._rng.choice(WORDS) for _ in range(self.words_for(tokens)))

    def fit(self, probes: list[tuple[int, int]]) -> None:
        """Text: (words sent, prompt tokens the server counted) from two or more probes of different sizes."""
        (w0, t0), (w1, t1) = min(probes), max(probes)
        if w1 == w0:
            return
        self.tokens_per_word = max((t1 - t0) / (w1 - w0), 1e-3)
        self.tokens_at_zero_words = t0 - self.tokens_per_word * w0

    def observe(self, target: int, counted: list[int]) -> None:
        """Text: the server counted ``counted`` tokens for prompts made for ``target``; steer the next ones."""
        if self.mode != TEXT or not counted:
            return
        ordered = sorted(counted)
        miss = target - ordered[len(ordered) // 2]
        if miss:
            step = round(miss / max(self.tokens_per_word, 1e-6)) or (1 if miss > 0 else -1)
            self.corrections[target] = self.corrections.get(target, 0) + step


def close_enough(target: int, counted: int) -> bool:
    """A measured point counts as the grid point when its prompt is within 2 % (or 2 tokens) of it."""
    return abs(counted - target) <= max(2, 0.02 * target)
