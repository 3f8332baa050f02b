"""Liger's fused linear cross-entropy on the simulated device (verify/fusedce.py) and in `model: hf`'s training step:
what it holds is Liger's own allocation pattern, and it turns a step that runs out into one that fits."""

from __future__ import annotations

import pytest

from oomdoctor.verify.fixes import NotApplicable, Variant, apply
from oomdoctor.verify.params import HFParams

TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000,
              "max_position_embeddings": 4096}


def test_the_fix_turns_the_fused_loss_on_for_a_causal_lms_training_step_only():
    lm = Variant(HFParams.model_validate({"config": TINY_LLAMA}).model_dump(), "")
    assert apply("fused-cross-entropy", lm, "train").changes == {"fused_cross_entropy": [False, True]}
    with pytest.raises(NotApplicable, match="evaluation computes the logits as usual"):
        apply("fused-cross-entropy", lm, "eval")
    with pytest.raises(NotApplicable, match="already chunked"):
        apply("fused-cross-entropy", apply("fused-cross-entropy", lm, "train"), "train")
    image = Variant(HFParams.model_validate({"config": "microsoft/resnet-50"}).model_dump(), "")
    with pytest.raises(NotApplicable, match="causal LM's own loss only"):
        apply("fused-cross-entropy", image, "train")
    rl = Variant({**lm.params, "completion_len": 64, "seq_len": 128}, "")
    with pytest.raises(NotApplicable, match="use_liger_loss"):
        apply("fused-cross-entropy", rl, "train")


torch = pytest.importorskip("torch")


def _loss_bytes(loss, rows: int, width: int, vocab: int) -> tuple[int, int]:
    """(bytes the loss of `rows` hidden states through a bf16 head of `vocab` x `width` added at its peak, over
    forward and backward; bytes still live after backward beyond the inputs), on the simulated device."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu
    from oomdoctor.verify.trial import patched_for_sim

    device = simgpu.setup()
    tracker = simgpu.StorageTracker()
    with patched_for_sim(torch), FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
        weight = torch.empty(vocab, width, dtype=torch.bfloat16, device=device, requires_grad=True)
        hidden = torch.empty(rows, width, dtype=torch.bfloat16, device=device, requires_grad=True)
        targets = torch.randint(0, vocab, (rows,), device=device)
        start = tracker.peak = tracker.live
        loss(hidden, weight, targets).backward()
        return tracker.peak - start, tracker.live - start


def test_the_fused_loss_holds_liger_s_buffers_and_never_the_full_logits():
    from oomdoctor.verify.fusedce import chunk_rows, fused_linear_cross_entropy

    rows, width, vocab = 1024, 256, 32000
    chunk = chunk_rows(rows, width, vocab)
    assert chunk == 16  # next power of two of ceil(1024 / ceil(32000 / 256))
    # Liger: the input's and the head's gradients (allocated in forward, handed to backward), an fp32 loss per row,
    # one chunk's logits and its projection back onto the hidden size
    fused_peak, fused_left = _loss_bytes(fused_linear_cross_entropy, rows, width, vocab)
    assert fused_peak == rows * width * 2 + vocab * width * 2 + rows * 4 + chunk * vocab * 2 + chunk * width * 2
    # the plain loss as transformers computes it: bf16 logits upcast to fp32, the log-softmax kept for backward and
    # backward's fp32 gradient of it: 12 bytes per logit at once
    plain_peak, plain_left = _loss_bytes(
        lambda h, w, t: torch.nn.functional.cross_entropy((h @ w.t()).float(), t), rows, width, vocab)
    assert plain_peak == pytest.approx(rows * vocab * 12, rel=1e-4)
    assert fused_left == plain_left == rows * width * 2 + vocab * width * 2  # both leave the two gradients only


def test_older_liger_kernels_held_more_of_each_chunk():
    from oomdoctor.verify.fusedce import chunk_rows, fused_linear_cross_entropy

    rows, width, vocab = 1024, 256, 32000
    chunk = chunk_rows(rows, width, vocab)

    def extra(kernel: str) -> int:
        return _loss_bytes(lambda h, w, t: fused_linear_cross_entropy(h, w, t, kernel), rows, width, vocab)[0]

    current = extra("current")
    # 0.5.0-0.5.2: the chunk's gradient scaled into a copy beside it (4 bytes per logit with the projection)
    assert extra("0.5.0") - current == chunk * vocab * 2
    # up to 0.4: bf16 and fp32 copies of the chunk at the upcast, 6 bytes per logit (the projection comes later)
    assert extra("0.4") - current == chunk * vocab * 4 - chunk * width * 2


def _peak(capacity: int = 1 << 30, **params) -> dict:
    from oomdoctor.verify.trial import run_sim

    spec = {"device": "sim", "phase": "train", "steps": 2, "capacity_bytes": capacity, "non_pytorch_bytes": 0,
            "alloc_conf": "", "workload": {"kind": "hf", "params": {"config": TINY_LLAMA, "batch": 2, "seq_len": 512,
                                                                     "dtype": "bfloat16", "lora_rank": 8, **params}}}
    return run_sim(spec)


def test_an_hf_lora_step_that_runs_out_on_its_logits_fits_with_the_fused_loss():
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    plain, fused = _peak(), _peak(fused_cross_entropy=True)
    rows, vocab = 2 * 512, 32000
    saved = plain["unlimited_peak_allocated_bytes"] - fused["unlimited_peak_allocated_bytes"]
    # at least the fp32 logits and their log-softmax (8 bytes per logit), at most every logit-sized buffer the plain
    # loss makes (bf16 logits, the fp32 copy, log-softmax, two gradients: 16 bytes per logit)
    assert rows * vocab * 8 < saved < rows * vocab * 16, saved
    card = (plain["peak_reserved_bytes"] + fused["peak_reserved_bytes"]) // 2
    assert _peak(card)["oom"] and not _peak(card, fused_cross_entropy=True)["oom"]


def test_the_fused_loss_gathers_the_head_under_zero3():
    pytest.importorskip("transformers")
    sharded = {"lora_rank": 0, "zero_stage": 3, "world_size": 4, "master_weights": True}
    plain, fused = _peak(**sharded), _peak(**sharded, fused_cross_entropy=True)
    assert not fused["oom"] and fused.get("error") is None
    assert fused["unlimited_peak_allocated_bytes"] < plain["unlimited_peak_allocated_bytes"] - 2 * 512 * 32000 * 8
