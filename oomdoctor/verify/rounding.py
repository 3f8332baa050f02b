"""c10's block and segment sizes (CUDACachingAllocator.cpp): shared by the allocator model and the facts rules read,
apart from the model so that `diagnose` does not import it."""

from __future__ import annotations

from oomdoctor.units import MIB

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MIB
K_SMALL_BUFFER = 2 * MIB
K_MIN_LARGE_ALLOC = 10 * MIB
K_ROUND_LARGE = 2 * MIB
K_LARGE_BUFFER = 20 * MIB


def round_size(size: int, divisions: int = 0) -> int:
    """c10 round_size: at least 512 B, multiples of 512 B, or the next power-of-two division if configured."""
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    if divisions > 1 and size > K_MIN_BLOCK * divisions:
        floor = 1 << (size.bit_length() - 1)
        if floor == size:
            return size
        step = floor // divisions
        return floor + -(-(size - floor) // step) * step
    return -(-size // K_MIN_BLOCK) * K_MIN_BLOCK


def allocation_size(size: int) -> int:
    """c10 get_allocation_size: the segment cudaMalloc'd for a rounded request."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE
