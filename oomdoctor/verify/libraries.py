"""Workspaces the CUDA libraries take from PyTorch's caching allocator (sizes as ATen's CublasHandlePool.cpp sets them).

cuBLAS gets one workspace per (handle, stream) the first time a thread runs a cuBLAS call, and keeps it for the life
of the process; handles are per thread, so the forward (the Python thread) and the backward (autograd's device
thread) hold one each. A `bias + x @ W.T` (addmm with a 1-D bias) goes through cuBLASLt, whose workspace is a second
allocation of its own. Both count as allocated memory in PyTorch's figures.
"""

from __future__ import annotations

import regex

from oomdoctor.units import KIB, MIB
from oomdoctor.verify.gpus import is_sm90

# getChosenWorkspaceSize(): ":4096:2:16:8" unless CUBLAS_WORKSPACE_CONFIG says otherwise, 32 MiB on sm90 (Hopper)
CUBLAS_WORKSPACE_BYTES = 4096 * KIB * 2 + 16 * KIB * 8
CUBLAS_WORKSPACE_SM90_BYTES = 4096 * KIB * 8
# getCUDABlasLtWorkspaceSize(): CUBLASLT_WORKSPACE_SIZE, 1024 KiB by default, at most the cuBLAS workspace
CUBLASLT_WORKSPACE_BYTES = 1 * MIB

_CONFIG = regex.compile(r":([0-9]+):([0-9]+)")


class WorkspaceConfigError(ValueError):
    """A CUBLAS_WORKSPACE_CONFIG value that names no :SIZE:COUNT pair."""


def cublas_workspace_bytes(gpu: str | None = None, config: str | None = None) -> int:
    """One cuBLAS workspace: CUBLAS_WORKSPACE_CONFIG's sum of SIZE KiB x COUNT when given, else the default for
    this GPU (32 MiB on Hopper, 8 MiB + 128 KiB otherwise)."""
    if config:
        pairs = _CONFIG.findall(config)
        if not pairs:
            raise WorkspaceConfigError(f"CUBLAS_WORKSPACE_CONFIG {config!r} has no :SIZE:COUNT pair (e.g. :4096:8)")
        return sum(int(size) * KIB * int(count) for size, count in pairs)
    return CUBLAS_WORKSPACE_SM90_BYTES if is_sm90(gpu) else CUBLAS_WORKSPACE_BYTES


def workspaces(gpu: str | None = None, config: str | None = None) -> tuple[int, int]:
    """(cuBLAS, cuBLASLt) workspace bytes each thread that runs matrix products allocates once."""
    cublas = cublas_workspace_bytes(gpu, config)
    return cublas, min(CUBLASLT_WORKSPACE_BYTES, cublas)
