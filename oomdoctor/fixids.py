"""The stable fix ids shared by the rule catalog (diagnose) and the fix transforms (verify)."""

from __future__ import annotations

# id -> one-line meaning. verify implements a transform for VERIFIABLE ones; the rest it reports as
# "not verifiable" rather than dropping them.
FIX_IDS: dict[str, str] = {
    "halve-batch": "halve the per-device batch and double gradient accumulation (effective batch kept)",
    "gradient-checkpointing": "recompute activations in backward instead of storing them",
    "bf16-autocast": "run forward/backward under bf16 autocast (mixed precision)",
    "eval-no-grad": "run evaluation under torch.inference_mode()/no_grad",
    "smaller-eval-batch": "lower the per-device evaluation (or inference) batch",
    "eval-accumulation-steps": "move eval predictions to the CPU every few steps",
    "shorter-max-seq": "cap the maximum sequence length",
    "expandable-segments": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "max-split-size": "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:<N>",
    "gc-threshold": "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:<f>",
    "lighter-optimizer": "an optimizer with less state (8-bit AdamW, Adafactor, SGD)",
    "raise-zero-stage": "shard more state: ZeRO stage 2 -> 3, or FSDP FULL_SHARD",
    "cpu-offload": "offload optimizer states and parameters (inference: idle model parts) to CPU memory",
    "more-gpus": "spread the sharded state over more GPUs",
    "fused-cross-entropy": "a chunked/fused cross-entropy that never materialises full-vocab logits in fp32",
    "free-other-process": "stop the other process on the GPU or pin the job to a free GPU",
    "fix-leak": "stop keeping graph-holding tensors across steps (loss.item(), detach)",
    "empty-cache-before-save": "gather the state dict shard by shard / on CPU when saving",
    "lower-gpu-memory-utilization": "serving: fit the KV-cache budget to the card (max_model_len, concurrent "
                                    "sequences, vLLM gpu_memory_utilization)",
    "lower-num-generations": "RL: fewer generations per prompt or a smaller generation batch",
    "more-host-ram": "give the job more host RAM or load with low_cpu_mem_usage / mmap",
    "more-shared-memory": "give DataLoader workers more /dev/shm (docker --shm-size or --ipc=host, a memory-backed "
                          "emptyDir in Kubernetes) or fewer, lighter workers",
    "fewer-dataloader-workers": "fewer DataLoader workers (each one maps the libraries and copies the dataset state)",
    "group-by-length": "sort/bucket samples by length or pack sequences to cap the longest batch",
    "no-preallocation": "JAX/TF: allocate on demand instead of preallocating most of the GPU",
    "quantize-weights": "load the weights in 4- or 8-bit (bitsandbytes, GPTQ/AWQ, an int4 release; QLoRA to train)",
    "ddp-bucket-view": "DistributedDataParallel(gradient_as_bucket_view=True): gradients live in DDP's buckets",
    "smaller-zero-buckets": "DeepSpeed ZeRO: reduce_bucket_size (and allgather_bucket_size) of hidden_size² elements",
    "activation-offload": "keep the activations saved for backward in host memory until backward needs them",
    "smaller-zero3-prefetch": "ZeRO-3/FSDP: gather fewer parameters ahead (DeepSpeed stage3_prefetch_bucket_size, "
                              "max_live_parameters, max_reuse_distance; FSDP backward/forward prefetch off)",
}

VERIFIABLE: frozenset[str] = frozenset({
    "halve-batch", "gradient-checkpointing", "bf16-autocast", "eval-no-grad", "smaller-eval-batch",
    "eval-accumulation-steps", "shorter-max-seq", "expandable-segments", "max-split-size", "gc-threshold", "lighter-optimizer",
    "raise-zero-stage", "cpu-offload", "more-gpus", "fused-cross-entropy", "lower-num-generations", "ddp-bucket-view",
    "smaller-zero-buckets", "activation-offload", "smaller-zero3-prefetch",
})


# Parameters of the allocator fixes: one definition for diagnose's advice and verify's replay.
GC_THRESHOLD = 0.6  # reclaim cached blocks once 60% of the allowed memory is in use (PyTorch's documented example)
# The threshold acts only under a per-process memory fraction below 1 (c10: garbage_collect_cached_blocks runs only
# when allowed_memory_maximum is set), so the fix sets one too; 0.99 gives up 1% of the card.
GC_MEMORY_FRACTION = 0.99
# smaller-zero3-prefetch: DeepSpeed's stage3_max_live_parameters and stage3_max_reuse_distance lowered from their
# 1e9 default to 1e8 elements, the step HF's DeepSpeed integration guide suggests when ZeRO-3 runs out of memory
ZERO3_FIX_LIVE_ELEMENTS = 100_000_000
MAX_SPLIT_SIZE_MB_LARGE = 512  # requests of 512 MiB and more: never split blocks above this size
MAX_SPLIT_SIZE_MB_SMALL = 128  # smaller requests: a lower cap keeps more whole blocks for them


def max_split_size_mb(requested_bytes: int | None) -> int:
    """max_split_size_mb for a failing request of this size (the larger cap when the size is unknown)."""
    small = requested_bytes is not None and requested_bytes < MAX_SPLIT_SIZE_MB_LARGE * 2**20
    return MAX_SPLIT_SIZE_MB_SMALL if small else MAX_SPLIT_SIZE_MB_LARGE
