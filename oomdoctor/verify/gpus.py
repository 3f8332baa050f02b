"""What a replay needs to know of a GPU named as nvidia-smi or a log prints it: its multiprocessors, threads, arch."""

from __future__ import annotations

from typing import NamedTuple

import regex


class GPU(NamedTuple):
    """Figures cudaGetDeviceProperties reports, and whether the card is Hopper (sm90)."""

    multiprocessors: int
    threads_per_multiprocessor: int
    sm90: bool = False


# By the name nvidia-smi or a log prints ("NVIDIA H100 80GB HBM3", "Tesla T4"); first match wins, so the longer names
# come first. A model number is whole: "H1000" is not an H100, "A100" is not an A10 ("RTX4090" is a 4090).
KNOWN_GPUS: tuple[tuple[str, GPU], ...] = (
    (r"H100[ -]?(?:PCIe|NVL)", GPU(114, 2048, sm90=True)),
    (r"G?H(?:100|200|800|20)", GPU(132, 2048, sm90=True)),
    (r"A100|A800", GPU(108, 2048)),
    (r"A30", GPU(56, 2048)),
    (r"A10G", GPU(80, 1536)),
    (r"A10", GPU(72, 1536)),
    (r"L40S|L40", GPU(142, 1536)),
    (r"L4", GPU(58, 1536)),
    (r"A6000", GPU(84, 1536)),
    (r"A40", GPU(84, 1536)),
    (r"4090", GPU(128, 1536)),
    (r"3090", GPU(82, 1536)),
    (r"V100", GPU(80, 2048)),
    (r"T4", GPU(40, 1024)),
)
_KNOWN = [(regex.compile(rf"(?i)(?<![0-9])(?:{pattern})(?![0-9])"), gpu) for pattern, gpu in KNOWN_GPUS]
# Hopper named by its architecture rather than a card (memory.gpu: hopper, sm90, sm_90)
_HOPPER = regex.compile(r"(?i)hopper|sm_?90(?![0-9])")
A100 = GPU(108, 2048)  # the card most published training figures come from: the default for a name we do not know


def known_gpu(name: str | None) -> GPU | None:
    """The GPU named `name`, or None for no name or one not in KNOWN_GPUS."""
    if name:
        for pattern, gpu in _KNOWN:
            if pattern.search(name):
                return gpu
    return None


def is_sm90(name: str | None) -> bool:
    """True for a Hopper GPU (H100, H200, H800, H20, GH200) or a name that says hopper or sm90."""
    gpu = known_gpu(name)
    return bool(gpu.sm90 if gpu else name and _HOPPER.search(name))
