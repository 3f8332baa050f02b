"""The `workload: {model: hf}` step: a transformers model built from its config, trained or evaluated for real.

Built on the meta device (no memory), then materialised on the target device, so every parameter, gradient,
optimizer state and activation is the library's own: its attention implementation, its MLP, its loss with
fp32 logits. As one rank of a ZeRO/FSDP job (`zero_stage`, `world_size`): stage 1 shards the optimizer's states,
stage 2 also the gradients (the built-in workload's ZeRO optimizer), stage 3 also the parameters, partitioned before
they are materialised and gathered around each module (verify/hfzero.py). Imports torch and transformers; only trial
subprocesses import this module.
"""

from __future__ import annotations

import contextlib
import inspect
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from oomdoctor.verify.architectures import (
    DYNAMIC_RESOLUTION,
    IMAGE_CLASSIFIERS,
    LIGER_PATCHED,
    VISION_LANGUAGE,
    causal_lm,
    fused_loss_refusal,
    hf_replays,
    resolve,
)
from oomdoctor.verify.hfzero import Partition, Zero3, partition
from oomdoctor.verify.params import HFParams

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _outside_fake_mode() -> Any:
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
    except ImportError:  # pragma: no cover - older torch
        return contextlib.nullcontext()
    return unset_fake_temporarily()


def _unpacked_under_fake_tensors() -> None:
    """Answer transformers' packed-batch test for a fake tensor as a real one of the replay's batch would be answered.

    transformers 5 reads the position ids to tell a packed batch (several sequences in one row) and, when the ids are a
    trace it cannot read (a fake tensor), takes the batch for packed. Then it builds the full causal mask, and SDPA
    takes the memory-efficient kernel with every key/value head repeated. On CUDA the same unpacked batch gets no mask
    and FlashAttention keeps grouped key/value heads as they are: Llama-3.2-3B, 2 x 4096 tokens, 62.24 GB peak on an
    H200 where the simulator said 64.16 GB (bench/measured/). The replay's rows are never packed (positions 0..n-1),
    so a fake tensor gets the answer a real one would: not packed. Real tensors are passed through untouched."""
    try:
        from transformers import masking_utils
    except ImportError:  # pragma: no cover - transformers is an optional extra
        return
    find = getattr(masking_utils, "find_packed_sequence_indices", None)
    if find is None or getattr(find, "oomdoctor_unpacked", False):  # older transformers, or already installed
        return
    from torch._subclasses.fake_tensor import FakeTensor

    def find_packed_sequence_indices(position_ids: torch.Tensor) -> torch.Tensor | None:
        return None if isinstance(position_ids, FakeTensor) else find(position_ids)

    find_packed_sequence_indices.oomdoctor_unpacked = True  # type: ignore[attr-defined]
    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices


def auto_class(model_type: str) -> Any:
    """The transformers Auto class that builds a `model_type` with its task head."""
    import transformers

    if model_type in IMAGE_CLASSIFIERS:
        return transformers.AutoModelForImageClassification
    if model_type in VISION_LANGUAGE:
        return transformers.AutoModelForImageTextToText
    return transformers.AutoModelForCausalLM


def build(p: HFParams, device: torch.device, base_dir: Path | None = None) -> Any:
    """The model from its config, materialised (uninitialised) on `device` in the weights' dtype."""
    return _build(p, device, base_dir)[0]


def _build(p: HFParams, device: torch.device, base_dir: Path | None) -> tuple[Any, Partition | None]:
    """The model, and at ZeRO stage 3 how its parameters are partitioned: only this rank's shards are materialised."""
    import transformers

    keys = {**resolve(p.config, base_dir), **p.overrides}
    model_type = keys.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **keys)
    image = model_type in IMAGE_CLASSIFIERS
    if not image:  # a convolutional classifier has no attention to choose (transformers refuses the setting)
        config._attn_implementation = p.attn_implementation
    config.use_cache = False
    auto = auto_class(model_type)
    with _outside_fake_mode(), torch.device("meta"):  # plain meta tensors: the fake mode refuses to swap its own
        model = auto.from_config(config)
        model = model.to(DTYPES[p.dtype])
        if p.lora_rank:  # the run's adapters as peft adds them (base frozen; adapters in fp32 under a 16-bit base)
            import peft

            lora = peft.LoraConfig(r=p.lora_rank, lora_alpha=2 * p.lora_rank, lora_dropout=p.lora_dropout,
                                   target_modules=list(p.lora_targets))
            with warnings.catch_warnings():  # peft asks transformers a property it deprecated: not the user's to fix
                warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
                model = peft.get_peft_model(model, lora)
        part = partition(model, p.world_size) if p.zero_stage == 3 else None
    from oomdoctor.verify.workload import host_memory

    with host_memory(device, p.offload == "all"):  # offloaded parameter shards live on the host (stage 3)
        model = model.to_empty(device=device)
    if part is not None:
        return model, part.materialised()  # a tied weight is one shard again
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return model, None


