"""What a model's name says about it: published shapes (hidden size, layers, vocabulary) of common base models, the
parameter count most names carry ("Llama-2-70b", "Qwen2.5-1.5B", "Mixtral-8x7B") and the quantisation they announce."""

from __future__ import annotations

import functools

import regex

from oomdoctor.parse.lazyregex import lazy

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


# The size token of a model name: "70b", "1.5B", "350m", "8x7b" (experts x size), standing alone between separators.
_SIZE_TOKEN = lazy(r"(?<![\w.])(?:(?P<experts>\d{1,3})x)?(?P<n>\d{1,4}(?:\.\d{1,3})?)(?P<unit>[bBmM])(?![\w.])")
_UNIT = {"b": 10**9, "m": 10**6}
# A mixture of experts shares attention and embeddings: Mixtral 8x7B has 46.7B parameters, 8x22B 141B (0.83x and 0.80x
# of experts x size). The floor below stays under both.
MOE_SHARE_FLOOR = 0.75
# Quantised releases and loaders named in a model's name or path: bytes per weight at most.
_QUANTISED = (("0.5", lazy(r"(?<![a-z0-9])(?:4bit|4-bit|int4|nf4|gptq|awq|q4(?:_\w{1,8})?|bnb-4bit|exl2)(?![a-z0-9])")),
              ("1", lazy(r"(?<![a-z0-9])(?:8bit|8-bit|int8|fp8|q8(?:_\w{1,8})?)(?![a-z0-9])")))


def params_in_name(model_name: str) -> int | None:
    """The parameter count a model's name announces ("Llama-2-70b-hf" -> 70e9), a floor for a mixture of experts;
    None when the name carries no size (gpt2-xl, bert-base)."""
    name = model_name.rsplit("/", 1)[-1] if "/" in model_name else model_name
    found = [m for m in _SIZE_TOKEN.finditer(name.replace("_", "-"))]
    if not found:
        return None
    m = found[-1]  # "llama-3-8b" (a version number is not a size: no unit)
    n = float(m["n"]) * _UNIT[m["unit"].lower()]
    if m["experts"]:
        n *= int(m["experts"]) * MOE_SHARE_FLOOR
    return int(n)


def quantised_bytes_per_weight(model_name: str) -> float | None:
    """Bytes per weight a quantised release or loader named in the model's name stores at most; None if none named."""
    low = model_name.lower()
    return next((float(b) for b, pattern in _QUANTISED if pattern.search(low)), None)
