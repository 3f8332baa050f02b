"""A worked example of the verify entry-point protocol: an MLP regression step with AdamW.

verify calls `make_step(params, device)` once, inside the replay, and then calls the returned function
`steps` times. `params` is the config's `workload.params` after the fix under test changed it (for example
halve-batch turns {"batch": 64, "grad_accum": 1} into {"batch": 32, "grad_accum": 2}), plus "phase".
Create every tensor on `device` (or move it there): on the simulator it is the fake `simgpu` device, on a
GPU it is `cuda:0`. Do not call .item(), .tolist() or print tensor values: on the simulator tensors have no data.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def make_step(params: dict, device: torch.device):
    width, depth = params["width"], params["depth"]
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1)).to(device)
    # foreach=True is what AdamW picks on CUDA; say so explicitly so the simulator does the same
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if params.get("autocast")
                else contextlib.nullcontext())

    def step() -> None:
        for _ in range(params.get("grad_accum", 1)):
            x = torch.randn(params["batch"], width, device=device)
            y = torch.randn(params["batch"], 1, device=device)
            with autocast:
                loss = nn.functional.mse_loss(model(x), y) / params.get("grad_accum", 1)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step
