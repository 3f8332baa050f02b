"""Fix ids made concrete for the user's stack: env vars, config keys and snippets, with the expected effect."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from oomdoctor.diagnosis import Fix
from oomdoctor.facts import GENERATING_APPS, Derived
from oomdoctor.fixids import (
    FIX_IDS,
    GC_MEMORY_FRACTION,
    GC_THRESHOLD,
    VERIFIABLE,
    ZERO3_FIX_LIVE_ELEMENTS,
    max_split_size_mb,
)
from oomdoctor.units import format_bytes

Changes = dict[str, Any]
Builder = Callable[[Derived], tuple[Changes, str | None]]

# Sections of `changes`, and the stack each belongs to. Sections of no stack are kept whatever the stack.
SECTION_STACK = {
    "training_args": ("hf_trainer", "trl"),
    "trainer": ("hf_trainer", "trl"),  # Trainer(...) arguments that are not TrainingArguments
    "accelerate_config": ("accelerate", "fsdp"),
    "deepspeed_json": ("deepspeed",),
    "axolotl_yaml": ("axolotl",),
    "llama_factory_yaml": ("llama_factory",),
    "lightning_trainer": ("lightning",),
    "megatron_args": ("megatron",),
    "torchtitan_toml": ("torchtitan",),
    "vllm_args": ("vllm",),
    "serving_engine": ("serving_engine",),
    "keras": ("tensorflow",),
    "skorch": ("skorch",),  # NeuralNet(...) parameters: its iterators' batch sizes, its train and validation steps
    "diffusers": ("diffusion",),
    "comfyui": ("comfyui",),  # its nodes' settings and launch flags
    "webui": ("webui",),  # AUTOMATIC1111's web UI (Forge, SD.Next): its launch flags and generation settings
    "sd_scripts": ("sd_scripts",),  # kohya-ss sd-scripts: its command-line options
}
# A front end whose own settings stand in for its libraries': axolotl and LLaMA-Factory wrap HF TrainingArguments in
# their own config file, the web UI runs diffusion models (not a pipeline or a graph), ComfyUI runs them as a graph of
# nodes (not a pipeline), sd-scripts trains them through accelerate and diffusers, configured by its own options.
SUPERSEDES = {"axolotl": ("training_args", "trainer"), "llama_factory": ("training_args", "trainer"),
              "webui": ("diffusers", "comfyui"), "comfyui": ("diffusers",),
              "sd_scripts": ("accelerate_config", "diffusers", "comfyui")}
# Fixes that exist in PyTorch only (its allocator, autograd modes, HF's evaluation loop, its kernels and wrappers):
# none of them is advice for a TensorFlow or JAX failure.
PYTORCH_ONLY = frozenset({"eval-accumulation-steps", "eval-no-grad", "expandable-segments", "max-split-size",
                          "gc-threshold", "fused-cross-entropy", "ddp-bucket-view", "smaller-zero-buckets",
                          "activation-offload", "empty-cache-before-save"})
# Stacks that run a loop of their own and read no TrainingArguments, DeepSpeed or accelerate config.
SELF_CONTAINED_STACKS = frozenset({"skorch", "sd_scripts"})


def _v(d: Derived, key: str) -> Any:
    return d.values.get(key)


def _serving(d: Derived) -> bool:
    """The failing process is a serving engine's (vLLM, TGI, SGLang, lmdeploy), not a trainer that calls one."""
    return bool(_v(d, "stack_vllm") or _v(d, "stack_serving_engine")) and _v(d, "inference_only") is True


def _not_pytorch(d: Derived) -> bool:
    """The failure is TensorFlow's or JAX's own allocator's (a PyTorch log that mentions TensorFlow is not), or a
    library's that allocates device memory itself (llama.cpp's ggml, CTranslate2, TensorRT, ...)."""
    kind = _v(d, "kind")
    return (kind == "tf_oom" or (kind == "xla_oom" and bool(_v(d, "stack_jax") or _v(d, "stack_tensorflow")))
            or _v(d, "own_allocator") is True)


def _caching_allocator(d: Derived) -> bool:
    """The failure went through PyTorch's CUDA/HIP caching allocator, the one PYTORCH_CUDA_ALLOC_CONF configures: not
    XLA's, TensorFlow's, MPS's, the host's, or a library's own."""
    return _v(d, "kind") not in ("xla_oom", "tf_oom", "mps_oom", "host_oom") and _v(d, "own_allocator") is not True


def _preallocating_framework(d: Derived) -> bool:
    """TensorFlow or JAX is in the run (its failure, or the log names it): what preallocates most of a GPU."""
    return _v(d, "kind") in ("tf_oom", "xla_oom") or bool(_v(d, "stack_jax") or _v(d, "stack_tensorflow"))


def _stacks(d: Derived) -> set[str]:
    """The detected stacks; TensorFlow's own allocator failing is a TensorFlow run even when nothing else says so."""
    found = set(d.stacks)
    return found | {"tensorflow"} if _v(d, "kind") == "tf_oom" else found


