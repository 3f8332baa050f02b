"""Fixes as transforms of (workload params, allocator settings), keyed by the ids in oomdoctor.fixids.

A transform returns the changed params and alloc_conf plus a note of what changed, or raises NotApplicable
(reported as a trial with "verifiable": false, never dropped). No torch here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from oomdoctor.fixids import (
    FIX_IDS,
    GC_MEMORY_FRACTION,
    GC_THRESHOLD,
    VERIFIABLE,
    ZERO3_FIX_LIVE_ELEMENTS,
    max_split_size_mb,
)
from oomdoctor.verify.allocator import AllocConf
from oomdoctor.verify.architectures import NO_CHECKPOINTING, from_catalog, fused_loss_refusal
from oomdoctor.verify.params import TransformerParams


class NotApplicable(Exception):
    """The fix cannot be applied to this workload (the reason is the message)."""


@dataclass(frozen=True)
class Variant:
    """One trial's inputs: the workload params, allocator settings and what the fix changed."""

    params: dict[str, Any]
    alloc_conf: str
    changes: dict[str, Any] = field(default_factory=dict)


def _need(params: dict[str, Any], *keys: str) -> None:
    missing = [k for k in keys if k not in params]
    if missing:
        raise NotApplicable(f"the workload's params have no {', '.join(map(repr, missing))} key")


def _set(v: Variant, **changes: Any) -> Variant:
    before = {k: v.params.get(k) for k in changes}
    return replace(v, params={**v.params, **changes},
                   changes={k: [before[k], changes[k]] for k in changes})


def _switch_on(v: Variant, key: str, already: str) -> Variant:
    """The variant with the boolean param `key` on; NotApplicable (`already`) when it is on."""
    _need(v.params, key)
    if v.params[key]:
        raise NotApplicable(already)
    return _set(v, **{key: True})


def _architecture(params: dict[str, Any]) -> dict[str, Any]:
    """The config keys of a `model: hf` workload named from the catalog or inline, with its overrides; else {}."""
    config = params.get("config")
    found = config if isinstance(config, dict) else from_catalog(config) if isinstance(config, str) else None
    return {**found, **(params.get("overrides") or {})} if found else {}


def _model_type(params: dict[str, Any]) -> str | None:
    """The transformers model_type of a `model: hf` workload named from the catalog or inline; else None."""
    return _architecture(params).get("model_type")


def _width(params: dict[str, Any]) -> int:
    """The model's hidden size: the built-in transformer's width, or a `model: hf` architecture's hidden_size (its
    language model's, for a vision-language model)."""
    if "width" in params:
        return int(params["width"])
    keys = _architecture(params)
    size = keys.get("hidden_size") or keys.get("n_embd") or (keys.get("text_config") or {}).get("hidden_size")
    if not size:
        raise NotApplicable("the workload's params have no 'width' key and its architecture names no hidden size")
    return int(size)


