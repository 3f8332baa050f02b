"""CUDA's reduction scratch (verify/reduce.py): Reduce.cuh's arithmetic, and the simulated device allocating it."""

from __future__ import annotations

import pytest

from oomdoctor.units import MIB
from oomdoctor.verify.reduce import DEFAULT_FIGURES, global_scratch, gpu_figures

A100 = gpu_figures("NVIDIA A100-SXM4-80GB")


# Liger-Kernel 0.2.1's RMSNorm benchmark (A100-SXM4-80GB, 2048 bf16 rows; all_benchmark_data.csv at b5672a15) measured
# 36.02, 72.04, 144.07, 268.13, 432.26 and 752.51 MiB: five input-sized bf16 units (input, gradient = the input's
# .grad, output, the fp32 per-row weight gradient) plus the staging buffer of summing that (2048, H) fp32 gradient
# over its rows. What is left beyond both is a few H-sized fp32 vectors (the weight, its gradient, the sum's output)
# and the per-row fp32 figure.
@pytest.mark.parametrize(("width", "measured_mib"), [(1024, 36.024), (2048, 72.040), (4096, 144.071),
                                                     (8192, 268.133), (16384, 432.258), (32768, 752.509)])
def test_an_fp32_sum_over_rows_stages_what_liger_s_benchmark_measured_beyond_its_tensors(width, measured_mib):
    five_units_mib = 5 * 2048 * width * 2 / MIB
    buffer, semaphores = global_scratch((2048, width), (width, 1), {0}, 4, A100)
    vectors_mib = (4 * width * 4 + 2 * 2048 * 4) / MIB
    assert 0 <= measured_mib - five_units_mib - buffer / MIB <= vectors_mib
    assert semaphores == 4 * width // 4 // 32  # one int per block of 32 lanes x 4 outputs


def test_the_buffer_follows_the_gpu_s_multiprocessors_once_they_limit_the_split():
    # at H = 16384 the 128 output blocks leave an A100 about 14 blocks per output, an H100 about 17
    a100 = global_scratch((2048, 16384), (16384, 1), {0}, 4, A100)[0]
    h100 = global_scratch((2048, 16384), (16384, 1), {0}, 4, gpu_figures("H100 80GB HBM3"))[0]
    assert h100 > a100 == 4 * 16384 * 14 * 32 * 4


def test_a_reduction_the_layout_does_not_split_across_blocks_needs_no_scratch():
    assert global_scratch((2048, 1024), (1024, 1), {1}, 4, A100) == []  # over the innermost (contiguous) dimension
    assert global_scratch((132, 4096), (4096, 1), {0}, 4, A100) == []  # too few rows to split: Liger's current sum
    assert global_scratch((2048, 1024), (1024, 1), set(), 4, A100) == []


def test_dimensions_are_merged_and_ordered_as_tensor_iterator_does():
    rows = global_scratch((2048, 4096), (4096, 1), {0}, 4, A100)
    assert global_scratch((4096, 2048), (1, 4096), {1}, 4, A100) == rows  # the same memory, transposed
    assert global_scratch((4, 512, 4096), (512 * 4096, 4096, 1), {0, 1}, 4, A100) == rows  # batch x seq merged
    assert global_scratch((2048, 4096), (4096, 1), {0}, 8, A100)[0] == 2 * rows[0]  # a double accumulator


@pytest.mark.parametrize(("name", "figures"), [("NVIDIA A100-SXM4-40GB", (108, 2048)), ("NVIDIA H100 PCIe", (114, 2048)),
                                               ("NVIDIA H200", (132, 2048)), ("NVIDIA GeForce RTX 4090", (128, 1536)),
                                               ("Tesla T4", (40, 1024)), ("NVIDIA L40S", (142, 1536)),
                                               ("NVIDIA L4", (58, 1536)), (None, DEFAULT_FIGURES),
                                               ("Some Future GPU", DEFAULT_FIGURES),
                                               # a model number is whole: no A10 in an A100, no H100 in an H1000
                                               ("NVIDIA A10G", (80, 1536)), ("NVIDIA A10", (72, 1536)),
                                               ("NVIDIA H1000", DEFAULT_FIGURES), ("rtx4090", (128, 1536))])
def test_gpu_figures_by_the_name_a_log_prints(name, figures):
    assert gpu_figures(name) == figures


def test_the_simulated_device_allocates_the_scratch_around_the_sum_only():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu

    device = simgpu.setup()
    peaks = {}
    for figures in (None, A100):
        tracker = simgpu.StorageTracker(gpu_figures=figures)
        with FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
            x = torch.empty(2048, 1024)
            base = tracker.live
            x.sum(0)
            x.sum(1)
            peaks[figures] = (tracker.peak - base, tracker.live - base)
    out = 1024 * 4  # the sum's own output, rounded to the 512-byte block it already is
    assert peaks[None] == (2048 * 4, 0)  # the larger output (2048 row sums); both freed
    assert peaks[A100] == (out + 16 * MIB + 512, 0)