def _select(changes: Changes, d: Derived) -> Changes:
    """Keep the sections for the detected stacks; with none detected, HF TrainingArguments and code."""
    stacks = _stacks(d)
    keep = {s for s, owners in SECTION_STACK.items() if stacks.intersection(owners)}
    keep -= {section for stack in stacks & SUPERSEDES.keys() for section in SUPERSEDES[stack]}
    if not keep & changes.keys():
        # HF's form is the guess for a PyTorch run that names no stack, never for a library's own allocator
        keep |= {"training_args"} if not stacks and not _not_pytorch(d) else set()
    if _not_pytorch(d) and not keep & changes.keys():
        return {k: v for k, v in changes.items() if k == "env"}  # no PyTorch keys or code for a TensorFlow/JAX run
    out = {k: v for k, v in changes.items() if k in keep or k not in SECTION_STACK}
    if stacks and keep & changes.keys() and "code" in out and len(out) > 1:
        out.pop("code")  # the run's config key says it; with no stack named, a loop of its own is as likely as HF
    if keep & {"diffusers", "comfyui", "webui", "sd_scripts", "vllm_args", "serving_engine"} and "loading" in out:
        out.pop("loading")  # a transformers loading line is no use to a diffusion pipeline or a serving engine
    if out or not stacks & SELF_CONTAINED_STACKS:
        return out or changes  # nothing of the run's own: every stack's form, for the user to pick from
    return {}  # a loop that reads none of the other stacks' configs: their keys would mislead; the title says it


def _halve_batch(d: Derived) -> tuple[Changes, str | None]:
    new_bs: int | str
    new_ga: int | str
    bs, ga = _v(d, "per_device_train_batch_size"), _v(d, "gradient_accumulation_steps") or 1
    if isinstance(bs, int) and bs > 1:
        new_bs = bs // 2
        new_ga = ga * bs // new_bs if (ga * bs) % new_bs == 0 else ga * 2
        effect = f"effective batch kept at {bs * ga} per GPU ({new_bs} × {new_ga}); activation memory roughly halves"
        if est := d.activation:
            back = est.total_bytes - est.total_bytes * new_bs // bs
            effect += f": ≈ {format_bytes(back)} back (activations ≈ {format_bytes(est.total_bytes)}: {est.basis})"
    else:
        new_bs, new_ga = "<half of the current micro-batch>", "<double the current value>"
        effect = "activation memory roughly halves; effective batch kept"
        if bs == 1:
            effect = "the micro-batch is already 1: shorten sequences or checkpoint activations instead"
    req = _v(d, "requested_bytes")
    if req and _v(d, "phase") in ("train", None) and isinstance(bs, int) and bs > 1:
        effect += f"; the failing {format_bytes(req)} request would be ≈ {format_bytes(req // 2)}"
    changes = {
        "training_args": {"per_device_train_batch_size": new_bs, "gradient_accumulation_steps": new_ga},
        "deepspeed_json": {"train_micro_batch_size_per_gpu": new_bs, "gradient_accumulation_steps": new_ga},
        "axolotl_yaml": {"micro_batch_size": new_bs, "gradient_accumulation_steps": new_ga},
        "llama_factory_yaml": {"per_device_train_batch_size": new_bs, "gradient_accumulation_steps": new_ga},
        "lightning_trainer": {"DataLoader(batch_size=)": new_bs, "accumulate_grad_batches": new_ga},
        "megatron_args": {"--micro-batch-size": new_bs},
        "torchtitan_toml": {"training.local_batch_size": new_bs},
        "keras": {"model.fit(batch_size=)": new_bs, "optimizer(gradient_accumulation_steps=)": new_ga},
        # skorch steps the optimizer every batch; accumulating means overriding train_step (its FAQ shows how)
        "skorch": {"NeuralNet(iterator_train__batch_size=)": new_bs,
                   "train_step": f"accumulate {new_ga} batches before optimizer_.step() (an overridden train_step)"},
        "sd_scripts": {"--train_batch_size": new_bs, "--gradient_accumulation_steps": new_ga},
        # a loop of its own (accelerate, plain PyTorch): shown only where no section above is the run's
        "code": f"loader = DataLoader(dataset, batch_size={new_bs})  # and step the optimizer every {new_ga} batches "
                "(accelerator.accumulate, or loss / steps)",
    }
    if _stacks(d) & {"hf_trainer", "trl", "accelerate"}:
        changes.pop("deepspeed_json")  # HF passes "auto" through to DeepSpeed
    return changes, effect


def _checkpointing(d: Derived) -> tuple[Changes, str | None]:
    effect = "stored activations drop to about one layer's worth plus layer inputs; ~20-30% more compute"
    est = d.activation
    if est and _v(d, "gradient_checkpointing") is False:
        back = est.layers_bytes - est.checkpointed_bytes
        effect = (f"layer activations ≈ {format_bytes(est.layers_bytes)} → ≈ {format_bytes(est.checkpointed_bytes)}: "
                  f"≈ {format_bytes(back)} back ({est.basis}); ~20-30% more compute")
    return _fsdp_keys_only_under_fsdp(d, {
        "training_args": {"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": False}},
        "accelerate_config": {"fsdp_config.fsdp_activation_checkpointing": True},
        "axolotl_yaml": {"gradient_checkpointing": True},
        "llama_factory_yaml": {"disable_gradient_checkpointing": False},
        "lightning_trainer": {"code": "model.gradient_checkpointing_enable()  # or torch.utils.checkpoint in your blocks"},
        "megatron_args": {"--recompute-granularity": "selective"},
        "torchtitan_toml": {"activation_checkpoint.mode": "selective"},
        "sd_scripts": {"--gradient_checkpointing": True},
        "skorch": {"module.forward": "x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)  # per block"},
        "code": "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False})",
    }), effect


