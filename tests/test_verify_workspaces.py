"""Library scratch on the simulated device: FlashAttention's backward buffers and cuDNN's convolution workspace."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _traced(run, **tracker_args):
    """The storage trace of `run(device)` on the simulated device."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu

    device = simgpu.setup()
    tracker = simgpu.StorageTracker(**tracker_args)
    with FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
        run(device)
    return tracker.trace


def _scratch(trace, sizes: list[int]) -> bool:
    """Whether the trace allocates blocks of `sizes`, in order, and frees them right after, before anything else: an
    op's scratch around its kernel."""
    n = len(sizes)
    for i in range(len(trace) - 2 * n + 1):
        made, gone = trace[i : i + n], trace[i + n : i + 2 * n]
        if [e[0] for e in made] == ["a"] * n and [e[0] for e in gone] == ["f"] * n \
                and [e[2] for e in made] == sizes and [e[1] for e in made] == [e[1] for e in gone]:
            return True
    return False


def test_flash_attention_backward_takes_softmax_d_and_dq_accum_in_fp32():
    # flash_api.cpp mha_bwd: softmax_d (b, h, s rounded to 128) and dq_accum (b, s rounded, h, d rounded to 32), fp32
    b, h, s, d = 2, 3, 100, 80

    def run(device):
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    trace = _traced(run)
    assert _scratch(trace, [b * h * 128 * 4, b * 128 * h * 96 * 4])


def test_flash_attention_forward_keeps_its_logsumexp_for_backward():
    # the forward's logsumexp (b, h, s) fp32 is an output autograd saves: allocated in forward, alive until backward
    b, h, s, d = 2, 3, 1000, 64
    kept = []

    def run(device):
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        kept.append(out.grad_fn is not None)
        out.sum().backward()

    from oomdoctor.verify.simgpu import round_block

    trace = _traced(run)
    lse = round_block(b * h * s * 4)
    assert kept == [True] and any(kind == "a" and n == lse for kind, _, n in trace)
