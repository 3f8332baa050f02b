"""Run context read from the log: which training stacks a log really uses."""

from __future__ import annotations

from oomdoctor.parse.context import config_from
from oomdoctor.parse.normalize import Line


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


def events(text: str):
    from oomdoctor.parse import parse_text
    return parse_text(text).events


MSG = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
       "12.10 GiB already allocated; 373.44 MiB free; 14.10 GiB reserved in total by PyTorch)\n")


def test_operation_is_read_from_the_traceback():
    optimizer = ('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    opt.step()\n'
                 '  File "/usr/lib/python3/site-packages/torch/optim/adamw.py", line 321, in adamw\n'
                 '    func(params)\n' + MSG)
    backward = ('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    loss.backward()\n'
                '  File "/usr/lib/python3/site-packages/torch/autograd/__init__.py", line 200, in backward\n'
                '    Variable._execution_engine.run_backward(\n' + MSG)
    kv = '    self.value_buffer = [torch.empty((size, heads, dim), device="cuda") for _ in range(layers)]\n\n' + MSG
    assert [e.operation for e in events(optimizer)] == ["optimizer"]
    assert events(optimizer)[0].phase == "train"
    assert [e.operation for e in events(backward)] == ["backward"]
    assert [e.operation for e in events(kv)] == ["kv_cache"]
    assert [e.operation for e in events("step 5 loss 1.2\n" + MSG)] == [None]
