"""`model: hf` as one rank of a DeepSpeed ZeRO / PyTorch FSDP job: the real transformers model's states sharded over
`world_size` GPUs on the simulated device, and its parameters gathered at stage 3 (verify/hfzero.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sim_states import live_bytes

from oomdoctor.verify.params import HFParams

# A tiny Llama (2 layers, grouped-query attention); its embedding and head dominate, which the analytic form covers
TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000,
              "max_position_embeddings": 4096}
# Its blocks dominate instead (4 layers, small vocabulary): what is gathered at stage 3 shows beside the shards
BLOCKY_LLAMA = {**TINY_LLAMA, "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
                "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 512}
BLOCK_BYTES = (4 * 512 * 512 + 3 * 512 * 1376 + 2 * 512) * 2  # one decoder layer's weights in bf16
WORLD = 4


def test_sharding_settings_are_validated_as_for_the_built_in_model():
    base = {"config": TINY_LLAMA}
    with pytest.raises(ValidationError, match="needs zero_stage: 3"):
        HFParams.model_validate({**base, "zero_stage": 2, "zero3_backward_prefetch_units": 0})
    with pytest.raises(ValidationError, match="needs zero3_gather_unit: module"):
        HFParams.model_validate({**base, "zero_stage": 3, "zero3_max_live_elements": 1000})
    with pytest.raises(ValidationError, match=r"ZeRO/FSDP .* reduce without them"):
        HFParams.model_validate({**base, "zero_stage": 1, "ddp_buckets": True})
    with pytest.raises(ValidationError, match="less than or equal to 3"):
        HFParams.model_validate({**base, "zero_stage": 4})
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        HFParams.model_validate({**base, "world_size": 0})
    with pytest.raises(ValidationError, match=r"master_weights .* needs dtype bfloat16 or float16"):
        HFParams.model_validate({**base, "master_weights": True})
    assert HFParams.model_validate({**base, "zero_stage": 3, "world_size": 8, "batch": 2}).effective_batch == 16


def test_the_sharding_fixes_and_optimizer_offload_apply_to_an_hf_model():
    from oomdoctor.verify.fixes import NotApplicable, Variant, apply

    params = HFParams.model_validate({"config": "meta-llama/Meta-Llama-3-8B", "zero_stage": 2, "world_size": 4,
                                      "zero_bucket_elements": 500_000_000}).model_dump()
    base = Variant(params, "")
    # the bucket to HF's "auto", hidden_size² of the architecture (4096 for Llama-3-8B)
    assert apply("smaller-zero-buckets", base, "train").changes == {"zero_bucket_elements": [500_000_000, 4096**2]}
    assert apply("raise-zero-stage", base, "train").params["zero_stage"] == 3
    assert apply("more-gpus", base, "train").params["world_size"] == 8
    module = Variant({**params, "zero_stage": 3, "zero3_gather_unit": "module"}, "")
    assert apply("smaller-zero3-prefetch", module, "train").params["zero3_prefetch_bucket_elements"] == int(
        0.9 * 4096**2)
    offloaded = apply("cpu-offload", base, "train")
    assert offloaded.params["offload"] == "optimizer"
    with pytest.raises(NotApplicable, match="parameter offload needs zero_stage: 3"):
        apply("cpu-offload", offloaded, "train")
    sharded = Variant({**offloaded.params, "zero_stage": 3}, "")
    assert apply("cpu-offload", sharded, "train").changes == {"offload": ["optimizer", "all"]}
    with pytest.raises(ValidationError, match=r"offload: all .* needs zero_stage: 3"):
        HFParams.model_validate({**params, "offload": "all"})


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _parameters(config: dict, **params) -> tuple[int, int]:
    """(all, trainable) parameters of the model `model: hf` builds (LoRA adapters included)."""
    from oomdoctor.verify.hfmodel import build

    model = build(HFParams(config=config, **params), torch.device("meta"))
    return (sum(q.numel() for q in model.parameters()),
            sum(q.numel() for q in model.parameters() if q.requires_grad))


def _model_states(**params) -> int:
    """Bytes live on the simulated device as the second optimizer step starts: the weights (or this rank's shards of
    them), the gradients the step reads and the optimizer's states; no activation is left by then."""
    from oomdoctor.verify.hfmodel import hf

    return live_bytes(lambda device: hf({"config": TINY_LLAMA, "batch": 1, "seq_len": 64, **params}, device))[1]


