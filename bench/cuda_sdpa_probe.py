"""On a CUDA GPU: which SDPA kernel PyTorch picks for grouped and ungrouped heads in fp32 and bf16, and each one's peak.

One step (forward, then backward of the sum) at 2 x 24 query heads x 2048 tokens x 128, causal; key/value heads 8
with enable_gqa, or 24 without. Prints the backend (torch._fused_sdp_choice: 0 math, 1 flash, 2 memory-efficient,
3 cuDNN), the output's grad_fn, and the peak allocated over the inputs. The grad of a sum is an expanded tensor, which
the fused kernels copy to a contiguous one: a model's step does not. Results: bench/measured/sdpa-h200-2026-11-28.json.
"""

from __future__ import annotations

import json
from typing import Any

import torch

F = torch.nn.functional


def step(device: torch.device, dtype: torch.dtype, kv_heads: int, gqa: bool, seq: int = 2048) -> dict[str, Any]:
    """One forward and backward; the kernel chosen and the peaks over the inputs."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    q = torch.randn(2, 24, seq, 128, dtype=dtype, device=device, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, seq, 128, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    base = torch.cuda.memory_allocated()
    choice = int(torch._fused_sdp_choice(q, k, v, None, 0.0, True, scale=None, enable_gqa=gqa))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    forward = torch.cuda.max_memory_allocated() - base
    grad_fn = type(out.grad_fn).__name__
    out.sum().backward()
    torch.cuda.synchronize()
    return {"choice": choice, "grad_fn": grad_fn, "fwd_peak_over_inputs": forward,
            "peak_over_inputs": torch.cuda.max_memory_allocated() - base}


def main() -> int:
    device = torch.device("cuda", 0)
    torch.cuda.init()
    result: dict[str, Any] = {"torch": torch.__version__}
    for dtype in (torch.float32, torch.bfloat16):
        for kv_heads, gqa in ((8, True), (24, False)):
            result[f"{dtype}-kv{kv_heads}-gqa{gqa}"] = step(device, dtype, kv_heads, gqa)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
