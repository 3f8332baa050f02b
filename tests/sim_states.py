"""Test support: bytes live on the simulated device after a workload's steps, and as its last optimizer step starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def live_bytes(build: Callable[[Any], Callable[[], None]], steps: int = 2) -> tuple[int, int]:
    """(bytes live after `steps` steps, bytes live as the last optimizer step starts) for the step `build(device)`
    returns. As a step starts the weights (or this rank's shards), the gradients it reads and the optimizer's states
    are live, and no activation is left."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu, workload
    from oomdoctor.verify.trial import patched_for_sim

    device = simgpu.setup()
    tracker = simgpu.StorageTracker()
    at_step: list[int] = []
    original = workload.Optimizer.step

    def step(self):
        at_step.append(tracker.live)
        original(self)
    workload.Optimizer.step = step  # type: ignore[method-assign]
    try:
        with patched_for_sim(torch), FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
            run = build(device)
            for _ in range(steps):
                run()
            return tracker.live, at_step[-1]
    finally:
        workload.Optimizer.step = original  # type: ignore[method-assign]


def step_bytes(build: Callable[[Any], Callable[[], None]], steps: int = 2) -> tuple[int, int]:
    """(bytes live as the last optimizer step starts, the most live during that step) for the step `build(device)`
    returns: what the optimizer's own temporaries add is the difference."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu, workload
    from oomdoctor.verify.trial import patched_for_sim

    device = simgpu.setup()
    tracker = simgpu.StorageTracker()
    seen: list[tuple[int, int]] = []
    original = workload.Optimizer.step

    def step(self):
        start = tracker.peak = tracker.live
        original(self)
        seen.append((start, tracker.peak))
    workload.Optimizer.step = step  # type: ignore[method-assign]
    try:
        with patched_for_sim(torch), FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
            run = build(device)
            for _ in range(steps):
                run()
            return seen[-1]
    finally:
        workload.Optimizer.step = original  # type: ignore[method-assign]
