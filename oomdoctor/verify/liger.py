"""Liger-Kernel's RMSNorm, SwiGLU and RoPE as memory sees them, and its patch of a transformers model's modules.

Read in linkedin/Liger-Kernel at commit ead96b61 (2026-08-21): `src/liger_kernel/ops/rms_norm.py`, `ops/swiglu.py`,
`ops/rope.py`, and `transformers/monkey_patch.py` (`apply_liger_kernel_to_llama`, `_mistral`, `_qwen2`); the kernels
its published benchmark ran (0.2.1) at commit b5672a15. What each autograd Function allocates and keeps:
- RMSNorm: the output (the input's dtype) and one fp32 reciprocal RMS per row in forward; it keeps the input itself,
  the weight and that per-row figure, never an fp32 copy of the input. Backward writes the input's gradient over the
  incoming gradient (in place, Llama's, Mistral's and Qwen2's patch) and sums the weight's gradient from fp32 partial
  rows, one per streaming multiprocessor (since 0.4.0, PR #255), or one per input row in the weight's dtype (`KERNELS`
  "0.2", the benchmark's), then casts the sum to the weight's dtype.
- SwiGLU (LigerSiLUMulFunction): the product silu(gate) * up in forward, keeping gate and up only (silu is recomputed
  in backward, so no activation or intermediate is kept); backward writes both gradients over gate and up in place.
- RoPE: q and k rotated in place in their projections' storage (made contiguous as (batch, seq, heads, head_dim)
  first, a no-op for a projection's view), cos and sin kept; backward rotates the incoming gradients in place.
The values are not Liger's: the Functions allocate what its kernels allocate (same shapes, dtypes, lifetimes, in-place
writes) with plain torch operations, and scale where the kernels rotate or differentiate. Imports torch; only trial
subprocesses (and the fidelity bench) import this module.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import torch

# RMSNorm's backward eras: whether the weight's gradient is summed from one partial row per input row (up to 0.3)
KERNELS = {"current": False, "0.2": True}
SM_COUNT = 132  # an H100's or H200's streaming multiprocessors, for a device that does not say (A100: 108)


def _multiprocessors(device: torch.device) -> int:
    """The device's streaming multiprocessors, as Liger's backward asks CUDA for them."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return SM_COUNT


class RMSNorm(torch.autograd.Function):
    """Liger's RMSNorm with Llama's casting (the reciprocal RMS in fp32), gradient written in place."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, kernel: str) -> torch.Tensor:
        x = x.contiguous()
        rows = x.view(-1, x.shape[-1])
        rstd = torch.linalg.vector_norm(rows, dim=-1, dtype=torch.float32)  # one fp32 figure per row
        rstd.square_().div_(rows.shape[-1]).add_(eps).rsqrt_()
        out = rows.clone()  # the output, in the input's dtype
        out.mul_(rstd.unsqueeze(-1)).mul_(weight)
        ctx.kernel = kernel
        ctx.save_for_backward(x, weight, rstd)
        return out.view(x.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        _, weight, rstd = ctx.saved_tensors  # the input is kept for the kernel's arithmetic, not replayed
        grad = grad.contiguous()
        rows = grad.view(-1, grad.shape[-1])
        if KERNELS[ctx.kernel]:  # up to 0.3: a partial row per input row, in the weight's dtype
            partial = torch.empty_like(rows, dtype=weight.dtype)
        else:
            partial = torch.empty(_multiprocessors(grad.device), rows.shape[-1], dtype=torch.float32,
                                  device=grad.device)
        rows.mul_(rstd.unsqueeze(-1))  # the input's gradient, over the incoming one
        grad_weight = partial.sum(dim=0).to(weight.dtype)
        # a view, as Liger's `dX = dY.view(*shape)`: autograd then keeps it as the input's .grad without copying
        return rows.view(grad.shape), grad_weight, None, None


class SiLUMul(torch.autograd.Function):
    """Liger's SwiGLU product silu(gate) * up: gate and up kept, silu recomputed, gradients written over them."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate, up = gate.contiguous(), up.contiguous()
        out = torch.nn.functional.silu(gate)
        out.mul_(up)
        ctx.save_for_backward(gate, up)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        gate, up = ctx.saved_tensors
        grad = grad.contiguous()
        gate.mul_(grad)  # the kernel stores d(gate) over gate and d(up) over up
        up.mul_(grad)
        return gate, up


class Rope(torch.autograd.Function):
    """Liger's rotary embedding: q and k rotated in their own storage, the gradients likewise in backward."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = cos.contiguous(), sin.contiguous()
        ctx.save_for_backward(cos, sin)
        return _rotated(q, cos), _rotated(k, cos)

    @staticmethod
    def backward(ctx: Any, grad_q: torch.Tensor, grad_k: torch.Tensor) -> tuple[Any, ...]:
        cos, _ = ctx.saved_tensors
        return _rotated(grad_q, cos), _rotated(grad_k, cos), None, None


def _rotated(heads: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """(batch, heads, seq, head_dim) rotated in place in its (batch, seq, heads, head_dim) layout."""
    rows = heads.transpose(1, 2).contiguous()
    rows.mul_(cos.unsqueeze(2))
    return rows.transpose(1, 2)


def rms_norm_forward(self: Any, hidden: torch.Tensor) -> torch.Tensor:
    """A transformers RMSNorm module's forward, patched."""
    eps = getattr(self, "variance_epsilon", None) or getattr(self, "eps", 1e-6)
    return RMSNorm.apply(hidden, self.weight, eps, "current")


def swiglu_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """A Llama-style MLP's forward (LigerSwiGLUMLP's): down(silu(gate(x)) * up(x))."""
    return self.down_proj(SiLUMul.apply(self.gate_proj(x), self.up_proj(x)))


def rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb, patched (Llama's cos/sin of (batch, seq, head_dim))."""
    return Rope.apply(q, k, cos, sin)


def patch(model: Any) -> None:
    """Bind Liger's RMSNorm and SwiGLU forwards to a built model's modules, as its instance patch does: the final
    norm, and each decoder layer's two norms and MLP (peft's wrapper looked through)."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = getattr(lm, lm.base_model_prefix, lm)
    norms = [decoder.norm, *(n for layer in decoder.layers for n in (layer.input_layernorm,
                                                                        layer.post_attention_layernorm))]
    for norm in norms:
        norm.forward = rms_norm_forward.__get__(norm)
    for layer in decoder.layers:
        layer.mlp.forward = swiglu_forward.__get__(layer.mlp)


@contextlib.contextmanager
def rope_patched(model_type: str) -> Iterator[None]:
    """transformers' apply_rotary_pos_emb of the architecture's module (one of architectures.LIGER_PATCHED) replaced by
    Liger's while the step runs."""
    module: Any = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    own = module.apply_rotary_pos_emb
    module.apply_rotary_pos_emb = rotary_pos_emb
    try:
        yield
    finally:
        module.apply_rotary_pos_emb = own
