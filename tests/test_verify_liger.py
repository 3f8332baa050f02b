"""Liger-Kernel's RMSNorm, SwiGLU and RoPE on the simulated device (verify/liger.py) and in `model: hf`'s replay:
what each Function allocates and keeps is Liger's, and a Liger run of a patched architecture keeps less."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from oomdoctor.verify.fromlog import build

TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000,
              "max_position_embeddings": 4096}
OOM = ("  1%|          | 12/1000 [00:31<42:58,  2.61s/it]\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 954.00 MiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 211.75 MiB is free. Including non-PyTorch memory, this process has 78.93 GiB memory in use. "
       "Of the allocated memory 76.10 GiB is allocated by PyTorch, and 2.21 GiB is reserved by PyTorch but unallocated.\n")


@pytest.mark.parametrize(("model", "patched"), [("meta-llama/Llama-2-7b-hf", True), ("Qwen/Qwen2-7B", True),
                                                ("google/gemma-7b", False), ("gpt2", False)])
def test_a_liger_run_of_a_patched_architecture_replays_liger_s_modules(tmp_path, model, patched):
    pytest.importorskip("transformers")  # without it the built-in transformer stands in, with no modules to patch
    head = f"+ torchrun --nproc_per_node=1 train.py --model_name_or_path {model} --per_device_train_batch_size 4 "
    (tmp_path / "l.log").write_text(head + "--use_liger_kernel --bf16\n" + OOM)
    config, notes = build(str(tmp_path / "l.log"))
    assert config["workload"]["model"] == "hf"
    assert config["workload"]["params"].get("liger_kernels", False) is patched
    assert any(n.startswith("Liger-Kernel's RMSNorm, SwiGLU and RoPE") for n in notes) is patched
    assert any("is not replayed: the model's own norms" in n for n in notes) is not patched
    (tmp_path / "o.log").write_text(head + "--bf16\n" + OOM)
    assert "liger_kernels" not in build(str(tmp_path / "o.log"))[0]["workload"]["params"]


torch = pytest.importorskip("torch")


@contextlib.contextmanager
def _sim() -> Iterator[Any]:
    """A storage tracker on the simulated device, fake tensors created there."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu
    from oomdoctor.verify.trial import patched_for_sim

    device = simgpu.setup()
    tracker = simgpu.StorageTracker()
    with patched_for_sim(torch), FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
        tracker.device = device
        yield tracker


def _bf16(*shape: int) -> torch.Tensor:
    """A bf16 activation as a model has one: the output of an operation on a leaf that requires a gradient."""
    return torch.empty(*shape, dtype=torch.bfloat16, requires_grad=True) * 1


ROWS, WIDTH, FFN = 1024, 256, 688


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


# the weight's gradient: (partial rows, their sum, its cast to the weight's bf16); since 0.4 one fp32 row per
# multiprocessor, summed in fp32; in 0.2 one row per input row in the weight's dtype, summed in it (no cast)
@pytest.mark.parametrize(("kernel", "weight_grad_bytes"), [("current", 132 * WIDTH * 4 + WIDTH * 4 + WIDTH * 2),
                                                           ("0.2", ROWS * WIDTH * 2 + WIDTH * 2)])
def test_liger_rms_norm_keeps_its_input_and_an_fp32_figure_per_row_and_writes_the_gradient_in_place(
        kernel, weight_grad_bytes):
    from oomdoctor.verify.liger import SM_COUNT, RMSNorm

    assert SM_COUNT == 132
    with _sim() as tracker:
        x, weight = _bf16(ROWS, WIDTH), torch.empty(WIDTH, dtype=torch.bfloat16, requires_grad=True)
        start = tracker.peak = tracker.live
        y = RMSNorm.apply(x, weight, 1e-6, kernel)
        # the output, and the reciprocal RMS in fp32 (kept with the input itself): no fp32 copy of the input
        assert tracker.peak - start == tracker.live - start == ROWS * WIDTH * 2 + ROWS * 4
        grad = torch.empty_like(y)
        before = tracker.peak = tracker.live
        grad_x, grad_weight, *_ = y.grad_fn.apply(grad)
        assert _same_storage(grad_x, grad)  # the input's gradient written over the incoming one
        assert tracker.peak - before == weight_grad_bytes
        assert tracker.live - before == grad_weight.numel() * 2


def test_liger_rms_norm_s_input_gradient_becomes_the_leaf_s_grad_without_a_copy():
    """Liger returns `dY.view(*shape)`, a new view of the gradient it wrote in place: autograd's AccumulateGrad keeps
    it as the leaf's .grad (no other reference holds the view). Returning the incoming tensor itself, which the
    caller still holds, made autograd copy it: the published 0.2.1 benchmark rows were one input-sized unit over."""
    from oomdoctor.verify.liger import RMSNorm

    with _sim():
        x = torch.empty(ROWS, WIDTH, dtype=torch.bfloat16, requires_grad=True)
        weight = torch.empty(WIDTH, requires_grad=True)
        grad = torch.empty(ROWS, WIDTH, dtype=torch.bfloat16)
        RMSNorm.apply(x, weight, 1e-6, "0.2").backward(grad)
        assert _same_storage(x.grad, grad)


def test_liger_swiglu_keeps_gate_and_up_only_and_writes_their_gradients_over_them():
    from oomdoctor.verify.liger import SiLUMul

    with _sim() as tracker:
        gate, up = _bf16(ROWS, FFN), _bf16(ROWS, FFN)
        start = tracker.live
        out = SiLUMul.apply(gate, up)
        assert tracker.live - start == ROWS * FFN * 2  # the product only: no silu output kept beside it
        grad = torch.empty_like(out)
        before = tracker.peak = tracker.live
        grad_gate, grad_up = out.grad_fn.apply(grad)
        assert tracker.peak == before  # silu recomputed in the kernel, both gradients over the saved inputs
        assert _same_storage(grad_gate, gate) and _same_storage(grad_up, up)