def _frozen_copy(p: HFParams, device: torch.device, base_dir: Path | None) -> Any:
    """The reference policy an RL or preference trainer keeps beside the one it trains: the same architecture and
    dtype, frozen, never stepped; sharded like the policy at ZeRO stage 3 (TRL prepares it with the same plugin)."""
    reference = build(p.model_copy(update={"lora_rank": 0}), device, base_dir)
    reference.requires_grad_(False)
    return reference.eval()


def _adam_moments(q: torch.Tensor, eight_bit: bool) -> list[torch.Tensor]:
    """AdamW's two moments for one parameter: in the parameter's own dtype as torch.optim.AdamW creates them (bf16
    weights, bf16 moments; fp32 adapters, fp32 moments), or bitsandbytes' 8-bit ones."""
    from oomdoctor.verify.workload import bnb_states

    return bnb_states(q.numel(), q.device) if eight_bit else [torch.zeros_like(q), torch.zeros_like(q)]


def _zero_optimizer(p: HFParams) -> bool:
    """Whether the step's optimizer is DeepSpeed's/FSDP's (sharded states, fp32 master weights), not torch.optim's."""
    return p.zero_stage >= 1 or p.master_weights


def _optimizer_states(model: Any, p: HFParams, device: torch.device) -> Any:
    """What a mid-training optimizer holds: AdamW's moments for every trainable parameter (any of its variants),
    none for SGD; under ZeRO this rank's share of them (and of the master weights)."""
    from oomdoctor.verify.workload import mid_training_states

    if _zero_optimizer(p):
        return mid_training_states(model, p, device)
    if p.optimizer not in ("adamw", "adamw_fused", "adamw8bit"):
        return []
    return [s for q in model.parameters() if q.requires_grad for s in _adam_moments(q, p.optimizer == "adamw8bit")]


class InPlaceAdamW(torch.optim.Optimizer):
    """An AdamW whose update is one fused kernel per parameter group, as memory sees it: its states created at the
    first step, the parameters updated in place, no temporaries. `eight_bit`: bitsandbytes' AdamW8bit states
    (bnb_states); else two moments in the parameter's dtype, as torch's AdamW(fused=True) keeps them. The arithmetic
    is neither's."""

    def __init__(self, params: Any, eight_bit: bool, lr: float = 1e-5) -> None:
        super().__init__(params, {"lr": lr})
        self.eight_bit = eight_bit

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for q in group["params"]:
                if q.grad is None:
                    continue
                if not self.state[q]:
                    self.state[q]["moments"] = _adam_moments(q, self.eight_bit)
                q.add_(q.grad, alpha=-group["lr"])


def _optimizer(model: Any, p: HFParams, device: torch.device) -> Any:
    """The optimizer HF Trainer would build: torch's AdamW (foreach, or fused) and SGD, transformers' own Adafactor
    (factored moments), bitsandbytes' 8-bit AdamW; under ZeRO, the sharded one of the built-in workload."""
    from oomdoctor.verify.workload import Optimizer

    if _zero_optimizer(p):
        return Optimizer(model, p, device)
    name = p.optimizer
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(model.parameters(), lr=1e-5, scale_parameter=False, relative_step=False)
    if name in ("adamw8bit", "adamw_fused"):  # bitsandbytes' (adamw_bnb_8bit), torch's fused (adamw_torch_fused)
        return InPlaceAdamW([q for q in model.parameters() if q.requires_grad], eight_bit=name == "adamw8bit")
    return (torch.optim.AdamW if name == "adamw" else torch.optim.SGD)(model.parameters(), lr=1e-5)


def _token_inputs(model: Any, p: HFParams, device: torch.device) -> Callable[[int], dict[str, Any]]:
    """A causal LM's batch: random token ids, which are also its labels (the loss path with fp32 logits)."""
    vocab = model.config.vocab_size

    def make(batch: int) -> dict[str, Any]:
        ids = torch.randint(0, vocab, (batch, p.seq_len), device=device)
        return {"input_ids": ids, "labels": ids, "use_cache": False}
    return make


