"""Published shapes (hidden size, layers, vocabulary) of common base models, matched by name."""

from __future__ import annotations

import functools

import regex

# (name pattern, hidden_size, num_layers, vocab_size), from each model's published config.json.
# Fine-tunes keep their base model's shape, so "…/llama-3-8b-instruct-sft" matches too.
_SHAPES: tuple[tuple[str, int, int, int], ...] = (
    (r"llama-?2-7b", 4096, 32, 32000),
    (r"llama-?2-13b", 5120, 40, 32000),
    (r"llama-?2-70b", 8192, 80, 32000),
    (r"llama-?3(?:\.1)?-8b", 4096, 32, 128256),
    (r"llama-?3(?:\.[13])?-70b", 8192, 80, 128256),
    (r"llama-?3\.2-1b", 2048, 16, 128256),
    (r"llama-?3\.2-3b", 3072, 28, 128256),
    (r"mistral-7b", 4096, 32, 32000),
    (r"tinyllama-1\.1b", 2048, 22, 32000),
    (r"qwen2(?:\.5)?-0\.5b", 896, 24, 151936),
    (r"qwen2(?:\.5)?-1\.5b", 1536, 28, 151936),
    (r"qwen2\.5-3b", 2048, 36, 151936),
    (r"qwen2(?:\.5)?-7b", 3584, 28, 152064),
    (r"qwen2\.5-14b", 5120, 48, 152064),
    (r"qwen2\.5-32b", 5120, 64, 152064),
    (r"qwen2(?:\.5)?-72b", 8192, 80, 152064),
    (r"qwen3-0\.6b", 1024, 28, 151936),
    (r"qwen3-1\.7b", 2048, 28, 151936),
    (r"qwen3-4b", 2560, 36, 151936),
    (r"qwen3-8b", 4096, 36, 151936),
    (r"qwen3-14b", 5120, 40, 151936),
    (r"qwen3-32b", 5120, 64, 151936),
    (r"gemma-2b", 2048, 18, 256000),
    (r"gemma-7b", 3072, 28, 256000),
    (r"gemma-2-2b", 2304, 26, 256000),
    (r"gemma-2-9b", 3584, 42, 256000),
    (r"gemma-2-27b", 4608, 46, 256000),
    (r"phi-3-mini", 3072, 32, 32064),
)


@functools.cache
def _compiled() -> tuple[tuple[regex.Pattern[str], int, int, int], ...]:
    """The name patterns, compiled on first use (40 compiles cost ~15 ms of every start-up otherwise)."""
    return tuple((regex.compile(rf"(?<![\w.]){p}(?![\w.])|(?<![\w.]){p}-"), h, n, v) for p, h, n, v in _SHAPES)


def shape_of(model_name: str) -> tuple[int, int, int] | None:
    """(hidden_size, num_layers, vocab_size) of a known base model named in `model_name`, else None."""
    name = model_name.lower().replace("_", "-").replace("meta-llama-3", "llama-3")
    for pattern, hidden, layers, vocab in _compiled():
        if pattern.search(name):
            return hidden, layers, vocab
    return None
