"""Liger-Kernel's memory benchmarks of its RMSNorm, SwiGLU and RoPE, as a verify entry point (bench/fidelity.py).

After linkedin/Liger-Kernel benchmark/scripts/benchmark_rms_norm.py, benchmark_swiglu.py and benchmark_rope.py (commit
b5672a15, PR #196, 2024-09-03, Liger 0.2.1, whose A100-SXM4-80GB figures are in benchmark/data/all_benchmark_data.csv):
one "full" step is a forward and a backward through one provider's layer, the figure the median peak allocated over
10 steps, so a step that starts with the input's gradient from the step before.
- rms_norm: a (2048, H) bf16 input and a given bf16 gradient; the norm's weight in fp32 (built without a dtype);
  Liger's norm (its 0.2 backward: a partial weight gradient per row) or Llama's own formula.
- swiglu: transformers' LlamaMLP (hidden 4096, intermediate 11008, bf16) on a (4, T, 4096) input, its forward as it
  is or as Liger's patch binds it; a fresh random gradient each step.
- rope: q (1, 32 heads, T, H / 32) and k (8 heads), each a transposed view of a (1, T, heads, head_dim) bf16 leaf,
  rotated by transformers' apply_rotary_pos_emb or Liger's, both gradients asked with given bf16 output gradients;
  cos and sin from the rotary embedding's matrix product, whose cuBLAS workspace stays allocated.
"""

from __future__ import annotations

from typing import Any

import torch


def _rms_norm(params: dict[str, Any], device: torch.device):
    from oomdoctor.verify.liger import RMSNorm

    width, eps = params["H"], 1e-6
    x = torch.randn(2048, width, dtype=torch.bfloat16, device=device, requires_grad=True)
    grad = torch.randn_like(x)
    weight = torch.ones(width, device=device, requires_grad=True)

    def llama(h: torch.Tensor) -> torch.Tensor:  # the benchmark's LlamaRMSNorm: fp32 inside, fp32 weight outside
        wide = h.to(torch.float32)
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
        return weight * wide.to(h.dtype)

    def step() -> None:
        y = RMSNorm.apply(x, weight, eps, "0.2") if params["provider"] == "liger" else llama(x)
        y.backward(grad, retain_graph=True)
    return step


def _swiglu(params: dict[str, Any], device: torch.device):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    from oomdoctor.verify.hfmodel import _outside_fake_mode
    from oomdoctor.verify.liger import swiglu_forward

    config = LlamaConfig(hidden_size=4096, intermediate_size=11008, hidden_act="silu")
    with _outside_fake_mode(), torch.device("meta"):  # built in bf16 from the start: the fp32 init is not measured
        layer = LlamaMLP(config).to(torch.bfloat16)
    layer = layer.to_empty(device=device)
    if params["provider"] == "liger":
        layer.forward = swiglu_forward.__get__(layer)
    x = torch.randn(4, params["T"], 4096, dtype=torch.bfloat16, device=device, requires_grad=True)

    def step() -> None:
        y = layer(x)
        y.backward(torch.randn_like(y), retain_graph=True)
    return step


def _rope(params: dict[str, Any], device: torch.device):
    from transformers.models.llama import modeling_llama

    from oomdoctor.verify.liger import rotary_pos_emb

    seq, width = params["T"], params["H"]
    dim = width // 32

    def heads(n: int) -> torch.Tensor:
        return torch.randn(1, seq, n, dim, dtype=torch.bfloat16, device=device, requires_grad=True).transpose(1, 2)

    # cos and sin as the benchmark's LlamaRotaryEmbedding (transformers 4.4x) made them: (1, T, head_dim) in the
    # input's dtype, from an fp32 matrix product of the inverse frequencies and the positions (cuBLAS's workspace);
    # made first, so that their temporaries stay under the step's peak (the benchmark reset the peak before a step)
    inverse = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    positions = torch.arange(seq, dtype=torch.float32, device=device)
    angles = (inverse[None, :, None] @ positions[None, None, :]).transpose(1, 2)
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    del inverse, positions, angles
    q, k = heads(32), heads(8)
    grads = torch.randn_like(q), torch.randn_like(k)
    rotate = rotary_pos_emb if params["provider"] == "liger" else modeling_llama.apply_rotary_pos_emb

    def step() -> None:
        out = rotate(q, k, cos, sin)
        torch.autograd.grad(out, (q, k), grads, allow_unused=True, retain_graph=True)
    return step


KERNELS = {"rms_norm": _rms_norm, "swiglu": _swiglu, "rope": _rope}


def make_step(params: dict[str, Any], device: torch.device):
    """One step of Liger's benchmark of `params["kernel"]` for `params["provider"]` ("liger" or "huggingface")."""
    return KERNELS[params["kernel"]](params, device)