def _bf16(d: Derived) -> tuple[Changes, str | None]:
    effect = "activations stored in 2 bytes instead of 4: roughly half the activation memory"
    if (est := d.activation) and _v(d, "mixed_precision") is False:
        effect += f": ≈ {format_bytes(est.layers_bytes // 2)} back ({est.basis})"
    return {
        "training_args": {"bf16": True},
        "deepspeed_json": {"bf16.enabled": True},
        "axolotl_yaml": {"bf16": True},
        "llama_factory_yaml": {"bf16": True},
        "lightning_trainer": {"precision": "bf16-mixed"},
        "megatron_args": {"--bf16": True},
        "torchtitan_toml": {"training.mixed_precision_param": "bfloat16"},
        "keras": {"keras.mixed_precision.set_global_policy": "mixed_bfloat16"},
        "sd_scripts": {"--mixed_precision": "bf16", "--save_precision": "bf16"},
        # skorch runs mixed precision through accelerate: its AccelerateMixin with an Accelerator of that precision
        "skorch": {"code": "from accelerate import Accelerator\nfrom skorch.hf import AccelerateMixin\n"
                           "class AcceleratedNet(AccelerateMixin, NeuralNetClassifier):  # or NeuralNet, NeuralNetRegressor\n"
                           "    pass\nnet = AcceleratedNet(..., accelerator=Accelerator(mixed_precision='bf16'))"},
        "code": "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(**batch).loss",
    }, effect


def _eval_no_grad(d: Derived) -> tuple[Changes, str | None]:
    return {
        "lightning_trainer": {"inference_mode": True},
        # skorch's own validation_step runs under torch.no_grad() (releases from 2018 on); an override may not
        "skorch": "run an overridden validation_step or evaluation_step under torch.no_grad(), as skorch's own do",
        "code": "model.eval()\nwith torch.inference_mode():\n    outputs = model(**batch)",
    }, "evaluation keeps no autograd graph: only the current batch's activations stay alive"


def _diffusion_sampling(d: Derived) -> bool:
    """A diffusion model sampling images or frames (not its training loop)."""
    return "diffusion" in _stacks(d) and _v(d, "phase") == "generate"


