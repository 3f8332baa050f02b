"""Build a verify config from a failed run's log: the failing GPU, the allocator settings, the phase and the run's
configuration as diagnose read them; what the log does not say is assumed and listed, never hidden."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from oomdoctor.errors import UsageError
from oomdoctor.fixids import VERIFIABLE
from oomdoctor.outfile import write_atomic
from oomdoctor.units import format_bytes
from oomdoctor.verify.params import TransformerParams, ZeroParams

DEVICE_KINDS = ("cuda_oom", "hip_oom", "xpu_oom", "cuda_error")
PHASES = {"train": "train", "eval": "eval", "generate": "generate", "save": "train", "init": "train"}
HEAD_DIM = 128  # heads = hidden / 128 when the log names no head count (Llama, Mistral, Qwen)
DEFAULTS = {"width": 4096, "layers": 32, "vocab": 32000, "seq_len": 2048, "batch": 1}


# The facts each replayed value is read from: their evidence says where in the log (file:line).
PARAM_FACTS: dict[str, tuple[str, ...]] = {
    "batch": ("per_device_train_batch_size",), "grad_accum": ("gradient_accumulation_steps",),
    "seq_len": ("max_prompt_length", "max_seq_length", "max_completion_length"),
    "autocast": ("mixed_precision", "bf16", "fp16"), "gradient_checkpointing": ("gradient_checkpointing",),
    "lora_rank": ("lora_r", "lora"), "zero_stage": ("zero_stage", "fsdp_sharding_strategy"), "world_size": ("world_size",),
    "zero_bucket_elements": ("reduce_bucket_size",), "overlap_comm": ("overlap_comm",),
    "zero3_gather_unit": ("stack_deepspeed", "zero_stage"),
    "zero3_prefetch_bucket_elements": ("zero3_prefetch_bucket_size",),
    "zero3_max_live_elements": ("zero3_max_live_parameters",),
    "zero3_persistence_threshold_elements": ("zero3_param_persistence_threshold",),
    "zero3_max_reuse_distance_elements": ("zero3_max_reuse_distance",),
    "zero3_backward_prefetch_units": ("fsdp_backward_prefetch",), "zero3_forward_prefetch_units": ("fsdp_forward_prefetch",),
    "zero3_streams": ("overlap_comm",),
    "eval_batch": ("per_device_eval_batch_size",), "eval_batches": ("eval_batches_total",),
    "eval_accumulation_steps": ("eval_accumulation_steps",), "eval_world_size": ("world_size",),
    "num_generations": ("num_generations",), "max_new_tokens": ("max_completion_length",),
    "completion_len": ("max_completion_length",), "generate_in_training": ("num_generations",),
    "reference_model": ("kl_beta",), "ddp_buckets": ("world_size",), "master_weights": ("stack_deepspeed",),
    "config": ("model_name",), "optimizer": ("deepspeed_optimizer", "optimizer"),
    "dtype": ("model_dtype", "mixed_precision", "bf16", "fp16"),
    "layers": ("num_layers",), "width": ("hidden_size",), "vocab": ("vocab_size",),
    "offload": ("offload_param", "offload_optimizer"), "fused_cross_entropy": ("liger_kernel",),
    "liger_kernels": ("liger_kernel",),
}
# DeepSpeed's config names that build its FusedAdam on a GPU (runtime/engine.py _configure_basic_optimizer, with
# torch_adam and cpu offload off): adam and adamw (adam_w_mode).
DEEPSPEED_FUSED_ADAM = frozenset({"adam", "adamw", "fusedadam"})
ORIGIN_TEXT = 60  # characters of the log line quoted beside a value


def _zero_buckets(d: dict[str, Any], params: dict[str, Any], notes: list[str]) -> None:
    """DeepSpeed ZeRO's gradient buckets, when the log prints reduce_bucket_size (an "auto" one it does not)."""
    if isinstance(d.get("reduce_bucket_size"), int) and d["reduce_bucket_size"] > 0:
        params["zero_bucket_elements"] = d["reduce_bucket_size"]
        if d.get("overlap_comm") is True:
            params["overlap_comm"] = True
    else:
        notes.append("ZeRO's gradient buckets: reduce_bucket_size is not in the log, not counted (DeepSpeed's "
                     "default, 5e8 elements, is 1 GB per bucket in 16-bit, two with overlap_comm at stages 1-2)")