def test_the_plain_mlp_product_keeps_one_intermediate_more_than_liger_s():
    from oomdoctor.verify.liger import SiLUMul

    def kept(product) -> int:
        with _sim() as tracker:
            gate, up = _bf16(ROWS, FFN), _bf16(ROWS, FFN)
            start = tracker.live
            out = product(gate, up)
            del gate, up
            assert out.requires_grad
            return tracker.live - start

    plain = kept(lambda g, u: torch.nn.functional.silu(g) * u)
    assert plain - kept(SiLUMul.apply) == ROWS * FFN * 2  # transformers' silu output, kept for the product's backward


def test_liger_rope_rotates_q_and_k_in_their_projections_storage():
    from oomdoctor.verify.liger import Rope

    batch, seq, heads, kv, dim = 2, 128, 8, 2, 32
    with _sim() as tracker:
        q = _bf16(batch, seq, heads * dim).view(batch, seq, heads, dim).transpose(1, 2)
        k = _bf16(batch, seq, kv * dim).view(batch, seq, kv, dim).transpose(1, 2)
        cos, sin = torch.empty(1, seq, dim, dtype=torch.bfloat16), torch.empty(1, seq, dim, dtype=torch.bfloat16)
        start = tracker.peak = tracker.live
        q_out, k_out = Rope.apply(q, k, cos, sin)
        assert tracker.peak == start
        assert _same_storage(q_out, q) and _same_storage(k_out, k)
        assert (q_out.shape, k_out.shape) == (q.shape, k.shape)
        grad_q, grad_k = torch.empty_like(q_out), torch.empty_like(k_out)  # attention's gradients, in q's layout
        before = tracker.peak = tracker.live
        q_out.grad_fn.apply(grad_q, grad_k)
        assert tracker.peak == before


def _kept_by_decoder(use_liger: bool) -> int:
    """Bytes a tiny Llama's decoder keeps at the end of its forward (2 x 512 tokens, bf16), with Liger's patch or
    the model's own modules."""
    from oomdoctor.verify import hfmodel, liger
    from oomdoctor.verify.params import HFParams

    p = HFParams.model_validate({"config": TINY_LLAMA, "dtype": "bfloat16"})
    with _sim() as tracker:
        model = hfmodel.build(p, tracker.device)
        if use_liger:
            liger.patch(model)
        ids = torch.randint(0, TINY_LLAMA["vocab_size"], (2, 512))
        start = tracker.live
        with liger.rope_patched("llama") if use_liger else contextlib.nullcontext():
            hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        assert hidden.requires_grad
        return tracker.live - start


def test_a_tiny_llama_keeps_less_with_liger_by_the_norms_fp32_copies_and_one_mlp_intermediate():
    pytest.importorskip("transformers")
    tokens, layers = 2 * 512, TINY_LLAMA["num_hidden_layers"]
    saved = _kept_by_decoder(False) - _kept_by_decoder(True)
    # each of the 2 x layers + 1 norms: transformers keeps an fp32 copy of its input and the bf16 normalised input,
    # Liger the input itself (4 bytes less per element); each MLP: silu's output is not kept. The rotary embedding
    # keeps nothing more in either (cos and sin need no gradient): Liger's saves only transient copies.
    hidden, ffn = TINY_LLAMA["hidden_size"], TINY_LLAMA["intermediate_size"]
    assert saved == (2 * layers + 1) * tokens * hidden * 4 + layers * tokens * ffn * 2


def test_liger_s_rotary_embedding_is_restored_after_the_step():
    pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama

    from oomdoctor.verify.liger import rope_patched, rotary_pos_emb

    own = modeling_llama.apply_rotary_pos_emb
    with rope_patched("llama"):
        assert modeling_llama.apply_rotary_pos_emb is rotary_pos_emb
    assert modeling_llama.apply_rotary_pos_emb is own


def _step(**params) -> dict:
    from oomdoctor.verify.trial import run_sim

    spec = {"device": "sim", "phase": params.pop("phase", "train"), "steps": 2, "capacity_bytes": 1 << 34,
            "non_pytorch_bytes": 0, "alloc_conf": "",
            "workload": {"kind": "hf", "params": {"config": TINY_LLAMA, "batch": 2, "seq_len": 512,
                                                  "dtype": "bfloat16", **params}}}
    return run_sim(spec)


@pytest.mark.parametrize("extra", [{"lora_rank": 8}, {"gradient_checkpointing": True},
                                   {"zero_stage": 3, "world_size": 4, "master_weights": True}])
def test_a_liger_training_step_replays_under_lora_checkpointing_and_zero3(extra):
    pytest.importorskip("transformers")
    if "lora_rank" in extra:
        pytest.importorskip("peft")
    plain, patched = _step(**extra), _step(liger_kernels=True, **extra)
    assert patched.get("error") is None
    assert patched["unlimited_peak_allocated_bytes"] < plain["unlimited_peak_allocated_bytes"]


def test_liger_kernels_leave_an_architecture_liger_s_patch_does_not_cover_as_it_is():
    pytest.importorskip("transformers")
    gpt2 = {"config": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 1000},
            "seq_len": 128}
    plain, patched = _step(**gpt2), _step(liger_kernels=True, **gpt2)
    assert patched["unlimited_peak_allocated_bytes"] == plain["unlimited_peak_allocated_bytes"]
