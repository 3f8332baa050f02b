"""Architectures of popular Hugging Face models (published config.json facts), and how `workload.hf` finds one.

No network and no torch here: a model is named from this catalog, given as a local config.json (or its folder),
or written inline as a mapping of config keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import regex

_LLAMA = {"model_type": "llama", "rms_norm_eps": 1e-5, "hidden_act": "silu"}
_QWEN2 = {"model_type": "qwen2", "rms_norm_eps": 1e-6, "hidden_act": "silu", "max_position_embeddings": 32768}
_GPT2 = {"model_type": "gpt2", "n_positions": 1024, "vocab_size": 50257}
_QWEN3 = {"model_type": "qwen3", "rms_norm_eps": 1e-6, "hidden_act": "silu", "max_position_embeddings": 40960,
          "rope_theta": 1000000.0, "head_dim": 128, "vocab_size": 151936}
_GEMMA = {"model_type": "gemma", "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "head_dim": 256,
          "vocab_size": 256000, "max_position_embeddings": 8192, "tie_word_embeddings": True}
_GEMMA2 = {**_GEMMA, "model_type": "gemma2", "query_pre_attn_scalar": 256, "sliding_window": 4096,
           "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}

_RESNET = {"model_type": "resnet", "layer_type": "bottleneck", "embedding_size": 64,
           "hidden_sizes": [256, 512, 1024, 2048], "hidden_act": "relu", "num_channels": 3, "num_labels": 1000}
_CLIP_L336 = {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
              "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
              "projection_dim": 768, "hidden_act": "quick_gelu"}


def _llava(**decoder: int) -> dict[str, Any]:
    """A LLaVA-1.5 config: the CLIP tower, a two-layer projector and a Llama-2 decoder of the given shape."""
    text = {**_LLAMA, **decoder, "num_key_value_heads": decoder["num_attention_heads"], "vocab_size": 32064,
            "max_position_embeddings": 4096}
    return {"model_type": "llava", "vision_config": _CLIP_L336, "image_token_index": 32000, "vision_feature_layer": -2,
            "vision_feature_select_strategy": "default", "projector_hidden_act": "gelu", "text_config": text}


# Qwen2-VL and Qwen2.5-VL (Qwen/Qwen2-VL-{2B,7B}-Instruct, Qwen/Qwen2.5-VL-{3B,7B}-Instruct, config.json on the Hugging
# Face hub): a native-resolution ViT (14 px patches, 2 frames a patch, 2 x 2 patches merged into one token) and a Qwen2
# decoder whose rotary embedding is split over time, height and width (mrope_section).
_MROPE = {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1000000.0}
_QWEN2_VL_VISION = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_channels": 3,
                    "hidden_act": "quick_gelu", "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
# 2.5's tower: RMSNorm and a SwiGLU MLP, attention within 112 px windows except in every eighth block
_QWEN25_VL_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "in_channels": 3,
                     "hidden_act": "silu", "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                     "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2}


def _qwen_vl(model_type: str, **decoder: Any) -> dict[str, Any]:
    """A Qwen2-VL or Qwen2.5-VL config: its vision tower projecting into a Qwen2 decoder of the given shape."""
    text = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_parameters": _MROPE, **decoder}
    if model_type == "qwen2_vl":
        vision = {**_QWEN2_VL_VISION, "hidden_size": decoder["hidden_size"]}
    else:
        vision = {**_QWEN25_VL_VISION, "out_hidden_size": decoder["hidden_size"]}
    return {"model_type": model_type, "text_config": text, "vision_config": vision, "image_token_id": 151655,
            "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
            "tie_word_embeddings": decoder.get("tie_word_embeddings", False)}


_VIT = {"model_type": "vit", "image_size": 224, "patch_size": 16, "num_channels": 3, "hidden_act": "gelu",
        "qkv_bias": True, "layer_norm_eps": 1e-12, "num_labels": 1000}

# (name pattern, config keys): each from the model's published config.json (architecture keys only).
CATALOG: tuple[tuple[str, dict[str, Any]], ...] = (
    (r"llama-?2-7b", {**_LLAMA, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
                      "max_position_embeddings": 4096}),
    (r"llama-?2-13b", {**_LLAMA, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
                       "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 32000,
                       "max_position_embeddings": 4096}),
    (r"llama-?3(?:\.1)?-8b", {**_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                              "max_position_embeddings": 8192, "rope_theta": 500000.0}),
    (r"llama-?3\.2-1b", {**_LLAMA, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                         "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": True}),
    (r"llama-?3\.2-3b", {**_LLAMA, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
                         "num_attention_heads": 24, "num_key_value_heads": 8, "vocab_size": 128256,
                         "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": True}),
    (r"tinyllama-1\.1b", {**_LLAMA, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                          "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                          "max_position_embeddings": 2048}),
    (r"mistral-7b", {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                     "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "hidden_act": "silu"}),
    (r"qwen2(?:\.5)?-0\.5b", {**_QWEN2, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                              "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                              "tie_word_embeddings": True}),
    (r"qwen2(?:\.5)?-1\.5b", {**_QWEN2, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                              "tie_word_embeddings": True}),
    (r"qwen2\.5-3b", {**_QWEN2, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                      "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                      "tie_word_embeddings": True}),
    (r"qwen2(?:\.5)?-7b", {**_QWEN2, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064}),
    (r"qwen3-0\.6b", {**_QWEN3, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                      "num_attention_heads": 16, "num_key_value_heads": 8, "tie_word_embeddings": True}),
    (r"qwen3-1\.7b", {**_QWEN3, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
                      "num_attention_heads": 16, "num_key_value_heads": 8, "tie_word_embeddings": True}),
    (r"qwen3-4b", {**_QWEN3, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": True}),
    (r"qwen3-8b", {**_QWEN3, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                   "num_attention_heads": 32, "num_key_value_heads": 8}),
    (r"gemma-2b", {**_GEMMA, "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
                   "num_attention_heads": 8, "num_key_value_heads": 1}),
    (r"gemma-7b", {**_GEMMA, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
                   "num_attention_heads": 16, "num_key_value_heads": 16}),
    (r"gemma-2-2b", {**_GEMMA2, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                     "num_attention_heads": 8, "num_key_value_heads": 4}),
    (r"gemma-2-9b", {**_GEMMA2, "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
                     "num_attention_heads": 16, "num_key_value_heads": 8}),
    (r"phi-3-mini(?:-4k)?", {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
                             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                             "vocab_size": 32064, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
                             "hidden_act": "silu"}),
    (r"mixtral-8x7b", {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                       "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                       "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                       "num_local_experts": 8, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5, "hidden_act": "silu"}),
    (r"gpt2-xl", {**_GPT2, "n_embd": 1600, "n_layer": 48, "n_head": 25}),
    (r"gpt2-large", {**_GPT2, "n_embd": 1280, "n_layer": 36, "n_head": 20}),
    (r"gpt2-medium", {**_GPT2, "n_embd": 1024, "n_layer": 24, "n_head": 16}),
    (r"gpt2", {**_GPT2, "n_embd": 768, "n_layer": 12, "n_head": 12}),
    # Vision-language (llava-hf/llava-1.5-*-hf): CLIP ViT-L/14-336 tower, a two-layer projector, a Llama-2 decoder.
    (r"llava-(?:v?1\.5-)?7b", _llava(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                      num_attention_heads=32)),
    (r"llava-(?:v?1\.5-)?13b", _llava(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                       num_attention_heads=40)),
    # Vision-language with dynamic resolution (Qwen/Qwen2-VL-*-Instruct, Qwen/Qwen2.5-VL-*-Instruct; "qwen2_vl" alone,
    # as a model_type, names no size)
    (r"qwen2-?vl-2b", _qwen_vl("qwen2_vl", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                              num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                              max_position_embeddings=32768, tie_word_embeddings=True)),
    (r"qwen2-?vl-7b", _qwen_vl("qwen2_vl", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                              num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                              max_position_embeddings=32768)),
    (r"qwen2[.-]5-?vl-3b", _qwen_vl("qwen2_5_vl", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                                 num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                                 max_position_embeddings=128000, tie_word_embeddings=True)),
    (r"qwen2[.-]5-?vl-7b", _qwen_vl("qwen2_5_vl", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                 num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                 max_position_embeddings=128000)),
    # Image classifiers (microsoft/resnet-*, google/vit-*-patch16-224); torchvision's "resnet152" is the same net.
    (r"resnet-?50", {**_RESNET, "depths": [3, 4, 6, 3]}),
    (r"resnet-?101", {**_RESNET, "depths": [3, 4, 23, 3]}),
    (r"resnet-?152", {**_RESNET, "depths": [3, 8, 36, 3]}),
    (r"vit-base-patch16-224", {**_VIT, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                               "intermediate_size": 3072}),
    (r"vit-large-patch16-224", {**_VIT, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                                "intermediate_size": 4096}),
)
# model_type of the image classifiers above: their step feeds pixel_values and class labels, not tokens.
IMAGE_CLASSIFIERS = frozenset({"resnet", "vit", "convnext", "swin", "deit", "beit", "regnet", "efficientnet"})
# Image-and-text models: a step feeds pixel_values and token ids whose first positions are the image's tokens.
VISION_LANGUAGE = frozenset({"llava", "qwen2_vl", "qwen2_5_vl"})
# of those, the ones whose images come at their own resolution, as patches with a (t, h, w) grid (verify/qwenvl.py),
# and the side of the one image a sample `model: hf` feeds them unless image_size says (32 x 32 patches, 256 tokens)
DYNAMIC_RESOLUTION = frozenset({"qwen2_vl", "qwen2_5_vl"})
DYNAMIC_IMAGE_SIDE = 448
# the architectures whose Liger-Kernel patch (RMSNorm, SwiGLU, RoPE) verify/liger.py replays: the patch functions read
LIGER_PATCHED = frozenset({"llama", "mistral", "qwen2"})
# transformers models whose class says supports_gradient_checkpointing = False (checked on transformers 5.x)
NO_CHECKPOINTING = frozenset({"resnet", "convnext"})


def causal_lm(model_type: str | None) -> bool:
    """Whether `model: hf` replays this model_type as a causal LM (not an image classifier or a vision-language model)."""
    return model_type not in IMAGE_CLASSIFIERS and model_type not in VISION_LANGUAGE


def hf_replays(model_type: str | None, phase: str) -> bool:
    """Whether `model: hf` replays `phase` for this model_type: training and evaluation for every model,
    generation for a causal LM."""
    return phase in ("train", "eval") or (phase == "generate" and causal_lm(model_type))


def fused_loss_refusal(model_type: str | None, completion_len: int | None) -> str | None:
    """Why Liger's fused linear cross-entropy is not replayed for this training step, or None: it stands for a causal
    LM's own loss, not an image model's nor an RL policy update's."""
    if not causal_lm(model_type):
        return "the fused cross-entropy is replayed for a causal LM's own loss only"
    if completion_len:
        return "an RL policy update's loss (TRL's use_liger_loss) is not replayed fused"
    return None