def halve_batch(v: Variant, phase: str) -> Variant:
    _need(v.params, "batch")
    batch = int(v.params["batch"])
    if batch < 2:
        raise NotApplicable("the per-device batch is already 1")
    out = _set(v, batch=batch // 2, grad_accum=int(v.params.get("grad_accum", 1)) * 2)
    return out


def gradient_checkpointing(v: Variant, phase: str) -> Variant:
    if phase != "train":
        raise NotApplicable("checkpointing only changes memory when gradients are computed (phase: train)")
    if _model_type(v.params) in NO_CHECKPOINTING:
        raise NotApplicable(f"transformers' {_model_type(v.params)} models have no activation checkpointing")
    return _switch_on(v, "gradient_checkpointing", "gradient checkpointing is already on")


def bf16_autocast(v: Variant, phase: str) -> Variant:
    _need(v.params, "autocast")
    if v.params.get("autocast") or v.params.get("dtype") in ("bfloat16", "float16"):
        raise NotApplicable("the step already runs in 16-bit precision")
    return _set(v, autocast="bfloat16")


def eval_no_grad(v: Variant, phase: str) -> Variant:
    if phase != "eval":
        raise NotApplicable("applies to evaluation (phase: eval)")
    return _switch_on(v, "eval_no_grad", "evaluation already runs under no_grad")


def smaller_eval_batch(v: Variant, phase: str) -> Variant:
    if phase == "train":
        raise NotApplicable("applies to evaluation or generation (phase: eval/generate)")
    _need(v.params, "batch")
    current = int(v.params.get("eval_batch") or v.params["batch"])
    if current < 2:
        raise NotApplicable("the evaluation batch is already 1")
    if v.params.get("eval_batches"):  # the same samples in twice as many batches: the kept outputs do not shrink
        return _set(v, eval_batch=current // 2, eval_batches=-(-int(v.params["eval_batches"]) * current // (current // 2)))
    return _set(v, eval_batch=current // 2)


def eval_accumulation_steps(v: Variant, phase: str) -> Variant:
    if phase != "eval":
        raise NotApplicable("applies to evaluation (phase: eval)")
    if not v.params.get("eval_batches"):
        raise NotApplicable("the replay keeps no outputs across evaluation batches (workload param eval_batches)")
    if v.params.get("eval_accumulation_steps") == 1:
        raise NotApplicable("outputs already go to the host after every batch")
    return _set(v, eval_accumulation_steps=1)


def shorter_max_seq(v: Variant, phase: str) -> Variant:
    _need(v.params, "seq_len")
    seq = int(v.params["seq_len"])
    if seq < 2:
        raise NotApplicable("the sequence length is already 1")
    return _set(v, seq_len=seq // 2)


def _conf(v: Variant, **changes: Any) -> Variant:
    before = AllocConf.parse(v.alloc_conf)
    if before.backend != "native":
        raise NotApplicable(f"PyTorch ignores the caching allocator's settings under backend:{before.backend}")
    after = replace(before, **changes)
    if after == before:
        raise NotApplicable(f"the allocator already runs with {before.render()}")
    return replace(v, alloc_conf=after.render(), changes={"alloc_conf": [before.render(), after.render()]})


def expandable_segments(v: Variant, phase: str) -> Variant:
    return _conf(v, expandable_segments=True)


def max_split_size(v: Variant, phase: str) -> Variant:
    return _conf(v, max_split_size=max_split_size_mb(None) * 1024 * 1024)


def gc_threshold(v: Variant, phase: str) -> Variant:
    return _conf(v, garbage_collection_threshold=GC_THRESHOLD, per_process_memory_fraction=GC_MEMORY_FRACTION)


def lighter_optimizer(v: Variant, phase: str) -> Variant:
    if phase != "train":
        raise NotApplicable("the optimizer only runs in phase: train")
    _need(v.params, "optimizer")
    # the advice's order: 8-bit AdamW (2 bytes of state per parameter), Adafactor (factored), SGD (none)
    nxt = {"adamw": "adamw8bit", "adamw_fused": "adamw8bit", "adamw8bit": "adafactor",
           "adafactor": "sgd"}.get(str(v.params["optimizer"]))
    if nxt is None:
        raise NotApplicable(f"optimizer {v.params['optimizer']!r} has no lighter variant here")
    return _set(v, optimizer=nxt)


def raise_zero_stage(v: Variant, phase: str) -> Variant:
    _need(v.params, "zero_stage")
    stage = int(v.params["zero_stage"])
    if stage >= 3:
        raise NotApplicable("already at ZeRO stage 3 / FSDP FULL_SHARD")
    if int(v.params.get("world_size", 1)) < 2:
        raise NotApplicable("sharding needs world_size ≥ 2 (try more-gpus)")
    return _set(v, zero_stage=3 if phase != "train" else stage + 1)


def cpu_offload(v: Variant, phase: str) -> Variant:
    _need(v.params, "offload")
    offload = v.params["offload"]
    if offload == "none":
        return _set(v, offload="optimizer")
    if offload == "optimizer" and int(v.params.get("zero_stage", 0)) >= 3:
        return _set(v, offload="all")
    raise NotApplicable("optimizer states are offloaded already; parameter offload needs zero_stage: 3")


def more_gpus(v: Variant, phase: str) -> Variant:
    _need(v.params, "world_size", "zero_stage")
    if int(v.params["zero_stage"]) == 0:
        raise NotApplicable("with zero_stage: 0 (DDP) every GPU holds the full state; more GPUs do not help")
    return _set(v, world_size=int(v.params["world_size"]) * 2)


def fused_cross_entropy(v: Variant, phase: str) -> Variant:
    _need(v.params, "fused_cross_entropy")
    if "config" in v.params:  # model: hf, where Liger replaces the causal-LM loss of a training step
        if phase != "train":
            raise NotApplicable("Liger's fused loss runs in training; evaluation computes the logits as usual")
        if why := fused_loss_refusal(_model_type(v.params), v.params.get("completion_len")):
            raise NotApplicable(why)
    if v.params["fused_cross_entropy"]:
        raise NotApplicable("the loss is already chunked")
    return _set(v, fused_cross_entropy=True)


def lower_num_generations(v: Variant, phase: str) -> Variant:
    if phase != "generate":
        raise NotApplicable("changes what generation decodes at once (phase: generate)")
    _need(v.params, "num_generations")
    n = int(v.params["num_generations"])
    if n < 2:
        raise NotApplicable("one completion per prompt already")
    return _set(v, num_generations=n // 2)


def ddp_bucket_view(v: Variant, phase: str) -> Variant:
    if phase != "train":
        raise NotApplicable("DDP's buckets hold gradients (phase: train)")
    if not v.params.get("ddp_buckets"):
        raise NotApplicable("the workload has no DDP gradient buckets (ddp_buckets: true)")
    return _switch_on(v, "ddp_bucket_view", "the gradients are bucket views already")


def smaller_zero_buckets(v: Variant, phase: str) -> Variant:
    if phase != "train":
        raise NotApplicable("ZeRO's gradient buckets exist in training steps only")
    elements = int(v.params.get("zero_bucket_elements") or 0)
    if not elements:
        raise NotApplicable("the workload has no ZeRO gradient buckets (zero_bucket_elements)")
    auto = _width(v.params) ** 2  # HF's "auto" for DeepSpeed: hidden_size x hidden_size
    if elements <= auto * 1.01:  # a resolved "auto" printed in JSON's short float form (1.677722e+07) is the same
        raise NotApplicable(f"the buckets are already at most hidden_size² ({auto} elements)")
    return _set(v, zero_bucket_elements=auto)


def _default(name: str) -> Any:
    """A built-in workload param's default where the variant leaves it unset (DeepSpeed's and FSDP's own defaults)."""
    return TransformerParams.model_fields[name].default


def smaller_zero3_prefetch(v: Variant, phase: str) -> Variant:
    """DeepSpeed: prefetch bucket to HF's auto (0.9 x hidden²), live and reuse caps to 1e8; FSDP: no prefetch."""
    if int(v.params.get("zero_stage") or 0) < 3:
        raise NotApplicable("parameters are gathered ahead at ZeRO stage 3 / FSDP FULL_SHARD only")
    unit = v.params.get("zero3_gather_unit", _default("zero3_gather_unit"))
    if unit == "layer":
        on = {k: 0 for k in ("zero3_forward_prefetch_units", "zero3_backward_prefetch_units")
              if int(v.params.get(k, _default(k)))}
        if not on:
            raise NotApplicable("FSDP prefetches nothing already (backward_prefetch=None, forward_prefetch=False)")
        return _set(v, **on)
    if unit != "module":
        raise NotApplicable("the replay gathers each weight just before its matmul (zero3_gather_unit: matmul)")
    target = {"zero3_prefetch_bucket_elements": int(0.9 * _width(v.params) ** 2),
              "zero3_max_live_elements": ZERO3_FIX_LIVE_ELEMENTS, "zero3_max_reuse_distance_elements": ZERO3_FIX_LIVE_ELEMENTS}
    lower = {k: low for k, low in target.items() if int(v.params.get(k, _default(k))) > low}
    if not lower:
        raise NotApplicable("DeepSpeed's prefetch bucket, live and reuse caps are already at most the fix's")
    return _set(v, **lower)


def activation_offload(v: Variant, phase: str) -> Variant:
    if phase != "train":
        raise NotApplicable("only a training step keeps activations for backward")
    return _switch_on(v, "activation_offload", "activations are offloaded already")


TRANSFORMS: dict[str, Callable[[Variant, str], Variant]] = {
    "halve-batch": halve_batch,
    "gradient-checkpointing": gradient_checkpointing,
    "bf16-autocast": bf16_autocast,
    "eval-no-grad": eval_no_grad,
    "smaller-eval-batch": smaller_eval_batch,
    "eval-accumulation-steps": eval_accumulation_steps,
    "shorter-max-seq": shorter_max_seq,
    "expandable-segments": expandable_segments,
    "max-split-size": max_split_size,
    "gc-threshold": gc_threshold,
    "lighter-optimizer": lighter_optimizer,
    "raise-zero-stage": raise_zero_stage,
    "cpu-offload": cpu_offload,
    "more-gpus": more_gpus,
    "fused-cross-entropy": fused_cross_entropy,
    "lower-num-generations": lower_num_generations,
    "ddp-bucket-view": ddp_bucket_view,
    "smaller-zero-buckets": smaller_zero_buckets,
    "activation-offload": activation_offload,
    "smaller-zero3-prefetch": smaller_zero3_prefetch,
}
assert set(TRANSFORMS) == VERIFIABLE, "every verifiable fix id needs a transform"


def apply(fix: str, base: Variant, phase: str) -> Variant:
    """Apply one fix; NotApplicable when verify cannot replay it."""
    if fix not in FIX_IDS:
        raise NotApplicable(f"unknown fix id {fix!r}")
    transform = TRANSFORMS.get(fix)
    if transform is None:
        raise NotApplicable(f"{fix} ({FIX_IDS[fix]}) is not something a step replay can test")
    return transform(base, phase)


def effective_batch(params: dict[str, Any]) -> int | None:
    """Samples per optimizer step over all GPUs, when the params say."""
    if "batch" not in params:
        return None
    return int(params["batch"]) * int(params.get("grad_accum", 1)) * int(params.get("world_size", 1))
