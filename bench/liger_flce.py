"""Liger-Kernel's memory benchmark of its fused linear cross-entropy, as a verify entry point (bench/fidelity.py).

After linkedin/Liger-Kernel benchmark/scripts/benchmark_fused_linear_cross_entropy.py (commit 90fb5e4a, PR #406,
2024-11-22, whose A100-SXM4-80GB figures are in benchmark/data/all_benchmark_data.csv): both heads (torch's and
Liger's, bias-free bf16 Linear(H, V)) are built on the device, the input (BT x H, bf16) requires a gradient, and one
"full" step is a forward and backward through one provider's loss; the figure is the median peak allocated over 10
steps, so a step that starts with the input's and the head's gradients from the step before.
"""

from __future__ import annotations

from typing import Any

import torch


def make_step(params: dict[str, Any], device: torch.device):
    """One step of the benchmark for `params["provider"]` ("liger" or "huggingface") at BT, H, V."""
    from oomdoctor.verify.fusedce import fused_linear_cross_entropy

    rows, width, vocab = params["BT"], params["H"], params["V"]
    heads = [torch.nn.Linear(width, vocab, bias=False, dtype=torch.bfloat16, device=device) for _ in range(2)]
    hidden = torch.randn(rows, width, dtype=torch.bfloat16, device=device, requires_grad=True)
    target = torch.randint(vocab, (rows, 1), dtype=torch.long, device=device).squeeze(1)
    torch_head, liger_head = heads

    def step() -> None:
        if params["provider"] == "liger":  # the kernel as PR #406 left it (the chunk's gradient scaled into a copy)
            loss = fused_linear_cross_entropy(hidden, liger_head.weight, target, params.get("kernel", "0.5.0"))
        else:
            loss = torch.nn.functional.cross_entropy(torch_head(hidden), target)
        loss.backward()

    return step