def _smaller_eval_batch(d: Derived) -> tuple[Changes, str | None]:
    ebs = _v(d, "per_device_eval_batch_size")
    new = max(1, ebs // 2) if isinstance(ebs, int) else 1
    return {
        "training_args": {"per_device_eval_batch_size": new},
        "axolotl_yaml": {"eval_batch_size": new},
        "llama_factory_yaml": {"per_device_eval_batch_size": new},
        "lightning_trainer": {"val DataLoader(batch_size=)": new},
        "keras": {"model.fit(validation_batch_size=)": new, "model.evaluate(batch_size=)": new,
                  "model.predict(batch_size=)": new},
        "skorch": {"NeuralNet(iterator_valid__batch_size=)": new},  # validation, predict() and predict_proba()
        "diffusers": {"pipe(num_images_per_prompt=)": 1, "pipe(height=, width=)": "<lower>"},
        "comfyui": "batch_size 1 on the latent node (Empty Latent Image), or a lower width/height or frame count",
        "webui": "Batch size 1 (Batch count for more images), a lower Width/Height, Hires. fix off or a smaller upscale",
        "vllm_args": {"max_num_seqs": "<fewer>", "max_num_batched_tokens": "<fewer>"},
        "serving_engine": {"text-generation-inference": "--max-batch-prefill-tokens <fewer> --max-batch-total-tokens <fewer>",
                           "sglang": "--max-running-requests <fewer> --chunked-prefill-size <smaller>",
                           "lmdeploy": "--max-batch-size <smaller>"},
        # shown only where no section above is the run's (a PyTorch loop of its own): TensorFlow runs get `keras`
        "code": "eval_loader = DataLoader(eval_set, batch_size=<smaller>)  # evaluate and predict in batches",
    }, ("fewer images or frames at once, or fewer pixels: sampling activations shrink with them"
        if _diffusion_sampling(d) else f"evaluation batch {ebs} → {new}: eval activations and logits shrink by {ebs / new:.0f}×"
        if isinstance(ebs, int) and ebs > new else "evaluation activations and logits shrink with the batch")


def _eval_accumulation(d: Derived) -> tuple[Changes, str | None]:
    return {
        "training_args": {"eval_accumulation_steps": 4, "prediction_loss_only": True},
        # keep the argmax ids instead of full-vocab logits when the metric needs predictions
        "trainer": {"preprocess_logits_for_metrics": "lambda logits, labels: logits.argmax(-1)"},
        "axolotl_yaml": {"eval_accumulation_steps": 4},
        "llama_factory_yaml": {"eval_accumulation_steps": 4},
        # a loop of its own (accelerate, plain PyTorch): collect on the host what the metric needs, batch by batch
        "code": "preds.append(logits.argmax(-1).cpu())  # ids on the host, not every batch's logits on the GPU",
    }, ("predictions move to the CPU every few eval steps instead of piling up on the GPU"
        + ("; keep none (prediction_loss_only) or only their argmax ids (preprocess_logits_for_metrics)"
           if _stacks(d).intersection(SECTION_STACK["trainer"]) else ""))


def _shorter_seq(d: Derived) -> tuple[Changes, str | None]:
    seq = _v(d, "max_seq_length")
    new = seq // 2 if isinstance(seq, int) and seq > 1 else "<shorter length>"
    effect = "activations shrink at least linearly with the sequence length"
    if isinstance(new, int):
        effect = f"sequence cap {seq} → {new}: activations at least halve (attention scores fall 4× without flash attention)"
        if d.activation:
            effect += f": ≈ {format_bytes(d.activation.total_bytes // 2)} back ({d.activation.basis})"
    return {
        "training_args": {"max_length": new},
        "axolotl_yaml": {"sequence_len": new},
        "llama_factory_yaml": {"cutoff_len": new},
        "torchtitan_toml": {"training.seq_len": new},
        "megatron_args": {"--seq-length": new},
        "vllm_args": {"max_model_len": new},
        "serving_engine": {"text-generation-inference": f"--max-input-tokens <shorter> --max-total-tokens {new}",
                           "sglang": f"--context-length {new}", "lmdeploy": f"--session-len {new}",
                           "llama.cpp": f"-c {new} (--ctx-size; Ollama: num_ctx)"},
        # an image or video model's "length" is its pixels (and frames)
        "diffusers": {"pipe(height=, width=)": "<lower>", "pipe(num_frames=)": "<fewer>"},
        "comfyui": "a lower width/height (or fewer frames) on the latent node; tiled VAE decode for large images",
        "webui": "a lower Width/Height, Hires. fix off or a smaller upscale; Tiled VAE for large images",
        # a loop of its own: shown only where no section above is the run's
        "code": f"batch = tokenizer(texts, truncation=True, max_length={new})  # images, audio, volumes: crop, "
                "resize or tile the input",
    }, effect


# The PyTorch release that first reads each allocator setting, and the message eras older than it (see
# parse.messages: the message's wording dates the PyTorch that printed it).
ALLOC_SETTING_SINCE = {"expandable_segments": ("2.1", ("pre-1.0", "1.0-1.3", "1.4-2.0", "1.10-2.0")),
                       "max_split_size_mb": ("1.10", ("pre-1.0", "1.0-1.3", "1.4-2.0")),
                       "garbage_collection_threshold": ("1.12", ("pre-1.0", "1.0-1.3", "1.4-2.0"))}


def _alloc_env(d: Derived, setting: str) -> Changes:
    era = _v(d, "era") or ""
    name = "PYTORCH_ALLOC_CONF" if era.startswith("2.9") else "PYTORCH_CUDA_ALLOC_CONF"
    changes: Changes = {"env": {name: setting}}
    key = setting.split(":", 1)[0]
    since, older = ALLOC_SETTING_SINCE[key]
    if era in older:  # this PyTorch ignores the setting: upgrade first
        changes["shell"] = f"pip install -U 'torch>={since}'  # PyTorch reads {key} from {since} on; this message has " \
                           f"{era}'s wording"
    return changes


def _expandable(d: Derived) -> tuple[Changes, str | None]:
    ru = _v(d, "reserved_unallocated_bytes")
    effect = f"up to {format_bytes(ru)} of cached-but-unusable memory becomes usable" if ru else \
        "cached segments grow in place instead of fragmenting"
    return _alloc_env(d, "expandable_segments:True"), effect


def _max_split(d: Derived) -> tuple[Changes, str | None]:
    mb = max_split_size_mb(_v(d, "requested_bytes"))
    return _alloc_env(d, f"max_split_size_mb:{mb}"), f"blocks over {mb} MiB are never split, so large requests find whole blocks"


def _gc_threshold(d: Derived) -> tuple[Changes, str | None]:
    changes = _alloc_env(d, f"garbage_collection_threshold:{GC_THRESHOLD}")
    # PyTorch runs the threshold's collection only under a per-process memory fraction below 1
    changes["code"] = (f"torch.cuda.set_per_process_memory_fraction({GC_MEMORY_FRACTION})"
                       "  # the threshold acts only under a fraction below 1")
    return changes, "cached blocks are reclaimed before the cache fills"


def _lighter_opt(d: Derived) -> tuple[Changes, str | None]:
    changes: Changes = {
        "training_args": {"optim": "adamw_bnb_8bit"},
        "axolotl_yaml": {"optimizer": "adamw_bnb_8bit"},
        "llama_factory_yaml": {"optim": "adamw_bnb_8bit"},
        "sd_scripts": {"--optimizer_type": "AdamW8bit"},
        "code": "import bitsandbytes as bnb\noptimizer = bnb.optim.AdamW8bit(model.parameters(), lr=lr)",
    }
    effect = "AdamW state falls from 8 to 2 bytes per trainable parameter"
    if _v(d, "bitsandbytes_unavailable") is True:  # the run asked for it; its bitsandbytes could not give it
        changes["shell"] = "pip install -U bitsandbytes  # a build with CUDA support; python -m bitsandbytes checks it"
        effect += " (this run's bitsandbytes was built without GPU support: install a CUDA build first)"
    return changes, effect


def _fsdp_keys_only_under_fsdp(d: Derived, changes: Changes) -> Changes:
    """An accelerate setting that exists only under FSDP (fsdp_config.*) is no advice to a run accelerate launches with
    DeepSpeed or DDP: that run's own form (its code, its TrainingArguments) says it."""
    if "fsdp" not in _stacks(d):
        changes.pop("accelerate_config", None)
    return changes


def _deepspeed_only(d: Derived, changes: Changes) -> Changes:
    """On a DeepSpeed run the ZeRO config is the one place to change: no FSDP keys beside it."""
    if "deepspeed" in _stacks(d):
        for section in ("accelerate_config", "training_args", "lightning_trainer"):
            changes.pop(section, None)
    return changes


def _raise_zero(d: Derived) -> tuple[Changes, str | None]:
    stage = _v(d, "zero_stage")
    new = min(3, stage + 1) if isinstance(stage, int) else 3
    world = _v(d, "world_size")
    known = isinstance(world, int) and isinstance(stage, int)
    effect = f"ZeRO {stage} → {new}: sharded state per GPU divides by {world}" if known \
        else "optimizer states, gradients (and at stage 3 parameters) are split across GPUs"
    return _deepspeed_only(d, {
        "deepspeed_json": {"zero_optimization.stage": new},
        "accelerate_config": {"fsdp_config.fsdp_sharding_strategy": "FULL_SHARD"},
        "training_args": {"fsdp": "full_shard auto_wrap"},
        "lightning_trainer": {"strategy": "fsdp"},
    }), effect


def _offload(d: Derived) -> tuple[Changes, str | None]:
    ds: Changes = {"zero_optimization.offload_optimizer.device": "cpu"}
    if _v(d, "zero_stage") in (3, None):  # parameter offload exists only at ZeRO stage 3
        ds["zero_optimization.offload_param.device"] = "cpu"
    return _deepspeed_only(d, {
        "deepspeed_json": ds,
        "accelerate_config": {"fsdp_config.fsdp_offload_params": True},
        "training_args": {"fsdp": "full_shard offload auto_wrap"},
        "axolotl_yaml": {"deepspeed": "deepspeed_configs/zero3_bf16_cpuoffload_all.json"},
        "lightning_trainer": {"strategy": "deepspeed_stage_3_offload"},
        "sd_scripts": {"--blocks_to_swap": "<N>  # FLUX/SD3 scripts: N transformer blocks wait in host RAM"},
        # inference: the pipeline's parts (text encoders, denoiser, VAE) go to the GPU only while each one runs
        "diffusers": "pipe.enable_model_cpu_offload()  # enable_sequential_cpu_offload(): least memory, slowest",
        "comfyui": "launch with --lowvram (or --novram); not --highvram/--gpu-only",
        "webui": "launch with --medvram (or --lowvram; --medvram-sdxl to offload SDXL models only)",
    }), ("the model's parts wait in host RAM and come to the GPU only while they run; sampling gets slower"
         if _diffusion_sampling(d) else "optimizer states (and at ZeRO-3 parameters) live in host RAM; steps get slower")


def _more_gpus(d: Derived) -> tuple[Changes, str | None]:
    world = _v(d, "world_size")
    if _serving(d):
        tp = _v(d, "tensor_parallel")
        more = 2 * tp if isinstance(tp, int) else "<GPUs>"
        return {
            "vllm_args": {"tensor_parallel_size": more},
            "serving_engine": {"text-generation-inference": f"--num-shard {more}", "sglang": f"--tp-size {more}",
                               "lmdeploy": f"--tp {more}"},
        }, "the weights and the KV cache split over the tensor-parallel GPUs: each holds a share"
    if _v(d, "inference_only") is True:  # one process that only infers: its layers spread over the GPUs, or a bigger card
        return {
            "loading": 'model = AutoModelForCausalLM.from_pretrained(name, device_map="auto")  # its layers over every '
                       "visible GPU",
            "diffusers": 'pipe = DiffusionPipeline.from_pretrained(name, device_map="balanced")  # its models over the GPUs',
            "shell": "CUDA_VISIBLE_DEVICES=0,1 python infer.py ...  # more GPUs visible, or a card with more memory",
        }, "the weights and activations split over the GPUs (or one card with more memory): each holds a share"
    return {"shell": f"torchrun --nproc_per_node={2 * world if isinstance(world, int) else '<more GPUs>'} ..."}, \
        (f"{world} → {2 * world} ranks: sharded states per GPU halve" if isinstance(world, int) else None)


def _fused_ce(d: Derived) -> tuple[Changes, str | None]:
    effect = "full-vocab fp32 logits (batch × seq × vocab × 4 bytes) are never materialised"
    if d.activation and d.activation.logits_bytes:
        est = d.activation
        effect += f": ≈ {format_bytes(est.logits_bytes)} back ({est.tokens} tokens × vocab {_v(d, 'vocab_size')})"
    return {
        "training_args": {"use_liger_kernel": True},
        "axolotl_yaml": {"plugins": ["axolotl.integrations.liger.LigerPlugin"], "liger_fused_linear_cross_entropy": True},
        "llama_factory_yaml": {"enable_liger_kernel": True},
        "torchtitan_toml": {"training.loss_chunks": 8},
        "code": "from liger_kernel.transformers import apply_liger_kernel_to_llama\napply_liger_kernel_to_llama()",
    }, effect


def _free_other(d: Derived) -> tuple[Changes, str | None]:
    others = _v(d, "other_processes_bytes")
    if _v(d, "other_processes_alike_contexts"):  # the job's own ranks created their contexts on this GPU
        return {"code": "local_rank = int(os.environ['LOCAL_RANK'])\n"
                        "torch.cuda.set_device(local_rank)  # first, before any CUDA call\n"
                        "model = model.to(local_rank)          # not .cuda() or 'cuda:0'"}, \
            (f"the other ranks' contexts ({format_bytes(others)}) stay on their own GPUs" if others else None)
    return {"shell": "nvidia-smi --query-compute-apps=pid,used_memory --format=csv  # then stop it, or\n"
                     "CUDA_VISIBLE_DEVICES=<a free GPU> python train.py ..."}, \
        (f"{format_bytes(others)} held by other processes comes back" if others else None)


def _fix_leak(d: Derived) -> tuple[Changes, str | None]:
    slope = _v(d, "memory_growth_bytes_per_step")
    return {"code": "running_loss += loss.item()          # not `+= loss` (keeps every step's graph)\n"
                    "history.append(outputs.logits.detach().cpu())  # not the GPU tensor"}, \
        (f"stops the growth of ≈ {format_bytes(int(slope))} per step" if slope and slope > 0 else None)


def _save(d: Derived) -> tuple[Changes, str | None]:
    return _fsdp_keys_only_under_fsdp(d, {
        "deepspeed_json": {"zero_optimization.stage3_gather_16bit_weights_on_model_save": False},
        "accelerate_config": {"fsdp_config.fsdp_state_dict_type": "SHARDED_STATE_DICT"},
        "training_args": {"save_only_model": True},
        "code": "torch.cuda.empty_cache()\nstate = {k: v.cpu() for k, v in model.state_dict().items()}\ntorch.save(state, path)",
    }), "the full state dict is never gathered on one GPU at once"


def _cache_budget(d: Derived) -> tuple[Changes, str | None]:
    # vLLM's own start-up check (SGLang's and TGI's name what they say): its cache cannot hold max_model_len tokens
    if _v(d, "kind") == "kv_cache" and _v(d, "message_says") is None:
        return {
            "vllm_args": {"max_model_len": "<shorter: at most the tokens the message says fit>",
                          "gpu_memory_utilization": "<higher (0.95) only if nothing else shares the GPU>"},
            "training_args": {"vllm_max_model_len": "<shorter>", "vllm_gpu_memory_utilization": "<higher, if it fits>"},
        }, "the KV cache must hold one max_model_len sequence: a shorter one fits the budget vLLM has"
    return {
        "vllm_args": {"gpu_memory_utilization": 0.8, "max_model_len": "<shorter>", "max_num_seqs": "<fewer>"},
        "training_args": {"vllm_gpu_memory_utilization": 0.3},
        "serving_engine": {"lmdeploy": "--cache-max-entry-count 0.5 --session-len <shorter>",
                           "text-generation-inference": "--cuda-memory-fraction 0.8 --max-batch-prefill-tokens <fewer> "
                                                        "--max-total-tokens <fewer>",
                           "sglang": "--mem-fraction-static 0.7 --context-length <shorter>",
                           # llama.cpp sizes its KV cache for the whole context of every parallel slot
                           "llama.cpp": "-c <shorter> --parallel <fewer> (Ollama: num_ctx, OLLAMA_NUM_PARALLEL)"},
    }, "the engine reserves less of the GPU for weights + KV cache, leaving room for the rest"


def _fewer_generations(d: Derived) -> tuple[Changes, str | None]:
    n, bs = _v(d, "num_generations"), _v(d, "per_device_train_batch_size")
    new = max(2, n // 2) if isinstance(n, int) else "<fewer>"
    effect = None
    if isinstance(n, int) and isinstance(bs, int):
        effect = f"completions per step {n} × {bs} = {n * bs} → {new} × {bs} = {new * bs if isinstance(new, int) else '?'}"
    return {"training_args": {"num_generations": new, "generation_batch_size": "<a multiple of num_generations>"}}, effect


def _quantize(d: Derived) -> tuple[Changes, str | None]:
    return {
        "loading": "model = AutoModelForCausalLM.from_pretrained(name, quantization_config=BitsAndBytesConfig(\n"
                   "    load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16))  # or the model's int4/GPTQ/AWQ release",
        "axolotl_yaml": {"load_in_4bit": True, "adapter": "qlora"},
        "llama_factory_yaml": {"quantization_bit": 4},
        "diffusers": "pipe = DiffusionPipeline.from_pretrained(name, torch_dtype=torch.bfloat16)  # 16-bit weights; "
                     "a quantization_config (bitsandbytes, torchao) for the transformer or UNet goes further",
        "comfyui": "an fp8 or GGUF build of the model, or weight_dtype fp8_e4m3fn in its loader node",
        "webui": "FP8 weight (Settings > Optimizations), or an fp16 (pruned) checkpoint",
        "sd_scripts": {"--fp8_base": True},
        "vllm_args": {"quantization": "awq  # with the model's AWQ release (or gptq, or fp8 on Hopper/Ada)"},
        "serving_engine": {"text-generation-inference": "--quantize bitsandbytes-nf4 (or awq/gptq with such a release)",
                           "sglang": "--quantization fp8 (or awq/gptq with such a release)",
                           "lmdeploy": "--model-format awq (with an AWQ release)",
                           "llama.cpp": "a smaller GGUF quant of the model (Q4_K_M rather than Q8_0), or -ngl <fewer> "
                                        "layers on the GPU"},
    }, "weights take a quarter of their 16-bit size in 4-bit, half in 8-bit"


def _host_ram(d: Derived) -> tuple[Changes, str | None]:
    return {
        "training_args": {"dataloader_num_workers": 2, "dataloader_pin_memory": False, "eval_accumulation_steps": 4},
        "loading": "model = AutoModelForCausalLM.from_pretrained(name, low_cpu_mem_usage=True, torch_dtype=torch.bfloat16)\n"
                "state = torch.load(path, mmap=True, map_location='cpu')  # not a full copy in RAM\n"
                "# keep metrics, not outputs: append loss.item(), never whole prediction tensors",
        "shell": "#SBATCH --mem=<more>   # or docker run --memory / --shm-size",
    }, ("fewer data-loader workers (each holds a copy of the dataset state), weights loaded once and memory-mapped, "
        "predictions not piled up in host RAM")


def _more_shm(d: Derived) -> tuple[Changes, str | None]:
    return {
        "shell": "docker run --shm-size=16g ...   # or --ipc=host; Kubernetes: an emptyDir {medium: Memory} at /dev/shm",
        "training_args": {"dataloader_num_workers": 2},
        "code": "DataLoader(dataset, num_workers=2, ...)  # each worker's batches wait in /dev/shm until used",
    }, "workers pass their batches through /dev/shm: a larger shm (Docker gives 64 MiB) or fewer workers in flight"


def _fewer_workers(d: Derived) -> tuple[Changes, str | None]:
    changes: Changes = {
        "training_args": {"dataloader_num_workers": 0},
        "lightning_trainer": {"DataLoader(num_workers=)": 2},
        "code": "DataLoader(dataset, num_workers=2)  # 0 loads in the main process",
    }
    if _v(d, "message_says") == "paging_file":
        changes["shell"] = "or enlarge Windows' paging file (System > Advanced > Performance > Virtual memory)"
    return changes, ("each worker is a process of its own that maps torch's libraries and a copy of the dataset state: fewer "
        "workers commit less host memory")


def _group_by_length(d: Derived) -> tuple[Changes, str | None]:
    return {
        "training_args": {"group_by_length": True},
        "axolotl_yaml": {"sample_packing": True},
        "llama_factory_yaml": {"packing": True},
    }, "batches of similar length: the longest batch no longer sets the peak"


def _no_prealloc(d: Derived) -> tuple[Changes, str | None]:
    return {"env": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}}, (
        "the framework allocates on demand instead of grabbing 75% of the GPU up front. Both directions: when "
        "another process shares the GPU, preallocate less (XLA_PYTHON_CLIENT_MEM_FRACTION=0.5); when this job "
        "alone needs more, let it take more (XLA_PYTHON_CLIENT_MEM_FRACTION=0.95)")


def _bucket_view(d: Derived) -> tuple[Changes, str | None]:
    return {
        "lightning_trainer": {"strategy": "DDPStrategy(gradient_as_bucket_view=True)"},
        "accelerate_config": {"kwargs_handlers": "DistributedDataParallelKwargs(gradient_as_bucket_view=True)"},
        "code": "model = DistributedDataParallel(model, device_ids=[local_rank], gradient_as_bucket_view=True)",
    }, "one copy of the trainable gradients less: each .grad is a view into DDP's all-reduce bucket"


def _zero_buckets(d: Derived) -> tuple[Changes, str | None]:
    hidden = _v(d, "hidden_size")
    size = hidden * hidden if isinstance(hidden, int) else "auto"  # HF's integration resolves "auto" to hidden²
    return {"deepspeed_json": {"zero_optimization.reduce_bucket_size": size,
                               "zero_optimization.allgather_bucket_size": size}}, \
        "ZeRO's gradient buckets (one per backward, two with overlap_comm) shrink to hidden_size² elements"


def _zero3_prefetch(d: Derived) -> tuple[Changes, str | None]:
    hidden = _v(d, "hidden_size")
    bucket = int(0.9 * hidden * hidden) if isinstance(hidden, int) else "auto"  # HF's "auto": 0.9 x hidden²
    return {"deepspeed_json": {"zero_optimization.stage3_prefetch_bucket_size": bucket,
                               "zero_optimization.stage3_max_live_parameters": ZERO3_FIX_LIVE_ELEMENTS,
                               "zero_optimization.stage3_max_reuse_distance": ZERO3_FIX_LIVE_ELEMENTS},
            "accelerate_config": {"fsdp_config.fsdp_backward_prefetch": "NO_PREFETCH",
                                  "fsdp_config.fsdp_forward_prefetch": False}}, \
        "fewer parameters gathered ahead of use: a lower peak for slower steps (less overlap of all-gathers)"


def _activation_offload(d: Derived) -> tuple[Changes, str | None]:
    return {"code": "with torch.autograd.graph.save_on_cpu(pin_memory=True):\n    loss = model(**batch).loss\n"
                    "loss.backward()  # torchtune: enable_activation_offloading: True"}, \
        "activations wait for backward in host RAM: the peak loses most of them, each step copies them twice over PCIe"


BUILDERS: dict[str, Builder] = {
    "halve-batch": _halve_batch, "gradient-checkpointing": _checkpointing, "bf16-autocast": _bf16,
    "eval-no-grad": _eval_no_grad, "smaller-eval-batch": _smaller_eval_batch,
    "eval-accumulation-steps": _eval_accumulation, "shorter-max-seq": _shorter_seq,
    "expandable-segments": _expandable, "max-split-size": _max_split, "gc-threshold": _gc_threshold,
    "lighter-optimizer": _lighter_opt, "raise-zero-stage": _raise_zero, "cpu-offload": _offload,
    "more-gpus": _more_gpus, "fused-cross-entropy": _fused_ce, "free-other-process": _free_other,
    "fix-leak": _fix_leak, "empty-cache-before-save": _save, "lower-gpu-memory-utilization": _cache_budget,
    "lower-num-generations": _fewer_generations, "more-host-ram": _host_ram, "more-shared-memory": _more_shm,
    "fewer-dataloader-workers": _fewer_workers, "group-by-length": _group_by_length,
    "no-preallocation": _no_prealloc, "quantize-weights": _quantize, "ddp-bucket-view": _bucket_view,
    "smaller-zero-buckets": _zero_buckets, "activation-offload": _activation_offload,
    "smaller-zero3-prefetch": _zero3_prefetch,
}


# Stacks whose evaluation keeps every batch's logits on the GPU until the end (HF Trainer and its wrappers).
PILING_EVAL_STACKS = frozenset({"hf_trainer", "trl", "axolotl", "llama_factory"})
# Trainers whose own evaluation loop already runs without autograd: HF Trainer's prediction_step (and the trainers
# built on it) under torch.no_grad(), Lightning's validation/test/predict loops under inference_mode by default.
NO_GRAD_EVAL_STACKS = PILING_EVAL_STACKS | {"lightning"}

# Fixes the log shows are already in place: suggesting them again would waste the user's next run.
# A serving engine (vLLM, TGI, SGLang, lmdeploy) runs without autograd and loads 16-bit weights by default.
ALREADY_APPLIED: dict[str, Callable[[Derived], bool]] = {
    "eval-no-grad": lambda d: (bool(_stacks(d) & NO_GRAD_EVAL_STACKS) and _v(d, "phase") == "eval") or _serving(d)
    or _v(d, "generating_app") is True,  # its sampling already runs without autograd
    "gradient-checkpointing": lambda d: _v(d, "gradient_checkpointing") is True,
    "bf16-autocast": lambda d: _v(d, "mixed_precision") is True or _serving(d),
    "expandable-segments": lambda d: _v(d, "expandable_segments") is True,
    "lighter-optimizer": lambda d: _v(d, "optimizer_is_8bit") is True,
    "raise-zero-stage": lambda d: _v(d, "zero_stage") == 3,
    "cpu-offload": lambda d: _v(d, "offload") is True,
    "eval-accumulation-steps": lambda d: _v(d, "eval_accumulation_steps") is not None,
}


# Fixes that change training: no use to a run that only serves or generates.
TRAINING_ONLY = frozenset({"halve-batch", "gradient-checkpointing", "lighter-optimizer", "raise-zero-stage",
                           "cpu-offload", "fused-cross-entropy", "group-by-length", "fix-leak", "ddp-bucket-view",
                           "smaller-zero-buckets", "activation-offload", "smaller-zero3-prefetch"})
# Fixes that shrink what a step's forward and backward keep: before the first step nothing of theirs is on the device.
ACTIVATION_FIXES = frozenset({"halve-batch", "gradient-checkpointing", "smaller-eval-batch", "shorter-max-seq",
                              "fused-cross-entropy", "group-by-length", "activation-offload", "eval-no-grad",
                              "eval-accumulation-steps"})
INIT_SUBSTITUTES = ("quantize-weights", "cpu-offload", "more-gpus")
# Fixes for an evaluation loop the user writes or a trainer runs: a serving engine has none.
EVAL_LOOP_ONLY = frozenset({"eval-accumulation-steps"})
# Trainers whose prediction loop already moves each batch's outputs to the host (skorch's forward_iter, device='cpu').
OUTPUTS_ON_HOST_STACKS = frozenset({"skorch"})
# Training fixes that also have an inference form on these stacks (a diffusion pipeline offloads its model parts).
INFERENCE_TOO: dict[str, set[str]] = {"cpu-offload": {"diffusion", "webui", "comfyui"}}  # --medvram, --lowvram
# A training fix whose inference form is another fix: the batch of a run that only infers is its inference batch.
INFERENCE_FORM = {"halve-batch": "smaller-eval-batch"}


# PYTORCH_CUDA_ALLOC_CONF settings of the native caching allocator: nothing to cudaMallocAsync.
NATIVE_ALLOCATOR_FIXES = frozenset({"expandable-segments", "max-split-size", "gc-threshold"})


def _no_room_to_rearrange(d: Derived) -> bool:
    """Free memory plus the cache's spare bytes were less than the request: no layout of them could have held it."""
    ratio = _v(d, "free_plus_slack_over_requested")
    return isinstance(ratio, (int, float)) and ratio < 1


def _loading(d: Derived) -> bool:
    """The device ran out before any step ran (loading weights, building the model or the optimizer)."""
    return _v(d, "phase") == "init" and _v(d, "kind") != "host_oom" and _v(d, "host_device") is not True


def _at_init(fix_ids: Sequence[str], d: Derived) -> list[str]:
    """Activation fixes swapped for what shrinks the weights and states on the device, where they were. A KV cache
    allocated at start-up is sized by the context length: a shorter one shrinks it there too."""
    kept = ("shorter-max-seq",) if _v(d, "operation") == "kv_cache" else ()
    out: list[str] = []
    for f in fix_ids:
        out.extend(INIT_SUBSTITUTES if f in ACTIVATION_FIXES and f not in kept else (f,))
    return out


def fitted(fix_ids: Sequence[str], d: Derived) -> list[str]:
    """The rule's fix ids fitted to the run: what is already on, or does not apply, left out; substitutes in."""
    out: list[str] = []
    for f in _at_init(fix_ids, d) if _loading(d) else fix_ids:
        if f in ALREADY_APPLIED and ALREADY_APPLIED[f](d):
            continue
        if f in NATIVE_ALLOCATOR_FIXES and (_v(d, "allocator_async") is True or not _caching_allocator(d)):
            continue
        if f in NATIVE_ALLOCATOR_FIXES and _no_room_to_rearrange(d):
            continue
        if f in TRAINING_ONLY and _v(d, "inference_only") is True and not _stacks(d) & INFERENCE_TOO.get(f, set()):
            if f not in INFERENCE_FORM:
                continue
            f = INFERENCE_FORM[f]
        if f in EVAL_LOOP_ONLY and (_serving(d) or _stacks(d) & (OUTPUTS_ON_HOST_STACKS | GENERATING_APPS)):
            continue
        if f in PYTORCH_ONLY and _not_pytorch(d):
            continue
        if f == "no-preallocation" and not _preallocating_framework(d):
            continue
        if f == "raise-zero-stage" and _v(d, "data_parallel_degree") == 1:
            f = "more-gpus"  # pure model parallel: nothing to shard across until there are data-parallel ranks
        if f not in out:
            out.append(f)
    if "eval-accumulation-steps" in out and _stacks(d) & PILING_EVAL_STACKS:
        out.remove("eval-accumulation-steps")  # HF keeps all eval logits on the GPU: move them out first
        out.insert(0, "eval-accumulation-steps")
    return out


def build_fixes(fix_ids: Sequence[str], d: Derived) -> tuple[Fix, ...]:
    """The rule's fixes made concrete for the run (see `fitted`)."""
    return tuple(build_fix(f, d) for f in fitted(fix_ids, d))


def build_fix(fix_id: str, d: Derived) -> Fix:
    """The fix `fix_id` for the stack and figures of one event."""
    builder = BUILDERS.get(fix_id)
    changes, effect = builder(d) if builder else ({}, None)
    return Fix(id=fix_id, title=FIX_IDS[fix_id], changes=_select(changes, d), effect=effect,
               verifiable=fix_id in VERIFIABLE)