# DeepSpeed ZeRO-3's gathering settings: (the fact diagnose reads, the param whose default is DeepSpeed's)
DEEPSPEED_ZERO3 = (
    ("zero3_prefetch_bucket_size", "zero3_prefetch_bucket_elements"),
    ("zero3_max_live_parameters", "zero3_max_live_elements"),
    ("zero3_param_persistence_threshold", "zero3_persistence_threshold_elements"),
    ("zero3_max_reuse_distance", "zero3_max_reuse_distance_elements"),
)
FSDP_BACKWARD_PREFETCH_UNITS = {"BACKWARD_PRE": 1, "BACKWARD_POST": 0, "NONE": 0}
# FSDP's sharding strategies as the ZeRO stage that shards the same state (NO_SHARD is DDP: no stage)
FSDP_STAGE = {"FULL_SHARD": 3, "HYBRID_SHARD": 3, "SHARD_GRAD_OP": 2, "_HYBRID_SHARD_ZERO2": 2}


def _zero3_gathering(d: dict[str, Any], params: dict[str, Any], notes: list[str]) -> None:
    """How ZeRO-3 gathers parameters: DeepSpeed's module fetch with its printed (else default) prefetch settings,
    or FSDP's unit gather with its printed prefetch switches."""
    if d.get("stack_deepspeed"):
        params["zero3_gather_unit"] = "module"
        if params["zero_stage"] < 3:
            return
        missing = []
        for fact, param in DEEPSPEED_ZERO3:
            if isinstance(d.get(fact), int):
                params[param] = d[fact]
            else:
                missing.append(f"{fact.removeprefix('zero3_')} {TransformerParams.model_fields[param].default:.0e}")
        if missing:
            notes.append("ZeRO-3 prefetch: not in the log, assumed DeepSpeed's defaults (" + ", ".join(missing) + ")")
        if d.get("overlap_comm") is False:  # stage 3 all-gathers on a stream of its own only with overlap_comm
            params["zero3_streams"] = False
            notes.append("DeepSpeed overlap_comm=false: ZeRO-3 gathers on the compute stream, replayed on one stream")
        return
    if params["zero_stage"] < 3:
        return
    printed = d.get("fsdp_backward_prefetch")
    if printed in FSDP_BACKWARD_PREFETCH_UNITS:
        params["zero3_backward_prefetch_units"] = FSDP_BACKWARD_PREFETCH_UNITS[printed]
        if printed == "BACKWARD_POST":
            notes.append("FSDP BACKWARD_POST: the next unit is gathered after the current one's gradients, replayed "
                         "as no backward prefetch")
    else:
        notes.append("FSDP prefetch: backward_prefetch is not in the log, assumed BACKWARD_PRE (one unit ahead)")
    if d.get("fsdp_forward_prefetch") is True:
        params["zero3_forward_prefetch_units"] = 1
    if d.get("fsdp_limit_all_gathers") is False:
        notes.append("FSDP limit_all_gathers=False: more than two all-gathers may be in flight; the replay holds at "
                     "most the prefetched units")


def _offload(d: dict[str, Any], params: dict[str, Any], notes: list[str]) -> None:
    """What the run keeps on the host: DeepSpeed's offload_optimizer (the optimizer's states) and, at ZeRO stage 3,
    DeepSpeed's offload_param or FSDP's cpu_offload (also the parameter shards and their gradients)."""
    if d.get("offload_param"):
        if params.get("zero_stage") == 3:
            params["offload"] = "all"
            notes.append("parameter offload: the parameter shards, their gradients and the optimizer's states live on "
                         "the host; each unit's weights are gathered to the device when used")
            return
        notes.append("parameter offload is printed, but the replay offloads parameters at ZeRO stage 3 / FSDP "
                     "FULL_SHARD only: replayed with them on the device")
    if d.get("offload_optimizer") or (d.get("offload_param") and params.get("zero_stage")):
        params["offload"] = "optimizer"
        notes.append("optimizer offload: the optimizer's states (and fp32 master weights) live on the host")


def build(log: str) -> tuple[dict[str, Any], list[str]]:
    """(config, notes) for the first fatal device OOM in `log`; notes list every assumption made."""
    config, notes, _ = _build(log)
    return config, notes