_COMPILED = tuple((regex.compile(rf"(?<![\w.]){p}(?![\w.])|(?<![\w.]){p}-"), cfg) for p, cfg in CATALOG)


class UnknownArchitecture(ValueError):
    """The model is neither in the catalog nor a readable config.json."""


def from_catalog(name: str) -> dict[str, Any] | None:
    """The catalog's config for a model id or path that names a known base model (fine-tunes match their base)."""
    key = name.lower().replace("_", "-").replace("meta-llama-3", "llama-3")
    for pattern, cfg in _COMPILED:
        if pattern.search(key):
            return dict(cfg)
    return None


def resolve(config: str | dict[str, Any], base_dir: Path | None = None) -> dict[str, Any]:
    """The config keys for `workload.hf`: an inline mapping, a local config.json (or its folder), or a catalog name."""
    if isinstance(config, dict):
        if "model_type" not in config:
            raise UnknownArchitecture("an inline config needs model_type (llama, mistral, qwen2, gpt2, …)")
        return dict(config)
    path = Path(config)
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UnknownArchitecture(f"cannot read {path}: {exc}") from None
        if not isinstance(data, dict) or "model_type" not in data:
            raise UnknownArchitecture(f"{path} is not a transformers config.json (no model_type)")
        return data
    found = from_catalog(config)
    if found is None:
        known = ", ".join(p.replace("\\", "").replace("(?:", "(").replace(")?", ")?") for p, _ in CATALOG[:6])
        raise UnknownArchitecture(f"{config!r} is not in the catalog ({known}, …) and is not a local config.json")
    return found
