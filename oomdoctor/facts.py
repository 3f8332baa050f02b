"""The facts layer: one OOM event and its run context flattened into named, documented facts for rules."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from oomdoctor.estimate import ActivationEstimate, activations
from oomdoctor.modelshapes import params_in_name, quantised_bytes_per_weight, shape_of
from oomdoctor.parse.model import Evidence, MemorySample, OOMEvent, OtherProcess, ParseResult, RunContext
from oomdoctor.units import IMPLAUSIBLE_BYTES, MIB
from oomdoctor.verify.rounding import allocation_size, round_size

FactType = Literal["bytes", "int", "float", "bool", "str"]

# What a CUDA context with cuBLAS/cuDNN handles usually holds outside PyTorch's allocator, whatever the card:
# 0.3-0.5 GiB with CUDA's lazy module loading (PyTorch 1.13+ sets it), about 1 GiB when every kernel is loaded.
# On a small card that alone is a large share; only what lies beyond it points at another process.
CUDA_CONTEXT_BYTES = 1 << 30

# Other processes that each hold about one bare CUDA context (200 MiB to 1.5 GiB, within a quarter of each other) are
# the job's other ranks or workers that created their context on this GPU: a rank's first CUDA call before it picked
# its own device lands on the current one, device 0 unless set.
CONTEXT_ALIKE_BYTES = (200 * MIB, 1536 * MIB)
CONTEXT_ALIKE_SPREAD = 1.25

# What a full card still reports free after cudaMalloc has failed: the driver hands out 2 MiB pages and
# keeps some for its own page tables, so a few tens of MiB "free" beside a failed request is a full card,
# not a gap the allocator missed.
FULL_CARD_RESIDUE_BYTES = 64 * MIB

# How many lines before an OOM an evaluation banner still counts as "just before" it.
EVAL_BANNER_WINDOW_LINES = 400

STACKS = (
    "hf_trainer", "accelerate", "deepspeed", "fsdp", "axolotl", "llama_factory", "lightning", "trl", "rl_trainer",
    "torchtitan", "megatron", "vllm", "serving_engine", "diffusion", "tpu", "jax", "tensorflow", "skorch", "webui",
    "comfyui", "sd_scripts",
)

CONFIG_FACTS: dict[str, tuple[FactType, str]] = {
    "per_device_train_batch_size": ("int", "micro-batch per GPU for training"),
    "per_device_eval_batch_size": ("int", "micro-batch per GPU for evaluation"),
    "gradient_accumulation_steps": ("int", "micro-batches accumulated per optimizer step"),
    "gradient_checkpointing": ("bool", "activation checkpointing on"),
    "bf16": ("bool", "bf16 mixed precision on"),
    "fp16": ("bool", "fp16 mixed precision on"),
    "max_seq_length": ("int", "longest sequence the run allows (tokens)"),
    "eval_steps": ("int", "evaluate every N steps"),
    "eval_accumulation_steps": ("int", "HF Trainer: move evaluation outputs to the host every N batches"),
    "save_steps": ("int", "save a checkpoint every N steps"),
    "zero_stage": ("int", "DeepSpeed ZeRO stage"),
    "reduce_bucket_size": ("int", "DeepSpeed ZeRO's gradient bucket (reduce_bucket_size), elements"),
    "overlap_comm": ("bool", "DeepSpeed overlap_comm on: ZeRO-1/2 double-buffer their gradient buckets"),
    "zero3_prefetch_bucket_size": ("int", "DeepSpeed ZeRO-3's stage3_prefetch_bucket_size, elements"),
    "zero3_max_live_parameters": ("int", "DeepSpeed ZeRO-3's stage3_max_live_parameters, elements"),
    "zero3_param_persistence_threshold": ("int", "DeepSpeed ZeRO-3's stage3_param_persistence_threshold, elements"),
    "zero3_max_reuse_distance": ("int", "DeepSpeed ZeRO-3's stage3_max_reuse_distance, elements"),
    "fsdp_sharding_strategy": ("str", "PyTorch FSDP's sharding strategy: FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, "
                                      "NO_SHARD"),
    "fsdp_backward_prefetch": ("str", "PyTorch FSDP's backward_prefetch: BACKWARD_PRE, BACKWARD_POST or NONE"),
    "fsdp_forward_prefetch": ("bool", "PyTorch FSDP's forward_prefetch"),
    "fsdp_limit_all_gathers": ("bool", "PyTorch FSDP's limit_all_gathers (at most two all-gathers in flight)"),
    "num_generations": ("int", "RL: completions generated per prompt"),
    "max_completion_length": ("int", "generation: most tokens decoded per completion"),
    "max_prompt_length": ("int", "RL/generation: longest prompt kept (tokens)"),
    "kl_beta": ("float", "RL/preference: the KL coefficient (TRL's beta); above 0 a reference model is kept"),
    "world_size": ("int", "number of ranks"),
    "model_name": ("str", "model name or path as printed"),
    "optimizer": ("str", "optimizer name as printed"),
    "deepspeed_optimizer": ("str", "the optimizer DeepSpeed builds from its own config block (adam/adamw there run as "
                                   "its FusedAdam), lower case; absent when the trainer brings its own"),
    "model_dtype": ("str", "the dtype the weights were loaded in (torch_dtype): bfloat16, float16 or float32"),
    "lora": ("bool", "LoRA / PEFT adapters in use"),
    "lora_r": ("int", "LoRA rank as printed (lora_r, lora_rank)"),
    "offload": ("bool", "optimizer/parameter offload to CPU on"),
    "offload_optimizer": ("bool", "DeepSpeed's offload_optimizer: the optimizer's states on the host (CPU or NVMe)"),
    "offload_param": ("bool", "parameter offload: DeepSpeed ZeRO-3's offload_param, PyTorch FSDP's cpu_offload "
                              "(offload_params) or accelerate's fsdp_offload_params"),
    "liger_kernel": ("bool", "Liger-Kernel's fused linear cross-entropy on (use_liger_kernel, enable_liger_kernel, "
                             "axolotl's liger_fused_linear_cross_entropy)"),
    "quantized_weights": ("bool", "the weights were loaded quantised (bitsandbytes 4/8-bit, GPTQ, AWQ, QLoRA, GGUF)"),
    "bitsandbytes_unavailable": ("bool", "bitsandbytes said it was built without GPU support: its 8-bit optimizers and "
                                         "GPU quantisation were not available to the run"),
    "xformers_unavailable": ("bool", "xFormers could not load its CUDA extensions (or was missing): its "
                                     "memory-efficient attention was not available to the run"),
    "hidden_size": ("int", "model hidden size, from the printed model config"),
    "num_layers": ("int", "transformer layers, from the printed model config"),
    "vocab_size": ("int", "vocabulary size, from the printed model config"),
    "tensor_parallel": ("int", "tensor-parallel degree (Megatron, torchtitan, vLLM)"),
    "serving_total_bytes": ("bytes", "serving engine: the GPU memory it profiled (vLLM total_gpu_memory)"),
    "gpu_memory_utilization": ("float", "serving engine: the share of the GPU it may use (vLLM gpu_memory_utilization)"),
    "weights_bytes": ("bytes", "serving engine: what loading the weights took (vLLM, SGLang)"),
    "activation_peak_bytes": ("bytes", "serving engine: the activation peak its profiling run measured (vLLM)"),
    "kv_cache_budget_bytes": ("bytes", "serving engine: the memory left for the KV cache (negative: none)"),
    "free_after_weights_bytes": ("bytes", "serving engine: device memory still free after the weights (SGLang)"),
    "trainable_params": ("int", "trainable parameters as printed (PEFT, HF Trainer, Lightning)"),
    "total_params": ("int", "all parameters as printed (PEFT, Lightning, Megatron)"),
}

# Every fact a rule may name: name -> (type, meaning). Unknown values are None, never guessed.
FACTS: dict[str, tuple[FactType, str]] = {
    # the event as printed
    "kind": ("str", "event kind: cuda_oom, cuda_error, cublas, nccl, hip_oom, mps_oom, xpu_oom, xla_oom, tf_oom, host_oom, kv_cache"),
    "phase": ("str", "train, eval, generate, save, init or unknown"),
    "operation": ("str", "what the traceback shows running: optimizer (step or state set-up), backward, kv_cache (allocating a key/value cache), attention (computing attention scores), pin_memory (page-locking host memory) or zero_bucket (allocating DeepSpeed ZeRO's gradient bucket)"),
    "progress_after_oom": ("bool", "a training counter kept advancing after this OOM was raised: another run writes to the same output"),
    "own_allocator": ("bool", "the message is a library's own device allocation (llama.cpp's ggml, CTranslate2, TensorRT, "
                      "ONNX Runtime, CuPy, faiss, RAPIDS, XGBoost, CatBoost, MXNet, Kaldi, PaddlePaddle), not PyTorch's caching "
                      "allocator: its settings and autograd modes do not reach it"),
    "raised_in_engine": ("str", "the serving engine whose own process raised the OOM (vllm: its EngineCore or worker "
                                "labelled the line), not a process beside it"),
    "request_absurd": ("bool", "the request is at least 8x the device (or over 1 PiB): a shape or size bug, not a memory limit"),
    "allocated_exceeds_total": ("bool", "PyTorch holds more than the device has: the driver spills into system memory (Windows WDDM)"),
    "step": ("int", "training step at failure"),
    "rank": ("int", "distributed rank of the failing process"),
    "gpu_index": ("int", "GPU index printed in the message"),
    "fatal": ("bool", "the failure ended the run (NCCL warnings may not)"),
    "era": ("str", "message-format era, e.g. 2.2-2.8"),
    "message_says": ("str", "what the message itself names as the failure: shared_memory, paging_file, enomem, "
                            "pinned_memory (cudaHostAlloc refused page-locked host memory), "
                            "alloc_failed (a host allocation refused: PyTorch's CPU allocator, numpy, MemoryError, "
                            "std::bad_alloc), batch_halved_to_zero, kv_pool_no_room, prefill_warmup, cublas_handle, "
                            "cudnn_no_algorithm, buffer_over_device_limit, startup_free_below_utilization, "
                            "inference_workspace, metal_out_of_memory and metal_buffer_over_limit (Metal itself, "
                            "under MLX or llama.cpp: not PyTorch's MPS)"),
    "root_cause": ("bool", "torchelastic named this rank as the first failure"),
    "requested_bytes": ("bytes", "'Tried to allocate': the segment the allocator asked for"),
    "total_bytes": ("bytes", "device total capacity"),
    "free_bytes": ("bytes", "device free memory after the allocator flushed its cache"),
    "allocated_bytes": ("bytes", "memory held by live PyTorch tensors"),
    "reserved_bytes": ("bytes", "memory reserved by the caching allocator (allocated + cached)"),
    "reserved_unallocated_bytes": ("bytes", "reserved but unallocated after the flush: fragmentation"),
    "process_in_use_bytes": ("bytes", "NVML: everything the failing process holds (incl. CUDA context)"),
    "allowed_bytes": ("bytes", "per-process cap (set_per_process_memory_fraction, MPS max allowed)"),
    "private_pools_bytes": ("bytes", "cached memory in CUDA-graph private pools"),
    # derived from the figures
    "free_fraction": ("float", "free / total"),
    "allocated_fraction_of_total": ("float", "allocated / total"),
    "reserved_fraction_of_total": ("float", "reserved / total"),
    "reserved_unallocated_fraction_of_total": ("float", "reserved-but-unallocated / total"),
    "reserved_unallocated_over_allocated": ("float", "reserved-but-unallocated / allocated: PyTorch's own hint asks whether reserved is >> allocated"),
    "reserved_unallocated_over_requested": ("float", "reserved-but-unallocated / requested"),
    "requested_fraction_of_total": ("float", "requested / total"),
    "requested_over_free": ("float", "requested / free (infinite when nothing was free)"),
    "free_covers_request": ("bool", "the device reported at least the requested bytes free, yet the allocation failed"),
    "free_fits_segment": ("bool", "free memory exceeded the segment cudaMalloc was asked for (c10 get_allocation_size) by more than a full card's residue"),
    "free_plus_slack_over_requested": ("float", "(free + reserved-but-unallocated) / requested: above 1, the memory exists but not in one piece"),
    "allowed_fraction_of_total": ("float", "per-process cap / total"),
    "other_processes_bytes": ("bytes", "sum of other processes' NVML usage (0 when NVML listed none)"),
    "other_processes_count": ("int", "other processes NVML listed on the GPU"),
    "other_processes_fraction_of_total": ("float", "other processes' usage / total"),
    "other_processes_alike_contexts": ("bool", "two or more other processes, each holding about one CUDA context and about the same (CONTEXT_ALIKE_BYTES): sibling ranks or workers whose context landed on this GPU"),
    "non_pytorch_bytes": ("bytes", "this process beyond the allocator: CUDA context, cuBLAS, NCCL, ..."),
    "non_pytorch_fraction_of_total": ("float", "non_pytorch_bytes / total"),
    "outside_pytorch_bytes": ("bytes", "total - free - reserved: memory on the GPU not reserved by this PyTorch"),
    "outside_pytorch_fraction": ("float", "outside_pytorch_bytes / total"),
    "outside_pytorch_beyond_context_fraction": ("float", "(outside_pytorch_bytes - a CUDA context's usual footprint) / total: what a context and library handles alone do not explain"),
    # the event among the others
    "eval_batches_done": ("int", "evaluation batches the loop had finished when it failed (its progress bar)"),
    "eval_batches_total": ("int", "evaluation batches in the whole loop (its progress bar's total)"),
    "host_device": ("bool", "the failing allocation was on the host: TensorFlow/XLA naming a CPU device or the cpu allocator (None when no device is named)"),
    # the failing tensor's shape, where the message prints it (TensorFlow, NumPy)
    "tensor_shape": ("str", "the shape of the tensor that did not fit, as printed: [32, 256, 35, 35]"),
    "tensor_rank": ("int", "number of dimensions of that tensor"),
    "tensor_leading_dim": ("int", "its first dimension: the batch, for an activation"),
    "tensor_inner_max_dim": ("int", "its largest dimension other than the first and the last: a length (tokens, samples, pixels), for an activation"),
    "tensor_inner_dim_square": ("bool", "that largest inner dimension is a perfect square (64x64, 256x256): a flattened feature map, not a length"),
    "event_count": ("int", "OOM events in the same source"),
    "failing_ranks": ("int", "distinct ranks that hit an OOM in the same source"),
    "is_first_step": ("bool", "the failure came at step 0 or 1, or after training started but before any step was logged"),
    "step_is_eval_multiple": ("bool", "step is a multiple of eval_steps"),
    "step_is_save_multiple": ("bool", "step is a multiple of save_steps"),
    "eval_banner_before_oom": ("bool", "an evaluation banner shortly before the OOM with no training step line after it"),
    # allocator configuration
    "expandable_segments": ("bool", "PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True (None when not printed)"),
    "allocator_async": ("bool", "allocations go through PyTorch's cudaMallocAsync backend (its OOM message, or backend:cudaMallocAsync in PYTORCH_CUDA_ALLOC_CONF): the caching allocator's settings do not apply"),
    "alloc_conf_printed": ("bool", "the log shows the allocator configuration"),
    # memory over steps
    "memory_samples": ("int", "per-step memory lines before the OOM"),
    "memory_first_allocated_bytes": ("bytes", "allocated (or peak) memory at the first sample"),
    "memory_last_allocated_bytes": ("bytes", "allocated (or peak) memory at the last sample"),
    "memory_growth_bytes_per_step": ("float", "least-squares slope of memory over steps"),
    "memory_growth_total_bytes": ("bytes", "last sample - first sample"),
    "memory_growth_fraction": ("float", "growth over the samples / first sample"),
    "memory_monotonic": ("bool", "memory never fell between samples"),
    # configuration derived
    "tokens_per_micro_batch": ("int", "per_device_train_batch_size * max_seq_length"),
    "mixed_precision": ("bool", "bf16 or fp16 on"),
    "optimizer_is_adam": ("bool", "the optimizer is an Adam variant (two fp32 states per parameter unless 8-bit)"),
    "optimizer_is_8bit": ("bool", "the optimizer keeps 8-bit states"),
    "stacks_known": ("bool", "the log names at least one training stack"),
    "inference_only": ("bool", "the log shows serving or generation/evaluation and no sign of training (no step, optimizer, backward or trainer)"),
    "generating_app": ("bool", "an app that only generates (AUTOMATIC1111's web UI and its forks, ComfyUI) and shows no "
                               "training: it samples without autograd and has no evaluation loop"),
    "data_parallel_degree": ("int", "world_size / tensor_parallel: ranks holding a replica (or a ZeRO shard)"),
    "context_shown": ("bool", "the log shows more than the message: a step, a phase, an operation, the run's configuration or memory over steps"),
    "model_params": ("int", "parameters of the model: all parameters as printed, else the size its name announces "
                             "(Llama-2-70b: 70e9; a mixture of experts' floor)"),
    "weights_bytes_floor": ("bytes", "the least the weights can take: model_params x the fewest bytes per weight the log "
                                     "allows (4-bit 0.5, 8-bit 1, float32 printed 4, else 2)"),
    "weights_floor_over_total": ("float", "weights_bytes_floor / total_bytes: at 1 or more the weights alone do not fit"),
    "activation_bytes_estimate": ("bytes", "activations of the longest micro-batch the config allows (oomdoctor.estimate)"),
    "activation_fraction_of_total": ("float", "activation_bytes_estimate / total"),
    # from a memory snapshot's segments (set only when they can be the state at the failure)
    "snapshot_largest_free_block_bytes": ("bytes", "largest free block in the failing device's cached segments"),
    "snapshot_inactive_bytes": ("bytes", "free blocks inside the failing device's cached segments, all together"),
    "snapshot_stranded_bytes": ("bytes", "free blocks in segments that also hold live blocks (cannot be released)"),
    "snapshot_live_floor_growth_fraction": ("float", "rise of the lowest live level across the recorded trace, as a share of where it began (many steps recorded)"),
    "snapshot_live_floor_rising": ("bool", "the lowest live level never fell from one part of the recorded trace to the next"),
    **{f"snapshot_{c}_fraction": ("float", f"share of the live bytes with a recorded stack that {c.replace('_', ' ')} held")
       for c in ("parameters", "gradients", "optimizer_state", "activations", "kv_cache")},
    # from a torch.cuda.memory_summary() table printed beside the failure
    "summary_reserved_bytes": ("bytes", "reserved memory now, as the memory_summary table printed it"),
    "summary_non_releasable_bytes": ("bytes", "non-releasable memory now (free space in partly used segments)"),
    "summary_non_releasable_fraction_of_reserved": ("float", "non-releasable memory as a share of reserved"),
    "summary_alloc_retries": ("int", "cudaMalloc retries the summary counted (each a flush of the cache)"),
    **CONFIG_FACTS,
    **{f"stack_{s}": ("bool", f"the log shows {s} in use") for s in STACKS},
}

# Facts computed from figures: when a source figure is implausible, so is the derived one.
_DEPENDS: dict[str, tuple[str, ...]] = {
    "free_fraction": ("free_bytes", "total_bytes"),
    "allocated_fraction_of_total": ("allocated_bytes", "total_bytes"),
    "reserved_fraction_of_total": ("reserved_bytes", "total_bytes"),
    "reserved_unallocated_fraction_of_total": ("reserved_unallocated_bytes", "total_bytes"),
    "reserved_unallocated_over_requested": ("reserved_unallocated_bytes", "requested_bytes"),
    "reserved_unallocated_over_allocated": ("reserved_unallocated_bytes", "allocated_bytes"),
    "requested_fraction_of_total": ("requested_bytes", "total_bytes"),
    "requested_over_free": ("requested_bytes", "free_bytes"),
    "free_covers_request": ("requested_bytes", "free_bytes"),
    "free_fits_segment": ("requested_bytes", "free_bytes"),
    "free_plus_slack_over_requested": ("free_bytes", "reserved_unallocated_bytes", "requested_bytes"),
    "allowed_fraction_of_total": ("allowed_bytes", "total_bytes"),
    "other_processes_bytes": ("other_processes",),
    "other_processes_fraction_of_total": ("other_processes", "total_bytes"),
    "other_processes_alike_contexts": ("other_processes",),
    "non_pytorch_bytes": ("process_in_use_bytes", "reserved_bytes"),
    "non_pytorch_fraction_of_total": ("process_in_use_bytes", "reserved_bytes", "total_bytes"),
    "outside_pytorch_bytes": ("total_bytes", "free_bytes", "reserved_bytes"),
    "outside_pytorch_fraction": ("total_bytes", "free_bytes", "reserved_bytes"),
    "outside_pytorch_beyond_context_fraction": ("total_bytes", "free_bytes", "reserved_bytes"),
    "activation_fraction_of_total": ("total_bytes",),
}

_FIGURES = (
    "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_bytes",
    "reserved_unallocated_bytes", "process_in_use_bytes", "allowed_bytes", "private_pools_bytes",
)


@dataclass(frozen=True)
class Derived:
    """Named facts for one event, the evidence behind each, and which ones must not be trusted."""

    values: dict[str, Any]
    evidence: dict[str, tuple[Evidence, ...]]
    implausible: frozenset[str] = field(default_factory=frozenset)
    event: OOMEvent | None = None
    run: RunContext | None = None
    activation: ActivationEstimate | None = None  # the breakdown behind activation_bytes_estimate

    @functools.cached_property
    def stacks(self) -> frozenset[str]:
        """The stacks the log shows: the stack_* facts that hold (read once; every fix of every rule asks)."""
        return frozenset(k.removeprefix("stack_") for k, v in self.values.items() if k.startswith("stack_") and v)


def run_for(facts: ParseResult, event: OOMEvent) -> RunContext | None:
    """The run context printed in the same source as the event (the event's run when several)."""
    runs = [r for r in facts.runs if r.source == event.source]
    if not runs:
        return None
    return runs[event.run] if event.run < len(runs) else runs[0]


def _ratio(a: int | float | None, b: int | float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _event_line(event: OOMEvent) -> Evidence:
    first = event.message.strip().splitlines()[0] if event.message.strip() else event.kind
    return Evidence(source=event.source, line=event.line, text=first[:400])


def _figures(event: OOMEvent, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    line = (_event_line(event),)
    for name in _FIGURES:
        out[name] = getattr(event, name)
        ev[name] = (event.evidence[name],) if name in event.evidence else line
    for name in ("kind", "fatal", "era", "root_cause", "rank", "gpu_index", "phase", "step", "operation"):
        out[name] = getattr(event, name)
        ev[name] = (event.evidence[name],) if name in event.evidence else line
    if out["phase"] == "unknown":
        out["phase"] = None  # unknown, so comparisons on it stay unknown
    out["message_says"] = event.detail.get("message_says")
    ev["message_says"] = line
    total, free, reserved = event.total_bytes, event.free_bytes, event.reserved_bytes
    others = sum(p.bytes for p in event.other_processes) if event.other_processes else None
    if others is None and event.process_in_use_bytes is not None:
        others = 0  # NVML answered and listed nobody else
    out.update({
        "free_fraction": _ratio(free, total),
        "allocated_fraction_of_total": _ratio(event.allocated_bytes, total),
        "reserved_fraction_of_total": _ratio(reserved, total),
        "reserved_unallocated_fraction_of_total": _ratio(event.reserved_unallocated_bytes, total),
        "reserved_unallocated_over_requested": _ratio(event.reserved_unallocated_bytes, event.requested_bytes),
        "reserved_unallocated_over_allocated": _ratio(event.reserved_unallocated_bytes, event.allocated_bytes),
        "requested_fraction_of_total": _ratio(event.requested_bytes, total),
        # "0 bytes free" (the commonest figure of a full card) makes the ratio unbounded, not unknown
        "requested_over_free": math.inf if free == 0 and event.requested_bytes else _ratio(event.requested_bytes, free),
        "free_covers_request": None if free is None or event.requested_bytes is None else free >= event.requested_bytes,
        "free_fits_segment": None if free is None or event.requested_bytes is None
        else free >= allocation_size(round_size(event.requested_bytes)) + FULL_CARD_RESIDUE_BYTES,
        "free_plus_slack_over_requested": None if free is None or event.reserved_unallocated_bytes is None
        else _ratio(free + event.reserved_unallocated_bytes, event.requested_bytes),
        "allowed_fraction_of_total": _ratio(event.allowed_bytes, total),
        "other_processes_bytes": others,
        "other_processes_count": len(event.other_processes) if others is not None else None,
        "other_processes_fraction_of_total": _ratio(others, total),
        "other_processes_alike_contexts": None if others is None else _alike_contexts(event.other_processes),
        "non_pytorch_bytes": None if event.process_in_use_bytes is None or reserved is None
        else event.process_in_use_bytes - reserved,
        "outside_pytorch_bytes": None if total is None or free is None or reserved is None else total - free - reserved,
    })
    out["outside_pytorch_fraction"] = _ratio(out["outside_pytorch_bytes"], total)
    outside = out["outside_pytorch_bytes"]
    out["outside_pytorch_beyond_context_fraction"] = None if outside is None or not total else \
        max(0, outside - CUDA_CONTEXT_BYTES) / total
    req, alloc = event.requested_bytes, event.allocated_bytes
    out["request_absurd"] = None if req is None else (req >= IMPLAUSIBLE_BYTES or (total is not None and req >= 8 * total))
    out["allocated_exceeds_total"] = None if alloc is None or total is None else alloc > total
    out["non_pytorch_fraction_of_total"] = _ratio(out["non_pytorch_bytes"], total)
    for name in _DEPENDS:
        ev[name] = line


def _implausible(event: OOMEvent) -> frozenset[str]:
    bad = set(event.implausible)
    if any(p.bytes >= 2**50 for p in event.other_processes):
        bad.add("other_processes")
    for name, sources in _DEPENDS.items():
        if bad.intersection(sources):
            bad.add(name)
    return frozenset(bad)


HOST_DEVICE = ("device:CPU", "/cpu:")  # TensorFlow's device names for host memory
HOST_ALLOCATORS = ("cpu", "mklcpu", "cpu_pool")


def _device(event: OOMEvent, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    device, allocator = event.detail.get("device"), event.detail.get("allocator")
    out["host_device"] = None if device is None and allocator is None else \
        any(h in (device or "") for h in HOST_DEVICE) or (allocator or "").lower() in HOST_ALLOCATORS
    if out["host_device"] is not None:
        ev["host_device"] = (_event_line(event),)


def _shape(event: OOMEvent, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    dims = event.detail.get("shape") or []
    out["tensor_shape"] = f"[{', '.join(map(str, dims))}]" if dims else None
    out["tensor_rank"] = len(dims) if dims else None
    out["tensor_leading_dim"] = dims[0] if dims else None
    out["tensor_inner_max_dim"] = inner = max(dims[1:-1]) if len(dims) >= 3 else None
    out["tensor_inner_dim_square"] = None if inner is None else inner >= 1024 and math.isqrt(inner) ** 2 == inner
    if dims:
        for name in ("tensor_shape", "tensor_rank", "tensor_leading_dim", "tensor_inner_max_dim", "tensor_inner_dim_square"):
            ev[name] = (_event_line(event),)


def _eval_bar(event: OOMEvent, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    for name in ("eval_batches_done", "eval_batches_total"):
        out[name] = event.detail.get(name)
        if out[name] is not None:
            ev[name] = (event.evidence["eval_progress"],)


def _alike_contexts(others: tuple[OtherProcess, ...]) -> bool:
    """Whether the other processes look like one CUDA context each of a job's siblings (see CONTEXT_ALIKE_BYTES)."""
    sizes = [p.bytes for p in others]
    low, high = CONTEXT_ALIKE_BYTES
    return len(sizes) >= 2 and all(low <= b <= high for b in sizes) and max(sizes) <= CONTEXT_ALIKE_SPREAD * min(sizes)


def _siblings(facts: ParseResult, event: OOMEvent, out: dict[str, Any]) -> None:
    same = [e for e in facts.events if e.source == event.source and e.run == event.run]
    out["event_count"] = len(same)
    ranks = {e.rank for e in same if e.rank is not None}
    out["failing_ranks"] = len(ranks) if ranks else (1 if same else None)


def _coerce(ftype: str, raw: Any) -> Any:
    """A config value in its documented type (the parser may keep "4096" or "true"); unusable -> None."""
    if raw is None or ftype == "str":
        return None if raw is None else str(raw)
    if ftype == "bool":
        if isinstance(raw, bool):
            return raw
        return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(str(raw).strip().lower())
    try:
        if isinstance(raw, bool):
            return None
        return float(raw) if ftype == "float" else int(raw)
    except (TypeError, ValueError):
        return None


# A serving engine's own message names it (vLLM's start-up check, SGLang's KV pool, TGI's warm-up): its stack.
_ENGINE_STACK = {"vllm": "stack_vllm", "sglang": "stack_serving_engine", "text-generation-inference": "stack_serving_engine"}


def _engine_named(event: OOMEvent, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    """The stack of the engine whose own message this is, when the rest of the log named none."""
    key = _ENGINE_STACK.get(str(event.detail.get("engine")))
    if key and not out[key]:
        out[key] = out["stacks_known"] = True
        ev[key] = (event.evidence["message"],) if "message" in event.evidence else ()


def _config(run: RunContext | None, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    config = run.config if run else {}
    for key, (ftype, _) in CONFIG_FACTS.items():
        value = config.get(key)
        out[key] = _coerce(ftype, value.value) if value is not None else None
        if value is not None:
            ev[key] = (value.evidence,)
    _known_shape(out, ev)
    stacks_value = config.get("stacks")
    stacks = list(stacks_value.value) if stacks_value is not None and stacks_value.value else []
    for stack in STACKS:
        out[f"stack_{stack}"] = stack in stacks
        if stacks_value is not None and stack in stacks:
            ev[f"stack_{stack}"] = (stacks_value.evidence,)
    out["stacks_known"] = bool(stacks)
    bs, seq = out["per_device_train_batch_size"], out["max_seq_length"]
    out["tokens_per_micro_batch"] = bs * seq if isinstance(bs, int) and isinstance(seq, int) else None
    ev["tokens_per_micro_batch"] = ev.get("per_device_train_batch_size", ()) + ev.get("max_seq_length", ())
    bf16, fp16 = out["bf16"], out["fp16"]
    out["mixed_precision"] = True if (bf16 or fp16) else (False if bf16 is False or fp16 is False else None)
    ev["mixed_precision"] = ev.get("bf16", ()) + ev.get("fp16", ())
    opt = str(out["optimizer"]).lower() if out["optimizer"] is not None else None
    out["optimizer_is_adam"] = None if opt is None else "adam" in opt
    out["optimizer_is_8bit"] = None if opt is None else any(t in opt for t in ("8bit", "bnb", "int8"))
    ev["optimizer_is_adam"] = ev["optimizer_is_8bit"] = ev.get("optimizer", ())
    if out["optimizer_is_8bit"] and out["bitsandbytes_unavailable"]:  # asked for, but bitsandbytes could not give it
        out["optimizer_is_8bit"] = False
        ev["optimizer_is_8bit"] += ev.get("bitsandbytes_unavailable", ())


def _known_shape(out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    """Model shape from the published config of a known base model, when the log printed no config."""
    name = out.get("model_name")
    shape = shape_of(name) if name else None
    if shape is None:
        return
    for key, value in zip(("hidden_size", "num_layers", "vocab_size"), shape):
        if out.get(key) is None:
            out[key] = value
            ev[key] = ev.get("model_name", ())


FLOAT32_DTYPES = ("float32", "fp32", "torch.float32", "float")


def _weights_floor(out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    """The least memory the model's weights need, from its printed parameter count or the size in its name."""
    name = out.get("model_name")
    params, source = out.get("total_params"), "total_params"
    if params is None and name:
        params, source = params_in_name(name), "model_name"
    out["model_params"] = params
    per_weight = 0.5 if out.get("quantized_weights") else (quantised_bytes_per_weight(name) if name else None) or (
        4.0 if str(out.get("model_dtype") or "").lower() in FLOAT32_DTYPES else 2.0)
    out["weights_bytes_floor"] = floor = int(params * per_weight) if params else None
    total = out.get("total_bytes")
    out["weights_floor_over_total"] = floor / total if floor and total else None
    if params:
        cited = ev.get(source, ()) + ev.get("model_dtype", ()) + ev.get("quantized_weights", ())
        ev["model_params"] = ev["weights_bytes_floor"] = ev.get(source, ())
        ev["weights_floor_over_total"] = cited + ev.get("total_bytes", ())


def _alloc_conf(event: OOMEvent, run: RunContext | None, out: dict[str, Any],
                ev: dict[str, tuple[Evidence, ...]]) -> None:
    conf = run.alloc_conf if run else None
    out["alloc_conf_printed"] = conf is not None
    text = str(conf.value).replace(" ", "").lower() if conf is not None else ""
    out["allocator_async"] = event.detail.get("allocator_backend") == "cudaMallocAsync" \
        or "backend:cudamallocasync" in text
    ev["allocator_async"] = (_event_line(event),) + ((conf.evidence,) if conf is not None else ())
    if conf is None:
        out["expandable_segments"] = None
        return
    out["expandable_segments"] = "expandable_segments:true" in text
    ev["expandable_segments"] = ev["alloc_conf_printed"] = (conf.evidence,)


def _multiples(out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    step = out["step"]
    out["is_first_step"] = None if step is None else step in (0, 1)
    ev["is_first_step"] = ev["step"]
    for flag, every in (("step_is_eval_multiple", "eval_steps"), ("step_is_save_multiple", "save_steps")):
        n = out[every]
        ok = isinstance(step, int) and isinstance(n, int) and n > 0 and step > 0
        out[flag] = (step % n == 0) if ok else None
        ev[flag] = ev["step"] + ev.get(every, ())


def _eval_banner(event: OOMEvent, run: RunContext | None, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    if run is None:
        out["eval_banner_before_oom"] = None
        return
    # A step line after the banner means training resumed after that evaluation.
    resumed = event.evidence["step"].line if "step" in event.evidence else 0
    near = [e for e in run.eval_lines
            if max(resumed, event.line - EVAL_BANNER_WINDOW_LINES) <= e.line <= event.line]
    out["eval_banner_before_oom"] = bool(near)
    if near:
        ev["eval_banner_before_oom"] = (near[-1],)


def _slope(points: list[tuple[int, int]]) -> float:
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    var = sum((p[0] - mx) ** 2 for p in points)
    return 0.0 if var == 0 else sum((p[0] - mx) * (p[1] - my) for p in points) / var


def _sample_bytes(s: MemorySample) -> int | None:
    return s.allocated_bytes if s.allocated_bytes is not None else s.max_allocated_bytes


def _memory(event: OOMEvent, run: RunContext | None, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    samples = [s for s in (run.memory if run else ()) if s.evidence.line <= event.line]
    points = [(s.step, b) for s in samples if s.step is not None and (b := _sample_bytes(s)) is not None]
    out["memory_samples"] = len(samples) if run else None
    keys = ("memory_first_allocated_bytes", "memory_last_allocated_bytes", "memory_growth_bytes_per_step",
            "memory_growth_total_bytes", "memory_growth_fraction", "memory_monotonic")
    for key in keys:
        out[key] = None
    if not points:
        return
    with_bytes = [s for s in samples if s.step is not None and _sample_bytes(s) is not None]
    first, last = points[0][1], points[-1][1]
    out["memory_first_allocated_bytes"], out["memory_last_allocated_bytes"] = first, last
    span = (with_bytes[0].evidence, with_bytes[-1].evidence)
    for key in keys:
        ev[key] = span
    if len(points) < 3:
        return
    out["memory_growth_bytes_per_step"] = _slope(points)
    out["memory_growth_total_bytes"] = last - first
    out["memory_growth_fraction"] = _ratio(last - first, first)
    out["memory_monotonic"] = all(b >= a for (_, a), (_, b) in zip(points, points[1:]))


def _estimate(out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> ActivationEstimate | None:
    est = activations(out)
    out["activation_bytes_estimate"] = est.total_bytes if est else None
    out["activation_fraction_of_total"] = _ratio(out["activation_bytes_estimate"], out["total_bytes"])
    names = ("hidden_size", "num_layers", "vocab_size", "per_device_train_batch_size", "max_seq_length")
    ev["activation_bytes_estimate"] = ev["activation_fraction_of_total"] = tuple(
        e for n in names for e in ev.get(n, ()))
    return est


# Apps that generate (AUTOMATIC1111's web UI and its forks, ComfyUI) unless the log shows them training.
GENERATING_APPS = frozenset({"webui", "comfyui"})
TRAINING_STACKS = ("hf_trainer", "deepspeed", "fsdp", "axolotl", "llama_factory", "lightning", "trl", "rl_trainer",
                   "torchtitan", "megatron", "skorch", "sd_scripts")


def _inference_only(out: dict[str, Any]) -> None:
    trained = (out["step"] is not None or out["phase"] in ("train", "save") or out["operation"] in ("optimizer", "backward")
               or out["per_device_train_batch_size"] is not None or any(out[f"stack_{s}"] for s in TRAINING_STACKS))
    # a web UI (AUTOMATIC1111, Forge) or ComfyUI generates unless the log shows training (a Train tab, a trainer node's
    # steps)
    serving = (out["phase"] in ("generate", "eval") or out["stack_vllm"] or out["stack_serving_engine"]
               or any(out[f"stack_{s}"] for s in GENERATING_APPS) or out["kind"] == "kv_cache")
    out["inference_only"] = False if trained else (True if serving else None)
    out["generating_app"] = out["inference_only"] is True and any(out[f"stack_{s}"] for s in GENERATING_APPS)
    world, tp = out["world_size"], out["tensor_parallel"]
    out["data_parallel_degree"] = world // tp if isinstance(world, int) and isinstance(tp, int) and tp > 0 else None


def _snapshot(event: OOMEvent, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    """The allocator's own layout, when a memory snapshot recorded it at the failure."""
    at_failure = event.detail.get("snapshot") and event.detail.get("snapshot_at_failure")
    for name, key in (("snapshot_largest_free_block_bytes", "largest_free_block_bytes"),
                      ("snapshot_inactive_bytes", "inactive_bytes"), ("snapshot_stranded_bytes", "stranded_bytes")):
        out[name] = event.detail.get(key) if at_failure else None
        ev[name] = (_event_line(event),)
    floors = event.detail.get("live_floors") or [] if event.detail.get("snapshot") else []
    out["snapshot_live_floor_growth_fraction"] = (floors[-1] - floors[0]) / max(floors[0], MIB) if floors else None
    out["snapshot_live_floor_rising"] = all(b >= a for a, b in zip(floors, floors[1:])) if floors else None
    for name in ("snapshot_live_floor_growth_fraction", "snapshot_live_floor_rising"):
        ev[name] = (_event_line(event),)
    by_cat = (event.detail.get("live_by_category") or {}) if at_failure else {}
    live = sum(by_cat.values())
    for cat in ("parameters", "gradients", "optimizer_state", "activations", "kv_cache"):
        name = f"snapshot_{cat}_fraction"
        out[name] = by_cat.get(cat, 0) / live if live else None
        ev[name] = (_event_line(event),)


def _summary(event: OOMEvent, out: dict[str, Any], ev: dict[str, tuple[Evidence, ...]]) -> None:
    """The allocator's own account, when a memory_summary() table was printed beside the failure."""
    table = event.detail.get("memory_summary") or {}
    reserved, stuck = table.get("reserved_bytes"), table.get("non_releasable_bytes")
    out["summary_reserved_bytes"] = reserved
    out["summary_non_releasable_bytes"] = stuck
    out["summary_non_releasable_fraction_of_reserved"] = stuck / reserved if reserved and stuck is not None else None
    out["summary_alloc_retries"] = table.get("retries")
    for name in ("summary_reserved_bytes", "summary_non_releasable_bytes",
                 "summary_non_releasable_fraction_of_reserved", "summary_alloc_retries"):
        if out[name] is not None:
            ev[name] = (event.evidence["memory_summary"],)


def derive(facts: ParseResult, index: int) -> Derived:
    """Flatten event `index` of `facts` (with its run context) into the facts named in FACTS."""
    event = facts.events[index]
    run = run_for(facts, event)
    out: dict[str, Any] = {}
    ev: dict[str, tuple[Evidence, ...]] = {}
    _figures(event, out, ev)
    _device(event, out, ev)
    _shape(event, out, ev)
    _eval_bar(event, out, ev)
    _siblings(facts, event, out)
    _config(run, out, ev)
    _engine_named(event, out, ev)
    _alloc_conf(event, run, out, ev)
    _multiples(out, ev)
    _weights_floor(out, ev)
    if event.detail.get("first_step") and out["is_first_step"] is None:  # started, then failed before a step
        out["is_first_step"] = True
        ev["is_first_step"] = (event.evidence["first_step"],)
    _eval_banner(event, run, out, ev)
    _memory(event, run, out, ev)
    _inference_only(out)
    _snapshot(event, out, ev)
    _summary(event, out, ev)
    out["own_allocator"] = bool(event.detail.get("own_allocator"))
    if out["own_allocator"]:
        ev["own_allocator"] = (event.evidence["message"],)
    out["raised_in_engine"] = event.detail.get("raised_in_engine")
    if out["raised_in_engine"]:
        ev["raised_in_engine"] = (event.evidence["message"],)
    out["progress_after_oom"] = bool(event.detail.get("progress_after"))
    if out["progress_after_oom"]:
        ev["progress_after_oom"] = (event.evidence["progress_after"],)
    config = set(run.config) - {"stacks"} if run else set()
    out["context_shown"] = bool(out["step"] is not None or out["phase"] or out["operation"] or config
                                or out["memory_samples"])
    est = _estimate(out, ev)
    missing = set(FACTS) - set(out)
    assert not missing, f"derive forgot facts: {sorted(missing)}"
    return Derived(values=out, evidence=ev, implausible=_implausible(event), event=event, run=run, activation=est)
