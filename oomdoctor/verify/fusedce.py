"""Fused linear cross-entropy as Liger-Kernel's memory sees it: the loss and its gradients in chunks, no full logits.

After `liger_kernel/ops/fused_linear_cross_entropy.py` (linkedin/Liger-Kernel): the forward takes the hidden states
(BT x H) and the head's weight (V x H) and never materialises the BT x V logits. It allocates the input's gradient
(zeros_like the hidden states) and, for a trainable head, the weight's (zeros_like the weight) up front, plus an fp32
loss per row; then, chunk by chunk, one chunk's logits (`chunk_rows` rows, in the matmul's dtype) whose gradient
the Triton kernel writes in place, projected back into both gradients. Backward hands the two stored gradients on
(scaled in place when the loss was scaled). Older kernels held more per chunk (`KERNELS`): up to 0.4 an fp32 copy for
the Triton kernel and back (6 bytes per bf16 logit at once); from 0.5.0 (PR #406) to 0.5.2 the chunk and its
gradient scaled by `alpha` into a copy (4 bytes); since 0.5.3 (PR #420) the one chunk (2 bytes).
Imports torch; only trial subprocesses (and the fidelity bench) import this module.
"""

from __future__ import annotations

from typing import Any

import torch

# Liger's kernel eras: (the chunk is upcast to fp32 and back, its gradient is scaled into a copy)
KERNELS = {"current": (False, False), "0.5.0": (False, True), "0.4": (True, True)}


def chunk_rows(rows: int, hidden: int, vocab: int) -> int:
    """Liger's chunk: the rows whose logits take about as much memory as the whole input, rounded up to a power of
    two (`inc_factor = cdiv(V, H)`, `chunk_size = next_power_of_2(cdiv(BT, inc_factor))`), at most all the rows."""
    factor = -(-vocab // hidden)
    want = -(-rows // factor)
    return min(1 << max(0, (want - 1).bit_length()), rows)


class FusedLinearCrossEntropy(torch.autograd.Function):
    """The loss of `hidden @ weight.T` against `targets` (mean over the rows not ignored), its gradients computed in
    forward as Liger does, chunk by chunk."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                kernel: str) -> torch.Tensor:
        rows, width = hidden.shape
        step = chunk_rows(rows, width, weight.shape[0])
        grad_input = torch.zeros_like(hidden)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss_rows = torch.zeros(rows, dtype=torch.float32, device=hidden.device)
        upcast, copied = KERNELS[kernel]
        for start in range(0, rows, step):
            part, wanted = hidden[start:start + step], targets[start:start + step]
            logits = part @ weight.t()  # the chunk's logits in the matmul's dtype (autocast's, or the weights')
            if upcast:  # up to 0.4: the kernel ran on an fp32 copy, then `.to(dtype)` back
                wide = logits.float()
                del logits
                logits = wide.to(torch.get_autocast_dtype(part.device.type)
                                 if torch.is_autocast_enabled(part.device.type) else part.dtype)
                del wide
            # up to 0.5.2: `grad_logits_chunk = logits_chunk * alpha`, beside the chunk kept for grad_weight's addmm
            scaled = logits * 1.0 if copied else logits
            # the kernel: each row's loss into loss_rows, the logits' gradient written over the logits in place
            loss_rows[start:start + step] = logits.gather(1, wanted.unsqueeze(1)).squeeze(1).float()
            grad_input[start:start + step] = scaled @ weight
            if grad_weight is not None:
                if grad_weight.dtype == logits.dtype == part.dtype:
                    torch.addmm(grad_weight, logits.t(), part, out=grad_weight)
                else:  # an fp32 head under autocast: Liger's addmm accumulates in fp32 (out_dtype); a chunk's copy
                    grad_weight.addmm_(logits.t().to(grad_weight.dtype), part.to(grad_weight.dtype))
            del logits, scaled, part
        ctx.save_for_backward(grad_input, grad_weight)
        return loss_rows.sum() / max(rows, 1)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
        grad_input, grad_weight = ctx.saved_tensors
        grad_input.mul_(grad_output)  # Liger's element_mul_kernel: in place
        if grad_weight is not None:
            grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None, None


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                               kernel: str = "current") -> torch.Tensor:
    """Liger's fused linear cross-entropy (of the `KERNELS` era) on hidden states of any leading shape."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    return FusedLinearCrossEntropy.apply(flat, weight, targets.reshape(-1), kernel)
