"""Activation estimates, published model shapes, parameter counts and fixes already in place."""

from __future__ import annotations

from rules_helpers import facts

from oomdoctor.engine.engine import diagnose
from oomdoctor.estimate import activations
from oomdoctor.facts import derive
from oomdoctor.modelshapes import shape_of
from oomdoctor.parse.context import config_from
from oomdoctor.parse.normalize import Line
from oomdoctor.units import GIB

ZERO3_8B = {"model_name": "meta-llama/Meta-Llama-3-8B", "max_seq_length": 4096, "per_device_train_batch_size": 4,
            "gradient_checkpointing": False, "bf16": True, "zero_stage": 3, "stacks": ["deepspeed", "axolotl"]}


def lines(*texts: str) -> list[Line]:
    return [Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(texts)]


def test_layer_activations_follow_34_bytes_per_token_per_hidden():
    est = activations({"hidden_size": 4096, "num_layers": 32, "per_device_train_batch_size": 4,
                       "max_seq_length": 4096, "mixed_precision": True})
    assert est.layers_bytes == 34 * 4096 * 4 * 4096 * 32 == 68 * GIB
    assert est.logits_bytes is None and est.total_bytes == est.layers_bytes
    # checkpointing keeps each layer's 16-bit input plus one layer recomputed in full
    assert est.checkpointed_bytes == 2 * 4096 * 16384 * 32 + 34 * 4096 * 16384


def test_fp32_doubles_and_tensor_parallel_divides():
    base = {"hidden_size": 1024, "num_layers": 10, "per_device_train_batch_size": 2, "max_seq_length": 512}
    mixed = activations({**base, "mixed_precision": True}).layers_bytes
    assert activations({**base, "mixed_precision": False}).layers_bytes == 2 * mixed
    assert activations({**base, "mixed_precision": True, "tensor_parallel": 4}).layers_bytes == mixed // 4


def test_no_estimate_without_every_input():
    assert activations({"hidden_size": 4096, "num_layers": 32, "per_device_train_batch_size": 4}) is None
    assert activations({"hidden_size": 4096, "num_layers": 32, "max_seq_length": 4096,
                        "per_device_train_batch_size": "<half>"}) is None


def test_published_shapes_match_by_base_model_name():
    assert shape_of("meta-llama/Meta-Llama-3-8B") == (4096, 32, 128256)
    assert shape_of("/ckpt/Qwen2.5-7B-Instruct-sft") == (3584, 28, 152064)
    assert shape_of("google/gemma-2-2b-it") == (2304, 26, 256000)
    assert shape_of("qwen2.5-15b") is None and shape_of("my-model") is None


def test_parameter_counts_and_megatron_arguments_are_read():
    cfg = config_from(lines(
        "trainable params: 8,388,608 || all params: 6,746,804,224 || trainable%: 0.1243",
        "  hidden_size ..................................... 5120",
        "  num_layers ...................................... 40",
        "  tensor_model_parallel_size ...................... 2",
        '  "vocab_size": 32000',
    ), "train.log")
    assert cfg["trainable_params"].value == 8388608 and cfg["total_params"].value == 6746804224
    assert (cfg["hidden_size"].value, cfg["num_layers"].value, cfg["tensor_parallel"].value) == (5120, 40, 2)
    assert cfg["vocab_size"].value == 32000
    lightning = config_from(lines("118 M     Trainable params", "1.2 B     Total params"), "x.log")
    assert lightning["trainable_params"].value == 118_000_000 and lightning["total_params"].value == 1_200_000_000


def test_fix_effects_state_gib_back_for_a_known_model():
    f = facts(config=ZERO3_8B, requested_gib=7.8, total_gib=79.15, free_gib=7.1, allocated_gib=70.2,
              reserved_unallocated_gib=1.2, reserved_gib=71.4, step=6, phase="train")
    d = derive(f, 0)
    assert d.values["activation_bytes_estimate"] == 68 * GIB + 10 * 16384 * 128256
    fixes = {x.id: x for g in diagnose(f) for x in g.fixes}
    assert "≈ 61.88 GiB back" in fixes["gradient-checkpointing"].effect
    assert "≈ 19.57 GiB back" in fixes["fused-cross-entropy"].effect
    assert "≈ 43.79 GiB back" in fixes["halve-batch"].effect


def test_fixes_already_in_place_are_not_suggested():
    on = {**ZERO3_8B, "gradient_checkpointing": True}
    f = facts(config=on, requested_gib=7.8, total_gib=79.15, free_gib=7.1, allocated_gib=70.2,
              reserved_unallocated_gib=1.2, reserved_gib=71.4, step=6, phase="train")
    ids = {x.id for g in diagnose(f) for x in g.fixes}
    assert ids and not ids & {"gradient-checkpointing", "bf16-autocast", "raise-zero-stage"}
    off = facts(config={**ZERO3_8B, "bf16": False, "zero_stage": 2}, requested_gib=7.8, total_gib=79.15,
                free_gib=7.1, allocated_gib=70.2, reserved_unallocated_gib=1.2, reserved_gib=71.4, step=6, phase="train")
    assert "gradient-checkpointing" in {x.id for g in diagnose(off) for x in g.fixes}