SAMPLING_TEMPERATURE = 0.9  # any value: dividing by it makes a copy of the logits, as the trainer's division does


def _policy_update_forward(model: Any, completion_len: int) -> Callable[[dict[str, Any]], Any]:
    """An RL policy update's forward and loss as TRL's GRPO trainer computes them: logits for the completion only
    (`logits_to_keep`), in the weights' dtype, divided by the sampling temperature, then each sequence's log-softmax
    in turn (its saved output stays for backward), the sampled tokens' log-probs weighted by their advantages."""

    def forward(batch: dict[str, Any]) -> Any:
        ids = batch["input_ids"]
        logits = model(input_ids=ids, logits_to_keep=completion_len + 1, use_cache=False).logits[:, :-1, :]
        logits = logits / SAMPLING_TEMPERATURE
        chosen = ids[:, -completion_len:]
        logps = torch.stack([torch.log_softmax(row, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
                             for row, tokens in zip(logits, chosen)])
        advantages = torch.ones(ids.shape[0], 1, device=ids.device, dtype=logps.dtype)
        return types.SimpleNamespace(loss=-(logps * advantages).mean())
    return forward


def _fused_loss_forward(model: Any) -> Callable[[dict[str, Any]], Any]:
    """The causal-LM loss as Liger's patched forward computes it in training (`use_liger_kernel`): the decoder's
    hidden states, then the fused linear cross-entropy over the head's weight with the labels shifted by one
    (verify/fusedce.py), called through the head module so that ZeRO-3 gathers its weight around it."""
    from oomdoctor.verify.fusedce import fused_linear_cross_entropy

    lm = model.get_base_model() if hasattr(model, "get_base_model") else model  # under peft's wrapper
    decoder, head = lm.base_model, lm.get_output_embeddings()

    def forward(batch: dict[str, Any]) -> Any:
        hidden = decoder(input_ids=batch["input_ids"], use_cache=False).last_hidden_state
        targets = torch.nn.functional.pad(batch["labels"], (0, 1), value=-100)[..., 1:]
        head.forward = lambda h: fused_linear_cross_entropy(h, head.weight, targets)  # the head's hooks run
        try:
            loss = head(hidden)
        finally:
            del head.forward
        return types.SimpleNamespace(loss=loss)
    return forward


def _image_text_inputs(model: Any, p: HFParams, device: torch.device) -> Callable[[int], dict[str, Any]]:
    """A LLaVA-style batch: one image per sample, its patch tokens first in the ids (as the processor expands the
    image placeholder), then text to `seq_len` in all; the loss covers the text only."""
    config = model.config
    vision = config.vision_config
    side = p.image_size or vision.image_size
    patches = (side // vision.patch_size) ** 2  # "default" feature strategy: the CLS token is dropped
    if patches >= p.seq_len:
        raise ValueError(f"seq_len {p.seq_len} leaves no text after the image's {patches} tokens")
    image_token = config.image_token_index
    vocab = min(config.text_config.vocab_size, image_token)

    def make(batch: int) -> dict[str, Any]:
        ids = torch.randint(0, vocab, (batch, p.seq_len), device=device)
        ids[:, :patches] = image_token
        labels = ids.clone()
        labels[:, :patches] = -100
        pixels = torch.randn(batch, vision.num_channels, side, side, device=device, dtype=DTYPES[p.dtype])
        return {"input_ids": ids, "pixel_values": pixels, "labels": labels, "patches": patches}
    return make


def _image_text_forward(model: Any, batch: dict[str, Any]) -> Any:
    """LLaVA's forward with the image features written over the image's token positions, as its own forward does
    with masked_scatter (which checks the token count with .item(), data the fake device cannot give)."""
    ids, patches = batch["input_ids"], batch["patches"]
    text = model.get_input_embeddings()(ids)
    features = model.model.get_image_features(pixel_values=batch["pixel_values"]).pooler_output
    embeds = torch.cat([torch.stack(list(features)).to(text.dtype), text[:, patches:]], dim=1)
    del text, features
    return model(inputs_embeds=embeds, labels=batch["labels"])


def _inputs_and_forward(model: Any, p: HFParams, device: torch.device) -> tuple[
        Callable[[int], dict[str, Any]], Callable[[dict[str, Any]], Any]]:
    """How a step of this model's kind makes its batch and runs its forward (before any loss it replaces)."""
    kind = model.config.model_type
    if kind in DYNAMIC_RESOLUTION:
        from oomdoctor.verify import qwenvl

        return qwenvl.inputs(model, p, device), lambda batch: qwenvl.forward(model, batch)
    if kind in VISION_LANGUAGE:
        return _image_text_inputs(model, p, device), lambda batch: _image_text_forward(model, batch)
    if kind in IMAGE_CLASSIFIERS:
        return _image_inputs(model, p, device), lambda batch: model(**batch)
    return _token_inputs(model, p, device), lambda batch: model(**batch)


def _image_inputs(model: Any, p: HFParams, device: torch.device) -> Callable[[int], dict[str, Any]]:
    """An image classifier's batch: images of the run's side in the weights' dtype, and a class label each."""
    side = p.image_size or getattr(model.config, "image_size", None) or 224
    channels = getattr(model.config, "num_channels", 3)
    classes = model.config.num_labels

    def make(batch: int) -> dict[str, Any]:
        pixels = torch.randn(batch, channels, side, side, device=device, dtype=DTYPES[p.dtype])
        return {"pixel_values": pixels, "labels": torch.randint(0, classes, (batch,), device=device)}
    return make


def hf(params: dict[str, Any] | HFParams, device: torch.device, phase: str = "train",
       base_dir: Path | None = None) -> Callable[[], None]:
    """Build the model on `device` and return a callable that runs one step of `phase`; what the run keeps beside
    the model (a trainer's reference model, DDP's gradient buckets) is built too and stays resident with the step."""
    from oomdoctor.verify.workload import DdpBuckets, keeping

    p = params if isinstance(params, HFParams) else HFParams.model_validate(params)
    _unpacked_under_fake_tensors()
    model, part = _build(p, device, base_dir)
    step = _liger(p, model, _step(p, model, device, phase, _zero3(p, part, device)))
    beside: list[Any] = []
    if p.reference_model:
        beside.append(_frozen_copy(p, device, base_dir))
    if p.ddp_buckets:
        beside.append(DdpBuckets(model.parameters(), device, p.ddp_bucket_view))
    return keeping(step, beside)


def _liger(p: HFParams, model: Any, step: Callable[[], None]) -> Callable[[], None]:
    """The step with Liger-Kernel's RMSNorm, SwiGLU and RoPE in place of the model's own (`liger_kernels`), for the
    architectures its patch covers (verify/liger.py); other models' steps as they are."""
    kind = model.config.model_type
    if not p.liger_kernels or kind not in LIGER_PATCHED:
        return step
    from oomdoctor.verify import liger

    liger.patch(model)

    def patched_step() -> None:
        with liger.rope_patched(kind):
            step()
    return patched_step


def _zero3(p: HFParams, part: Partition | None, device: torch.device) -> Zero3 | None:
    """A partitioned model's gathering (ZeRO stage 3), as `zero3_gather_unit` and its prefetch settings ask."""
    from oomdoctor.verify.zero3 import gathering

    if part is None:
        return None
    return Zero3(part, gathering(p, device, DTYPES[p.dtype]), DTYPES[p.dtype], offload=p.offload == "all")


def _step(p: HFParams, model: Any, device: torch.device, phase: str, zero: Zero3 | None) -> Callable[[], None]:
    """One step of `phase` on the built model (`zero`: its parameters' gathering at ZeRO stage 3)."""
    from oomdoctor.verify.workload import offload_activations, offload_hooks

    def saving(offload: bool) -> Any:
        """A forward's saved tensors: gathered weights kept as where they live (ZeRO-3), activations offloaded."""
        if zero is not None:
            return zero.forward(offload_hooks() if offload else None)
        return offload_activations(offload)

    def end_pass() -> None:
        if zero is not None:
            zero.end_pass()

    autocast = (torch.autocast(device.type, dtype=DTYPES[p.autocast]) if p.autocast else contextlib.nullcontext())
    kind = model.config.model_type
    inputs, forward = _inputs_and_forward(model, p, device)
    if p.completion_len and phase == "train":
        if not causal_lm(kind):
            raise ValueError("completion_len (an RL policy update) is replayed for causal LMs only")
        forward = _policy_update_forward(model, p.completion_len)
    if p.fused_cross_entropy and phase == "train":
        if why := fused_loss_refusal(kind, p.completion_len):
            raise ValueError(f"fused_cross_entropy (Liger's fused linear cross-entropy): {why}")
        forward = _fused_loss_forward(model)

    if phase == "train":
        if p.gradient_checkpointing:
            with warnings.catch_warnings():  # renamed activation_checkpointing_enable in transformers 5, same call
                warnings.simplefilter("ignore", FutureWarning)
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        opt = _optimizer(model, p, device)
        buckets = opt.backward_buckets if _zero_optimizer(p) else list  # DeepSpeed ZeRO-1/2's, per backward

        def train_step() -> None:
            model.train()
            for _ in range(p.grad_accum):
                batch = inputs(p.batch)
                with autocast, saving(p.activation_offload):
                    loss = forward(batch).loss / p.grad_accum
                if zero is not None:
                    loss = zero.loss_boundary(loss)
                reducing: list[torch.Tensor] = buckets()
                loss.backward()
                end_pass()
                del loss, batch, reducing
            opt.step()
            opt.zero_grad()
        return train_step

    if phase == "eval":
        states = _optimizer_states(model, p, device)  # eval happens mid-training: the optimizer's states exist

        kept = min(p.eval_batches, p.eval_accumulation_steps or p.eval_batches) if p.eval_batches else 1
        world = p.eval_world_size if p.eval_batches else 1  # the gather is the evaluation loop's, as the pile is

        def eval_step() -> None:
            model.eval()
            batch = inputs(p.eval_batch or p.batch)
            with (torch.no_grad() if p.eval_no_grad else contextlib.nullcontext()), autocast, saving(False):
                out = forward(batch)
                if (kept > 1 or world > 1) and getattr(out, "logits", None) is not None:
                    # HF Trainer's evaluation loop gathers every rank's logits onto each rank (all_gather: the
                    # output is world x this rank's), then joins them to the batches before (nested_concat).
                    pile = None
                    if kept > 1:  # the last batch runs on top of the earlier batches' pile: run it again so
                        logits = out.logits
                        del out
                        pile = logits.new_empty((logits.shape[0] * world * (kept - 1), *logits.shape[1:]))
                        del logits
                        out = forward(batch)
                    gathered = torch.cat([out.logits] * world) if world > 1 else out.logits
                    if pile is not None:  # old pile, gathered logits and the joined copy coexist
                        pile = torch.cat([pile, gathered])
                    del pile, gathered
            del out, batch
            end_pass()
            assert states is not None
        return eval_step
    if phase == "generate" and hf_replays(kind, phase):
        return _generate_step(model, p, device, autocast, end_pass)
    raise ValueError(f"phase {phase!r} is not replayed for model: hf yet (train and eval are, and a causal LM's "
                     "generate)")


def _generate_step(model: Any, p: HFParams, device: torch.device, autocast: Any,
                   end_pass: Callable[[], None]) -> Callable[[], None]:
    """Decoding as `generate` does it: the prompt's forward fills the library's own KV cache, then each new token
    extends it; replayed in at most DECODE_STEPS forwards (the cache grows to the same length through the same
    steps, see verify.workload); `end_pass` after each forward (ZeRO-3 releases what it gathered)."""
    import transformers

    from oomdoctor.verify.workload import decode_chunks

    states = _optimizer_states(model, p, device) if p.generate_in_training else None
    sequences = (p.eval_batch or p.batch) * p.num_generations
    vocab = model.config.vocab_size
    # transformers 5 renames the forward's past_key_values to cache (the old name warns until it goes)
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def generate_step() -> None:
        model.eval()
        with torch.no_grad(), autocast:
            cache = transformers.DynamicCache()
            prompt = torch.randint(0, vocab, (sequences, p.seq_len), device=device)
            out = model(input_ids=prompt, use_cache=True, logits_to_keep=1, **{cache_arg: cache})
            logits = out.logits[:, -1:].float()
            del out, prompt
            end_pass()
            for chunk in decode_chunks(p.max_new_tokens):
                nxt = logits.argmax(-1).expand(sequences, chunk)
                out = model(input_ids=nxt, use_cache=True, logits_to_keep=1, **{cache_arg: cache})
                logits = out.logits[:, -1:].float()
                del out
                end_pass()
            del cache, logits
        _ = states  # referenced, so the rollout's optimizer states stay resident while the step runs
    return generate_step
