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


def test_flash_attention_takes_grouped_key_value_heads_as_they_are():
    # sdp_utils.cpp: FlashAttention supports grouped-query attention, so SDPA(enable_gqa=True) hands it the 2 key/value
    # heads as they are (nothing repeated to 6), and mha_bwd adds dk_expanded/dv_expanded (b, s, h, d) in the inputs'
    # dtype to its scratch, which it sums into dk/dv
    b, h, kv, s, d = 2, 6, 2, 128, 64
    shapes = []

    def run(device):
        q = torch.randn(b, h, s, d, dtype=torch.bfloat16, device=device, requires_grad=True)
        k, v = (torch.randn(b, kv, s, d, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(2))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        shapes.append(type(out.grad_fn).__name__)
        out.sum().backward()
        shapes.append(tuple(k.grad.shape))

    trace = _traced(run)
    assert shapes == ["ScaledDotProductFlashAttentionBackward0", (b, kv, s, d)]
    assert _scratch(trace, [b * h * s * 4, b * s * h * d * 4, b * s * h * d * 2, b * s * h * d * 2])


def test_grouped_heads_outside_flash_attention_take_the_math_kernel_and_its_scores():
    # sdp_utils.cpp: the memory-efficient kernel takes no grouped-query attention, so fp32 grouped heads run the math
    # kernel, which materialises the (b, h, s, s) scores (an H200: 3.49 GB against 0.30 GB ungrouped, 2 x 2048 tokens)
    b, h, kv, s, d = 1, 4, 2, 256, 32
    kinds = []

    def run(device, heads):
        q = torch.randn(b, h, s, d, device=device, requires_grad=True)
        k, v = (torch.randn(b, heads, s, d, device=device, requires_grad=True) for _ in range(2))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        kinds.append(type(out.grad_fn).__name__)
        out.sum().backward()

    scores = b * h * s * s * 4
    grouped = _traced(lambda device: run(device, kv))
    ungrouped = _traced(lambda device: run(device, h))
    assert kinds == ["UnsafeViewBackward0", "ScaledDotProductEfficientAttentionBackward0"]
    assert any(kind == "a" and n == scores for kind, _, n in grouped)
    assert not any(kind == "a" and n >= scores for kind, _, n in ungrouped)


def test_the_flash_scratch_of_a_grouped_llama_layer_is_what_an_h200_requested():
    # Llama-3.2-3B at 2 x 4096 tokens on an H200 (torch 2.11): one scratch request of 202,113,280 bytes per layer's
    # attention backward, the four buffers' 202,113,024 and 256 bytes of alignment (bench/measured/)
    from oomdoctor.verify.simgpu import flash_backward_scratch

    q = torch.empty(2, 24, 4096, 128, dtype=torch.bfloat16, device="meta")
    k = torch.empty(2, 8, 4096, 128, dtype=torch.bfloat16, device="meta")
    assert sum(flash_backward_scratch((None, q, k))) == 202_113_280 - 256


def _model_grad(out):
    """The gradient a model's step hands SDPA's backward: (batch, heads, queries, dim) over a (batch, queries, heads,
    dim) tensor (the next op transposed the output back), which the kernels take without a copy."""
    b, h, s, d = out.shape
    return torch.ones(b, s, h, d, dtype=out.dtype, device=out.device).transpose(1, 2)


def test_efficient_attention_backward_takes_delta_and_the_fp32_dq_accumulator():
    # attention_backward.cu _efficient_attention_backward, half inputs: delta (b, h, m) fp32, then the workspace, whose
    # dq accumulator is fp32 (kNeedsAccumGradQ): queries rounded to the 128-row block of head dims 65-128, head dim to
    # 64. A mask keeps bf16 off FlashAttention.
    b, h, s, d = 2, 3, 100, 80

    def run(device):
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
        mask = torch.ones(s, s, dtype=torch.bool, device=device).tril()
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert type(out.grad_fn).__name__ == "ScaledDotProductEfficientAttentionBackward0"
        out.backward(_model_grad(out))

    from oomdoctor.verify.simgpu import round_block

    assert _scratch(_traced(run), [round_block(b * h * s * 4), b * h * 128 * 128 * 4])


def test_efficient_attention_backward_in_fp32_computes_delta_outside_the_kernel():
    # kKernelComputesDelta holds for half only: in fp32, (grad_out * out).sum(-1).transpose(-2, -1).contiguous(), whose
    # product is the output's size; the kernel accumulates in fp32 already, so there is no workspace
    b, h, s, d = 2, 3, 100, 64

    def run(device):
        q, k, v = (torch.randn(b, h, s, d, device=device, requires_grad=True) for _ in range(3))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(_model_grad(out))

    from oomdoctor.verify.simgpu import round_block

    rows = round_block(b * h * s * 4)
    assert _scratch(_traced(run), [b * h * s * d * 4, rows, rows])


def test_efficient_attention_backward_in_fp32_is_what_an_h200_measured():
    # bench/measured/sdpa-h200-2026-11-28.json (torch 2.11): fp32, 2 x 24 heads x 2048 x 128, causal, the backward of a
    # sum (an expanded gradient, which the kernel copies to a contiguous one): 303,170,560 bytes over the inputs
    from oomdoctor.verify import simgpu

    with simgpu.simulate("40GiB") as gpu:
        assert simgpu.ACTIVE is not None
        allocator = simgpu.ACTIVE.allocator
        q, k, v = (torch.randn(2, 24, 2048, 128, device=gpu, requires_grad=True) for _ in range(3))
        base = allocator.allocated
        allocator.peak_allocated = base
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        assert abs((allocator.peak_allocated - base) - 303_170_560) <= 4096


def test_grouped_heads_math_forward_is_what_an_h200_measured():
    # the same file: fp32, 24 query and 8 key/value heads (enable_gqa: the math kernel), forward 2,063,696,384 bytes over
    # the inputs, with the H200's 32 MiB cuBLAS workspace and _safe_softmax's isneginf() bool the scores' size
    from oomdoctor.verify import simgpu

    with simgpu.simulate("140GiB", gpu="H200") as gpu:
        assert simgpu.ACTIVE is not None
        allocator = simgpu.ACTIVE.allocator
        q = torch.randn(2, 24, 2048, 128, device=gpu, requires_grad=True)
        k, v = (torch.randn(2, 8, 2048, 128, device=gpu, requires_grad=True) for _ in range(2))
        base = allocator.allocated
        allocator.peak_allocated = base
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        assert abs((allocator.peak_allocated - base) - 2_063_696_384) <= 4096


def test_efficient_attention_scratch_with_wide_heads_adds_dk_dv_accumulators_per_key_split():
    # head dims above 128 keep dk/dv out of registers: fp32 accumulators per key split (splits capped at
    # 200 / (batch x heads): 2 x 4 heads -> 25, but 300 keys make only 5 blocks of 64)
    from oomdoctor.verify.simgpu import efficient_backward_scratch

    q, k, v = (torch.empty(2, 4, 300, 256, dtype=torch.float16, device="meta") for _ in range(3))
    delta, workspace = efficient_backward_scratch((_model_grad(q), q, k, v))
    assert delta == 2 * 4 * 300 * 4
    assert workspace == 2 * 4 * (320 * 256 + 5 * 320 * (256 + 256)) * 4


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


def _conv_step(device):
    conv = torch.nn.Conv2d(8, 16, 3, device=device)
    conv(torch.randn(4, 8, 32, 32, device=device, requires_grad=True)).sum().backward()


def test_a_cudnn_convolution_takes_its_workspace_around_each_kernel():
    # Conv_v8.cpp run_conv_plan: the forward's plan, then backward data and backward filter, each with its workspace
    ws = 3 << 20  # a size no tensor of this test has
    trace = _traced(_conv_step, conv_workspace=ws)
    scratch = [(kind, sid) for kind, sid, n in trace if n == ws]
    assert [k for k, _ in scratch] == ["w", "f"] * 3  # the input asks for its gradient too: backward data runs
    assert all(trace[i + 1][:2] == ("f", trace[i][1]) for i, e in enumerate(trace) if e[0] == "w")
    # nothing else changes (ids aside: the workspaces take three)
    assert [(k, n) for k, _, n in _traced(_conv_step)] == [(k, n) for k, _, n in trace if n != ws]


def test_a_cudnn_workspace_shrinks_to_what_memory_is_left_and_never_runs_out():
    # generate_and_filter_plans halves the workspace after each OOM; the last plans need none
    from oomdoctor.verify.allocator import replay

    ws = 64 << 20
    trace = _traced(_conv_step, conv_workspace=ws)
    roomy = replay(trace, 1 << 30)
    assert not roomy.oom and roomy.peak_allocated_bytes >= ws
    tight = replay(trace, 24 << 20)  # a 20 MiB segment fits, 32 or 64 MiB do not
    assert not tight.oom and tight.peak_allocated_bytes < 20 << 20
    assert replay([e for e in trace if e[2] != ws], 24 << 20).peak_allocated_bytes < tight.peak_allocated_bytes


def test_a_live_simulation_gives_a_convolution_what_is_left():
    from oomdoctor.verify import simgpu

    with simgpu.simulate("24MiB", cudnn_workspace="64MiB") as device:
        _conv_step(device)  # each kernel asks for 64 MiB and takes what fits: no OOM
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(64 << 20, dtype=torch.uint8, device=device)
