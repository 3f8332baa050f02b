"""Test support: bytes live on the simulated device after a workload's steps, and as its last optimizer step starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Build = Callable[[Any], Callable[[], None]]


def _run_watching_steps(build: Build, steps: int, watch: Callable[[Any, Callable[[], None]], None]) -> int:
    """Run the step `build(device)` returns `steps` times on the simulated device, each optimizer step through
    `watch(tracker, step)`; the bytes live after the last step (read before the tracker closes)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu, workload
    from oomdoctor.verify.trial import patched_for_sim

    device = simgpu.setup()
    tracker = simgpu.StorageTracker()
    original = workload.Optimizer.step

    def step(self):
        watch(tracker, lambda: original(self))
    workload.Optimizer.step = step  # type: ignore[method-assign]
    try:
        with patched_for_sim(torch), FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
            run = build(device)
            for _ in range(steps):
                run()
            return tracker.live
    finally:
        workload.Optimizer.step = original  # type: ignore[method-assign]


def live_bytes(build: Build, steps: int = 2) -> tuple[int, int]:
    """(bytes live after `steps` steps, bytes live as the last optimizer step starts) for the step `build(device)`
    returns. As a step starts the weights (or this rank's shards), the gradients it reads and the optimizer's states
    are live, and no activation is left."""
    at_step: list[int] = []

    def watch(tracker: Any, step: Callable[[], None]) -> None:
        at_step.append(tracker.live)
        step()
    return _run_watching_steps(build, steps, watch), at_step[-1]


def step_bytes(build: Build, steps: int = 2) -> tuple[int, int]:
    """(bytes live as the last optimizer step starts, the most live during that step) for the step `build(device)`
    returns: what the optimizer's own temporaries add is the difference."""
    seen: list[tuple[int, int]] = []

    def watch(tracker: Any, step: Callable[[], None]) -> None:
        start = tracker.peak = tracker.live
        step()
        seen.append((start, tracker.peak))
    _run_watching_steps(build, steps, watch)
    return seen[-1]
