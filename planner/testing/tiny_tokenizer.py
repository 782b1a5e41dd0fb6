"""Train a tiny byte-level BPE tokenizer on generated text: ``python tiny_tokenizer.py OUT_DIR VOCAB_SIZE``.

Run as a script by ``planner.testing.vllm_cpu.make_tiny_model`` under the vLLM environment's Python (which
has the ``tokenizers`` library; the planner's own environment need not). Imports only the standard library
and ``tokenizers``; writes ``tokenizer.json`` and prints the special tokens' ids as JSON.

Deterministic: the corpus comes from a seeded generator and the trainer runs single-threaded (its parallel
word counting may order ties differently from run to run).
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an have not which but all "
    "they one were there their has more can will about when what into time only other some could would "
    "model token request prefill decode cache latency load server engine planner replica scale queue "
    "prompt output input batch memory compute window rate second minute hour first last next every "
    "hello world system user assistant question answer number value because while after before"
).split()


def pseudo_words(n: int, rng: random.Random) -> list[str]:
    """Pronounceable made-up words: enough distinct pairs for the trainer to reach a few thousand merges."""
    onsets = ("", "b", "br", "c", "ch", "d", "f", "g", "h", "k", "l", "m", "n", "p", "qu", "r", "s", "sh", "st",
              "t", "th", "tr", "v", "w", "z")
    vowels = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y")
    codas = ("", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "x")
    return ["".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                    for _ in range(rng.randint(1, 4))) for _ in range(n)]


def corpus(lines: int = 5000, seed: int = 0) -> list[str]:
    """Sentences of common and made-up words (Zipf-like frequencies), numbers and punctuation."""
    rng = random.Random(seed)
    vocabulary = list(WORDS) + pseudo_words(6000, rng)
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    out = []
    for i in range(lines):
        words = rng.choices(vocabulary, weights, k=rng.randint(4, 16))
        if i % 3 == 0:
            words.insert(rng.randint(0, len(words)), str(rng.randint(0, 100_000)))
        text = " ".join(words)
        out.append(text[0].upper() + text[1:] + rng.choice(".?!,;:"))
    return out


def train(out_dir: Path, vocab_size: int) -> dict[str, int]:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # must be set before the library's thread pool starts
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    ids["vocab_size"] = tok.get_vocab_size()
    return ids


if __name__ == "__main__":
    print(json.dumps(train(Path(sys.argv[1]), int(sys.argv[2]))))
