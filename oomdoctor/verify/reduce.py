"""The global scratch CUDA's reduction kernel takes from the caching allocator (ATen's Reduce.cuh, setReduceConfig).

A sum or mean over the *outer* dimensions of a tensor (a weight's gradient summed over the rows of a batch, the bias
gradient of a broadcast add) can split each output's rows across several thread blocks; the blocks then combine
their partial sums through a staging buffer allocated just before the kernel and freed after it, with one int per
output block of semaphores beside it. The buffer holds, per output, one accumulator per block it was split into, for
each of the block's lanes and vector slots: sizeof(acc) x outputs x ctas_per_output x block.x x output_vec_size, which
for a (2048, H) fp32 sum over its rows on an A100 is 16 MiB at H = 1024 and 108-112 MiB from H = 8192 on. How many
blocks an output gets depends on the GPU's multiprocessors and threads per multiprocessor, so the figures below are
per GPU. A reduction over the innermost dimensions stages one value per output and block (a few KiB at most) and is
not modelled. Pure arithmetic: no torch import.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomdoctor.verify.gpus import A100, known_gpu

MAX_NUM_THREADS = 512  # mnt_wrapper<T>::MAX_NUM_THREADS for every real dtype
WARP_SIZE = 32
MIN_VALUES_PER_THREAD = 16
MAX_VALUES_PER_THREAD = 256
OUTPUT_VEC_SIZE = 4  # get_output_vec_size_cuda starts at 4 and halves until the sizes and strides divide

DEFAULT_FIGURES = (A100.multiprocessors, A100.threads_per_multiprocessor)


def gpu_figures(gpu: str | None) -> tuple[int, int]:
    """(multiprocessors, max threads per multiprocessor) of the GPU named `gpu` (verify/gpus.py); an A100's when
    unknown."""
    found = known_gpu(gpu) or A100
    return found.multiprocessors, found.threads_per_multiprocessor


def _last_pow2(n: int) -> int:
    """floor(log2) as a power of two, at least 1 (Reduce.cuh's last_pow2)."""
    return max(1, 1 << (max(1, n).bit_length() - 1))


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _geometry(sizes: Sequence[int], strides: Sequence[int], reduced: set[int]) -> tuple[list[int], list[int], int]:
    """TensorIterator's view of a reduction's input: reduced dimensions first, each group fastest first, adjacent
    dimensions of a group merged where the strides allow; (sizes, strides, how many of them are reduced)."""
    groups: list[list[list[int]]] = []
    for group in ([d for d in range(len(sizes)) if d in reduced], [d for d in range(len(sizes)) if d not in reduced]):
        merged: list[list[int]] = []  # [size, stride] of each dimension kept
        for d in sorted((d for d in group if sizes[d] != 1), key=lambda d: strides[d]):
            if merged and merged[-1][0] * merged[-1][1] == strides[d]:
                merged[-1][0] *= sizes[d]
            else:
                merged.append([sizes[d], strides[d]])
        groups.append(merged)
    both = groups[0] + groups[1]
    return [size for size, _ in both], [stride for _, stride in both], len(groups[0])


def global_scratch(sizes: Sequence[int], strides: Sequence[int], reduced: set[int], acc_bytes: int,
                   figures: tuple[int, int]) -> list[int]:
    """Bytes of the staging buffer and the semaphores a CUDA sum/mean over `reduced` of a tensor with these sizes and
    strides (in elements) allocates, in that order; [] when it needs none or reduces its innermost dimensions."""
    shape, stride, n_reduced = _geometry(sizes, strides, reduced)
    if not n_reduced or n_reduced == len(shape) or stride[0] < stride[n_reduced]:
        return []  # nothing reduced, everything reduced, or the innermost dimension is reduced
    num_outputs = 1
    for s in shape[n_reduced:]:
        num_outputs *= s
    inputs_per_output = 1
    for s in shape[:n_reduced]:
        inputs_per_output *= s
    vec, dim0 = 1, num_outputs
    if stride[n_reduced] == 1:  # "vectorize along output": the kept dimension is the contiguous one
        vec = OUTPUT_VEC_SIZE
        while vec > 1 and (shape[n_reduced] % vec or any(st % vec for i, st in enumerate(stride) if i != n_reduced)):
            vec //= 2
        dim0 //= vec
    max_threads = MAX_NUM_THREADS // vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(inputs_per_output) if inputs_per_output < max_threads else max_threads
    width = min(dim0_pow2, WARP_SIZE)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    step_output, step_input = width, 1  # the outputs split across a warp's lanes
    if _div_up(inputs_per_output, step_input) >= min(height * 16, MAX_VALUES_PER_THREAD):
        step_input *= height  # the inputs split across the block's warps
    else:
        return []  # each warp takes outputs of its own: no block shares an output
    values_per_thread = _div_up(inputs_per_output, step_input)
    multiprocessors, threads_per_mp = figures
    target_grid = multiprocessors * (threads_per_mp // (width * height))
    grid_x = _div_up(num_outputs // vec, step_output)
    if values_per_thread < MAX_VALUES_PER_THREAD or grid_x > target_grid:
        return []
    ctas = max(min(_div_up(target_grid, grid_x), _div_up(values_per_thread, MIN_VALUES_PER_THREAD)),
               _div_up(values_per_thread, MAX_VALUES_PER_THREAD))
    if ctas <= 1:
        return []
    return [acc_bytes * num_outputs * ctas * width * vec, 4 * grid_x]
