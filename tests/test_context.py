"""Run context read from the log: which training stacks a log really uses."""

from __future__ import annotations

from oomdoctor.context import config_from
from oomdoctor.normalize import Line


def stacks(*texts: str) -> list[str]:
    cfg = config_from([Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(texts)], "train.log")
    return cfg["stacks"].value if "stacks" in cfg else []


def test_unused_fields_of_a_training_arguments_dump_name_no_stack():
    dump = ("TrainingArguments(", "deepspeed=None,", "fsdp=[],",
            "fsdp_config={'min_num_params': 0, 'xla': False, 'xla_fsdp_v2': False},",
            "fsdp_transformer_layer_cls_to_wrap=None,", "per_device_train_batch_size=2,")
    assert stacks(*dump) == ["hf_trainer"]


def test_used_fields_of_a_training_arguments_dump_name_their_stack():
    assert "deepspeed" in stacks("deepspeed=ds_config_zero3.json,")
    assert "fsdp" in stacks("fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>, <FSDPOption.AUTO_WRAP: 'auto_wrap'>],")
    assert "deepspeed" in stacks("[2024-08-21 02:13:48,210] [INFO] [real_accelerator.py:203:get_accelerator] DeepSpeed")