# Mixed-precision AdamW per parameter: 2 bytes of 16-bit weights, 2 of gradients, 12 of fp32 master weights and
# moments (DeepSpeed's bf16 mode); stage 1 shards the 12, stage 2 also the gradients, stage 3 everything.
ANALYTIC = {1: lambda n, w: 2 * n + 2 * n + 12 * n / w, 2: lambda n, w: 2 * n + (2 * n + 12 * n) / w,
            3: lambda n, w: 16 * n / w}


@pytest.mark.parametrize(("stage", "unit"), [(1, "layer"), (2, "layer"), (3, "layer"), (3, "module"), (3, "matmul")])
def test_model_state_bytes_per_rank_are_the_analytic_zero_form(stage, unit):
    # measured (2026-11-28): 1.0000-1.0003 of the analytic form at every stage (the 512-byte rounding of small shards)
    extra = {"zero3_gather_unit": unit, "zero3_persistence_threshold_elements": 0} if unit == "module" else \
        {"zero3_gather_unit": unit}
    n, _ = _parameters(TINY_LLAMA)
    states = _model_states(zero_stage=stage, world_size=WORLD, dtype="bfloat16", master_weights=True, **extra)
    assert states == pytest.approx(ANALYTIC[stage](n, WORLD), rel=0.02)


def test_zero3_lora_keeps_the_frozen_base_sharded_with_no_gradients_or_states():
    # fp32 weights: the frozen base is 4 bytes per parameter / N (sharded, gathered when used), the adapters 16 / N
    n, adapters = _parameters(TINY_LLAMA, lora_rank=8)
    states = _model_states(zero_stage=3, world_size=WORLD, lora_rank=8)
    assert states == pytest.approx(4 * (n - adapters) / WORLD + 16 * adapters / WORLD, rel=0.02)


def _peak(phase: str = "train", capacity: int = 1 << 30, **params) -> dict:
    from oomdoctor.verify.trial import run_sim

    spec = {"device": "sim", "phase": phase, "steps": 2, "capacity_bytes": capacity, "alloc_conf": "",
            "workload": {"kind": "hf", "params": {"config": BLOCKY_LLAMA, "batch": 1, "seq_len": 32, **params}}}
    return run_sim(spec)


def test_a_step_that_ooms_unsharded_fits_under_zero3_at_its_world_size():
    # DeepSpeed bf16 full fine-tuning: 16 bytes per parameter unsharded (about 253 MB here, 15.8M parameters); on a
    # 96 MiB card it runs out unsharded and over 2 ranks (8 bytes per parameter left), and fits over 8
    common = {"dtype": "bfloat16", "master_weights": True, "capacity": 96 << 20}
    unsharded = _peak(**common)
    two, eight = (_peak(**common, zero_stage=3, world_size=w) for w in (2, 8))
    assert unsharded["oom"] and two["oom"], (unsharded["message"], two["message"])
    assert not eight["oom"] and eight["headroom_bytes"] > 0


def test_fsdp_gathers_decoder_layers_as_units_and_prefetches_one_ahead():
    # fp32 weights under bf16 autocast, gathered in bf16 (FSDP's param_dtype); backward prefetch depth d holds d more
    # decoder layers, forward prefetch one more in evaluation
    sharded = {"zero_stage": 3, "world_size": 64, "autocast": "bfloat16"}
    depth = {d: _peak(**sharded, zero3_backward_prefetch_units=d)["unlimited_peak_allocated_bytes"] for d in (0, 1)}
    assert depth[1] - depth[0] == pytest.approx(BLOCK_BYTES, rel=0.01)
    evaluation = {**sharded, "seq_len": 1024, "batch": 2}
    plain = _peak("eval", **evaluation)["unlimited_peak_allocated_bytes"]
    ahead = _peak("eval", **evaluation, zero3_forward_prefetch_units=1)["unlimited_peak_allocated_bytes"]
    assert ahead - plain == pytest.approx(BLOCK_BYTES, rel=0.01)
    per_use = _peak(**sharded, zero3_gather_unit="matmul")["unlimited_peak_allocated_bytes"]
    assert depth[0] - per_use > BLOCK_BYTES  # whole layers (and the root unit) beside one weight at a time


