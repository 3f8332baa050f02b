"""Parameters of verify's workloads: the built-in transformer and `model: hf` (pydantic, no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Dtype = Literal["float32", "bfloat16", "float16"]


DDP_BUCKETS_DOC = ("DistributedDataParallel's gradient buckets (gradient_as_bucket_view false, its default): a flat "
                   "copy of every trainable gradient in 25 MB buckets, allocated when the model is wrapped and kept "
                   "for the run")
ZERO_BUCKET_DOC = ("DeepSpeed's reduce_bucket_size in elements (contiguous_gradients, its default): ZeRO-1/2 "
                   "allocate a gradient bucket of this many elements in the weights' dtype for every backward (two "
                   "with overlap_comm), ZeRO-3 one for the run; 0: none (FSDP, or not in the log)")
ACTIVATION_OFFLOAD_DOC = ("the tensors saved for backward live in host memory and come back as backward needs them "
                          "(torchtune's enable_activation_offloading; parameters and tensors under 1 KiB stay)")
ZERO3_UNIT_DOC = ("ZeRO-3/FSDP: what is gathered at once. layer: one transformer block's weights in one flat buffer "
                  "(PyTorch FSDP FULL_SHARD wrapping each block; embedding and head are the root unit, gathered for "
                  "the step); module: each module's own weights, prefetched along the recorded module order "
                  "(DeepSpeed ZeRO-3); matmul: each weight just before its matmul, nothing ahead (a lower bound)")
FSDP_ONLY = ("zero3_forward_prefetch_units", "zero3_backward_prefetch_units")
DEEPSPEED_ONLY = ("zero3_prefetch_bucket_elements", "zero3_max_live_elements", "zero3_persistence_threshold_elements",
                  "zero3_max_reuse_distance_elements")
MASTER_WEIGHTS_DOC = ("the optimizer keeps an fp32 master copy of (this rank's shard of) the 16-bit weights and fp32 "
                      "moments, as DeepSpeed's bf16/fp16 mode does (2 + 2 + 12 bytes per parameter before sharding); "
                      "false: torch.optim on the weights as loaded (moments in their dtype), as without DeepSpeed")
DDP_BUCKET_VIEW_DOC = ("DistributedDataParallel(gradient_as_bucket_view=True): each gradient is a view into its "
                       "bucket instead of a second copy beside it (needs ddp_buckets)")


class ZeroParams(BaseModel):
    """One rank of a data-parallel job: DeepSpeed ZeRO / PyTorch FSDP sharding over `world_size` GPUs, or DDP's
    buckets (shared by the built-in transformer and `model: hf`)."""

    model_config = ConfigDict(extra="forbid")

    zero_stage: int = Field(0, ge=0, le=3, description="ZeRO stage: 1 shards optimizer states, 2 also gradients, "
                                                       "3 also parameters (FSDP SHARD_GRAD_OP = 2, FULL_SHARD = 3)")
    world_size: int = Field(1, ge=1, description="GPUs the state is sharded over")
    zero_bucket_elements: int = Field(0, ge=0, description=ZERO_BUCKET_DOC)
    overlap_comm: bool = Field(False, description="DeepSpeed's overlap_comm: ZeRO-1/2 keep two gradient buckets "
                                                  "(double-buffered) instead of one")
    zero3_gather_unit: Literal["layer", "module", "matmul"] = Field("layer", description=ZERO3_UNIT_DOC)
    # PyTorch FSDP's defaults (torch/distributed/fsdp: forward_prefetch=False, backward_prefetch=BACKWARD_PRE)
    zero3_forward_prefetch_units: int = Field(0, ge=0, le=8, description="layer: units all-gathered ahead in forward "
                                              "(FSDP forward_prefetch=True: 1; off by default)")
    zero3_backward_prefetch_units: int = Field(1, ge=0, le=8, description="layer: units all-gathered ahead in "
                                               "backward, before the current unit's compute (FSDP's default "
                                               "BACKWARD_PRE: 1; backward_prefetch=None: 0)")
    # DeepSpeed's defaults (DeepSpeed runtime/zero/config.py, DeepSpeedZeroConfig)
    zero3_prefetch_bucket_elements: int = Field(50_000_000, ge=0, description="module: DeepSpeed's "
                                                "stage3_prefetch_bucket_size, elements fetched ahead of use (5e7)")
    zero3_max_live_elements: int = Field(1_000_000_000, ge=0, description="module: DeepSpeed's "
                                         "stage3_max_live_parameters, the most elements a prefetch leaves gathered "
                                         "(1e9)")
    zero3_persistence_threshold_elements: int = Field(100_000, ge=0, description="module: DeepSpeed's "
                                                      "stage3_param_persistence_threshold: weights with fewer "
                                                      "elements stay gathered for the run (1e5)")
    zero3_max_reuse_distance_elements: int = Field(1_000_000_000, ge=0, description="module: DeepSpeed's "
                                                   "stage3_max_reuse_distance: a weight used again within this many "
                                                   "elements of other modules is not released (1e9)")
    zero3_streams: bool = Field(True, description="layer/module: gathered weights are allocated on the all-gather "
                                "stream's pool and freed with record_stream, so their memory is reused only after "
                                "the next unit's compute starts (FSDP's unshard stream, DeepSpeed's allgather stream); "
                                "false: one stream, reused at once")
    ddp_buckets: bool = Field(False, description=DDP_BUCKETS_DOC)
    ddp_bucket_view: bool = Field(False, description=DDP_BUCKET_VIEW_DOC)

    @model_validator(mode="after")
    def _check_sharding(self) -> ZeroParams:
        if self.ddp_buckets and self.zero_stage:
            raise ValueError("ddp_buckets is DistributedDataParallel's; ZeRO/FSDP (zero_stage) reduce without them")
        if self.ddp_bucket_view and not self.ddp_buckets:
            raise ValueError("ddp_bucket_view shares DDP's buckets with the gradients: it needs ddp_buckets: true")
        if self.zero_bucket_elements and not self.zero_stage:
            raise ValueError("zero_bucket_elements is DeepSpeed ZeRO's reduce_bucket_size: it needs zero_stage 1-3")
        self._zero3_settings_fit()
        if not self.zero3_streams and self.zero_stage < 3:
            raise ValueError("zero3_streams sets ZeRO-3/FSDP parameter gathering: it needs zero_stage: 3")
        return self

    def _zero3_settings_fit(self) -> None:
        """FSDP's prefetch settings need the layer unit, DeepSpeed's the module unit; both need ZeRO stage 3. A
        setting at its default passes anywhere (verify writes every field of the params it replays)."""
        fields = type(self).model_fields
        changed = [name for name in (*FSDP_ONLY, *DEEPSPEED_ONLY) if getattr(self, name) != fields[name].default]
        for name in changed:
            if self.zero_stage < 3:
                raise ValueError(f"{name} sets ZeRO-3/FSDP parameter gathering: it needs zero_stage: 3")
            unit, who = ("layer", "PyTorch FSDP's") if name in FSDP_ONLY else ("module", "DeepSpeed's")
            if self.zero3_gather_unit != unit:
                raise ValueError(f"{name} is {who} prefetch setting: it needs zero3_gather_unit: {unit} "
                                 f"(not {self.zero3_gather_unit})")


class TransformerParams(ZeroParams):
    """A decoder-only transformer step, standing for one rank of an N-GPU (ZeRO/FSDP) job."""

    layers: int = Field(2, ge=1)
    width: int = Field(128, ge=8)
    heads: int = Field(4, ge=1)
    vocab: int = Field(1024, ge=2)
    ffn: int | None = Field(None, ge=1, description="MLP hidden size; default 4 × width (gelu) or 8/3 × width")
    mlp: Literal["gelu", "swiglu"] = "gelu"
    seq_len: int = Field(128, ge=1)
    batch: int = Field(4, ge=1, description="per-device micro-batch (train)")
    grad_accum: int = Field(1, ge=1, description="micro-batches per optimizer step")
    eval_batch: int | None = Field(None, ge=1, description="per-device batch for eval/generate; default batch")
    eval_no_grad: bool = Field(True, description="eval runs under torch.no_grad()")
    max_new_tokens: int = Field(16, ge=1, description="generate: tokens decoded after the prompt")
    num_generations: int = Field(1, ge=1, description="generate: completions per prompt (GRPO/RLOO group size); "
                                                      "eval_batch prompts x num_generations sequences decode at once")
    generate_in_training: bool = Field(False, description="generate: the rollout of an RL trainer (GRPO/PPO), so "
                                                         "the optimizer's states stay resident while it decodes")
    dtype: Dtype = Field("float32", description="dtype of the weights")
    autocast: Literal["bfloat16", "float16"] | None = None
    gradient_checkpointing: bool = False
    checkpoint_every: int = Field(1, ge=1, description="with gradient_checkpointing: checkpoint every k-th block only "
                                                       "(selective checkpointing, torchtune's ac_option); 1 = all")
    activation_offload: bool = Field(False, description=ACTIVATION_OFFLOAD_DOC)
    lora_rank: int = Field(0, ge=0, description="0 = full fine-tuning; >0 = LoRA on q and v, base frozen")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the LoRA input (PEFT, litgpt: 0.05)")
    norm: Literal["layernorm", "rmsnorm"] | None = Field(
        None, description="rmsnorm computes in fp32 as Llama-family code does (HF, litgpt): its fp32 input is "
                          "kept for backward; default rmsnorm with mlp swiglu, else layernorm")
    optimizer: Literal["adamw", "adamw_fused", "adamw8bit", "sgd", "adafactor"] = "adamw"
    master_weights: bool = Field(True, description="keep fp32 master weights when dtype is not float32")
    offload: Literal["none", "optimizer", "all"] = "none"
    fused_cross_entropy: bool = False
    ce_chunk_tokens: int = Field(4096, ge=1)
    tie_embeddings: bool = False

    @model_validator(mode="after")
    def _check(self) -> TransformerParams:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
        if self.offload == "all" and self.zero_stage < 3:
            raise ValueError("offload: all (parameters) needs zero_stage: 3")
        return self

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def norm_kind(self) -> str:
        return self.norm or ("rmsnorm" if self.mlp == "swiglu" else "layernorm")

    @property
    def ffn_size(self) -> int:
        if self.ffn:
            return self.ffn
        return 4 * self.width if self.mlp == "gelu" else int(8 * self.width / 3 + 255) // 256 * 256

    @property
    def effective_batch(self) -> int:
        return self.batch * self.grad_accum * self.world_size

    def num_parameters(self) -> int:
        """Parameters of the full (unsharded) model, LoRA adapters included."""
        w, f, v = self.width, self.ffn_size, self.vocab
        mlp = (2 if self.mlp == "gelu" else 3) * w * f + (f + w if self.mlp == "gelu" else 0)
        block = 4 * w * w + 4 * w + mlp + 4 * w
        lora = 2 * 2 * self.lora_rank * w if self.lora_rank else 0
        head = 0 if self.tie_embeddings else v * w
        return self.layers * (block + lora) + v * w + head + 2 * w


class HFParams(ZeroParams):
    """One step of a Hugging Face transformers model built from its config (the user's real architecture): a causal LM,
    or an image classifier (ResNet, ViT, …) fed images of `image_size`; one rank of a ZeRO/FSDP job with zero_stage."""

    config: str | dict = Field(..., description="a catalog name (e.g. meta-llama/Llama-3.2-1B), a local "
                                                "config.json or its folder, or an inline mapping of config keys")
    overrides: dict = Field(default_factory=dict, description="config keys to change, e.g. num_hidden_layers")
    seq_len: int = Field(512, ge=1)
    batch: int = Field(1, ge=1, description="per-device micro-batch (train)")
    grad_accum: int = Field(1, ge=1)
    eval_batch: int | None = Field(None, ge=1)
    eval_no_grad: bool = True
    eval_batches: int | None = Field(None, ge=1, description="evaluation batches whose outputs the loop keeps on the "
                                     "device until it ends (HF Trainer without eval_accumulation_steps): the last "
                                     "batch runs on top of the others' logits, then joins them")
    eval_accumulation_steps: int | None = Field(None, ge=1, description="move the kept outputs to the host every N "
                                                "batches (HF eval_accumulation_steps)")
    eval_world_size: int = Field(1, ge=1, description="data-parallel ranks whose evaluation logits HF Trainer gathers "
                                                      "onto every rank before keeping them (accelerate's "
                                                      "gather_for_metrics): each rank keeps all ranks' outputs")
    num_generations: int = Field(1, ge=1, description="generate: completions per prompt; eval_batch (else batch) "
                                                       "prompts x this many sequences decode at once")
    max_new_tokens: int = Field(256, ge=1, description="generate: tokens decoded after the seq_len-token prompt")
    generate_in_training: bool = Field(False, description="generate: an RL rollout between optimizer steps (the "
                                                          "optimizer's states stay on the device)")
    completion_len: int | None = Field(None, ge=1, description="train: an RL policy update (TRL's GRPO): log-probs "
                                       "of the last completion_len tokens of each seq_len-token sequence only, from "
                                       "logits in the weights' dtype, one sequence's log-softmax at a time; unset: "
                                       "the causal-LM loss over every token")
    reference_model: bool = Field(False, description="an RL or preference trainer's frozen reference copy of the "
                                  "policy (TRL with beta > 0 and no PEFT): the same weights once more, resident")
    dtype: Dtype = Field("float32", description="dtype the weights are loaded in")
    autocast: Literal["bfloat16", "float16"] | None = None
    gradient_checkpointing: bool = False
    activation_offload: bool = Field(False, description=ACTIVATION_OFFLOAD_DOC)
    optimizer: Literal["adamw", "adamw_fused", "adamw8bit", "adafactor", "sgd"] = "adamw"
    master_weights: bool = Field(False, description=MASTER_WEIGHTS_DOC)
    offload: Literal["none", "optimizer", "all"] = Field("none", description="ZeRO-Offload: the optimizer's states "
                                                         "(and master weights) live in host memory, each step's "
                                                         "gradients are copied there; all: also the parameter shards "
                                                         "and their gradients (DeepSpeed offload_param, FSDP "
                                                         "cpu_offload), gathered to the device per use (stage 3)")
    fused_cross_entropy: bool = Field(False, description="train, causal LM: Liger's fused linear cross-entropy "
                                      "(use_liger_kernel): the loss and its gradients in chunks of rows, no full logits")
    liger_kernels: bool = Field(False, description="Liger-Kernel's RMSNorm, SwiGLU and RoPE in place of the model's "
                                "own (use_liger_kernel), for the architectures its patch covers here: Llama, Mistral, "
                                "Qwen2; no fp32 copy in the norms, no MLP intermediate kept, q and k rotated in place")
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    lora_rank: int = Field(0, ge=0, description="0 = full fine-tuning; >0 = LoRA through peft (base frozen)")
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"],
                                    description="module names LoRA adapts (peft's target_modules)")
    image_size: int | None = Field(None, ge=1, description="image side: an image classifier's (default: the config's "
                                                           "image_size, else 224; seq_len is unused there), a "
                                                           "vision-language model's image in each sample (LLaVA: the "
                                                           "tower's; Qwen2-VL/2.5-VL: 448, to a multiple of 28)")

    @model_validator(mode="after")
    def _check(self) -> HFParams:
        if self.completion_len is not None and self.completion_len >= self.seq_len:
            raise ValueError(f"completion_len {self.completion_len} leaves no prompt in seq_len {self.seq_len} "
                             "(seq_len counts prompt and completion)")
        if self.master_weights and self.dtype == "float32":
            raise ValueError("master_weights is an fp32 copy of 16-bit weights: it needs dtype bfloat16 or float16")
        if self.offload == "all" and self.zero_stage < 3:
            raise ValueError("offload: all (parameters) needs zero_stage: 3")
        return self

    @property
    def effective_batch(self) -> int:
        return self.batch * self.grad_accum * self.world_size

