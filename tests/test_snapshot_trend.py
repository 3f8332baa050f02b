"""The live-memory trend of a recorded trace: floors that rise step after step, and what is not a trend."""

from __future__ import annotations

from oomdoctor.parse.snapshot import TREND_WINDOWS, live_floors

MIB = 2**20


def _steps(n_steps: int, kept_per_step: int, activations: int = 400 * MIB, tensors: int = 20) -> list[dict]:
    """n training steps: each allocates activations and frees them, and keeps `kept_per_step` bytes alive."""
    trace, addr = [], 0
    for _ in range(n_steps):
        live = []
        for _ in range(tensors):
            addr += 1
            trace.append({"action": "alloc", "addr": addr, "size": activations // tensors})
            live.append(addr)
        for a in live:
            trace.append({"action": "free_requested", "addr": a, "size": activations // tensors})
            trace.append({"action": "free_completed", "addr": a, "size": activations // tensors})
        if kept_per_step:
            addr += 1
            trace.append({"action": "alloc", "addr": addr, "size": kept_per_step})  # a leak: never freed
    return trace


def test_a_leak_across_many_steps_gives_rising_floors():
    trace = _steps(40, kept_per_step=30 * MIB)
    floors = live_floors(trace, allocated_at_dump=2048 * MIB + 40 * 30 * MIB)
    assert len(floors) == TREND_WINDOWS and all(b >= a for a, b in zip(floors, floors[1:]))
    assert floors[-1] - floors[0] >= 6 * 30 * MIB  # about 35 of the 40 steps' leaks between the first and last part


def test_steady_steps_give_flat_floors():
    floors = live_floors(_steps(40, kept_per_step=0), allocated_at_dump=2048 * MIB)
    assert floors and max(floors) - min(floors) == 0


def test_one_long_forward_pass_is_not_a_trend():
    trace = [{"action": "alloc", "addr": i, "size": 4 * MIB} for i in range(1000)]  # activations pile up once
    assert live_floors(trace, allocated_at_dump=4000 * MIB) == ()


def test_a_short_trace_says_nothing():
    assert live_floors(_steps(2, kept_per_step=30 * MIB), allocated_at_dump=2048 * MIB) == ()