def test_deepspeed_fetches_modules_and_its_caps_bound_what_is_gathered_ahead():
    module = {"zero_stage": 3, "world_size": 64, "autocast": "bfloat16", "zero3_gather_unit": "module",
              "zero3_persistence_threshold_elements": 0, "zero3_max_reuse_distance_elements": 0}

    def peak(**params) -> int:
        return _peak(**module, **params)["unlimited_peak_allocated_bytes"]

    one_at_a_time, capped = peak(zero3_prefetch_bucket_elements=0), peak(zero3_max_live_elements=0)
    ahead, everything = peak(zero3_max_live_elements=12 * 512 * 512), peak()
    assert one_at_a_time == capped < ahead < everything
    assert everything - one_at_a_time > 2 * BLOCK_BYTES  # the default bucket (5e7) prefetches the whole model


def test_checkpointed_zero3_layers_gather_again_for_the_recompute_and_leave_only_shards():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu
    from oomdoctor.verify.hfmodel import _build, _step, _zero3
    from oomdoctor.verify.trial import patched_for_sim

    sharded = {"zero_stage": 3, "world_size": 64, "autocast": "bfloat16", "seq_len": 512}
    plain = _peak(**sharded)["unlimited_peak_allocated_bytes"]
    ckpt = _peak(**sharded, gradient_checkpointing=True)["unlimited_peak_allocated_bytes"]
    assert ckpt < plain
    p = HFParams(config=BLOCKY_LLAMA, batch=1, **sharded, gradient_checkpointing=True)
    device = simgpu.setup()
    with patched_for_sim(torch), FakeTensorMode(allow_non_fake_inputs=True), simgpu.StorageTracker(), \
            torch.device(device):
        model, part = _build(p, device, None)
        _step(p, model, device, "train", _zero3(p, part, device))()
        shapes = {tuple(q.shape) for q in model.parameters()}
    assert all(len(s) == 1 for s in shapes), shapes  # every parameter is its 1-D shard again after the step


def test_optimizer_offload_leaves_only_weights_and_gradients_on_the_device():
    # ZeRO-Offload of DeepSpeed's bf16 mode: the 12 bytes of fp32 master weights and moments per parameter go to the
    # host, the 16-bit weights and gradients (2 + 2 bytes) stay
    n, _ = _parameters(TINY_LLAMA)
    common = {"dtype": "bfloat16", "master_weights": True}
    assert _model_states(**common) == pytest.approx(16 * n, rel=0.02)
    assert _model_states(**common, offload="optimizer") == pytest.approx(4 * n, rel=0.02)


def test_parameter_offload_leaves_no_model_state_on_the_device():
    # ZeRO-3 in DeepSpeed's bf16 mode: offload_optimizer takes the 12 bytes of fp32 state per parameter to the host
    # (4 / N left: the 16-bit shards and their gradients), offload_param also the shards and their gradients
    n, _ = _parameters(TINY_LLAMA)
    common = {"dtype": "bfloat16", "master_weights": True, "zero_stage": 3, "world_size": WORLD}
    assert _model_states(**common, offload="optimizer") == pytest.approx(4 * n / WORLD, rel=0.02)
    assert _model_states(**common, offload="all") < 0.01 * 4 * n / WORLD  # the rotary buffers only


def test_a_zero3_step_that_runs_out_fits_once_its_parameters_are_offloaded():
    # one rank holding everything (N = 1): 2 + 2 bytes per parameter of shards and gradients leave the device, and
    # the weights come back one decoder layer (FSDP unit) at a time; the card sits between the two peaks
    from oomdoctor.verify.fixes import Variant, apply

    common = {"config": TINY_LLAMA, "dtype": "bfloat16", "master_weights": True, "zero_stage": 3, "world_size": 1,
              "offload": "optimizer"}
    on_device = _peak(**common)
    variant = apply("cpu-offload", Variant(HFParams.model_validate(common).model_dump(), ""), "train")
    offloaded = _peak(**{**common, "offload": variant.params["offload"]})
    n, _ = _parameters(TINY_LLAMA)
    moved = on_device["unlimited_peak_allocated_bytes"] - offloaded["unlimited_peak_allocated_bytes"]
    assert 2 * n < moved <= 4 * n  # the shards, and the gradients that exist at the peak
    card = (on_device["peak_reserved_bytes"] + offloaded["peak_reserved_bytes"]) // 2
    assert _peak(capacity=card, **common)["oom"]
    assert variant.params["offload"] == "all" and not offloaded["oom"]
    assert not _peak(capacity=card, **{**common, "offload": "all"})["oom"]
