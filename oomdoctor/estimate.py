"""Rough activation memory of one micro-batch, from the model shape and batch the log prints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Stored activations of one transformer layer, in bytes per token per unit of hidden size, with 16-bit
# activations and a fused (flash / SDPA) attention kernel: 34·h (Korthikanti et al. 2022, "Reducing
# Activation Recomputation in Large Transformer Models", table 2, without the 5·a·s/h score term).
LAYER_BYTES_PER_TOKEN_PER_HIDDEN = 34
# With activation checkpointing a layer keeps only its 16-bit input (2·h per token); one layer at a
# time is recomputed in full during backward.
CHECKPOINTED_BYTES_PER_TOKEN_PER_HIDDEN = 2
# The loss head: 16-bit logits, their fp32 copy for the loss, and the fp32 gradient (2 + 4 + 4 bytes).
LOGIT_BYTES_PER_TOKEN_PER_VOCAB = 10


@dataclass(frozen=True)
class ActivationEstimate:
    """Estimated activation bytes for one micro-batch and what the common fixes would give back."""

    layers_bytes: int  # stored by the transformer layers
    logits_bytes: int | None  # the loss head, when the vocabulary size is known
    checkpointed_bytes: int  # what the layers would keep with activation checkpointing on
    tokens: int
    basis: str  # the figures used, for the reader

    @property
    def total_bytes(self) -> int:
        return self.layers_bytes + (self.logits_bytes or 0)


def activations(values: Mapping[str, Any]) -> ActivationEstimate | None:
    """The estimate, or None unless hidden size, layer count, micro-batch and sequence cap are all known.

    The sequence cap is an upper bound on the real length (padding to the longest in the batch or
    packing), so the estimate is for the longest micro-batch the configuration allows.
    """
    h, layers = values.get("hidden_size"), values.get("num_layers")
    bs, seq = values.get("per_device_train_batch_size"), values.get("max_seq_length")
    if not (isinstance(h, int) and isinstance(layers, int) and isinstance(bs, int) and isinstance(seq, int)) \
            or min(h, layers, bs, seq) <= 0:
        return None
    tokens = bs * seq
    width = 2 if values.get("mixed_precision") is False else 1  # fp32 activations take twice the bytes
    tp = values.get("tensor_parallel")
    tp = tp if isinstance(tp, int) and tp > 1 else 1  # tensor (and sequence) parallelism splits activations
    per_layer = LAYER_BYTES_PER_TOKEN_PER_HIDDEN * tokens * h * width // tp
    stored_per_layer = CHECKPOINTED_BYTES_PER_TOKEN_PER_HIDDEN * tokens * h * width // tp
    checkpointed = stored_per_layer * layers + per_layer  # every layer's input, one layer recomputed in full
    layers_bytes = checkpointed if values.get("gradient_checkpointing") is True else per_layer * layers
    vocab = values.get("vocab_size")
    logits = LOGIT_BYTES_PER_TOKEN_PER_VOCAB * tokens * vocab if isinstance(vocab, int) and vocab > 0 else None
    basis = f"{layers} layers × hidden {h} × {bs} × {seq} tokens" + (f" / TP {tp}" if tp > 1 else "")
    if vocab and logits:
        basis += f", vocab {vocab}"
    return ActivationEstimate(
        layers_bytes=layers_bytes, logits_bytes=logits, checkpointed_bytes=checkpointed,
        tokens=tokens, basis=basis,
    )