def _build(log: str) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """(config, notes, origins): origins maps a value's dotted path in the config to where the log shows it
    (file:line and the line's start) or to why it was assumed."""
    from oomdoctor.engine.engine import diagnose_with
    from oomdoctor.engine.loader import load_rules
    from oomdoctor.facts import derive
    from oomdoctor.parse import parse_files

    facts = parse_files([log])
    index = next((i for i, e in enumerate(facts.events) if e.kind in DEVICE_KINDS and e.fatal), None)
    if index is None:
        raise UsageError("no GPU out-of-memory event to replay in this log", where=log,
                         tip="verify --from needs a CUDA/HIP/XPU OOM; write a config by hand (docs/verify.md)")
    derived = derive(facts, index)
    d = derived.values
    event = facts.events[index]
    notes: list[str] = []
    assumed: dict[str, str] = {}  # param -> its note; kept only for the params the chosen workload uses

    def fact(name: str, param: str) -> Any:
        value = d.get(name)
        if value is None and param in DEFAULTS:
            assumed[param] = f"{param}: not in the log, assumed {DEFAULTS[param]}"
            return DEFAULTS[param]
        return value

    width = fact("hidden_size", "width")
    params: dict[str, Any] = {
        "layers": fact("num_layers", "layers"), "width": width, "heads": max(1, width // HEAD_DIM),
        "vocab": fact("vocab_size", "vocab"), "seq_len": fact("max_seq_length", "seq_len"),
        "batch": fact("per_device_train_batch_size", "batch"),
        "grad_accum": d.get("gradient_accumulation_steps") or 1,
    }
    if width % params["heads"]:
        params["heads"] = 1
    printed = str(d.get("optimizer") or "").lower()  # adamw_torch_fused, adamw_bnb_8bit, paged_adamw_8bit, adafactor
    optimizer = next((ours for word, ours in (("adafactor", "adafactor"), ("sgd", "sgd"), ("8bit", "adamw8bit"),
                                              ("fused", "adamw_fused"), ("adam", "adamw")) if word in printed), None)
    if d.get("deepspeed_optimizer") in DEEPSPEED_FUSED_ADAM:  # DeepSpeed's block wins over the trainer's optim
        optimizer = "adamw_fused"
        notes.append(f"optimizer: DeepSpeed's own ({d['deepspeed_optimizer']} in its config), replayed as its "
                     "FusedAdam: one kernel, in place")
    if optimizer:
        params["optimizer"] = optimizer
    if d.get("mixed_precision"):
        params["autocast"] = "float16" if d.get("fp16") else "bfloat16"
    if d.get("gradient_checkpointing"):
        params["gradient_checkpointing"] = True
    if d.get("lora"):
        params["lora_rank"] = d.get("lora_r") or 16
    stage = d.get("zero_stage")
    if not isinstance(stage, int) and not d.get("stack_deepspeed") and d.get("fsdp_sharding_strategy") in FSDP_STAGE:
        stage = FSDP_STAGE[d["fsdp_sharding_strategy"]]
        notes.append(f"FSDP {d['fsdp_sharding_strategy']}: replayed as ZeRO stage {stage} (parameters, gradients and "
                     "optimizer states sharded" + (")" if stage == 3 else " except the parameters)")
                     + (" over the log's world size; a hybrid strategy shards within a node only"
                        if "HYBRID" in d["fsdp_sharding_strategy"] else ""))
    if isinstance(stage, int):
        params["zero_stage"] = stage
        params["world_size"] = d.get("world_size") or 1
        if d.get("stack_deepspeed") and stage >= 1:
            _zero_buckets(d, params, notes)
        if stage >= 1:
            _zero3_gathering(d, params, notes)
    elif (isinstance(d.get("world_size"), int) and d["world_size"] > 1 and not d.get("stack_deepspeed")
          and not d.get("stack_fsdp") and not d.get("stack_megatron") and not d.get("stack_torchtitan")
          and (d.get("data_parallel_degree") or d["world_size"]) > 1):
        # data parallel without ZeRO/FSDP: torch's DistributedDataParallel, whose buckets copy every gradient
        params["ddp_buckets"] = True
        notes.append(f"data parallel over {d['world_size']} ranks without ZeRO/FSDP: DDP's gradient buckets "
                     "(a copy of every trainable gradient; gradient_as_bucket_view=True would share them)")
    _offload(d, params, notes)
    if d.get("liger_kernel") and event.phase == "train":
        params["fused_cross_entropy"] = True
        notes.append("Liger-Kernel's fused linear cross-entropy on: the loss in chunks of rows, no full logits")
    if d.get("stack_deepspeed") and "autocast" in params and not d.get("model_dtype"):
        # DeepSpeed's bf16/fp16 mode casts the module itself; its optimizer keeps the fp32 master copy
        params["dtype"] = params.pop("autocast")
        notes.append(f"DeepSpeed's {params['dtype']} mode: weights and gradients in {params['dtype']}, an fp32 master "
                     "copy in its optimizer")
    if d.get("per_device_eval_batch_size"):
        params["eval_batch"] = d["per_device_eval_batch_size"]
    kept = _kept_eval_outputs(d, event.phase, notes)
    if event.phase == "train" and (d.get("num_generations") or 0) > 1 and d.get("max_completion_length"):
        # an RL policy update (GRPO/RLOO): log-probs over the completions of prompt + completion sequences
        completion = d["max_completion_length"]
        params["completion_len"] = completion
        if d.get("max_prompt_length"):
            params["seq_len"] = d["max_prompt_length"] + completion
        else:
            params["seq_len"] = max(params["seq_len"], completion + 1)
            notes.append(f"RL update: the prompt length is not in the log, sequences assumed {params['seq_len']} "
                         "tokens in all")
        notes.append(f"RL update: {params['batch']} completions of {completion} tokens after the prompt, their "
                     "log-probs from the policy's logits (every completion at its longest)")
    if event.phase == "generate":
        if d.get("max_completion_length"):
            params["max_new_tokens"] = d["max_completion_length"]
        if (n := d.get("num_generations")) and n > 1:  # a GRPO/RLOO rollout: the trainer's state is resident
            params["num_generations"] = n
            params["generate_in_training"] = True
            notes.append(f"generation: {params['eval_batch'] if 'eval_batch' in params else params['batch']} prompts "
                         f"x {n} completions decode at once (TRL versions that count completions in the per-device "
                         "batch decode fewer: lower eval_batch)")
    if ("completion_len" in params or params.get("generate_in_training")) and not d.get("lora"):
        # TRL keeps a frozen copy of the policy to measure the KL against when beta > 0 (with PEFT, the base
        # with its adapters switched off is that reference: no copy)
        beta = d.get("kl_beta")
        if beta:
            params["reference_model"] = True
            notes.append(f"RL: beta {beta:g} keeps a frozen reference copy of the policy resident")
        elif beta is None:
            notes.append("RL: beta is not in the log, assumed 0 (TRL 0.19's default, no reference model; older TRL "
                         "kept one at 0.04: set reference_model: true if yours did)")
    if event.total_bytes is None:
        raise UsageError("the OOM message prints no device total to replay against", where=f"{log}:{event.line}",
                         tip="write a config with memory.limit (docs/verify.md)")
    others = sum(p.bytes for p in event.other_processes)
    memory: dict[str, Any] = {"limit": _mib(event.total_bytes - others)}
    if d.get("non_pytorch_bytes") is not None and d["non_pytorch_bytes"] >= 0:
        memory["non_pytorch"] = _mib(d["non_pytorch_bytes"])
    else:
        notes.append("non-PyTorch memory: not in the message, assumed 512 MiB (CUDA context, libraries)")
    phase = PHASES.get(event.phase, "train")
    if event.phase == "unknown":
        notes.append("phase: not in the log, assumed train")
    fixes = [f.id for g in diagnose_with(facts, load_rules()) if g.event_index == index for f in g.fixes
             if f.id in VERIFIABLE]
    if params.get("ddp_buckets") and phase == "train":
        fixes.append("ddp-bucket-view")  # what the buckets cost, tried beside the diagnosis's fixes
    if params.get("zero_bucket_elements") and phase == "train":
        fixes.append("smaller-zero-buckets")
    if params.get("zero_stage") == 3:
        fixes.append("smaller-zero3-prefetch")  # what gathering ahead costs, tried beside the diagnosis's fixes
    workload, hf_notes = _hf_workload(d, {**params, **kept}, phase)  # why hf cannot, or what hf assumed
    if workload is None:
        workload = {"model": "transformer", "params": params}
    notes.extend(hf_notes)
    used = set(workload["params"])  # an hf replay takes the shape from the real architecture, not from defaults
    notes[:0] = [note for param, note in assumed.items() if param in used]
    config: dict[str, Any] = {
        "workload": workload, "phase": phase, "device": "auto",
        "memory": memory, "fixes": list(dict.fromkeys(fixes)) or None,
    }
    run = next((r for r in facts.runs if r.source == event.source), None)
    if run and run.alloc_conf:
        config["alloc_conf"] = str(run.alloc_conf.value)
    if config["fixes"] is None:
        del config["fixes"]
    model = (f"{d['model_name']}'s own architecture (transformers)" if workload["model"] == "hf"
             else "the built-in transformer")
    notes.insert(0, f"replaying {event.source}:{event.line} ({event.kind}, phase {phase}) against "
                    f"{format_bytes(event.total_bytes - others)} with {model}")
    return config, notes, _origins(config, derived, assumed, event.source, event.line)


def _origins(config: dict[str, Any], derived: Any, assumed: dict[str, str], source: str,
             line: int) -> dict[str, str]:
    """Where each value of the built config comes from: the log line behind the fact it was read from, the OOM
    message for the limits, or "assumed" (with the reason) for what the log does not say."""

    def shown(*names: str) -> str | None:
        for name in names:
            if derived.values.get(name) is not None and (evidence := derived.evidence.get(name)):
                ev = evidence[0]
                text = " ".join(ev.text.split())
                return f"{ev.source}:{ev.line}  {text[:ORIGIN_TEXT]}{'…' if len(text) > ORIGIN_TEXT else ''}"
        return None

    out: dict[str, str] = {}
    for param in config["workload"]["params"]:
        where = None if param in assumed else shown(*PARAM_FACTS.get(param, ()))
        if param == "heads" and where is None:
            where = f"derived: width / {HEAD_DIM} (the log names no head count)"
        out[f"workload.params.{param}"] = where or "assumed: not in the log"
    out["memory.limit"] = f"{source}:{line}  the device total in the OOM message, less other processes"
    memory = config["memory"]
    out["memory.non_pytorch"] = (f"{source}:{line}  the OOM message" if "non_pytorch" in memory
                                 else "assumed: 512 MiB (not in the message)")
    out["phase"] = shown("phase") or "assumed: not in the log"
    if "fixes" in config:
        out["fixes"] = "the fixes the diagnosis proposes that verify can apply"
    if "alloc_conf" in config:
        out["alloc_conf"] = shown("alloc_conf") or "the run's PYTORCH_CUDA_ALLOC_CONF as the log prints it"
    return out


def _kept_eval_outputs(d: dict[str, Any], phase: str, notes: list[str]) -> dict[str, Any]:
    """HF Trainer keeps every evaluation batch's logits on the device until its loop ends (unless
    eval_accumulation_steps moves them): the replay runs the whole loop, as long as the failing loop's bar says."""
    from oomdoctor.fixcatalog import PILING_EVAL_STACKS

    total = d.get("eval_batches_total")
    if phase != "eval" or not total or not any(d.get(f"stack_{s}") for s in PILING_EVAL_STACKS):
        return {}
    kept: dict[str, Any] = {"eval_batches": total}
    every = d.get("eval_accumulation_steps")
    if every:
        kept["eval_accumulation_steps"] = every
    notes.append(f"evaluation: {total} batches (the failing loop's progress bar); HF Trainer keeps their logits on "
                 "the device " + (f"for {every} batches at a time" if every else "until the loop ends"))
    world = d.get("data_parallel_degree") or d.get("world_size")
    if isinstance(world, int) and world > 1:
        kept["eval_world_size"] = world
        notes.append(f"evaluation: every rank gathers all {world} ranks' logits before keeping them "
                     "(accelerate's gather_for_metrics)")
    return kept


def _hf_workload(d: dict[str, Any], params: dict[str, Any], phase: str) -> tuple[dict[str, Any] | None, list[str]]:
    """`model: hf` when the log names a catalogued model and the replay needs nothing hf lacks (with notes on what
    it assumed), else None and why not."""
    import importlib.util

    from oomdoctor.verify.architectures import (
        DYNAMIC_IMAGE_SIDE,
        DYNAMIC_RESOLUTION,
        IMAGE_CLASSIFIERS,
        LIGER_PATCHED,
        from_catalog,
        hf_replays,
    )

    name = d.get("model_name")
    architecture = from_catalog(name) if isinstance(name, str) else None
    if architecture is None:
        return None, []
    if importlib.util.find_spec("transformers") is None:
        return None, [f"model: {name} is catalogued, but transformers is not installed: the built-in transformer "
                      "stands in (pip install 'oomdoctor[integrations]' replays the real architecture)"]
    lacking = [what for what, used in ((f"phase {phase}", not hf_replays(architecture["model_type"], phase)),
                                       ("LoRA without peft installed",
                                        "lora_rank" in params and importlib.util.find_spec("peft") is None)) if used]
    if lacking:
        return None, [f"model: {name}: the built-in transformer stands in ({', '.join(lacking)} not replayed for hf yet)"]
    hf: dict[str, Any] = {"batch": params["batch"], "grad_accum": params["grad_accum"]}
    if architecture["model_type"] not in IMAGE_CLASSIFIERS:  # images have a side, not a sequence length
        hf["seq_len"] = params["seq_len"]
    for key in ("autocast", "gradient_checkpointing", "eval_batch", "lora_rank", "eval_batches", "eval_accumulation_steps",
                "eval_world_size", "num_generations", "max_new_tokens", "generate_in_training", "completion_len",
                "reference_model", "offload", "fused_cross_entropy",
                *ZeroParams.model_fields):  # ZeRO/FSDP sharding and DDP's buckets as read
        if key in params:
            hf[key] = params[key]
    optimizer = params.get("optimizer")
    hf["optimizer"] = optimizer or "adamw"  # written out even when assumed: the config says what was replayed
    notes = [] if optimizer else ["optimizer: not in the log, assumed AdamW (two moments per parameter, in its dtype)"]
    if architecture["model_type"] in DYNAMIC_RESOLUTION:  # the processor sizes each image: no side in the config
        notes.append(f"images: not in the log, assumed one a sample at {DYNAMIC_IMAGE_SIDE} px (image_size sets it; "
                     "the processor turns each 28 px square into one token of seq_len)")
    if d.get("model_dtype"):  # the weights as loaded (torch_dtype)
        hf["dtype"] = d["model_dtype"]
    elif "dtype" in params:  # DeepSpeed's half-precision mode
        hf["dtype"] = params["dtype"]
    elif "lora_rank" in params and "autocast" in params:
        # a LoRA run's frozen base is loaded in the run's precision by the common recipes (LLaVA, axolotl, TRL's)
        hf["dtype"] = params["autocast"]
        notes.append(f"weights: the dtype they were loaded in is not in the log, assumed {params['autocast']} "
                     "(a LoRA run's frozen base in the run's precision)")
    else:
        notes.append("weights: the dtype they were loaded in is not in the log, assumed float32 (transformers' "
                     "default before 5)")
    if d.get("stack_deepspeed") and hf.get("dtype") in ("bfloat16", "float16"):
        hf["master_weights"] = True  # DeepSpeed's bf16/fp16 optimizer: fp32 master weights and moments
    if d.get("liger_kernel") and architecture["model_type"] in LIGER_PATCHED:
        hf["liger_kernels"] = True  # Liger's patch of the model's modules (every phase; the fused loss trains only)
        notes.append("Liger-Kernel's RMSNorm, SwiGLU and RoPE replace the model's own: no fp32 copy in the norms, no "
                     "MLP intermediate kept, q and k rotated in place")
    elif d.get("liger_kernel"):
        notes.append(f"Liger-Kernel's patch of {architecture['model_type']}'s modules, if it has one, is not replayed: "
                     "the model's own norms, MLP and rotary embedding")
    return {"model": "hf", "params": {"config": name, **hf}}, notes


def _mib(n: int) -> str:
    return f"{round(n / 2**20)}MiB"


def write(log: str, path: Path) -> list[str]:
    """Write the config built from `log` to `path`, the assumptions as comments above it and, beside every value,
    where it came from; return the notes."""
    config, notes, origins = _build(log)
    header = "".join(f"# {n}\n" for n in notes)
    write_atomic(path, f"# built by `oomdoctor verify --from {log}`; edit and rerun with --config\n{header}"
                 + annotated(yaml.safe_dump(config, sort_keys=False), origins))
    return notes


def annotated(text: str, origins: dict[str, str]) -> str:
    """YAML as safe_dump writes it (two-space indents), each `key: value` line whose dotted path has an origin
    followed by `  # origin`; a key that opens a block comments its first line (a list: fixes)."""
    out: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings the current line sits in
    for ln in text.splitlines():
        stripped = ln.lstrip(" ")
        indent = len(ln) - len(stripped)
        if stripped.startswith("- ") or ":" not in stripped:
            out.append(ln)
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = stripped.split(":", 1)[0]
        path = ".".join([k for _, k in stack] + [key])
        value = stripped.split(":", 1)[1].strip()
        if not value:  # a block follows: its children are nested under this key
            stack.append((indent, key))
        out.append(f"{ln}  # {origins[path]}" if path in origins else ln)
    return "\n".join(out) + "\n"
