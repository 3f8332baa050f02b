"""Run context read from the log: which training stacks a log really uses."""

from __future__ import annotations

from oomdoctor.parse import context as ctx
from oomdoctor.parse.context import config_from
from oomdoctor.parse.normalize import Line, normalize_region


def _config_of(texts: list[str]) -> dict:
    return config_from(normalize_region(1, texts), "train.log")


def stacks(*texts: str) -> list[str]:
    cfg = config_from([Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(texts)], "train.log")
    return cfg["stacks"].value if "stacks" in cfg else []


def test_vllm_is_named_by_its_package_not_by_a_folder_named_after_it():
    frame = '  File "/workspace/{}/lib/python3.10/site-packages/torch/nn/functional.py", line 2380, in silu'
    assert "vllm" not in stacks(frame.format("mamba-vllm"))  # a virtualenv's folder
    assert "vllm" not in stacks(frame.format("vllm-env"))
    assert "vllm" in stacks('  File "/usr/lib/python3/site-packages/vllm/worker/model_runner.py", line 1, in f')
    assert "vllm" in stacks("Successfully installed vllm-0.6.3")
    assert "vllm" in stacks("docker run --gpus all vllm/vllm-openai:latest --model m")


def test_unused_fields_of_a_training_arguments_dump_name_no_stack():
    dump = ("TrainingArguments(", "deepspeed=None,", "fsdp=[],",
            "fsdp_config={'min_num_params': 0, 'xla': False, 'xla_fsdp_v2': False},",
            "fsdp_transformer_layer_cls_to_wrap=None,", "per_device_train_batch_size=2,")
    assert stacks(*dump) == ["hf_trainer"]


def test_used_fields_of_a_training_arguments_dump_name_their_stack():
    assert "deepspeed" in stacks("deepspeed=ds_config_zero3.json,")
    assert "fsdp" in stacks("fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>, <FSDPOption.AUTO_WRAP: 'auto_wrap'>],")
    assert "deepspeed" in stacks("[2024-08-21 02:13:48,210] [INFO] [real_accelerator.py:203:get_accelerator] DeepSpeed")


def test_an_rl_trainers_rollout_names_the_rl_trainer_stack():
    frame = '  File "/usr/local/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 1501, in _generate'
    assert "rl_trainer" in stacks(frame) and "trl" in stacks(frame)
    assert "rl_trainer" in stacks('  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 980, in fit')
    assert "rl_trainer" not in stacks("SFTTrainer: 1200 examples", "the Verlag catalogue reloaded")


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


def one(text: str):
    (e,) = events(text)
    return e


def test_phase_from_progress_bars_that_name_their_loop():
    train = "Epoch 1: 100%|##########| 500/500 [01:00<00:00, 8.3it/s, loss=0.41]\n"
    assert one(train + "Evaluating:  40%|####      | 20/50 [00:03<00:05]\n" + MSG).phase == "eval"
    assert one(train + "Validation DataLoader 0:  10%|#  | 5/50 [00:01<00:09]\n" + MSG).phase == "eval"
    assert one(train + "[11/23 10:00:00 d2.evaluation.evaluator]: Inference done 11/500. 0.1 s / img\n" + MSG).phase == "eval"
    assert one(train + "2024/05/01 10:00:00 - mmengine - INFO - Epoch(val) [1][ 10/500]  eta: 0:01:00\n" + MSG).phase == "eval"
    # an evaluation bar followed by training progress again is history
    assert one("eval: 100%|##| 50/50 [00:05<00:00]\n" + "{'loss': 0.5, 'step': 120}\n" + MSG).phase == "train"


def test_step_formats_of_common_loops():
    assert one("[3,   120] loss: 1.234\n" + MSG).step == 120
    assert one("Epoch(train) [2][ 340/1000]  lr: 1.0e-04  loss: 0.7\n" + MSG).step == 340
    assert one("[11/23 10:00:00 d2.utils.events]:  eta: 1:00:00  iter: 1999  total_loss: 0.9  max_mem: 10234M\n"
               + MSG).step == 1999
    assert one("Iter 250/5000 loss 0.31\n" + MSG).step == 250
    assert one("    step: 42\n" + MSG).step == 42
    # a data-processing bar is not the training counter
    assert one("step 7 loss 0.3\nMap: 100%|##########| 9000/9000 [00:02<00:00]\n" + MSG).step == 7


def test_training_started_then_failed_before_a_step_is_the_first_step():
    e = one("***** Running training *****\n  Num examples = 1000\n" + MSG)
    assert (e.phase, e.step, e.detail.get("first_step")) == ("train", None, True)
    e = one("Loading checkpoint shards: 100%|##| 2/2\n" + MSG)  # nothing has run yet: model set-up
    assert e.phase == "init" and not e.detail.get("first_step")
    e = one("[2021-02-12 03:31:37,319] [train] [INFO] Training Started.\n" + MSG)  # any capitalisation
    assert (e.phase, e.detail.get("first_step")) == ("train", True)


def test_innermost_strong_frame_wins_and_xla_names_its_jitted_function():
    tb = ('Traceback (most recent call last):\n  File "run.py", line 3, in evaluate\n    out = model.generate(x)\n'
          '  File "/site-packages/transformers/generation/utils.py", line 10, in generate\n    return self._sample()\n')
    assert one(tb + MSG).phase == "generate"
    xla = ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
           "1073741824 bytes.: while running replica 0 and partition 0 of a replicated computation (other "
           "replicas may have failed as well). pjit(train_step)\n")
    assert one(xla).phase == "train"


def test_run_facts_from_namespace_and_hydra_dumps():
    def cfg(*texts):
        return {k: v.value for k, v in config_from(
            [Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(texts)], "train.log").items()}

    c = cfg("Namespace(batch_size=16, grad_accum=4, max_len=2048, precision='bf16-mixed', use_checkpoint=False)")
    assert (c["per_device_train_batch_size"], c["gradient_accumulation_steps"], c["max_seq_length"]) == (16, 4, 2048)
    assert c["bf16"] is True and c["gradient_checkpointing"] is False
    c = cfg("trainer:", "  precision: 16-mixed", "data:", "  batch_size: 8")
    assert c["per_device_train_batch_size"] == 8 and c["bf16"] is False
    # torchvision's reference scripts: the model is `arch`; a flag's False names no model; -1 means unset
    c = cfg("Namespace(arch='resnet152', batch_size=64, pretrained=False, world_size=-1, max_steps=-1)")
    assert c["model_name"] == "resnet152" and "world_size" not in c and "max_steps" not in c
    # HF's _n_gpu is the GPUs one process drives (1 under DDP): it never overrides torchrun's process count
    c = cfg("+ torchrun --nproc_per_node=8 train.py --per_device_eval_batch_size 8", "TrainingArguments(", "_n_gpu=1,")
    assert c["world_size"] == 8


def test_hand_written_memory_prints_become_samples():
    from oomdoctor.parse.context import memory_samples

    lines = ["step 1 memory_allocated: 10.5 GB max_memory_allocated: 12.0 GB",
             "step 2 memory_allocated: 11.5 GB", "step 3 allocated_bytes.all.current: 13000000000",
             "[d2] iter: 40  max_mem: 10234M", "step 4 mem 3 params"]
    got = memory_samples([Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(lines)], "t.log")
    assert [(s.step, s.allocated_bytes, s.max_allocated_bytes) for s in got] == [
        (1, int(10.5 * 2**30), 12 * 2**30), (2, int(11.5 * 2**30), None), (3, 13000000000, None),
        (40, None, 10234 * 2**20)]


def test_axolotl_and_torchtune_memory_metrics_become_samples():
    # axolotl's metric dict names the unit in the key; torchtune's StdoutLogger prints its peaks in GiB with none
    from oomdoctor.parse.context import memory_samples
    from oomdoctor.units import to_bytes

    lines = ["{'loss': 2.0312, 'grad_norm': 59.5, 'learning_rate': 4.95e-06, 'memory/max_mem_active(gib)': 34.89, "
             "'memory/max_mem_allocated(gib)': 34.89, 'memory/device_mem_reserved(gib)': 41.26, 'epoch': 2.0}",
             "Step 10 | loss:1.2345 lr:2e-05 tokens_per_second_per_gpu:1234.5 peak_memory_active:16.4 "
             "peak_memory_alloc:16.4 peak_memory_reserved:17.1 "]
    got = memory_samples([Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(lines)], "t.log")
    gib = [to_bytes(v, "GiB") for v in ("34.89", "41.26", "16.4", "17.1")]
    assert [(s.max_allocated_bytes, s.reserved_bytes, s.max_reserved_bytes) for s in got] == [
        (gib[0], gib[1], None), (gib[2], None, gib[3])]
    assert got[1].step == 10


def test_mlx_lm_training_reports_are_steps_and_their_peak_memory_a_sample():
    from oomdoctor.parse.context import memory_samples

    line = ("Iter 50: Train loss 1.487, Learning Rate 1.000e-05, It/sec 0.372, Tokens/sec 358.620, Trained Tokens 26805, "
            "Peak mem 34.108 GB")
    assert ctx.step_of(Line(1, None, line)) == ctx.StepCount(50, None, False)
    assert ctx.step_of(Line(1, None, "Iter 50: Val loss 1.602, Val took 12.345s")) is None
    got = memory_samples([Line(number=1, rank=None, text=line, raw=line)], "t.log")
    assert [(s.step, s.max_allocated_bytes is not None) for s in got] == [(50, True)]


def test_a_decode_that_failed_right_after_the_message_is_generation():
    for after in ("llama_decode: failed to decode, ret = -3", "llama_eval: failed to eval",
                  "Failed to predict at 43! Check your context buffer sizes!"):
        log = ("ggml_metal_graph_compute: command buffer 0 failed with status 5\n"
               "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
               "llama_graph_compute: ggml_backend_sched_graph_compute_async failed with error -1\n" + after + "\n")
        assert events(log)[0].phase == "generate", after
    # a model that failed to load is start-up, as before
    assert events(MSG + "Exception: Failed to load the model\n")[0].phase == "init"


def test_megatrons_training_banner_and_rerun_iteration_give_phase_and_step():
    log = ("done with setup ...\nTraining ...\nSetting rerun_state_machine.current_iteration to 0...\n"
           "[2025-09-24 16:15:28] node-1:29:30 [0] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'\n")
    e = events(log)[0]
    assert (e.kind, e.step, e.phase) == ("nccl", 0, "train")
    assert ctx.step_of(Line(1, None, "Setting rerun_state_machine.current_iteration to 12...")) == ctx.StepCount(12, None, False)


def test_attention_scores_are_recognised_as_the_operation():
    tb = ('Traceback (most recent call last):\n  File "model.py", line 40, in forward\n'
          '    attn_weights = torch.matmul(query, key.transpose(2, 3)) / math.sqrt(self.head_dim)\n' + MSG)
    assert one(tb).operation == "attention"
    tb = ('Traceback (most recent call last):\n  File "/site-packages/transformers/integrations/sdpa_attention.py", line 9, '
          'in sdpa_attention_forward\n    out = fn(q, k, v)\n' + MSG)
    assert one(tb).operation == "attention"


def test_notebook_tracebacks_and_the_calls_in_frame_code_lines_name_the_phase():
    old_ipython = ("ResourceExhaustedError                    Traceback (most recent call last)\n"
                   "<ipython-input-3-0a1b2c3d4e5f> in <module>()\n      1 history = net.fit(x=ds,\n"
                   "----> 2                   epochs=3)\n\n" + MSG)
    assert one(old_ipython).phase == "train"
    ipython8 = ("Cell In[7], line 2\n      1 with torch.no_grad():\n----> 2     preds = trainer.predict(ds)\n"
                "File ~/venv/lib/python3.10/site-packages/torch/nn/modules/module.py:1501, in Module._call_impl(self)\n"
                "   1500     return forward_call(*args)\n" + MSG)
    assert one(ipython8).phase == "eval"
    cpython = ('Traceback (most recent call last):\n  File "run.py", line 30, in <module>\n    metrics = trainer.evaluate()\n'
               '  File "/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl\n    return forward_call(*args)\n'
               + MSG)
    assert one(cpython).phase == "eval"
    colab = ("OutOfMemoryError                          Traceback (most recent call last)\n"
             "[<ipython-input-4-9f8e7d6c5b4a>](https://localhost:8080/#) in <cell line: 3>()\n"
             "      2 model.train()\n----> 3 history = run_epochs(model, loader)\n\n1 frames\n"
             "[/content/recipe/loop.py](https://localhost:8080/#) in train_one_epoch(model, loader, optimizer)\n"
             "     41         loss = model(batch).loss\n---> 42         loss.backward()\n\n" + MSG)
    assert one(colab).phase == "train"  # Colab links each frame's file


def test_rank_named_by_spawn_headers_banners_and_wording():
    from oomdoctor.parse.context import rank_near

    def rank(text: str):
        lines = [Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(text.splitlines())]
        idx = next(i for i, ln in enumerate(lines) if "out of memory" in ln.text)
        got = rank_near(lines, idx)
        return got.value if got else None

    spawn = ("torch.multiprocessing.spawn.ProcessRaisedException: \n\n-- Process 3 terminated with the following error:\n"
             'Traceback (most recent call last):\n  File "train.py", line 5, in run\n    loss.backward()\n' + MSG)
    assert rank(spawn) == 3
    assert rank("[rank: 1] " + MSG) == 1
    assert rank("RuntimeError: CUDA out of memory on rank 5 while gathering\n") == 5
    assert rank("step 3\n" + MSG) is None


def test_memory_series_stays_bounded_and_keeps_both_ends():
    from oomdoctor.parse.context import SampleSeries, memory_samples

    lines = [Line(number=i + 1, rank=None, text=f"step {i} memory_allocated: {i} MB", raw="") for i in range(50000)]
    got = memory_samples(lines, "t.log")
    cap = SampleSeries.FIRST + SampleSeries.MIDDLE + SampleSeries.LAST
    assert len(got) <= cap
    steps = [s.step for s in got]
    assert steps[:3] == [0, 1, 2] and steps[-1] == 49999 and steps == sorted(steps)
    assert any(20000 < s < 30000 for s in steps)  # the middle is sampled, not dropped


def test_lightning_bars_give_the_training_loops_counter_across_epochs():
    assert one("Epoch 2:  40%|####      | 4/10 [00:01<00:02, 3.1it/s, train_loss=0.5]\n" + MSG).step == 24
    assert one("Epoch 1/2  ━━━━━━━━━━━━━━━━━━━━ 10/10 0:00:00 • 0:00:00 250.00it/s\n" + MSG).step == 20


# pytorch-lightning 1.9: the epoch's bar counts 10 training and 5 validation batches, and goes on during validation
PL19_EPOCH0 = "".join(
    [f"Epoch 0:  {k * 100 // 15:2d}%|#   | {k}/15 [00:01<00:02, 5.2it/s, loss=0.9, v_num=0, train_loss=1.07]\n"
     for k in range(11)]
    + [f"Validation DataLoader 0:  {v * 20}%|##  | {v}/5 [00:00<00:00, 34.07it/s]\n"
       f"Epoch 0:  {(10 + v) * 100 // 15}%|#   | {10 + v}/15 [00:02<00:00, 6.7it/s, loss=0.9, v_num=0, train_loss=1.07]\n"
       for v in range(1, 6)])


def test_lightning_1x_bars_count_validation_batches_which_are_not_steps():
    train = PL19_EPOCH0 + "Epoch 1:  20%|##  | 3/15 [00:00<00:01, 10.9it/s, loss=0.9, v_num=0, train_loss=1.32]\n"
    assert one(train + MSG).step == 13  # epoch 1's third batch after 10 per epoch, not 1 x 15 + 3
    val = (PL19_EPOCH0 + "".join(f"Epoch 1:  {k * 100 // 15}%|#   | {k}/15 [00:00<00:00, 11.0it/s, v_num=0]\n"
                                 for k in range(11))
           + "Validation DataLoader 0:  40%|####      | 2/5 [00:00<00:00, 50.31it/s]\n"
           + "Epoch 1:  80%|########  | 12/15 [00:00<00:00, 12.41it/s, loss=0.939, v_num=0, train_loss=1.020]\n")
    e = one(val + MSG)
    assert (e.step, e.phase) == (20, "eval")  # the training batches of two epochs; the bar's 12 counts 2 validation


def test_lightning_2x_bars_at_their_total_during_validation_keep_counting_training_batches():
    epoch = "".join(f"Epoch 0:  {k * 10}%|#   | {k}/10 [00:01<00:02, 5.2it/s, train_loss=1.07]\n" for k in range(11))
    val = "".join(f"Validation DataLoader 0:  {v * 20}%|##  | {v}/5 [00:00<00:00, 34.07it/s]\n"
                  f"Epoch 0: 100%|####| 10/10 [00:02<00:00, 6.7it/s, train_loss=1.07]\n" for v in range(1, 6))
    assert one(epoch + val + "Epoch 1:  30%|#   | 3/10 [00:00<00:01, 10.9it/s, train_loss=1.32]\n" + MSG).step == 13



# Lightning's default sanity check: two validation batches under their own bar before the first training bar
SANITY = ("Sanity Checking: |          | 0/? [00:00<?, ?it/s]\n"
          "Sanity Checking DataLoader 0:   0%|          | 0/2 [00:00<?, ?it/s]\n"
          "Sanity Checking DataLoader 0:  50%|#####     | 1/2 [00:00<00:00, 61.18it/s]\n"
          "Sanity Checking DataLoader 0: 100%|##########| 2/2 [00:00<00:00, 84.59it/s]\n"
          "                                                                           \n"
          "Training: |          | 0/? [00:00<?, ?it/s]\n")


def test_lightnings_epoch_bar_after_its_sanity_check_is_training():
    epoch0 = "".join(f"Epoch 0:  {k * 12}%|#   | {k}/8 [00:00<00:00, 8.2it/s, train_loss_step=4.41]\n" for k in range(6))
    e = one(SANITY + epoch0 + MSG)
    assert (e.step, e.phase) == (5, "train")  # epoch 0's fifth batch, not the sanity check's count
    first = one(SANITY + "Epoch 0:   0%|          | 0/8 [00:00<?, ?it/s]\n" + MSG)
    assert (first.step, first.phase) == (0, "train")  # its first batch, as the bar shows it
    assert one(SANITY + MSG).phase != "eval"  # failing before the epoch's bar is drawn: the sanity check is over
    # a bar of another label after the sanity check stays the evaluation's
    e = one(SANITY + "Validation DataLoader 0:  50%|#####     | 1/2 [00:00<00:00, 61.18it/s]\n" + MSG)
    assert e.phase == "eval"


def _catalyst(epoch: int, loader: str, upto: int, total: int) -> str:
    return "".join(f"{epoch}/3 * Epoch ({loader}):  {k * 100 // total}%|#  | {k}/{total} [00:00<00:00,  5.52it/s, "
                   f"accuracy01=0.125, loss=1.426, lr=1.000e-03, momentum=0.900]\n" for k in range(upto + 1))


CATALYST_EPOCH1 = (_catalyst(1, "train", 10, 10) + "train (1/3) accuracy01: 0.2125 | loss: 1.4668 | lr: 0.001\n"
                   + _catalyst(1, "valid", 4, 4) + "valid (1/3) accuracy01: 0.25 | loss: 1.4286 | lr: 0.001\n"
                   + "* Epoch (1/3) \n")


def test_a_labelled_evaluation_bars_count_is_not_the_training_step():
    # Catalyst draws one bar per loader and epoch: the "(valid)" bars count validation batches
    e = one(CATALYST_EPOCH1 + _catalyst(2, "train", 4, 10) + MSG)
    assert (e.step, e.phase) == (4, "train")  # the second epoch's training bar, after the validation bars
    e = one(_catalyst(1, "train", 10, 10) + _catalyst(1, "valid", 1, 4) + MSG)
    assert (e.step, e.phase) == (10, "eval")  # the training bar's count, not the validation bar's 1
    e = one(CATALYST_EPOCH1 + "Saving checkpoint to /workspace/run/out/model.0001.pth\n" + MSG)
    assert (e.step, e.phase) == (10, "save")

MM = "11/28 15:35:25 - mmengine - INFO - "
MM_TRAIN_FRAMES = ('Traceback (most recent call last):\n'
                   '  File "/site-packages/mmengine/runner/loops.py", line 115, in run_epoch\n'
                   '    self.run_iter(idx, data_batch)\n'
                   '  File "/site-packages/mmengine/runner/loops.py", line 131, in run_iter\n'
                   '    outputs = self.runner.model.train_step(\n')


def test_mmengines_validation_line_at_its_total_is_a_finished_validation():
    log = (MM + "Epoch(train) [1][5/5]  lr: 3.0000e-04  eta: 0:00:00  time: 0.0135  data_time: 0.0018  loss: 2.3361\n"
           + MM + "Saving checkpoint at 1 epochs\n"
           + MM + "Epoch(val) [1][4/4]    accuracy: 10.1562  data_time: 0.0015  time: 0.0021\n")
    e = one(log + MM_TRAIN_FRAMES + MSG)
    assert (e.step, e.phase) == (5, "train")  # epoch 2's training, before its first logged line
    mmcv = "Epoch(val) [1][20]\taccuracy: 0.1016\n" + MM_TRAIN_FRAMES + MSG  # mmcv's summary, no total
    assert one(mmcv).phase == "train"


def test_mmengines_validation_line_below_its_total_is_a_running_validation():
    assert one(MM + "Epoch(val) [1][5/8]    eta: 0:00:00  time: 0.0725  data_time: 0.0006\n" + MSG).phase == "eval"
    assert one(MM + "Iter(test) [ 50/100]    eta: 0:00:10  time: 0.0725\n" + MSG).phase == "eval"


def test_torchtunes_bar_description_gives_the_global_step_not_the_epochs_count():
    bar = ("2|8|Loss: 3.9424233436584473:  33%|███▎      | 2/6 [00:02<00:05,  1.37s/it]\n"
           "2|9|Loss: 4.070089817047119:  50%|█████     | 3/6 [00:03<00:02,  1.01it/s]\n")
    assert one(bar + MSG).step == 9
    assert one("1|1|Loss: nan:  17%|█▋        | 1/6 [00:00<00:00, 12.70it/s]\n" + MSG).step == 1


def test_a_forward_inside_an_optimizer_closure_is_not_the_optimizer():
    tb = ('Traceback (most recent call last):\n'
          '  File "/site-packages/torch/optim/adamw.py", line 210, in step\n    loss = closure()\n'
          '  File "/site-packages/lightning/pytorch/loops/optimization/automatic.py", line 146, in closure\n'
          '    step_output = self._step_fn()\n'
          '  File "train.py", line 20, in training_step\n    out = self.net(x)\n' + MSG)
    assert one(tb).operation is None and one(tb).phase == "train"


def test_ranks_reach_events_from_spawn_headers_and_the_elastic_root_cause():
    spawn = ("torch.multiprocessing.spawn.ProcessRaisedException: \n\n-- Process 3 terminated with the following error:\n"
             'Traceback (most recent call last):\n  File "train.py", line 5, in run\n    loss.backward()\n' + MSG)
    assert one(spawn).rank == 3
    elastic = (MSG + "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
               "Root Cause (first observed failure):\n[0]:\n  time      : 2024-01-01_00:00:00\n  host      : node1\n"
               "  rank      : 5 (local_rank: 5)\n  exitcode  : 1 (pid: 123)\n")
    e = one(elastic)
    assert (e.rank, e.root_cause) == (5, True)


def _frames(*frames: tuple[str, str]) -> str:
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "{path}", line 10, in {func}\n    call()\n' for path, func in frames)


SITE = "/usr/lib/python3.10/site-packages"


def test_optimizer_internals_take_the_phase_of_what_encloses_them():
    step_excerpt = _frames((f"{SITE}/deepspeed/runtime/zero/stage3.py", "_optimizer_step"))
    engine_init = _frames((f"{SITE}/deepspeed/__init__.py", "initialize"),
                          (f"{SITE}/deepspeed/runtime/engine.py", "_configure_zero_optimizer"),
                          (f"{SITE}/deepspeed/runtime/zero/stage3.py", "initialize_optimizer_states"),
                          (f"{SITE}/deepspeed/runtime/zero/stage3.py", "_optimizer_step"),
                          (f"{SITE}/torch/optim/adam.py", "_init_group"))
    in_training = _frames(("train.py", "train_one_epoch"), (f"{SITE}/torch/optim/adamw.py", "_init_group"))
    assert [events(t + MSG)[0].phase for t in (step_excerpt, engine_init, in_training)] == ["train", "init", "train"]


def test_a_torchscript_backward_op_is_training():
    scripted = ('Traceback of TorchScript (most recent call last):\n  File "<string>", line 83, in <backward op>\n'
                "            result = torch.softmax(self, dim, dtype)\n")
    (event,) = events(scripted + MSG)
    assert (event.phase, event.operation) == ("train", "attention")  # the softmax it was computing



def test_torchscripts_here_marker_names_the_failing_statement():
    scripted = ('Traceback of TorchScript (most recent call last):\n  File "<string>", line 83, in <backward op>\n'
                "            def backward(grad_output):\n"
                "                grad_self = torch._softmax_backward_data(grad_output, result, dim, self.dtype)\n"
                "                            ~~~~~~~~~~~~~~~~~~~~~~~~~~~~ <--- HERE\n"
                "                return grad_self, None, None\n")
    assert events(scripted + MSG)[0].operation == "attention"  # not the `return` printed after it


def test_frames_inside_an_evaluation_package_are_evaluation():
    matching = _frames(("rfdetr/evaluation/matching.py", "build_matching_data"),
                       ("rfdetr/evaluation/matching.py", "_compute_mask_iou"))
    script = _frames(("eval_coco.py", "main"), ("models/head.py", "forward"))
    elsewhere = _frames(("models/evaluator_utils.py", "merge"), ("train.py", "<module>"))
    assert [events(t + MSG)[0].phase for t in (matching, script, elsewhere)] == ["eval", "eval", "unknown"]


def test_pytorchs_own_eval_frame_file_is_not_an_evaluation():
    # every activation-checkpointed step since torch 2.1 passes through torch/_dynamo/eval_frame.py
    checkpointed = _frames(("train.py", "train_epoch"), (f"{SITE}/torch/_dynamo/eval_frame.py", "_fn"),
                           (f"{SITE}/torch/utils/checkpoint.py", "checkpoint"), ("models/block.py", "forward"))
    assert events(checkpointed + MSG)[0].phase == "train"
    user_eval = _frames(("run.py", "main"), (f"{SITE}/torch/_dynamo/eval_frame.py", "_fn"),
                        ("project/eval_frame.py", "score"))
    assert events(user_eval + MSG)[0].phase == "eval"  # a project's own eval_*.py still is


def test_a_diffusers_pipeline_frame_is_generation_and_its_bar_no_training_step():
    bar = " 35%|███▌      | 7/20 [00:00<00:00, 50.51it/s]\n"
    sampling = _frames(("run.py", "<module>"), (f"{SITE}/diffusers/pipelines/ddpm/pipeline_ddpm.py", "__call__"),
                       (f"{SITE}/diffusers/models/unets/unet_2d.py", "forward"))
    (event,) = events(bar + sampling + MSG)
    assert (event.phase, event.step) == ("generate", None)
    training = _frames(("train.py", "train_one_epoch"), (f"{SITE}/diffusers/models/unets/unet_2d.py", "forward"))
    assert events(training + MSG)[0].phase == "train"  # the model alone is not a pipeline


def test_a_banner_initialising_a_part_of_the_model_is_set_up():
    banner = "Initializing language decoder from ../ckpt/vicuna/7b/ ...\n"
    assert events(banner + MSG)[0].phase == "init"
    assert events("Initializing the data pipeline ...\n" + MSG)[0].phase == "unknown"


def test_moving_a_module_to_the_device_is_set_up():
    convert = _frames((f"{SITE}/torch/nn/modules/module.py", "convert"))
    assert events(convert + MSG)[0].phase == "init"


def test_a_collectors_bare_time_stamp_does_not_hide_the_frames():
    text = "".join(f"16:49:33.632{ln}\n" for ln in (_frames(("train.py", "train_one_epoch")) + MSG).splitlines())
    assert events(text)[0].phase == "train"


def test_a_bar_redrawn_right_after_the_message_gives_the_step():
    text = MSG + "     0/299     15.8G      3.99     0.358         0      4.35        22       608:  63% 34/54 [00:42<00:25,  1.26s/it]\n"
    assert events(text)[0].step == 34


def test_an_inference_scripts_running_bar_is_not_a_training_step():
    bar = " 33%|███▎      | 1/3 [01:33<03:06, 93.34s/it]\n"
    infer = _frames(("test.py", "<module>"), ("test.py", "main"), ("test.py", "validation"))
    train = _frames(("train.py", "<module>"), ("train.py", "train"), ("train.py", "validation"))
    assert events(bar + infer + MSG)[0].step is None
    assert events(bar + train + MSG)[0].step == 1
    finished = " 100%|██████████| 12/12 [00:00<00:00, 47.40it/s]\n"  # training ended; then a generate call failed
    gen = _frames(("train.py", "<module>"), (f"{SITE}/transformers/generation/utils.py", "generate"))
    assert events(finished + gen + MSG)[0].step == 12


def test_pytests_long_traceback_after_the_failure_line_gives_the_phase():
    report = ("  FAILED tests/test_dpo.py::test_train - " + MSG +
              "  tests/test_dpo.py:852: \n  " + "_ " * 20 + "\n"
              "  .venv/lib/python3.11/site-packages/transformers/trainer.py:1412: in train\n"
              "      return inner_training_loop(\n")
    assert events(report)[0].phase == "train"


def test_streamlits_traceback_panel_after_the_message_gives_the_phase():
    panel = (MSG + "Traceback:\n"
             'File "/site-packages/chandra/scripts/app.py", line 61, in ocr_layout\n'
             "    result = model.generate([batch])[0]\n"
             'File "/site-packages/chandra/model/hf.py", line 34, in generate_hf\n'
             "    generated_ids = model.generate(**inputs, max_new_tokens=max_output_tokens)\n")
    assert events(panel)[0].phase == "generate"
    assert events(panel.replace("Traceback:\n", "Traceback: see the server log\n"))[0].phase == "unknown"


def test_frames_behind_a_child_process_label_are_read():
    # Ray actors and vLLM workers label each line with the process ("(WorkerDict pid=8812)", "(Worker_TP1 pid=..)");
    # a logging header may follow the label. The traceback under it is read, with no rank from the label.
    actor = ("(WorkerDict pid=8812) Traceback (most recent call last):\n"
             '(WorkerDict pid=8812)   File "/workspace/verl/workers/fsdp_workers.py", line 610, in update_actor\n'
             '(WorkerDict pid=8812)   File "/workspace/verl/workers/actor/dp_actor.py", line 380, in train_step\n'
             "(WorkerDict pid=8812) " + MSG)
    (event,) = events(actor)
    assert (event.rank, event.phase) == (None, "train")
    head = "(Worker_PP0_TP1 pid=162486) ERROR 08-14 16:06:55 [multiproc_executor.py:1020] "
    worker = (head + "Traceback (most recent call last):\n"
              + head + '  File "/workspace/vllm/v1/worker/gpu_model_runner.py", line 88, in generate\n'
              + "(EngineCore_DP0 pid=162129) ERROR 08-14 16:06:55 [core.py:1349] " + MSG)
    (event,) = events(worker)
    assert (event.rank, event.phase) == (None, "generate")
    assert event.detail.get("raised_in_engine") == "vllm"  # the label stays readable in the line's raw text
    # a label with no pid is not a process label; a parenthesis in the text is left alone
    (event,) = events("(raylet) " + MSG)
    assert event.phase == "unknown"


def _config(*texts: str) -> dict:
    cfg = config_from([Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(texts)], "train.log")
    return {k: v.value for k, v in cfg.items()}


def test_zero_stage_from_deepspeeds_config_print_and_the_config_files_name():
    assert _config("[INFO] [config.py:988:print]   zero_optimization_stage ...... 3")["zero_stage"] == 3
    assert _config("deepspeed: deepspeed_configs/zero3_bf16.json")["zero_stage"] == 3
    assert _config("--deepspeed ds_config_zero2.json")["zero_stage"] == 2
    assert "zero_stage" not in _config("loading hero3.json")


def test_the_run_configuration_each_popular_stack_prints_at_start():
    # the exact start-up prints of DeepSpeed's engine (dots padded to a column, down to two), accelerate's environment
    # summary, Lightning's AMP and process-group lines, and torchtune's resolved recipe config
    ds = _config("[INFO] [config.py:992:print]   bfloat16_enabled ............. True",
                 "[INFO] [config.py:992:print]   fp16_enabled ................. False",
                 "[INFO] [config.py:992:print]   gradient_accumulation_steps .. 8")
    assert (ds["bf16"], ds["fp16"], ds["gradient_accumulation_steps"]) == (True, False, 8)
    assert _config("Num processes: 8", "Process index: 0")["world_size"] == 8
    lightning = _config("Using bfloat16 Automatic Mixed Precision (AMP)",
                        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4")
    assert (lightning["bf16"], lightning["world_size"]) == (True, 4)
    assert _config("INFO: Using 16bit Automatic Mixed Precision (AMP)")["fp16"] is True
    assert _config("All distributed processes registered. Starting with 2 processes")["world_size"] == 2
    assert _config("enable_activation_checkpointing: false")["gradient_checkpointing"] is False
    # a full stop ending a sentence is no column padding
    assert "per_device_train_batch_size" not in _config("Lower the batch_size. 8 GPUs are not enough")


def test_a_memory_saver_that_did_not_load_is_recorded_and_an_8bit_optimizer_it_was_to_give_is_not_assumed():
    bnb = ("/usr/lib/python3/dist-packages/bitsandbytes/cextension.py:34: UserWarning: The installed version of "
           "bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization "
           "are unavailable.")
    assert _config(bnb)["bitsandbytes_unavailable"] is True
    assert _config("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:")[
        "xformers_unavailable"] is True
    assert _config("No module 'xformers'. Proceeding without it.")["xformers_unavailable"] is True
    assert not {"bitsandbytes_unavailable", "xformers_unavailable"} & _config(
        "Applying attention optimization: xformers... done.", "bitsandbytes 0.45.0 loaded").keys()

    from oomdoctor.facts import derive
    from oomdoctor.parse.events import parse_text

    def eight_bit(*lines: str) -> object:
        return derive(parse_text("\n".join((*lines, MSG)), "train.log"), 0).values["optimizer_is_8bit"]

    assert eight_bit("optim=paged_adamw_8bit,") is True
    assert eight_bit("optim=paged_adamw_8bit,", bnb) is False  # the 8-bit optimizer was asked for, not given


def test_zeros_gradient_bucket_size_and_overlap_comm_in_every_spelling():
    printed = ("[INFO] [config.py:1003:print]   zero_config .................. stage=2 contiguous_gradients=True "
               "reduce_scatter=True reduce_bucket_size=500000000 allgather_partitions=True "
               "allgather_bucket_size=500000000 overlap_comm=True load_from_fp32_weights=True")
    cfg = _config(printed)
    assert (cfg["zero_stage"], cfg["reduce_bucket_size"], cfg["overlap_comm"]) == (2, 500_000_000, True)
    assert _config('    "reduce_bucket_size": 5e8,')["reduce_bucket_size"] == 500_000_000
    assert _config("reduce_bucket_size=200,000,000 overlap_comm=False")["reduce_bucket_size"] == 200_000_000
    assert _config("reduce_bucket_size=200,000,000 overlap_comm=False")["overlap_comm"] is False
    assert "reduce_bucket_size" not in _config('    "reduce_bucket_size": "auto",')  # resolved later, not printed


def test_a_bare_switch_in_a_launch_command_is_on():
    assert _config("torchrun train.py --bf16 --gradient_checkpointing \\") == {
        "bf16": True, "gradient_checkpointing": True}
    assert _config("python train.py --bf16 False --fp16")["bf16"] is False  # a value, when given, is the value
    assert _config("python train.py --fp16 --lr 3e-4")["fp16"] is True
    assert _config("python train.py --use_checkpoint")["gradient_checkpointing"] is True
    assert "bf16" not in _config("see --bf16_full_eval for details")  # another option
    assert "bf16" not in _config("the --bf16 switch halves activation memory")  # prose, not a command


def test_prose_after_the_word_optimizer_names_no_optimizer():
    assert "optimizer" not in _config("[axolotl callback] after optimizer step 6")
    assert _config("optim=adamw_torch_fused,")["optimizer"] == "adamw_torch_fused"
    assert _config("optimizer: paged_adamw_8bit")["optimizer"] == "paged_adamw_8bit"


def test_the_evaluation_loops_bar_gives_its_length_and_a_training_bar_does_not():
    train_bar = " 10%|█         | 50/500 [01:40<15:00,  2.00s/it]\n"
    banner = "***** Running Evaluation *****\n"
    eval_bar = " 44%|████▍     | 14/32 [00:03<00:04,  4.35it/s]\n"
    frames = _frames((f"{SITE}/transformers/trainer.py", "evaluation_loop"))
    (event,) = events(train_bar + banner + eval_bar + frames + MSG)
    assert (event.detail["eval_batches_done"], event.detail["eval_batches_total"]) == (14, 32)
    (event,) = events(train_bar + banner + frames + MSG)  # no evaluation bar printed yet
    assert "eval_batches_total" not in event.detail


def test_the_error_raised_on_top_of_the_oom_can_say_it_was_loading_the_model():
    assert events(MSG + "\nException: Failed to load SDXL model\n")[0].phase == "init"
    assert events(MSG + "\nRuntimeError: Could not load checkpoint weights.pt\n")[0].phase == "init"
    assert events(MSG + "\nException: Failed to process batch 3\n")[0].phase == "unknown"


def test_a_stack_named_only_in_a_logging_prefix_is_still_named():
    log = "INFO:tensorflow:step = 21901, loss = 0.0004 (1.756 sec)\n" + MSG
    from oomdoctor.parse import parse_text

    assert parse_text(log).runs[0].config["stacks"].value == ["tensorflow"]


def test_a_hedged_title_keeps_a_names_capitals():
    from oomdoctor.engine.engine import _lower_first

    assert _lower_first("TensorFlow maps the GPU") == "TensorFlow maps the GPU"
    assert _lower_first("JAX/XLA preallocates") == "JAX/XLA preallocates"
    assert _lower_first("The batch may be too large") == "the batch may be too large"
    assert _lower_first("A batch of thousands") == "a batch of thousands"


def test_torch_load_restoring_tensors_onto_the_gpu_is_set_up():
    restore = _frames((f"{SITE}/torch/serialization.py", "default_restore_location"),
                      (f"{SITE}/torch/serialization.py", "_cuda_deserialize"))
    assert events(restore + MSG)[0].phase == "init"


def test_an_evaluation_bar_redrawn_right_after_the_message_names_the_phase():
    assert events(MSG + "\nPredicting:   0%|          | 0/40 [00:00<?, ?it/s]\n")[0].phase == "eval"
    assert events(MSG + "\nMap:  40%|████      | 400/1000\n")[0].phase == "unknown"


def test_lightnings_accelerator_summary_does_not_name_a_tpu():
    assert "tpu" not in stacks("GPU available: True (cuda), used: True", "TPU available: False, using: 0 TPU cores")
    assert "tpu" in stacks("Compilation failure: Ran out of memory in memory space hbm. Used 8.38G of 8.00G hbm.")


def test_trls_lora_defaults_with_peft_off_are_not_lora():
    dump = "Model parameters ModelConfig(model_name_or_path='Qwen/Qwen2.5-1.5B-Instruct', use_peft=False, lora_r=16, lora_alpha=32)"
    assert _config(dump)["lora"] is False
    assert _config(dump.replace("use_peft=False", "use_peft=True"))["lora"] is True


def test_the_weights_dtype_is_the_runs_argument_not_the_checkpoints_config():
    args = "Model parameters ModelArguments(model_name_or_path='meta-llama/Llama-2-7b-hf', torch_dtype='bfloat16')"
    saved = '  "torch_dtype": "float16",'
    assert _config(args, saved)["model_dtype"] == "bfloat16"
    assert _config("model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16)")["model_dtype"] == "float16"


def test_data_building_bars_and_banners_are_set_up_and_a_glued_training_bar_counts():
    data = ("Constructing datasets...\n"
            "Training datasets: 100%|##########| 231/231 [00:00<00:00, 1087.41it/s]\n"
            "Validation datasets: 100%|##########| 42/42 [00:00<00:00, 2241.66it/s]\n")
    # building the data is neither an evaluation nor the training counter: nothing has run yet
    e = one(data + MSG)
    assert (e.phase, e.step) == ("init", None)
    # a training bar drawn on the failing line itself, before the message, is the loop that failed
    e = one(data + "Training:   0%|          | 0/1000 [00:00<?, ?it/s]" + MSG)
    assert (e.phase, e.step) == ("train", 0)
    e = one("Processing...\nProcessing graphs...\n100%|##########| 1/1 [00:00<00:00, 31068.92it/s]\n" + MSG)
    assert e.phase == "init"  # PyTorch Geometric preparing its dataset


def _tb(*frames: tuple[str, str]) -> str:
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "{path}", line 10, in {func}\n    step()\n' for path, func in frames)


def test_a_script_names_the_phase_only_when_no_function_does():
    assert events(_tb(("test_semisup.py", "<module>"), ("/usr/lib/python3/site-packages/numpy/core.py", "concat"))
                  + MSG)[0].phase == "eval"
    assert events(_tb(("/workspace/proj/preprocess.py", "<module>"), ("/workspace/proj/io.py", "dump")) + MSG)[0].phase \
        == "init"
    # a function that names its phase wins over the script's name; a helper module's name says nothing
    assert events(_tb(("test.py", "<module>"), ("test.py", "train_epoch")) + MSG)[0].phase == "train"
    assert events(_tb(("run.py", "<module>"), ("/workspace/proj/test_utils.py", "pad")) + MSG)[0].phase == "unknown"


def test_a_kill_right_after_a_scripts_own_loading_line_is_set_up():
    for loading in ("Load pretraining parameters from /workspace/model/params.", "-- loading /data/models/q4f16/params/",
                    "Loading pretrained weights"):
        (e,) = events("Namespace(model='x')\n" + loading + "\nKilled\n")
        assert e.phase == "init", loading
    # a loading line the training loop has gone past is stale
    (e,) = events("Loading model weights\n{'loss': 0.5, 'step': 10}\nKilled\n")
    assert e.phase == "train"


def test_data_preparation_functions_are_set_up():
    assert events(_tb(("main.py", "<module>"), ("/workspace/proj/prepro.py", "build_features")) + MSG)[0].phase == "init"
    for loader in ("load_data", "extract_data", "load_dataset", "read_data"):  # a dataset read before training
        assert events(_tb(("convolutional.py", "<module>"), ("convolutional.py", "main"), ("convolutional.py", loader))
                      + MSG)[0].phase == "init", loader
    # ... but a training loop's frame inside still wins
    assert events(_tb(("main.py", "load_data"), ("main.py", "train_epoch")) + MSG)[0].phase == "train"


def test_a_traceback_after_the_process_died_belongs_to_a_later_command():
    died = ("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n"
            "./run.sh: line 34:  4482 Aborted                 (core dumped) ./tool -input data\n")
    later = _tb(("eval.py", "<module>")) + "ValueError: bad format\n"
    assert events(died + later)[0].phase == "unknown"
    # a message logged before its own traceback still takes the traceback's phase
    logged = MSG + _tb(("train.py", "<module>"), ("train.py", "evaluate")) + "RuntimeError: see above\n"
    assert events(logged)[0].phase == "eval"


def test_a_validation_bar_without_glyphs_names_the_phase():
    log = ("0/10 * Epoch (train): 100% 32/32 [00:41<00:00,  2.39s/it, loss=0.898]\n"
           "0/10 * Epoch (valid):   3% 1/32 [00:01<00:46,  1.50s/it, loss=1.656]\n"
           "RuntimeError: CUDA error: out of memory\n")
    assert events(log)[0].phase == "eval"


MSG_21 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 986.00 MiB. GPU 3 has a total capacity of "
          "23.64 GiB of which 499.69 MiB is free. Including non-PyTorch memory, this process has 23.15 GiB memory in "
          "use. Of the allocated memory 18.71 GiB is allocated by PyTorch, and 3.83 GiB is reserved by PyTorch but "
          "unallocated. If reserved but unallocated memory is large try setting\n")


def test_the_messages_own_advice_wrapped_onto_its_own_line_is_not_a_setting():
    from oomdoctor.parse import parse_text

    hint = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation\n"
    assert parse_text(MSG_21 + hint).runs[0].alloc_conf is None
    assert parse_text("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + MSG_21 + hint
                      ).runs[0].alloc_conf.value == "expandable_segments:True"


def test_ignites_bar_puts_its_count_before_the_bar():
    after = events(MSG + "Epoch: [63/4391266]   0%|          , loss=0.0535, lr=5e-5 [00:09<174:20:29\n")[0]
    assert (after.step, after.phase) == (63, "train")
    before = events("Epoch [2/10]: [30/100]  30%|###       , loss=1.2 [00:09<00:21]\n" + MSG)[0]
    assert before.step == 130


def test_monais_stats_line_counts_the_epochs_before_its_iteration():
    e = events("2026-11-29 01:19:22,273 - INFO - Epoch: 2/3, Iter: 4/10 -- train_loss: 0.4807 \n" + MSG)[0]
    assert (e.step, e.phase) == (14, "train")  # epochs count from 1: one epoch of 10 before, plus 4


def test_an_ignite_evaluator_opening_its_run_is_evaluation_after_the_training_step():
    train = "2026-11-29 01:19:22,771 - INFO - Epoch: 2/3, Iter: 10/10 -- train_loss: 0.4627 \n"
    for opening in ("INFO:ignite.engine.engine.SupervisedEvaluator:Engine run resuming from iteration 0, epoch 1 "
                    "until 2 epochs\n",
                    "2024-05-01 10:00:00,000 val_evaluator INFO: Engine run starting with max_epochs=1.\n"):
        e = events(train + opening + MSG)[0]
        assert (e.phase, e.step) == ("eval", 20), opening


def test_an_ignite_trainer_opening_its_run_starts_training_at_its_iteration():
    e = events("INFO:ignite.engine.engine.SupervisedTrainer:Engine run resuming from iteration 0, epoch 0 until 3 "
               "epochs\n" + MSG)[0]
    assert (e.phase, e.step, e.detail.get("first_step")) == ("train", 0, True)
    e = events("INFO:ignite.engine.engine.SupervisedTrainer:Engine run resuming from iteration 120, epoch 3 until 5 "
               "epochs\n" + MSG)[0]
    assert e.step == 120
    # ignite's own Engine class names no loop: an evaluator built by create_supervised_evaluator logs the same name
    e = events("INFO:ignite.engine.engine.Engine:Engine run starting with max_epochs=1.\n" + MSG)[0]
    assert e.step is None and not e.detail.get("first_step")


def test_a_failed_export_is_writing_the_model_out():
    assert events("Detailed export error: " + MSG)[0].phase == "save"


def test_a_start_banner_that_names_its_iteration_gives_the_first_steps_count():
    for banner, step in (("[08/06 19:37:38 d2.engine.train_loop]: Starting training from iteration 1200\n", 1200),
                         ("2022-08-06 19:37:38,038 INFO: Start training from epoch: 0, iter: 0\n", 0),
                         ("***** Running training *****\n", None)):
        e = events(banner + MSG)[0]
        assert (e.step, e.phase, e.detail.get("first_step")) == (step, "train", True), banner
    later = events("Starting training from iteration 0\niter: 20  total_loss: 1.2\n" + MSG)[0]
    assert (later.step, later.detail.get("first_step")) == (20, None)


def test_a_constructor_is_set_up_unless_a_phase_frame_runs_inside_it():
    assert events(_tb(("run.py", "<module>"), ("/site-packages/recbole/model/recvae.py", "__init__")) + MSG)[0].phase \
        == "init"
    assert events(_tb(("run.py", "<module>"), ("/workspace/proj/trainer.py", "__init__"),
                      ("/workspace/proj/trainer.py", "evaluate")) + MSG)[0].phase == "eval"


def test_a_quantization_bar_is_not_a_training_step():
    bar = "Quantizing mlp.down_proj in layer 0 of 125:   0%|          | 0/126 [00:44<?, ?it/s]\n"
    e = events(bar + MSG)[0]
    assert (e.step, e.phase) == (None, "unknown")


LOSS_TRACEBACK = (
    'Traceback (most recent call last):\n'
    '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py", line 3053, in cross_entropy\n'
    '    return torch._C._nn.cross_entropy_loss(input, target, weight)\n'
    'RuntimeError: CUDA out of memory. Tried to allocate 1.17 GiB (GPU 0; 10.76 GiB total capacity; 7.37 GiB '
    'already allocated; 525.44 MiB free; 9.07 GiB reserved in total by PyTorch)\n')


def test_a_loss_frame_alone_reads_as_training_but_never_over_other_evidence():
    (event,) = events(LOSS_TRACEBACK)
    assert event.phase == "train"
    (event,) = events("Saving model checkpoint to out/checkpoint-500\n" + LOSS_TRACEBACK)
    assert event.phase == "save"


def test_an_image_to_image_gans_training_step_frames_are_training():
    oom = "RuntimeError: CUDA out of memory. Tried to allocate 50.00 MiB (GPU 0; 4.00 GiB total capacity)\n"
    for step in ("run_generator_one_step", "run_discriminator_one_step", "optimize_parameters"):  # SPADE's, pix2pix's
        tb = ("Traceback (most recent call last):\n"
              '  File "train.py", line 46, in <module>\n'
              f"    trainer.{step}(data_i)\n"
              f'  File "/workspace/trainers/pix2pix_trainer.py", line 36, in {step}\n'
              "    g_losses, generated = self.model(data, mode='generator')\n")
        (event,) = events(tb + oom)
        assert event.phase == "train", step


def test_a_backward_pass_under_an_attack_or_an_attribution_method_is_no_training():
    oom = "RuntimeError: CUDA out of memory. Tried to allocate 50.00 MiB (GPU 0; 4.00 GiB total capacity)\n"

    def tb(*frames: tuple[str, str]) -> str:
        return "Traceback (most recent call last):\n" + "".join(
            f'  File "{path}", line 10, in {func}\n    x = y\n' for path, func in frames) + oom

    backward = ("/site-packages/torch/autograd/__init__.py", "backward")
    # Grad-CAM visualising a trained model, an FGSM attack: gradients with respect to the input
    (event,) = events(tb(("vis_cam.py", "main"), ("/site-packages/pytorch_grad_cam/base_cam.py", "forward"), backward))
    assert event.phase == "unknown"
    (event,) = events(tb(("run.py", "main"), ("utils.py", "fgsm"), backward))
    assert event.phase == "unknown"
    # what encloses the attack still names the phase: adversarial training, a robustness evaluation
    (event,) = events(tb(("run.py", "train_epoch"), ("utils.py", "pgd_attack"), backward))
    assert event.phase == "train"
    (event,) = events(tb(("run.py", "evaluate"), ("utils.py", "pgd_attack"), backward))
    assert event.phase == "eval"
    # a plain training backward stays training
    (event,) = events(tb(("run.py", "main"), backward))
    assert event.phase == "train"


def test_an_evaluation_bar_with_the_message_glued_after_it_is_the_phase():
    glued = "Validation DataLoader 0:  40%|████      | 4/10 [00:03<00:04]" + LOSS_TRACEBACK.splitlines()[-1] + "\n"
    (event,) = events(glued)
    assert event.phase == "eval"
    (event,) = events(LOSS_TRACEBACK.splitlines()[-1] + " Validation DataLoader 0:  40%|\n")  # after it: not the phase
    assert event.phase != "eval"


def test_a_keras_bar_at_its_total_still_showing_an_eta_is_the_epoch_end_validation():
    message = "ResourceExhaustedError: OOM when allocating tensor with shape[1,64,96,96] and type float\n"
    (event,) = events("Epoch 1/100\n100/100 [==============================] - ETA: 0s - loss: 0.7440\n" + message)
    assert event.phase == "eval"
    for bar in ("57/100 [================>.............] - ETA: 3s - loss: 0.7440\n",  # mid-epoch
                "100/100 [==============================] - 41s 410ms/step - loss: 0.7440\n"):  # the epoch closed
        (event,) = events("Epoch 1/100\n" + bar + message)
        assert event.phase != "eval", bar


def test_another_frameworks_trainer_py_is_not_hf_trainer():
    chainer = '  File "/opt/conda/lib/python2.7/site-packages/chainer/training/trainer.py", line 306, in run'
    lightning = '  File "/usr/lib/python3/site-packages/pytorch_lightning/trainer/trainer.py", line 1030, in _run_stage'
    assert "hf_trainer" not in stacks(chainer) and "hf_trainer" not in stacks(lightning)
    hf = '  File "/workspace/src/trainer.py", line 1885, in _inner_training_loop'  # a vendored copy of HF's Trainer
    assert "hf_trainer" in stacks(hf)


def test_llama_cpp_context_building_is_init_and_chainers_training_loop_is_train():
    ggml = ("llama_new_context_with_model: n_ctx      = 4096\n"
            "llama_new_context_with_model: KV self size  = 1005.79 MiB\n"
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: "
            "out of memory\n")
    (event,) = events(ggml)
    assert (event.kind, event.phase, event.requested_bytes) == ("cuda_error", "init", 4096 * 2**20)
    (event,) = events("Exception in main training loop: out of memory to allocate 205520896 bytes "
                      "(total 16068929536 bytes)\n")
    assert (event.kind, event.phase, event.requested_bytes) == ("cuda_oom", "train", 205520896)


def test_a_message_prefix_naming_evaluation_is_the_phase_and_an_encode_bar_is_no_step():
    log = ("Batches: 100%|██████████| 3125/3125 [03:27<00:00, 15.07it/s]\n"
           "Error while evaluating MSMARCO: CUDA out of memory. Tried to allocate 93.68 GiB.\n")
    (event,) = events(log)
    assert (event.phase, event.step) == ("eval", None)


def test_a_message_prefix_or_a_start_line_naming_generation_is_the_phase():
    oom = "CUDA out of memory. Tried to allocate 9.07 GiB. GPU 0 has a total capacity of 23.68 GiB of which 7.80 GiB is free.\n"
    bar = " 19%|███▊               | 3/16 [01:37<07:00, 32.31s/it]\n"
    # an app's own error line around the message (a Gradio text-to-video demo)
    (event,) = events("[ERROR] Error during text-to-video generation: " + oom)
    assert event.phase == "generate"
    # its start line, then the sampler's unlabelled bar: the bar is the generation's, not training step 3
    (event,) = events("[INFO] Starting text-to-video generation...\n" + bar + "RuntimeError: " + oom)
    assert (event.phase, event.step) == ("generate", None)
    # a training bar after a sampling run at a checkpoint is training again
    (event,) = events("Start sampling\n" + bar + "Steps:  45%|████▌     | 450/1000 [10:00<12:00, 1.31s/it]\n"
                      "RuntimeError: " + oom)
    assert (event.phase, event.step) == ("train", 450)
    # words about generation that start nothing
    (event,) = events("generation config: max_new_tokens=64\n" + bar + "RuntimeError: " + oom)
    assert event.phase == "train"


def test_an_ide_exception_view_lists_its_frames_after_the_message_innermost_first():
    view = ("Exception has occurred: OutOfMemoryError\n"
            "CUDA out of memory. Tried to allocate 16.00 MiB (GPU 0; 4.00 GiB total capacity; 3.46 GiB already "
            "allocated; 0 bytes free; 3.47 GiB reserved in total by PyTorch)\n"
            '  File "/usr/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1507, in _configure_zero_optimizer\n'
            "    optimizer = DeepSpeedZeroOptimizer(\n"
            '  File "/workspace/train.py", line 8, in <module>\n'
            "    engine = make_engine(model)\n")
    (event,) = events(view)
    assert event.phase == "init"
    (event,) = events(view.replace("Exception has occurred: OutOfMemoryError\n", "some other line\n"))
    assert event.phase == "unknown"  # without the banner, lines after a message are not its frames


def test_a_notebook_error_dump_reads_its_stack_after_the_message():
    # VS Code's "copy output" of a notebook error: a JSON object whose message and stack strings span lines with no
    # blank line between them. The message ends where the stack's traceback header starts.
    dump = ('{\n\t"name": "RuntimeError",\n\t"message": "CUDA error: out of memory\n'
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
            'incorrect.\n",\n\t"stack": "-----------------------------------------------------------------\n'
            "RuntimeError                              Traceback (most recent call last)\n"
            "Cell In[4], line 3\n      2 model.cuda()\n----> 3 result = trainer.train()\n\n"
            "File /opt/conda/lib/python3.11/site-packages/transformers/trainer.py:2241, in Trainer.train(self, "
            "resume_from_checkpoint, trial)\n")
    (event,) = events(dump)
    assert (event.kind, event.phase) == ("cuda_error", "train")
    (event,) = events(dump.replace("Trainer.train(", "Trainer.evaluate("))
    assert event.phase == "eval"


def test_a_log_inside_a_json_error_body_is_read_line_by_line():
    # A client's exception carrying a server's JSON error: the runner's lines joined by escaped newlines. The bare
    # cudaMalloc line and ggml's buffer line after it are one failure; the context line after them names set-up.
    body = ('RuntimeError: request failed (500): {"error": "model runner exited: cudaMalloc failed: out of memory\\n'
            'ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 2147483648\\n'
            'llama_new_context_with_model: failed to allocate compute buffers"}\n')
    (event,) = events(body)
    assert (event.kind, event.gpu_index, event.requested_bytes, event.phase) == ("cuda_error", 1, 2147483648, "init")
    assert event.line == 1
    (event,) = events("[rank3]: " + body)  # the launcher's prefix labels every line the string holds
    assert (event.rank, event.gpu_index, event.phase) == (3, 1, "init")


def test_escaped_newlines_split_a_line_only_when_every_backslash_is_an_escape():
    from oomdoctor.parse.normalize import _unescaped_lines

    assert _unescaped_lines(r'a \"b\"\n\tc\nd\\e') == ['a "b"', "\tc", "d\\e"]
    assert _unescaped_lines(r"C:\Users\me\new_run\nlog\nx") == [r"C:\Users\me\new_run\nlog\nx"]  # a path
    assert _unescaped_lines(r"one\ntwo") == [r"one\ntwo"]  # one escaped newline may be a path's "\n"


def test_llama_cpps_context_creation_failing_after_the_message_is_set_up():
    log = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1328.31 MiB on device 0: cudaMalloc failed: out of memory\n"
           "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1392836608\n"
           "llama_new_context_with_model: failed to allocate compute buffers\n")
    (event,) = events(log)
    assert (event.phase, event.gpu_index) == ("init", 0)
    (event,) = events(log.replace("llama_new_context_with_model: failed to allocate compute buffers\n", ""))
    assert event.phase == "unknown"
    # the context's KV cache, sized when the model is set up
    (event,) = events("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 256.00 MiB on device 1: cudaMalloc failed: "
                      "out of memory\nalloc_tensor_range: failed to allocate CUDA1 buffer of size 268435456\n"
                      "llama_kv_cache_init: failed to allocate buffer for kv cache\n")
    assert (event.phase, event.gpu_index) == ("init", 1)


def test_a_statement_building_an_object_as_the_last_frame_is_set_up():
    # A traceback cut at the statement that builds the pipeline or the dataset: its constructor was running.
    tb = ("Traceback (most recent call last):\n"
          '  File "/workspace/transcribe.py", line 12, in <module>\n'
          '    pipe = speech.AsrPipeline("large-v3", dtype=jnp.bfloat16)\n'
          "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
          "5120 bytes.\n")
    (event,) = events(tb)
    assert event.phase == "init"
    # a tensor wrapped inside the training step builds nothing, and a call that is not assigned is not a build
    for code in ("    inputs = Variable(batch.cuda())", "    t = torch.FloatTensor(rows)", "    run(Config())",
                 "    loss = nn.CrossEntropyLoss(weight=w)(out, y)", "    y = Head(cfg)(x)", "    l = nn.MSELoss()",
                 "    feats = self.ConvBLSTM(lstm_feats)"):  # a submodule the model holds, called in its forward
        (event,) = events(tb.replace('    pipe = speech.AsrPipeline("large-v3", dtype=jnp.bfloat16)', code))
        assert event.phase == "unknown", code
    # a training frame inside the constructor still wins
    (event,) = events(tb.replace("5120 bytes", "5120 bytes")
                      .replace("jaxlib", '  File "/workspace/runner.py", line 3, in train_step\n    y = f(x)\njaxlib'))
    assert event.phase == "train"


def test_a_message_saying_the_model_was_being_loaded_is_set_up():
    msg = ("E1129 10:00:00.000 12 model_lifecycle.cc:626] failed to load 'llm' version 1: Internal: unexpected error when "
           "creating modelInstanceState: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, "
           "stream): out of memory (/src/tensorrt_llm/runtime/buffers.h:112)\n")
    (event,) = events(msg)
    assert event.phase == "init"
    (event,) = events("RuntimeError: Error while loading the model: CUDA out of memory. Tried to allocate 20.00 MiB\n")
    assert event.phase == "init"
    (event,) = events("RuntimeError: Error while running the request: CUDA out of memory. Tried to allocate 20.00 MiB\n")
    assert event.phase == "unknown"
    ort = ("2023-08-25 19:08:18.923557831 [E:onnxruntime:, inference_session.cc:1644 operator()] Exception during "
           "initialization: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:368 void* onnxruntime::BFCArena::"
           "AllocateRawInternal(size_t, bool) Failed to allocate memory for requested buffer of size 4718592\n")
    (event,) = events(ort)
    assert event.phase == "init"  # ONNX Runtime creating its session
    (event,) = events(ort.replace("Exception during initialization: ", ""))
    assert event.phase == "unknown"


def test_a_spawned_worker_killed_after_the_scripts_epoch_banner_is_training():
    # torch.multiprocessing.spawn before 1.5 raised a plain Exception for a worker the kernel killed
    log = ("Starting Epoch: 0\nTotal Epoches: 80\nTraceback (most recent call last):\n"
           '  File "/workspace/train_dist.py", line 148, in main\n    mp.spawn(main_worker, nprocs=4)\n'
           "Exception: process 2 terminated with signal SIGKILL\n")
    (event,) = events(log)
    assert (event.kind, event.phase) == ("host_oom", "train")
    (event,) = events(log.replace("Starting Epoch: 0\n", ""))
    assert event.phase == "unknown"
    assert not events("Exception: process 2 terminated with exit code 1\n")


def test_detectron2s_closing_report_after_the_message_names_the_failing_iteration():
    log = (MSG + "[11/29 10:00:00 d2.engine.hooks]: Overall training speed: 3 iterations in 0:00:02 (0.7 s / it)\n"
           "[11/29 10:00:00 d2.engine.hooks]: Total training time: 0:00:03 (0:00:00 on hooks)\n"
           "[11/29 10:00:00 d2.utils.events]:  eta: 0:10:00  iter: 4  total_loss: 1.913  loss_cls: 0.7  lr: 2e-05  "
           "max_mem: 1710M\n")
    (event,) = events(log)
    assert (event.step, event.phase) == (4, "train")
    (event,) = events(log.replace("Total training time", "Total inference time"))
    assert (event.step, event.phase) == (None, "unknown")


def test_the_rest_of_a_prefixed_row_a_terminal_cut_keeps_the_rows_rank():
    head = "[1,3]<stderr>:  what():  /src/kernels/hashtable_op_gpu.cu.cc:413"
    row = head + "x" * (100 - len(head))
    log = (row + "\n: CUDA error 2: out of memory\n[1,3]<stderr>:[host:87519] *** Process received signal ***\n"
           "[1,2]<stderr>:" + "y" * 86 + "\n")
    (event,) = events(log)
    assert event.rank == 3
    (event,) = events(log.replace(row, row[:-10]))  # a row narrower than the widest was not cut
    assert event.rank is None


def test_an_unprefixed_message_right_before_a_ranks_traceback_is_that_ranks():
    tb = ("[rank2]: Traceback (most recent call last):\n"
          '[rank2]:   File "/workspace/train.py", line 77, in train\n[rank2]:     trainer.train()\n')
    (event,) = events(MSG + tb)
    assert event.rank == 2
    (event,) = events(MSG + "\n" + tb)  # a blank line between: the traceback may be another failure's
    assert event.rank is None


def test_another_ranks_traceback_right_after_a_ranks_message_tells_the_phase():
    # torchrun: rank 5's message, then rank 3's traceback (the ranks run one program in step)
    tb = ("[rank3]: Traceback (most recent call last):\n"
          '[rank3]:   File "/workspace/finetune.py", line 112, in <module>\n[rank3]:     stats = trainer.train()\n'
          '[rank3]:   File "/venv/lib/python3.10/site-packages/transformers/trainer.py", line 2237, in train\n')
    (event,) = events("[rank5]: " + MSG + tb)
    assert (event.rank, event.phase) == (5, "train")
    # a launcher's wrapper alone ("_training_function" runs predict runs too) says too little about another process
    wrapper = tb.replace("stats = trainer.train()", "_training_function(config)").replace("in train\n", "in run_sft\n")
    wrapper = wrapper.replace("in <module>", "in _training_function")
    (event,) = events("[rank5]: " + MSG + wrapper)
    assert event.phase == "unknown"
    # the rank's own traceback, or a blank line between, is not borrowed
    (event,) = events("[rank5]: " + MSG + "\n" + tb)
    assert event.phase == "unknown"


def test_the_compilers_own_constructors_are_not_set_up():
    # Inductor's CUDA-graph trees build a CUDAGraphNode on a compiled function's first calls, in any phase
    tb = ('Traceback (most recent call last):\n'
          '  File "/venv/lib/python3.10/site-packages/torch/_inductor/cudagraph_trees.py", line 2123, in record_function\n'
          '    node = CUDAGraphNode(\n'
          '  File "/venv/lib/python3.10/site-packages/torch/_inductor/cudagraph_trees.py", line 970, in __init__\n'
          '    self.recording_outputs = self._record(\n')
    (event,) = events(tb + MSG)
    assert event.phase == "unknown"
    (event,) = events(tb.replace("_inductor/cudagraph_trees.py", "nn/modules/conv.py") + MSG)
    assert event.phase == "init"  # a module's own constructor is set-up


def test_a_tracing_span_rank_after_the_message_is_its_rank():
    # Text Generation Inference's shard: the record's span fields follow the multi-line message on a row of their own
    tail = "Error: ShardCannotStart\n"
    (event,) = events(MSG + " rank=1\n" + tail)
    assert event.rank == 1
    (event,) = events(MSG + "\n rank=1\n" + tail)  # a blank row between: another record's field
    assert event.rank is None
    (event,) = events(MSG + " world rank=1 of 2\n" + tail)  # prose naming a rank is not the span's field
    assert event.rank is None


def test_a_web_servers_access_line_for_the_failed_request_is_serving():
    # the handler logged the message, then the server logged the request it failed with a server error
    access = 'INFO:     127.0.0.1:41070 - "POST /clone_voice HTTP/1.1" 500 Internal Server Error\n'
    (event,) = events(MSG + access)
    assert event.phase == "generate"
    werkzeug = '127.0.0.1 - - [20/Mar/2025 11:29:15] "POST /predict HTTP/1.1" 500 -\n'
    (event,) = events(MSG + werkzeug)
    assert event.phase == "generate"
    (event,) = events(MSG + access.replace('" 500 Internal Server Error', '" 200 OK'))  # another request, served
    assert event.phase == "unknown"


def test_a_prediction_scripts_walk_over_its_inputs_is_evaluation():
    bar = "  0%|          | 0/125 [00:00<?, ?it/s]\n"
    for banner in ("Predicting file 1/1    case_01\n", "Inference using model nnUNetTrainer__3d_fullres\n"):
        (event,) = events(banner + "Preprocessing image case_01.nii.gz\n" + bar + MSG)
        assert (event.step, event.phase) == (None, "eval"), banner
    (event,) = events("Preprocessing image case_01.nii.gz\n" + bar + MSG)  # the bar alone: a training step
    assert (event.step, event.phase) == (0, "train")


def test_a_frame_opened_by_a_code_spans_backtick_is_read():
    tb = ('`File "/venv/lib/python3.8/site-packages/torch/nn/modules/module.py", line 671, in convert\n'
          "    return t.to(device, dtype if t.is_floating_point() else None, non_blocking)\n")
    (event,) = events(tb + MSG.rstrip("\n") + "`\n")
    assert event.phase == "init"  # Module.to() moving the model


def test_a_cuda_error_raised_in_pin_memory_is_the_hosts_page_locked_memory():
    tb = ('Traceback (most recent call last):\n  File "/workspace/src/expert_cache.py", line 68, in <listcomp>\n'
          "    torch.UntypedStorage(self.module_size).pin_memory(self.device) for _ in range(offload_size)]\n"
          '  File "/venv/lib/python3.10/site-packages/torch/storage.py", line 226, in pin_memory\n'
          "    cast(Storage, self)).pin_memory(device)\n")
    (event,) = events(tb + "RuntimeError: CUDA error: out of memory\n")
    assert (event.kind, event.operation) == ("cuda_error", "pin_memory")
    (event,) = events(tb.replace("in pin_memory", "in _new_shared") + "RuntimeError: CUDA error: out of memory\n")
    assert event.operation is None  # pin_memory() only in a code line, not the failing frame


def test_a_loaders_caught_cuda_errors_at_two_call_sites_are_two_failures_of_loading():
    log = ("[2025-04-13 22:44:54.874] [warning] Failed to load safetensors using method MIO: CUDA error: out of memory "
           "(at C:\\src\\Serialization.cpp:130)\n"
           "[2025-04-13 22:45:02.011] [warning] Failed to load safetensors using method READ: CUDA error: out of memory "
           "(at C:\\src\\Tensor.h:72)\n")
    first, second = events(log)
    assert (first.line, second.line) == (1, 2)  # each closed by its own source location
    assert (first.phase, second.phase) == ("init", "init")


def test_a_tensorflow_backward_op_is_training():
    log = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
           "shape[2048,3,130,130] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
           "\t [[{{node gradients/discriminator/conv_0/Conv2D_grad/Conv2DBackpropFilter}} = Conv2DBackpropFilter[T=DT_FLOAT]()]]\n")
    (event,) = events(log)
    assert event.phase == "train"
    (event,) = events(log.replace("gradients/discriminator", "discriminator"))
    assert event.phase == "unknown"  # a forward op alone says nothing of the phase


def test_a_tensorflow_batch_norm_in_training_mode_is_training():
    log = ("ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[32,256,52,52]\n"
           "\t [[Node: batch_normalization_12/FusedBatchNorm = FusedBatchNorm[T=DT_FLOAT, data_format=\"NHWC\", "
           "epsilon=0.001, is_training=true, _device=\"/job:localhost/replica:0/task:0/device:GPU:0\"](conv2d_12/Conv2D)]]\n")
    (event,) = events(log)
    assert event.phase == "train"
    (event,) = events(log.replace("is_training=true", "is_training=false"))
    assert event.phase == "unknown"  # inference mode: batch norm with its moving statistics


def test_a_tensorflow_op_initialising_a_variable_is_set_up():
    head = "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[196,196]\n"
    assign = ('\t [[Node: z_mean/kernel/Assign = Assign[T=DT_FLOAT, _class=["loc:@z_mean/kernel"], use_locking=true, '
              '_device="/job:localhost/replica:0/task:0/device:GPU:0"](z_mean/kernel, z_mean/random_uniform)]]\n')
    (event,) = events(head + assign)
    assert event.phase == "init"  # a variable assigned its random initial value
    slot = ('\t [[Node: embeddings/Adam/Initializer/zeros = Const[dtype=DT_FLOAT, value=Tensor<type: float shape: '
            '[563354,256] values: [0 0 0]...>, _device="/job:localhost/replica:0/task:0/device:GPU:0"]()]]\n')
    (event,) = events(head + slot)
    assert event.phase == "init"  # an optimizer's slot being created
    # a variable assigned a computed value (a moving average's update in a step) is no initialiser
    (event,) = events(head + assign.replace("z_mean/random_uniform", "z_mean/mul_3"))
    assert event.phase == "unknown"


def test_autograds_backward_entry_just_before_the_message_is_training():
    msg = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.28 GiB (GPU 0; 39.39 GiB total capacity)\n"
    cut = "    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass\n"
    assert events(cut + msg)[0].phase == "train"
    assert events("Variable._execution_engine.run_backward(RuntimeError: CUDA out of memory. Tried to allocate 88.00 MiB "
                  "(GPU 0; 4.00 GiB total capacity; 2.68 GiB already allocated; 0 bytes free; 2.85 GiB reserved in total "
                  "by PyTorch)\n")[0].phase == "train"  # glued to the message
    # far above the message, it says nothing about this failure
    assert events(cut + "x\n" * 10 + msg)[0].phase == "unknown"


def test_time_series_librarys_start_banner_then_a_kill_is_the_first_step():
    log = ("Use CPU\n>>>>>>>start training : traffic_96_96_iTransformer_custom_M>>>>>>>>>>>>>>>>>>>>>>>>>>\n"
           "train 12089\nval 1661\n./run.sh: line 24:   633 Killed                  python -u run.py\n")
    (e,) = events(log)
    assert (e.kind, e.phase) == ("host_oom", "train")


def test_a_bar_after_a_loading_banner_is_the_training_loops_when_the_frames_show_training():
    load = "Loading checkpoint shards: 100%|##########| 2/2 [00:07<00:00,  3.52s/it]\n"
    bar = "  0%|          | 0/1563 [00:00<?, ?it/s]\n"
    train = _tb(("/usr/lib/python3/site-packages/transformers/trainer.py", "training_step"),
                ("/usr/lib/python3/site-packages/torch/_tensor.py", "backward"))
    (e,) = events(load + bar + train + MSG)
    assert (e.phase, e.step) == ("train", 0)
    # without training frames the bar may be a data-processing one: no step is claimed
    (e,) = events(load + bar + MSG)
    assert e.step is None


def test_a_bar_without_its_percentage_still_counts_the_step():
    # tqdm with a bar_format that drops the percentage shows its elapsed/remaining time instead
    bar = "[Train] [Epoch 1/20] |▏                   | 1316/181580 [23:54<42:25:21,  1.18batch/s, loss=110.3]\n"
    (e,) = events(bar + MSG)
    assert (e.step, e.phase) == (1316, "train")
    # a markdown table row or a ratio between pipes is not a bar: no elapsed time follows it
    (e,) = events("| layers | 24/32 [frozen] |\n" + MSG)
    assert e.step is None


def test_peft_readying_a_quantized_base_is_set_up_not_training():
    frames = ('Traceback (most recent call last):\n  File "finetune.py", line 40, in <module>\n    main()\n'
              '  File "/usr/local/lib/python3.11/site-packages/peft/utils/other.py", line 81, in '
              'prepare_model_for_kbit_training\n    param.data = param.data.to(torch.float32)\n')
    (e,) = events(frames + MSG)
    assert e.phase == "init"


RAY_KILL = ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
            "Memory on the node (IP: 10.0.0.2, ID: 0a1b) where the task (actor ID: 5b17, name=WorkerDict.__init__, "
            "pid=4100606, memory used=56.57GB) was running was 1900.12GB / 2000.00GB (0.95), which exceeds the "
            "memory usage threshold of 0.95. Ray killed this worker (ID: 9c2d) because it was the most recently "
            "scheduled task.\nThe top 10 memory consumers are:\n\nPID\tMEM(GB)\tCOMMAND\n")


def test_the_killed_ray_workers_method_names_the_phase():
    rows = ("4100605\t56.36\tray::WorkerDict.update_actor\n"
            "4100606\t56.57\tray::WorkerDict.actor_rollout_generate_sequences\n")
    (e,) = events(RAY_KILL + rows)
    assert (e.kind, e.phase) == ("host_oom", "generate")
    # the table's other workers do not speak for the killed one
    (e,) = events(RAY_KILL + "4100605\t56.36\tray::WorkerDict.actor_rollout_generate_sequences\n")
    assert e.phase == "unknown"


def test_a_ray_task_errors_header_names_the_phase_of_the_remote_task():
    header = ("(main_task pid=21) Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
              "ray::WorkerDict.actor_rollout_generate_sequences() (pid=2396579, ip=10.0.0.12)\n")
    (e,) = events("(main_task pid=21) " + MSG + header)
    assert e.phase == "generate"
    (e,) = events(MSG + "ray.exceptions.RayTaskError: ray::SharedStorage.get_info() (pid=17985, ip=10.0.0.12)\n")
    assert e.phase == "unknown"  # a method that names no phase says nothing


def test_a_script_reporting_a_part_loaded_is_still_setting_up_when_the_host_kills_it():
    (e,) = events("Update diffusion transformer\nloaded 3D transformer's pretrained weights from /models/dit ...\n"
                  "Killed\n")
    assert (e.kind, e.phase) == ("host_oom", "init")
    # a training step logged after the load line: the load is over, the kill came in training
    (e,) = events("loaded the model weights from /models/dit\n{'loss': 1.2, 'step': 40}\nKilled\n")
    assert e.phase != "init"


def test_pointcept_train_lines_count_steps_and_a_posters_elision_hides_the_failing_one():
    start = ">>>>>>>>>>>>>>>> Start Training >>>>>>>>>>>>>>>>\n"
    bar = "[2025-11-18 14:44:12,052 INFO misc.py line 117] Train: [1/50][12/157] Data 1.587 (1.587)\n"
    (e,) = events(start + bar + MSG)
    assert (e.step, e.phase) == (12, "train")
    (e,) = events(start + bar + "...\n" + MSG)  # the poster cut the log: training, at a step the log does not show
    assert (e.step, e.phase) == (None, "train")
    # frames cut out of the traceback hide frames, not progress
    (e,) = events(bar + "Traceback (most recent call last):\n....\n" + MSG)
    assert e.step == 12


def test_comfyui_names_the_failing_node_or_its_sampling_code():
    panel = ("Error occurred when executing KSampler:\n\nAllocation on device 0 would exceed allowed memory. (out of "
             "memory)\nCurrently allocated : 21.72 GiB\nRequested : 720.00 MiB\nDevice limit : 23.65 GiB\n")
    (e,) = events(panel)
    assert e.phase == "generate"
    (e,) = events(panel.replace("KSampler", "CheckpointLoaderSimple"))
    assert e.phase == "init"
    for node in ("CogVideoDecode", "VAEDecodeTiled", "WanVideoTextEncode",  # a wrapper's own decoder or encoder
                 "KSampler (Efficient)"):  # a custom pack's node, its pack in parentheses
        (e,) = events(panel.replace("KSampler", node))
        assert e.phase == "generate", node
    (e,) = events(panel.replace("KSampler", "DepthFM_Zho"))  # a node whose name says nothing
    assert e.phase == "unknown"
    rope = ('  File "C:\\ComfyUI\\comfy\\ldm\\flux\\math.py", line 43, in apply_rope\n'
            "    xk_out = freqs_cis[..., 0] * xk_[..., 0]\n")
    (e,) = events(rope + MSG)
    assert e.phase == "generate"


def test_the_launch_commands_script_names_an_evaluation_a_sampling_or_a_training_run():
    (e,) = events(MSG + "$ bash ./scripts/test.sh 0 --ckpts ./pretrained/model.pth\n")
    assert e.phase == "eval"
    (e,) = events("torchrun --nproc_per_node 8 scripts/sample.py --ckpt model.pt\n" + MSG)
    assert e.phase == "generate"
    (e,) = events("`python -u sample_frag.py --ckpt 500.pt --num_samples 50`\n\n" + MSG)  # pasted as a code span
    assert e.phase == "generate"
    # inference.py is either (a classifier's evaluation, a generative model's sampling): no phase from it
    (e,) = events("$ python scripts/inference.py --prompt cat\n" + MSG)
    assert e.phase == "unknown"
    # a training script: the failure, with no step, evaluation or save logged, was most often in its training loop
    (e,) = events("$ python train.py --epochs 3\n" + MSG)
    assert e.phase == "train"
    for script in ("tools/train_v2v.py", "CLAN_train.py", "finetuning.py", "scripts/pretrain_gpt.sh"):
        (e,) = events(f"python {script} --lr 1e-4\n" + MSG)
        assert e.phase == "train", script
    (e,) = events("$ python trainable_params.py\n" + MSG)  # a name that only starts with "train"
    assert e.phase == "unknown"
    # anything else the log shows about the phase comes first
    (e,) = events("$ python train.py --epochs 3\n***** Running Evaluation *****\n" + MSG)
    assert e.phase == "eval"
    # bash's own prompt with its environment, the interpreter by its path, a script whose name ends in _eval
    (e,) = events("(umi) user@box:~/repo$ ~/miniforge3/envs/umi/bin/python load_checkpoint_eval.py -i out/latest.ckpt\n"
                  + MSG)
    assert e.phase == "eval"
    (e,) = events("user@box:~/repo$ /usr/bin/python3 train.py --epochs 3\n" + MSG)
    assert e.phase == "train"
    (e,) = events("we ran it as user@box:~/repo and then python my_eval.py\n" + MSG)  # prose is no prompt
    assert e.phase == "unknown"
    # a script run by its own path
    (e,) = events("./tools/uniad_dist_eval.sh ./configs/base_e2e.py ./ckpts/base_e2e.pth 1\n" + MSG)
    assert e.phase == "eval"
    (e,) = events("./tools/dist_train.sh ./configs/base_e2e.py 8\n" + MSG)
    assert e.phase == "train"


def test_a_sampling_scripts_module_frame_is_generation():
    frames = ('Traceback (most recent call last):\n  File "/workspace/DiT/sample_ddp.py", line 88, in <module>\n'
              "    main(args)\n")
    (e,) = events(frames + MSG)
    assert e.phase == "generate"
    (e,) = events(frames.replace("sample_ddp.py", "downsample.py") + MSG)
    assert e.phase != "generate"


def test_word_language_model_epoch_lines_count_batches():
    line = "| epoch   1 |   600/ 3515 batches | lr 0.00100 | ms/batch 1721.19 | loss  1.57 | ppl     4.82\n"
    (e,) = events(line + MSG)
    assert (e.step, e.phase) == (600, "train")
    (e,) = events("| end of epoch   1 | time: 120.5s | valid loss  4.61 |\n" + MSG)  # a summary, not a step
    assert e.step is None


def test_a_message_hard_wrapped_at_a_space_keeps_the_space():
    wrapped = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 426.00 MiB. GPU 3 has a total "
               "capacity of 79.32 GiB of which 69.56 MiB is free. Including non-PyTorch memory, this process has \n"
               "79.25 GiB memory in use. Of the allocated memory 73.91 GiB is allocated by PyTorch, and 2.41 GiB is "
               "reserved by PyTorch but unallocated.\n")
    (e,) = events(wrapped)
    assert e.process_in_use_bytes == round(79.25 * 2**30) and e.allocated_bytes == round(73.91 * 2**30)


def _through(*funcs: str) -> str:
    """A traceback from a script's <module> frame through library functions named `funcs`, outermost first."""
    return _frames(("main.py", "<module>"), *((f"{SITE}/lib/mod.py", f) for f in funcs))


def test_loop_and_set_up_names_that_mention_training():
    (e,) = events(_through("train_and_evaluate", "forward") + MSG)  # the training loop that also evaluates
    assert e.phase == "train"
    (e,) = events(_through("train_and_evaluate", "evaluate") + MSG)  # unless an inner frame is the evaluation
    assert e.phase == "eval"
    (e,) = events(_through("create_train_state", "init") + MSG)  # Flax: building the state is set-up
    assert e.phase == "init"
    (e,) = events(_through("setup", "fit_transform") + MSG)  # pycaret's setup(), Lightning's setup hooks
    assert e.phase == "init"


def test_a_finished_inner_bar_closed_after_training_resumed_is_not_the_step():
    # HF Trainer: evaluation at step 10, training redrawn at 10/12, then the evaluation bar's close redraw at 8/8
    train = " 83%|████████▎ | 10/12 [00:03<00:00,  2.76it/s]\n"
    evals = "".join(f"{100 * k // 8:3d}%|███       | {k}/8 [00:00<00:00, 13.19it/s]\n" for k in range(9))
    closed = "100%|██████████| 8/8 [00:01<00:00,  6.64it/s]\n"
    assert events(train + evals + train + closed + MSG)[0].step == 10
    # without the training bar's return in between, the last count stands as before
    assert events(train + evals + MSG)[0].step == 8


def test_zero3_gathering_settings_in_deepspeeds_print_its_json_and_fsdps():
    printed = ("zero_config .................. stage=3 prefetch_bucket_size=50000000 param_persistence_threshold=100000 "
               "max_live_parameters=1,000,000,000 max_reuse_distance=1000000000")
    cfg = _config(printed)
    assert (cfg["zero3_prefetch_bucket_size"], cfg["zero3_param_persistence_threshold"], cfg["zero3_max_live_parameters"],
            cfg["zero3_max_reuse_distance"]) == (50_000_000, 100_000, 1_000_000_000, 1_000_000_000)
    assert _config('    "stage3_prefetch_bucket_size": 5e7,')["zero3_prefetch_bucket_size"] == 50_000_000
    assert "zero3_prefetch_bucket_size" not in _config('    "stage3_prefetch_bucket_size": "auto",')
    fsdp = _config("FullyShardedDataParallelPlugin(backward_prefetch=BackwardPrefetch.BACKWARD_PRE, "
                   "forward_prefetch=True, limit_all_gathers=False)")
    assert (fsdp["fsdp_backward_prefetch"], fsdp["fsdp_forward_prefetch"], fsdp["fsdp_limit_all_gathers"]) == (
        "BACKWARD_PRE", True, False)
    assert _config('"backward_prefetch": "backward_post",')["fsdp_backward_prefetch"] == "BACKWARD_POST"


def test_what_deepspeed_and_fsdp_offload_and_whether_liger_is_on():
    printed = ("zero_config .................. stage=3 offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', "
               "nvme_path=None) offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='none', nvme_path=None)")
    cfg = _config(printed)
    assert (cfg["offload"], cfg["offload_param"], cfg["offload_optimizer"]) == (True, True, False)
    # the next key's device is not this one's (offload_optimizer=None then offload_param=...(device='cpu'))
    cfg = _config("offload_optimizer=None offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', nvme_path=None)")
    assert cfg["offload_param"] is True and "offload_optimizer" not in cfg
    assert _config('    "offload_optimizer": {"device": "cpu", "pin_memory": true},')["offload_optimizer"] is True
    for fsdp in ("  fsdp_offload_params: true", "fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>, <FSDPOption.OFFLOAD: "
                 "'offload'>],", '--fsdp "full_shard offload auto_wrap" \\'):
        assert _config(fsdp)["offload_param"] is True, fsdp
    assert _config("FullyShardedDataParallelPlugin(cpu_offload=CPUOffload(offload_params=False))")["offload_param"] is False
    for liger in ("use_liger_kernel=True,", "python train.py --use_liger_kernel --bf16", "enable_liger_kernel: true",
                  "liger_fused_linear_cross_entropy: true"):
        assert _config(liger)["liger_kernel"] is True, liger
    assert _config("use_liger_kernel=False,")["liger_kernel"] is False


def test_fsdps_sharding_strategy_as_hf_accelerate_and_lightning_print_it():
    hf = "fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>, <FSDPOption.AUTO_WRAP: 'auto_wrap'>],"
    assert _config(hf)["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert _config('--fsdp "shard_grad_op auto_wrap" \\')["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    assert _config("  fsdp_sharding_strategy: HYBRID_SHARD")["fsdp_sharding_strategy"] == "HYBRID_SHARD"
    assert _config("  fsdp_sharding_strategy: 1")["fsdp_sharding_strategy"] == "FULL_SHARD"  # older accelerate
    plugin = "FullyShardedDataParallelPlugin(sharding_strategy=<ShardingStrategy.SHARD_GRAD_OP: 2>, backward_prefetch=None"
    assert _config(plugin)["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    # the words elsewhere are not FSDP's strategy (a shard count, a dataset's shards)
    assert "fsdp_sharding_strategy" not in _config("Loading checkpoint shards: 100%|██| 4/4", "num_shards=16 full_shard=False")


def test_the_hf_banner_logged_by_the_users_own_script_is_not_hf_trainer():
    # accelerate's and diffusers' example loops log HF's banner from their own __main__ logger
    own = "11/28/2026 10:10:49 - INFO - __main__ - ***** Running training *****"
    ranked = "11/28/2026 10:10:49 - INFO - __main__ - [RANK 0] ***** Running training *****"
    assert "hf_trainer" not in stacks(own) and "hf_trainer" not in stacks(ranked)
    hf = "[INFO|trainer.py:2128] 2026-01-01 00:00:00,000 >> ***** Running training *****"
    assert "hf_trainer" in stacks(hf) and "hf_trainer" in stacks("***** Running training *****")


def test_an_evaluation_run_inline_after_the_training_bar_keeps_the_training_step():
    # accelerate's example loops: one bar over the optimizer steps, an evaluate() with no bar of its own; under
    # torchrun the bar (rank 0's) is glued to the failing rank's traceback
    head = ("INFO - __main__ - ***** Running training *****\n  0%|          | 0/12 [00:00<?, ?it/s]\n"
            " 17%|█▋        | 2/12 [00:00<00:00, 19.08it/s]")
    frames = ('Traceback (most recent call last):\n  File "/workspace/run/train.py", line 65, in <module>\n'
              '    print(evaluate(model, loader))\n  File "/workspace/run/train.py", line 47, in evaluate\n'
              '    out = model(x)\n')
    event = one(head + frames + MSG)
    assert (event.step, event.phase) == (2, "eval")
    # an inference loop's own bar (another total) after training is still not a training step
    inference = "\n  5%|▌         | 3/64 [00:01<00:20,  3.01it/s]"
    event = one(head + "\n100%|██████████| 12/12 [00:02<00:00,  5.21it/s]" + inference + frames + MSG)
    assert (event.step, event.phase) == (None, "eval")


RAY_HEAD = ("(TrainController pid=25112) Started training worker group of size 2: \n"
            "(TrainController pid=25112) - (ip=10.0.0.5, pid=25230) world_rank=0, local_rank=0, node_rank=0\n"
            "(TrainController pid=25112) - (ip=10.0.0.5, pid=25256) world_rank=1, local_rank=1, node_rank=0\n"
            "(RayTrainWorker pid=25230) epoch 0 step 0 loss 2.3368\n")


def test_a_ray_train_workers_rank_comes_from_the_pid_its_controller_lists():
    failing = ("(RayTrainWorker pid=25256) Error in training function:\n"
               "(RayTrainWorker pid=25256) Traceback (most recent call last):\n"
               '(RayTrainWorker pid=25256)   File "/workspace/run/train.py", line 33, in train_loop\n'
               "(RayTrainWorker pid=25256) " + MSG)
    (event,) = events(RAY_HEAD + failing + "ray.train.WorkerGroupError: Training failed due to worker errors:\n"
                      "[Rank 1 Error Snippet]:\n" + MSG)  # the driver's echo of rank 1's message is the same event
    assert event.rank == 1 and event.step is None  # rank 0's step line is not rank 1's
    # Ray folds rank 1's repeated step lines into one printed after the failure: the latest step before it
    folded = "(RayTrainWorker pid=25256) epoch 0 step 20 loss 2.3233 [repeated 9x across cluster]\n"
    (event,) = events(RAY_HEAD + failing + folded)
    assert (event.rank, event.step, event.phase) == (1, 20, "train")
    # a worker that says its rank when it joins (the listing absent)
    joined = "(RayTrainWorker pid=25256) Setting up process group for: env:// [rank=1, world_size=2]\n"
    (event,) = events(joined + failing)
    assert event.rank == 1


def _config(*texts: str) -> dict:
    cfg = config_from([Line(number=i + 1, rank=None, text=t, raw=t) for i, t in enumerate(texts)], "serve.log")
    return {k: v.value for k, v in cfg.items() if k != "stacks"}


def test_serving_engines_memory_profiling_summaries_give_the_budget_in_bytes():
    gib = 1024**3
    vllm = _config("the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) = "
                   "71.24GiB",
                   "model weights take 14.99GiB; non_torch_memory takes 0.25GiB; PyTorch activation peak memory takes "
                   "1.23GiB; the rest of the memory reserved for KV Cache is -2.50GiB.")
    assert vllm["serving_total_bytes"] == round(79.15 * gib) and vllm["gpu_memory_utilization"] == 0.9
    assert vllm["weights_bytes"] == round(14.99 * gib) and vllm["activation_peak_bytes"] == round(1.23 * gib)
    assert vllm["kv_cache_budget_bytes"] == -round(2.5 * gib)  # nothing left: vLLM prints it negative
    assert _config("INFO 05-02 [gpu_worker.py:249] Available KV cache memory: 54.77 GiB")["kv_cache_budget_bytes"] \
        == round(54.77 * gib)
    sglang = _config("[2026-05-11 09:04:51 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
                     "avail mem=60.12 GB, mem usage=14.38 GB.",
                     "[2026-05-11 09:04:52 TP0] KV Cache is allocated. #tokens: 1093421, K size: 25.03 GB, V size: "
                     "25.03 GB")
    assert sglang == {"free_after_weights_bytes": round(60.12 * gib), "weights_bytes": round(14.38 * gib),
                      "kv_cache_budget_bytes": 2 * round(25.03 * gib)}


def test_the_size_a_model_name_announces_and_weights_loaded_quantised():
    from oomdoctor.modelshapes import params_in_name, quantised_bytes_per_weight

    assert params_in_name("meta-llama/Llama-2-70b-chat-hf") == 70 * 10**9
    assert params_in_name("Qwen/Qwen2.5-1.5B-Instruct") == 15 * 10**8
    assert params_in_name("bigscience/bloom-560m") == 560 * 10**6
    assert params_in_name("mistralai/Mixtral-8x7B-v0.1") == 42 * 10**9  # a floor under its 46.7B
    assert params_in_name("gpt2-xl") is None and params_in_name("llama-3.1") is None  # no size, a version
    assert quantised_bytes_per_weight("TheBloke/Llama-2-13B-GPTQ") == 0.5
    assert quantised_bytes_per_weight("meta-llama/Llama-2-13b-hf") is None
    assert _config("model = AutoModelForCausalLM.from_pretrained(name, load_in_4bit=True)")["quantized_weights"]
    # a BitsAndBytesConfig dump with quantisation off names its 4-bit fields all the same
    assert "quantized_weights" not in _config('"load_in_4bit": false, "bnb_4bit_quant_type": "nf4"')
KERAS3 = "{n:>2}/20 ━━━━━━━━━━━━━━━━━━━━ {eta} 83ms/step - accuracy: 0.1429 - loss: 2.3236{val}\n"


def test_a_keras3_bar_counts_the_epochs_batches():
    bars = "".join(KERAS3.format(n=n, eta="1s", val="") for n in range(1, 8))
    event = one("Epoch 2/3\n" + bars + MSG)
    assert (event.phase, event.step) == ("train", 7)


def test_a_keras3_bar_at_its_total_still_showing_eta_0s_is_the_epoch_end_validation():
    bars = "".join(KERAS3.format(n=n, eta="0s", val="") for n in range(18, 21))
    event = one("Epoch 1/3\n" + bars + MSG)
    assert (event.phase, event.step) == ("eval", 20)  # the training bar's last batch is done
    closed = KERAS3.format(n=20, eta="3s", val=" - val_accuracy: 0.1484 - val_loss: 2.3309")
    assert one("Epoch 1/3\n" + bars + closed + MSG).phase != "eval"  # the epoch closed after its validation
    assert one("Epoch 1/3\n" + KERAS3.format(n=19, eta="0s", val="") + MSG).phase != "eval"  # mid-epoch


def test_keras3_evaluate_after_fit_draws_its_own_bar_and_the_step_stays_the_last_epochs():
    fit = "".join(KERAS3.format(n=n, eta="0s", val="") for n in (19, 20))
    closed = KERAS3.format(n=20, eta="5s", val=" - val_accuracy: 0.1562 - val_loss: 2.3190")
    evaluate = "".join(f"{n}/8 ━━━━━━━━━━━━━━━━━━━━ 0s 161ms/step - accuracy: 0.1719 - loss: 2.2912\n" for n in (1, 2, 3))
    frames = 'Traceback (most recent call last):\n  File "/workspace/run.py", line 60, in <module>\n    model.evaluate(vx, vy)\n'
    event = one("Epoch 3/3\n" + fit + closed + "\n" + evaluate + frames + MSG)
    assert (event.phase, event.step) == ("eval", 20)


ULTRA_TRAIN = "        2/3         0G      4.767      2.819      2.897          9         64: {pct}% ━━━╸──────── {n}/10 3.4it/s\n"
ULTRA_VAL = ("                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 50% ━━━━━━────── "
             "1/2 1.0s/it 0.3s<1.0s\n")
ULTRA_FRAMES = (
    'Traceback (most recent call last):\n'
    '  File "/usr/lib/python3/site-packages/ultralytics/engine/trainer.py", line 549, in _do_train\n'
    '    loss, self.loss_items = self.model(batch)\n'
    '  File "/usr/lib/python3/site-packages/ultralytics/nn/tasks.py", line 163, in forward\n'
    '    return self.predict(x, *args, **kwargs)\n'
    '  File "/usr/lib/python3/site-packages/ultralytics/nn/tasks.py", line 180, in predict\n'
    '    return self._predict_once(x, profile, embed)\n')


def test_ultralytics_bars_count_the_epochs_batches_and_its_models_predict_is_the_forward_pass():
    scan = "train: Scanning /data/shapes/labels/train... 40 images, 0 backgrounds, 0 corrupt: 100% ━━━━━━━━━━━━ 40/40 906it/s\n"
    bars = "".join(ULTRA_TRAIN.format(pct=10 * n, n=n) for n in range(4))
    event = one(scan + "Starting training for 3 epochs...\n" + bars + ULTRA_FRAMES + MSG)
    assert (event.phase, event.step) == ("train", 3)
    assert one(scan + "Starting training for 3 epochs...\n" + ULTRA_FRAMES + MSG).step is None  # the scan is no step


def test_ultralytics_validation_bar_is_evaluation_after_the_epochs_training_bar():
    bars = "".join(ULTRA_TRAIN.format(pct=10 * n, n=n) for n in (8, 9, 10))
    event = one(bars + ULTRA_VAL + MSG)
    assert (event.phase, event.step) == ("eval", 10)


FASTPROGRESS = "Epoch 1/3 : |{bar}| {pct:.2f}% [{n}/{total} 00:00<00:00... 2.3331]\n"


def _fastprogress(total: int, upto: int) -> str:
    return "".join(FASTPROGRESS.format(bar="█" * n + "-" * (total - n), pct=100 * n / total, n=n, total=total)
                   for n in range(upto + 1))


def test_a_fastprogress_bar_counts_the_epochs_batches():
    frames = ('Traceback (most recent call last):\n'
              '  File "/usr/lib/python3/site-packages/fastai/learner.py", line 246, in _do_epoch_train\n'
              '    self._with_events(self.all_batches, "train", CancelTrainException)\n')
    event = one(_fastprogress(10, 4) + frames + MSG)
    assert (event.phase, event.step) == ("train", 4)


def test_in_evaluation_a_bar_started_after_a_finished_one_counts_evaluation_batches():
    frames = ('Traceback (most recent call last):\n'
              '  File "/usr/lib/python3/site-packages/fastai/learner.py", line 252, in _do_epoch_validate\n'
              '    with torch.no_grad(): self._with_events(self.all_batches, "validate", CancelValidException)\n')
    event = one(_fastprogress(10, 10) + _fastprogress(8, 3) + frames + MSG)
    assert (event.phase, event.step) == ("eval", 10)  # the epoch's training bar, finished; not the validation bar's 3
    unfinished = one(_fastprogress(10, 7) + _fastprogress(8, 3) + frames + MSG)
    assert unfinished.step == 3  # no finished training bar before it: nothing to prefer


def test_the_batch_hf_trainer_unsloth_and_accelerate_loops_announce():
    # HF Trainer's "***** Running training *****" banner (transformers 5 under its logger's name), its evaluation
    # banner, and Unsloth's one-row banner
    cfg = _config_of([
        "[transformers] ***** Running training *****",
        "[transformers]   Instantaneous batch size per device = 4",
        "[transformers]   Total train batch size (w. parallel, distributed & accumulation) = 8",
        "[transformers]   Gradient Accumulation steps = 2",
        "[INFO|trainer.py:4122] 2024-11-05 10:02:27,726 >>   Batch size = 16",
    ])
    assert (cfg["per_device_train_batch_size"].value, cfg["gradient_accumulation_steps"].value) == (4, 2)
    assert cfg["per_device_eval_batch_size"].value == 16
    unsloth = _config_of([
        "==((====))==  Unsloth - 2x faster free finetuning | Num GPUs used = 2",
        r"O^O/ \_/ \    Batch size per device = 2 | Gradient accumulation steps = 4",
    ])
    assert (unsloth["per_device_train_batch_size"].value, unsloth["gradient_accumulation_steps"].value) == (2, 4)
    assert unsloth["world_size"].value == 2
    # prose and other totals are not the run's batch
    assert _config_of(["the effective Batch size = 8 for this run", "Batch size = 32 and more",
                    "  Total train batch size (w. parallel, distributed & accumulation) = 64"]) == {}


def test_a_datasets_bar_over_an_eval_split_is_preprocessing_not_an_evaluation():
    # TRL's RewardTrainer filters its eval split through datasets.filter() before training: the bar counts examples
    prep = ("Filtering eval >48 tokens:   0%|          | 0/32 [00:00<?, ? examples/s]\n"
            "Filtering eval >48 tokens: 100%|██████████| 32/32 [00:00<00:00, 9744.28 examples/s]\n")
    train = "".join(f" {k * 8}%|█         | {k}/12 [00:00<00:00, 18.83it/s]\n" for k in range(7))
    frames = ('Traceback (most recent call last):\n'
              '  File "/site-packages/transformers/trainer.py", line 1917, in _run_epoch\n'
              '    tr_loss_step = self.training_step(model, inputs, num_items_in_batch)\n'
              '  File "/site-packages/trl/trainer/reward_trainer.py", line 822, in training_step\n'
              '    return super().training_step(*args, **kwargs)\n')
    event = one(prep + train + frames + MSG)
    assert (event.phase, event.step) == ("train", 6)
    # the same description over an evaluation loop's batches is still an evaluation bar
    assert one(train + "Evaluating eval split:  40%|████      | 2/5 [00:01<00:01, 2.01it/s]\n" + MSG).phase == "eval"


SKORCH_FRAMES = ('Traceback (most recent call last):\n'
                 '  File "/site-packages/skorch/net.py", line 1276, in run_single_epoch\n'
                 '    step = step_fn(batch, **fit_params)\n'
                 '  File "/site-packages/skorch/net.py", line {line}, in {step}\n'
                 '    y_pred = self.infer(Xi, **fit_params)\n'
                 '  File "/site-packages/skorch/net.py", line 1687, in infer\n'
                 '    return self.module_(x, **fit_params)\n'
                 '  File "/workspace/train.py", line 34, in forward\n'
                 '    return self.net(X)\n')


def test_skorchs_infer_is_the_modules_call_under_training_and_validation_alike():
    table = ("  epoch    train_loss    valid_acc    valid_loss     dur\n"
             "-------  ------------  -----------  ------------  ------\n"
             "      1        2.4523       0.1250        2.4510  0.0280\n")
    train = one(table + SKORCH_FRAMES.format(line=1024, step="train_step_single") + MSG)
    assert (train.phase, train.step) == ("train", None)  # the table counts epochs, not steps
    assert one(table + SKORCH_FRAMES.format(line=992, step="validation_step") + MSG).phase == "eval"


def test_skorchs_bar_drawn_on_a_validation_batch_is_not_a_training_step():
    # skorch's ProgressBar: one bar an epoch over its 16 training batches, then its 4 validation batches
    bar = "".join(f" {k * 5}%|█         | {k}/20 [00:02<00:00,  7.76it/s, train_loss=2.61]\n" for k in range(1, 17))
    val = " 85%|████████▌ | 17/20 [00:02<00:00,  7.91it/s, valid_loss=2.66]"
    event = one(bar + val + SKORCH_FRAMES.format(line=992, step="validation_step") + MSG)
    assert (event.phase, event.step) == ("eval", 16)


def test_hf_trainers_evaluation_bar_below_the_training_bar_is_not_the_step():
    # evaluate() called from the training loop draws its bar below the open training bar (tqdm's "\x1b[A" moves
    # back up); the step is the training bar's count, whether the evaluation's bar shows 0 or 3 of 8 batches
    train = "".join(f" {k * 8}%|█         | {k}/12 [00:00<00:00, 18.83it/s]\n" for k in range(5))
    frames = ('Traceback (most recent call last):\n'
              '  File "/site-packages/transformers/trainer.py", line 1660, in _inner_training_loop\n    x()\n'
              '  File "/site-packages/transformers/trainer.py", line 2278, in _maybe_log_save_evaluate\n    x()\n'
              '  File "/site-packages/transformers/trainer.py", line 2871, in evaluate\n    x()\n'
              '  File "/site-packages/transformers/trainer.py", line 2996, in evaluation_loop\n    x()\n')
    for done in (1, 4):
        evaluation = "".join(f"\n {k * 12}%|█         | {k}/8 [00:00<00:00, 18.83it/s]\x1b[A" for k in range(done))
        event = one(train + evaluation + frames + MSG)
        assert (event.phase, event.step) == ("eval", 4)
    # Seq2SeqTrainer's predict_with_generate: generate() inside that evaluation
    generating = frames + '  File "/site-packages/transformers/generation/utils.py", line 3008, in generate\n    x()\n'
    event = one(train + "\n  0%|          | 0/8 [00:00<?, ?it/s]\x1b[A" + generating + MSG)
    assert (event.phase, event.step) == ("generate", 4)
    # no training loop around the evaluation in the traceback: an unfinished bar before it is not known to be the
    # training loop's, and the running bar's count stays
    alone = frames.replace("_inner_training_loop", "predict").replace("_maybe_log_save_evaluate", "predict")
    assert one(train + " 37%|███       | 3/8 [00:00<00:00, 9.1it/s]\n" + alone + MSG).step == 3


def test_a_tensorflow_1_session_running_the_training_op_is_training():
    def log(code: str) -> str:
        return ("Traceback (most recent call last):\n"
                '  File "fit.py", line 146, in main\n'
                f"    {code}\n"
                '  File "/usr/lib/python3/dist-packages/tensorflow/python/client/session.py", line 1340, in _do_call\n'
                "    raise type(e)(node_def, op, message)\n"
                "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
                "shape[20,65536,64]\n")
    assert events(log("train_step.run(feed_dict=feed_dict)"))[0].phase == "train"
    assert events(log("_, loss_value = sess.run([train_op, loss], feed_dict=feed)"))[0].phase == "train"
    assert events(log("out = sess.run(predictions, feed_dict=feed)"))[0].phase == "unknown"


def test_a_bar_over_an_iterable_without_a_length_counts_steps():
    def step(text: str):
        return ctx.step_of(Line(1, None, text))
    assert step("37it [00:10,  3.60it/s, loss=0.5]") == ctx.StepCount(37, None, True)  # tqdm(enumerate(loader))
    assert step("Epoch 3: 120it [01:10,  1.70it/s, loss=2.31]") == ctx.StepCount(120, None, True)
    # Lightning over an IterableDataset: the epoch's count, the global step only in epoch 0
    assert step("Epoch 0: |          | 12/? [00:05<00:00,  2.31it/s, v_num=0]") == ctx.StepCount(12, None, True)
    assert step("Epoch 2: |          | 12/? [00:05<00:00,  2.31it/s, v_num=0]") is None
    # a data bar, an evaluation bar and a rate are not training steps
    assert step("Tokenizing: 512it [00:01, 400.0it/s]") is None
    assert step("Evaluating: 37it [00:10,  3.60it/s]") is None
    assert step("throughput 12.5it [00:01]") is None
    assert step("Training datasets: 12it [00:01, 9.1it/s]") is None
    # a label that only holds one of those words is no data bar: "data" alone, "files" in a loop's name
    assert step("Training data loop: 37it [00:10,  3.60it/s, loss=0.5]") == ctx.StepCount(37, None, True)


def test_a_bar_labelled_by_another_stage_counts_no_steps():
    """A bar whose label says what it is doing counts training steps only when that is training."""
    def step(text: str):
        return ctx.step_of(Line(1, None, text))
    for other in ("Extrapolating border:  14%|████▊     | 1/7 [00:46<04:36, 46.13s/it]",  # a mesh stage (p903)
                  "Detecting bboxes: 100%|██████████| 1/1 [00:00<00:00,  2.93it/s]",  # an OCR model's stage (p625)
                  "Sanity Checking DataLoader 0:   0%|          | 0/2 [00:00<?, ?it/s]",  # Lightning's sanity check
                  "Sampling: 40%|████      | 10/25 [00:04<00:06,  2.31it/s]",
                  "Upscaling 3/12: 25%|██▌       | 3/12 [00:09<00:27,  3.0s/it]"):
        assert step(other) is None, other
    for training in ("Training:  45%|████▌     | 45/100 [00:10<00:12,  4.40it/s, loss=0.31]",
                     "Fine-tuning: 12%|█▏        | 12/100 [00:03<00:22,  3.9it/s]",
                     "Pretraining 12%|█▏        | 12/100 [00:03<00:22,  3.9it/s]",
                     "Epoch 1: 100%|██████████| 50/50 [00:10<00:00,  4.9it/s, loss=0.3]",
                     " 45%|████▌     | 45/100 [00:10<00:12,  4.40it/s]"):
        assert step(training) is not None, training


def _open_epoch(epoch: int, upto: int, post: str = "") -> str:
    return "".join(f"Epoch {epoch}: |          | {k}/? [00:00<00:00, 84.14it/s{post}]\n" for k in range(upto + 1))


OPEN_VALIDATION = ("Validation: |          | 0/? [00:00<?, ?it/s]\n"
                   "Validation DataLoader 0: |          | 0/? [00:00<?, ?it/s]\n"
                   "Validation DataLoader 0: |          | 1/? [00:00<00:00, 348.22it/s]\n"
                   "Epoch 0: |          | 8/? [00:00<00:00, 115.83it/s, val_loss=1.430, train_loss=2.060]\n"
                   "Epoch 0: |          | 0/? [00:00<?, ?it/s, val_loss=1.430, train_loss=2.060]\n")


def test_lightnings_bars_over_an_iterable_dataset_count_the_epochs_before():
    # GluonTS's estimators (an endless sampler cut at num_batches_per_epoch): "Epoch 1: |  | 5/?" is the sixth batch
    # of the second epoch, 8 + 5, after epoch 0's eight and its validation
    epoch0 = SANITY + _open_epoch(0, 8) + OPEN_VALIDATION
    e = one(epoch0 + _open_epoch(1, 5, ", val_loss=1.430") + MSG)
    assert (e.step, e.phase) == (13, "train")
    # validation failing at the end of epoch 1: both epochs' batches
    e = one(epoch0 + _open_epoch(1, 8, ", val_loss=1.430") + "Validation DataLoader 0: |          | 0/? [00:00<?]\n"
            + MSG)
    assert (e.step, e.phase) == (16, "eval")
    # each epoch's length is its own largest count: epochs of an iterable may differ
    assert one(_open_epoch(0, 8) + _open_epoch(1, 6) + _open_epoch(2, 3) + MSG).step == 17
    # a log that starts mid-run, without the earlier epochs' bars, does not show the global step
    assert one(_open_epoch(2, 3) + MSG).step is None


LOGGED_OOM = "Recovering from a checkpoint after training failed with the following exception:\n " + MSG_21.split(": ", 1)[1]


def _traceback_after(func: str, exception: str) -> str:
    return ("Traceback (most recent call last):\n"
            '  File "/site-packages/gluonts/torch/model/estimator.py", line 235, in train\n'
            "    best_checkpoint = torch.load(\n"
            f'  File "/site-packages/torch/serialization.py", line 776, in {func}\n'
            "    super().__init__(open(name, mode))\n"
            f"{exception}\n")


def test_a_traceback_of_another_exception_after_a_logged_message_is_not_the_oom_s():
    # GluonTS logs the OOM, then fails to load the checkpoint it recovers from: those frames are FileNotFoundError's
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/run/checkpoints/epoch=0-step=8.ckpt'"
    assert one(LOGGED_OOM + _traceback_after("__init__", missing)).phase == "unknown"
    # the logged message raised after it: its own traceback still names the phase
    raised = MSG_21.rstrip()  # the same message: one event
    assert one(LOGGED_OOM + _traceback_after("save_checkpoint", raised)).phase == "save"


def test_lightnings_verbose_model_checkpoint_line_is_a_save_banner():
    bar = "Epoch 0: |          | 8/? [00:00<00:00, 22.72it/s, val_loss=1.430, train_loss=1.940]"
    saving = ("Epoch 0, global step 8: 'val_loss' reached 1.43126 (best 1.43126), saving model to "
              "'/run/checkpoints/epoch=0-step=8.ckpt' as top 1\n")
    e = one(_open_epoch(0, 8) + bar + saving + LOGGED_OOM)
    assert (e.step, e.phase) == (8, "save")
    # the next epoch's bars after it: the save went through, training went on
    assert one(_open_epoch(0, 8) + bar + saving + _open_epoch(1, 3) + LOGGED_OOM).phase == "train"
    # the line saying the score did not improve saves nothing
    assert one(_open_epoch(0, 8) + bar + "Epoch 0, global step 8: 'val_loss' was not in top 1\n"
               + LOGGED_OOM).phase != "save"


def test_a_training_heading_between_two_rules_starts_training():
    msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)\n"
    rule = "-------------------------------------\n"
    assert events(rule + "Training 1 Recover and 3 Generator\n" + rule + msg)[0].phase == "train"
    # a configuration line, or a heading with one rule only, is not a banner
    assert events(rule + "Training set size: 5000\n" + rule + msg)[0].phase == "unknown"
    assert events("Training 1 Recover and 3 Generator\n" + rule + msg)[0].phase == "unknown"


def test_a_global_step_in_lightnings_bar_is_the_step():
    bar = "Epoch 0: 100%|█| 209/209 [06:12<00:00,  1.78s/it, loss=0.0685, v_num=0, global_step=208.0, lr=1e-06]"
    assert ctx.step_of(Line(1, None, bar)) == ctx.StepCount(208, 209, True)
    assert ctx.step_of(Line(1, None, bar.replace(", global_step=208.0", ""))) == ctx.StepCount(209, 209, True)
    assert ctx.step_of(Line(1, None, bar.replace("global_step=208.0", "global_step=208.5"))).n == 209  # not a count


def test_a_tgi_shard_that_cannot_start_failed_at_start_up():
    msg = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 15.77 GiB total "
           "capacity; 15.37 GiB already allocated; 13.62 MiB free; 15.40 GiB reserved in total by PyTorch)\n")
    assert events(msg + " rank=0\nError: ShardCannotStart\n")[0].phase == "init"
    assert events(msg + " rank=0\nError: ShardCannotConnect\n")[0].phase == "unknown"


def test_the_node_of_a_comfyui_error_report_names_the_phase():
    def report(node: str) -> str:
        return ("# ComfyUI Error Report\n## Error Details\n- **Node ID:** 7\n"
                f"- **Node Type:** {node}\n"
                "- **Exception Type:** torch.OutOfMemoryError\n"
                "- **Exception Message:** Allocation on device \n## Stack Trace\n")
    assert events(report("KSampler"))[0].phase == "generate"
    assert events(report("WanVideoSampler"))[0].phase == "generate"
    assert events(report("Hy3DSampleMultiView"))[0].phase == "generate"  # a node that samples, named by the verb
    assert events(report("Hy3DGenerateMesh"))[0].phase == "generate"
    assert events(report("UNETLoader"))[0].phase == "init"
    assert events(report("ImageScaleBy"))[0].phase == "unknown"  # a node that names no phase


def test_a_bar_after_the_rows_of_a_wrapped_messages_advice_is_still_right_after_it():
    log = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
           " (GPU 0; 31.75 GiB total capacity; 1.81 GiB already allocated; 29.17 GiB free; 2\n"
           ".10 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory \n"
           "try setting max_split_size_mb to avoid fragmentation.  See documentation for Mem\n"
           "ory Management and PYTORCH_CUDA_ALLOC_CONF\n"
           "Epoch 0: |          | 0/? [00:00<?, ?it/s]\n")
    (event,) = events(log)
    assert (event.phase, event.step) == ("train", 0)
    # three unrelated lines before the bar: it is not the failing loop's redraw
    (event,) = events(log.replace("Epoch 0:", "loading shards\nloading shards\nloading shards\nEpoch 0:"))
    assert event.step is None


def _sb3_table(iteration: int) -> str:
    rows = (("rollout/", ""), ("   ep_len_mean", "21.2"), ("time/", ""), ("   fps", "28"),
            ("   iterations", str(iteration)), ("   total_timesteps", str(256 * iteration)))
    rule = "-" * 33 + "\n"
    return rule + "".join(f"| {k:<18} | {v:<8} |\n" for k, v in rows) + rule


SB3_LEARN = ('Traceback (most recent call last):\n'
             '  File "/site-packages/stable_baselines3/common/on_policy_algorithm.py", line 337, in learn\n'
             '    self.train()\n'
             '  File "/site-packages/stable_baselines3/ppo/ppo.py", line 213, in train\n'
             '    values, log_prob, entropy = self.policy.evaluate_actions(obs, actions)\n')


def test_stable_baselines3s_table_counts_iterations_and_evaluate_actions_is_the_update():
    tables = _sb3_table(2) + _sb3_table(3)
    update = SB3_LEARN + ('  File "/site-packages/stable_baselines3/common/policies.py", line 737, in evaluate_actions\n'
                          '    distribution = self._get_action_dist_from_latent(latent_pi)\n')
    assert (one(tables + update + MSG).phase, one(tables + update + MSG).step) == ("train", 3)
    # CheckpointCallback saving from inside the next rollout: the model's save() (its message comes after the save)
    saving = (SB3_LEARN.split("  File")[0] + '  File "/site-packages/stable_baselines3/common/callbacks.py", line 303, '
              'in _on_step\n    self.model.save(model_path)\n'
              '  File "/site-packages/stable_baselines3/common/base_class.py", line 865, in save\n'
              '    params_to_save = self.get_parameters()\n')
    assert (one(tables + saving + MSG).phase, one(tables + saving + MSG).step) == ("save", 3)


def test_tabnets_pass_over_the_eval_set_inside_fit_is_evaluation():
    epoch = "epoch 0  | loss: 1.71365 | val_0_accuracy: 0.27734 |  0:00:01s\n"
    frames = ('Traceback (most recent call last):\n'
              '  File "/site-packages/pytorch_tabnet/abstract_model.py", line 262, in fit\n'
              '    self._predict_epoch(eval_name, valid_dataloader)\n'
              '  File "/site-packages/pytorch_tabnet/abstract_model.py", line 562, in _predict_epoch\n'
              '    scores = self._predict_batch(X)\n'
              '  File "/site-packages/pytorch_tabnet/abstract_model.py", line 590, in _predict_batch\n'
              '    scores, _ = self.network(X)\n')
    assert (one(epoch + frames + MSG).phase, one(epoch + frames + MSG).step) == ("eval", None)


def test_a_no_trainer_loops_metric_gather_is_evaluation_and_its_bar_counted_past_an_epoch_line():
    # accelerate's examples: one tqdm bar over all steps, an evaluation after each epoch printed glued to the bar
    bar = "".join(f" {k * 5}%|█         | {k}/18 [00:01<00:00,  7.5it/s]" + ("epoch 0: {'accuracy': 0.19}\n" if k == 6
                                                                           else "\n") for k in range(13))
    frames = ('[rank1]: Traceback (most recent call last):\n'
              '[rank1]:   File "/workspace/train.py", line 68, in <module>\n'
              '[rank1]:     pred, ref = accelerator.gather_for_metrics((model(x).argmax(-1), y))\n'
              '[rank1]:   File "/site-packages/torch/nn/modules/module.py", line 1778, in _wrapped_call_impl\n'
              '[rank1]:     return self._call_impl(*args, **kwargs)\n')
    event = one(bar.rstrip("\n") + frames + "[rank1]: " + MSG)
    assert (event.phase, event.step, event.rank) == ("eval", 12, 1)
    # an evaluation script's bar that only stood beside an epoch's line (its count unchanged since) is its own loop
    script = " 0%|          | 0/50 [00:00<?, ?it/s]epoch 100, avg. loss: 0.0123\n 0%|          | 0/50 [00:01<?, ?it/s]\n"
    alone = ('Traceback (most recent call last):\n  File "/workspace/eval.py", line 41, in <module>\n'
             '    scores = evaluate(model)\n')
    assert one(script + alone + MSG).step is None


FLAIR_ITERS = "".join(f"2026-01-05 10:00:0{k % 10},100 epoch 1 - iter {k}/13 - loss 1.12 - lr: 0.100000\n"
                      for k in range(1, 14)) + "2026-01-05 10:00:09,200 EPOCH 1 done: loss 1.1242 - lr: 0.100000\n"


def test_flairs_iteration_lines_stay_the_step_under_its_evaluations_unlabelled_bar():
    frames = ('Traceback (most recent call last):\n'
              '  File "/site-packages/flair/trainers/trainer.py", line 765, in train_custom\n'
              '    eval_result = self.model.evaluate(\n'
              '  File "/site-packages/flair/nn/model.py", line 881, in predict\n'
              '    scores = self.decoder(data_point_tensor)\n')
    dev = FLAIR_ITERS + "\n  0%|          | 0/1 [00:00<?, ?it/s]\n"
    assert (one(dev + frames + MSG).phase, one(dev + frames + MSG).step) == ("eval", 13)
    # after the DEV pass ran to its total, "saving best model": the step is still the iteration line's
    saving = ('Traceback (most recent call last):\n'
              '  File "/site-packages/flair/trainers/trainer.py", line 817, in train_custom\n'
              '    self._save_model(base_path / "best-model.pt", checkpoint=save_optimizer_state)\n')
    done = dev + "100%|██████████| 1/1 [00:00<00:00,  9.33it/s]\n2026-01-05 10:00:09,400 saving best model\n"
    assert (one(done + saving + MSG).phase, one(done + saving + MSG).step) == ("save", 13)
    # a training bar drawn between printed counters resumes mid-count: it is the step, not the counter before it
    mixed = "Step 450 | loss 1.20\n 45%|████▌     | 450/1000 [01:00<01:00, 7.5it/s]\n"
    assert one(mixed + frames + MSG).step == 450
    # ... and one that started at 0 after a lone start line is the training loop's own bar
    started = "Starting training from iteration 0\n" + "".join(
        f" {k // 10}%|█         | {k}/1000 [01:00<01:00, 7.5it/s]\n" for k in (0, 1, 2, 450))
    assert one(started + frames + MSG).step == 450


def test_a_web_uis_txt2img_failing_after_its_sampling_bars_is_generation_with_no_training_step():
    # AUTOMATIC1111's web UI (and Forge): the sampler's bars, then its request queue's traceback into the VAE decode
    log = (" 100%|██████████| 20/20 [00:06<00:00,  3.12it/s]\n"
           "Total progress: 100%|██████████| 20/20 [00:05<00:00,  3.41it/s]\n"
           "*** Error completing request\n"
           "    Traceback (most recent call last):\n"
           '      File "/opt/webui/modules/call_queue.py", line 57, in f\n'
           "        res = list(func(*args, **kwargs))\n"
           '      File "/opt/webui/modules/txt2img.py", line 109, in txt2img\n'
           "        processed = processing.process_images(p)\n"
           '      File "/opt/webui/modules/processing.py", line 632, in decode_latent_batch\n'
           "        sample = decode_first_stage(model, batch[i:i + 1])[0]\n"
           "    torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity "
           "of 7.78 GiB of which 1.21 GiB is free.\n")
    (event,) = events(log)
    assert (event.phase, event.step) == ("generate", None)
    assert {"diffusion", "webui"} <= set(config_from(normalize_region(1, log.splitlines()), "x.log")["stacks"].value)
    # the same bars and frames without the web UI's modules: a training loop's bar stays the step
    plain = log.replace("/opt/webui/modules/txt2img.py", "/opt/run/loop.py").replace("in txt2img", "in run_loop")
    assert events(plain)[0].step == 20


def test_mmengines_memory_field_is_a_per_interval_peak_sample_and_mmcv_1s_running_peak_is_not():
    lines = ["Epoch(train)  [1][  50/7330]  lr: 1.9780e-03  eta: 1 day, 2:03:01  time: 0.8520  memory: 8712  loss: 2.1032",
             "Epoch(train)  [1][ 100/7330]  lr: 3.9760e-03  eta: 1 day, 1:50:12  time: 0.8400  memory: 9410  loss: 1.8432"]
    samples = ctx.memory_samples(normalize_region(1, lines), "x.log")
    assert [(s.step, s.max_allocated_bytes) for s in samples] == [(50, 8712 * 2**20), (100, 9410 * 2**20)]
    mmcv = ["Epoch [1][50/7330]\tlr: 1.978e-03, eta: 1 day, 2:03:01, time: 0.852, memory: 8712, loss: 2.1032"]
    assert ctx.memory_samples(normalize_region(1, mmcv), "x.log") == []


def test_kohyas_bilingual_summary_gives_the_batch_and_the_stack():
    lines = ["running training / 学習開始", "  batch size per device / バッチサイズ: 4",
             "  gradient accumulation steps / 勾配を合計するステップ数 = 2"]
    cfg = config_from(normalize_region(1, lines), "x.log")
    assert (cfg["per_device_train_batch_size"].value, cfg["gradient_accumulation_steps"].value) == (4, 2)
    assert "sd_scripts" in cfg["stacks"].value


def _tqdm(total: int, counts) -> str:
    """An unlabelled tqdm bar over `total`, drawn at each of `counts`."""
    return "".join(f" {100 * k // total}%|█         | {k}/{total} [00:00<00:00,  7.5it/s]\n" for k in counts)


def test_a_function_named_with_the_word_eval_or_fit_names_its_phase():
    # pytorch-accelerated's evaluation epoch inside its training run; Poutyne's fit at its first batch
    evaluating = ('Traceback (most recent call last):\n'
                  '  File "/site-packages/pytorch_accelerated/trainer.py", line 793, in _run_training\n'
                  '    self._run_eval_epoch(self._eval_dataloader)\n'
                  '  File "/site-packages/pytorch_accelerated/trainer.py", line 1019, in _run_eval_epoch\n'
                  '    batch_output = self.calculate_eval_batch_loss(batch)\n'
                  '  File "/site-packages/pytorch_accelerated/trainer.py", line 384, in calculate_eval_batch_loss\n'
                  '    model_outputs = self.model(xb)\n')
    assert one(evaluating + MSG).phase == "eval"
    fitting = ('Traceback (most recent call last):\n'
               '  File "/site-packages/poutyne/framework/model.py", line 622, in fit_generator\n'
               '    self._fit_generator_one_batch_per_step(epoch_iterator, callback_list)\n'
               '  File "/site-packages/poutyne/framework/model.py", line 709, in _fit_batch\n'
               '    loss_tensor, batch_metrics, pred_y = self._compute_loss_and_metrics(\n')
    assert (one(fitting + MSG).phase, one(fitting + MSG).step) == ("train", None)
    # a word inside another word is not the word: a frame evaluating a retrieval is still "evaluat"'s, not "eval"'s
    assert one(fitting.replace("_fit_batch", "_refit_batch").replace("fit_generator", "outfit") + MSG).phase == "unknown"


def test_a_loops_start_line_for_evaluation_is_an_evaluation_banner():
    # pytorch-accelerated prints "Starting eval epoch" before the evaluation's unlabelled bar (another total)
    log = "Starting epoch 1\n" + _tqdm(12, range(13)) + "train_loss_epoch: 1.41\n\nStarting eval epoch\n" + _tqdm(4, [0])
    event = one(log + MSG)
    assert (event.phase, event.step) == ("eval", 12)
    assert ctx.is_eval_banner("Starting evaluation run") and ctx.is_eval_banner("Beginning validation")
    assert not ctx.is_eval_banner("Starting evaluations of the tokenizer") and not ctx.is_eval_banner("Starting training")


def test_poutynes_progress_line_over_validation_or_test_batches_is_not_a_training_step():
    train = "".join(f"Epoch: 2/3 Step: {k:2}/12  {100 * k / 12:5.2f}% |████      |ETA: 0.01s loss: 1.31 acc: 25.0\r"
                    for k in range(1, 13))
    val = "Epoch: 2/3 Step: 1/4  25.00% |█████     |ETA: 0.00s val_loss: 1.399517 val_acc: 25.000000"
    frames = ('Traceback (most recent call last):\n'
              '  File "/site-packages/poutyne/framework/model.py", line 767, in _validate\n'
              '    loss, batch_metrics, pred_y = self._compute_loss_and_metrics(\n')
    event = one(train + val + frames + MSG)
    assert (event.phase, event.step) == ("eval", 12)
    test = "Step: 3/5  60.00% |████████████        |ETA: 0.00s test_loss: 1.200241 test_acc: 62.500000\n"
    assert ctx.step_of(Line(1, None, test.strip())) is None
    assert ctx.step_of(Line(1, None, train.split("\r")[3])).n == 4


def test_a_datasets_bar_under_any_description_counts_examples_not_steps():
    # run_clm's group_texts map, its own description: "Grouping texts in chunks of 1024: ... examples/s]"
    prep = ("Grouping texts in chunks of 16:   0%|          | 0/80 [00:00<?, ? examples/s]\n"
            "Grouping texts in chunks of 16: 100%|██████████| 80/80 [00:00<00:00, 41287.60 examples/s]\n")
    frames = ('Traceback (most recent call last):\n'
              '  File "/site-packages/transformers/trainer.py", line 2674, in _inner_training_loop\n'
              '    self._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval)\n'
              '  File "/site-packages/transformers/trainer.py", line 3134, in _maybe_log_save_evaluate\n'
              '    metrics = self._evaluate(trial, ignore_keys_for_eval)\n'
              '  File "/site-packages/transformers/trainer.py", line 4315, in evaluation_loop\n'
              '    losses, logits, labels = self.prediction_step(model, inputs, prediction_loss_only)\n')
    event = one(prep + _tqdm(12, range(5)).rstrip("\n") + frames + MSG)
    assert (event.phase, event.step) == ("eval", 4)
    assert ctx.step_of(Line(1, None, prep.splitlines()[1])) is None


def test_out_of_training_the_step_is_the_bar_an_epochs_line_opened():
    # SpeechBrain: "Going into epoch N", the epoch's training bar, its validation's unlabelled bar, the checkpoint
    epoch = ("speechbrain.utils.epoch_loop - Going into epoch 2\n" + _tqdm(12, range(13))
             + _tqdm(4, [0, 4]) + "speechbrain.utils.train_logger - epoch: 2, lr: 1.00e-02 - train loss: 1.2\n")
    saving = ('Traceback (most recent call last):\n'
              '  File "/site-packages/speechbrain/utils/checkpoints.py", line 686, in save_and_keep_only\n'
              '    self.save_checkpoint(meta=meta, end_of_epoch=end_of_epoch, name=name, verbosity=verbosity)\n'
              '  File "/site-packages/speechbrain/utils/checkpoints.py", line 620, in save_checkpoint\n'
              '    torch.save(obj.state_dict(), savepath)\n')
    assert (one(epoch + saving + MSG).phase, one(epoch + saving + MSG).step) == ("save", 12)
    # Brain.evaluate after fit: its test bar, another total, still running
    testing = ('Traceback (most recent call last):\n'
               '  File "/site-packages/speechbrain/core.py", line 1396, in evaluate\n'
               '    loss = self.evaluate_batch(batch, stage=Stage.TEST)\n')
    after = epoch + _tqdm(5, [0, 2])
    assert (one(after + testing + MSG).phase, one(after + testing + MSG).step) == ("eval", 12)
    # training failing in the next epoch's bar reads that bar, whatever line opened it
    training = ('Traceback (most recent call last):\n  File "/site-packages/speechbrain/core.py", line 1044, in '
                '_fit_train\n    loss = self.fit_batch(batch)\n')
    assert one(epoch + "Going into epoch 3\n" + _tqdm(12, range(6)) + training + MSG).step == 5


def test_pykeens_batch_bar_counts_in_unit_scale_and_its_epoch_bar_counts_no_steps():
    # the epoch bar around the batches' bar (tqdm unit "epoch"), redrawn after the batches' bar cleared itself
    batches = "".join(f"Training batches on cpu:  {k * 12}%|█▎        | {k}.00/8.00 [00:00<00:00, 8.05batch/s]\x1b[A\r"
                      for k in range(5))
    epochs = "Training epochs on cpu:  25%|██▌       | 1/4 [00:01<00:05,  1.91s/epoch, loss=1.12, prev_loss=nan]\n"
    frames = ('Traceback (most recent call last):\n'
              '  File "/site-packages/pykeen/training/training_loop.py", line 707, in _train\n'
              '    epoch_loss = self._train_epoch(\n')
    event = one(epochs + batches + "\n" + epochs + frames + MSG)
    assert (event.phase, event.step) == ("train", 4)
    assert ctx.step_of(Line(1, None, "Evaluating on cpu:  50%|█████     | 29.0/58.0 [00:00<00:00, 555triple/s]")) is None
    assert ctx.step_of(Line(1, None, " 40%|████      | 2/5 [00:02<00:03,  1.03epoch/s]")) is None
    # a float total of another unit is no count (demucs' bar over seconds of audio)
    assert ctx.step_of(Line(1, None, "100%|██████████| 4356.0/4356.0 [01:35<00:00, 45.42seconds/s]")) is None


def test_a_memory_error_raised_from_the_oom_is_the_same_failure():
    # torch_max_mem (PyKEEN's evaluation): halving the batch down to one, then "raise MemoryError(...) from error"
    oom = ('Traceback (most recent call last):\n'
           '  File "/site-packages/torch_max_mem/api.py", line 485, in wrapper_maximize_memory_utilization\n'
           '    result = func(*bound_arguments.args, **p_kwargs, **kwargs)\n'
           'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of '
           '79.15 GiB of which 1.00 GiB is free.\n\n')
    wrapped = ('The above exception was the direct cause of the following exception:\n\n'
               'Traceback (most recent call last):\n'
               '  File "/site-packages/torch_max_mem/api.py", line 494, in wrapper_maximize_memory_utilization\n'
               '    raise MemoryError(\n'
               "MemoryError: Execution did not even succeed with ('batch_size', 'slice_size') all equal to 1.\n")
    assert [e.kind for e in events(oom + wrapped)] == ["cuda_oom"]
    # a MemoryError while handling the OOM (saving to the host) is a second failure
    handling = wrapped.replace("The above exception was the direct cause of the following exception",
                               "During handling of the above exception, another exception occurred")
    assert [e.kind for e in events(oom + handling)] == ["cuda_oom", "host_oom"]


def test_ggml_s_cuda_check_names_its_device_on_the_next_line_and_its_start_up_is_set_up():
    # llama.cpp in 2023 and its forks (qwen.cpp): the check's "CUDA error 2 at file:line" and "current device: N"
    start = "ggml_init_cublas: found 2 CUDA devices:\n  Device 0: NVIDIA A800 80GB PCIe, compute capability 8.0\n\n"
    event = one(start + "CUDA error 2 at /src/ggml-cuda.cu:7196: out of memory\ncurrent device: 1\n")
    assert (event.kind, event.gpu_index, event.phase) == ("cuda_error", 1, "init")
    # llama.cpp's main before it loads anything: its build line, then the failure
    event = one("main: build = 1233 (98311c4)\nmain: seed  = 1694805687\n\n"
                "CUDA error 2 at /src/ggml-cuda.cu:5509: out of memory\n")
    assert (event.gpu_index, event.phase) == (None, "init")
    # a later ggml: "CUDA error: out of memory" and the device with the function that failed
    event = one("CUDA error: out of memory\n  current device: 0, in function ggml_backend_cuda_buffer_type_alloc_buffer"
                " at ggml-cuda.cu:412\n")
    assert event.gpu_index == 0


def test_a_2_1_message_cut_inside_its_last_clause_keeps_the_figure_before_the_cut():
    head = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of "
            "14.74 GiB of which 38.12 MiB is free. Process 207160 has 14.70 GiB memory in use. Of the allocated memory "
            "14.36 GiB is allocated by PyTorch, and 217.26 MiB is ")
    event = one(head + "reserve\n")
    assert event.reserved_unallocated_bytes == round(217.26 * 2**20)
    # the reserve known, the only process listed is the failing one (a container prints it under its own pid)
    assert event.process_in_use_bytes == round(14.70 * 2**30) and event.other_processes == ()
    assert one(head[:-4] + "\n").reserved_unallocated_bytes is None  # cut inside the figure: not read


def test_caffe_s_solver_start_is_training_and_a_tensorrt_engine_build_is_set_up():
    solver = ("I0930 23:28:33.788710  3746 solver.cpp:282] Solving spacenet_SSD_500x500_train\n"
              "I0930 23:28:33.788714  3746 solver.cpp:283] Learning Rate Policy: step\n")
    caffe = "F0930 23:28:34.930538  3746 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n"
    assert one(solver + caffe).phase == "train"
    assert one("Solving environment: done\n" + caffe).phase == "unknown"  # conda resolving packages is not a solver
    test = "I0911 12:46:39.811416 18216 caffe.cpp:252] Running for 1449 iterations.\n"  # `caffe test`
    assert one(test + caffe).phase == "eval"
    trt = "[09/29/2022-16:59:38] [E] [TRT] ../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)\n"
    assert one("start building engine\n" + trt).phase == "init"


def test_an_evaluation_loop_s_start_line_counts_anywhere_in_the_log_not_only_as_its_first_line():
    # pytorch-accelerated's "Starting evaluation run": the per-source gate once asked whether the whole text started so
    msg = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 1.00 GiB is free.\n")
    assert one("Starting evaluation run\n" + msg).phase == "eval"
    assert one("loading the data\nStarting evaluation run\n" + msg).phase == "eval"


def test_llama_cpp_under_its_own_logger_one_failure_its_kv_cache_and_its_stack():
    from oomdoctor.parse import parse_text

    log = ("0.00.116.142 I srv  load_model: loading model '/models/m.gguf'\n"
           "0.01.047.215 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 36864.00 MiB on device 0: cudaMalloc "
           "failed: out of memory\n"
           "0.01.047.220 E alloc_tensor_range: failed to allocate CUDA0 buffer of size 38654705664\n"
           "0.01.048.446 E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n")
    result = parse_text(log)
    (e,) = result.events  # the buffer's own line is the same failure, a record of its own
    assert (e.line, e.end_line, e.requested_bytes, e.gpu_index, e.phase, e.operation) == (
        2, 2, 36864 * 2**20, 0, "init", "kv_cache")
    assert "serving_engine" in result.runs[0].config["stacks"].value


def test_frames_printed_after_a_logged_message_are_read_with_the_calls_in_their_code_lines():
    from oomdoctor.parse import parse_text

    logged = ("W tensorflow/core/framework/op_kernel.cc:1152] Resource exhausted: OOM when allocating tensor with "
              "shape[25088,4096]\n")
    frames = ('Traceback (most recent call last):\n  File "train_net.py", line 109, in <module>\n    train_net(net)\n'
              '  File "lib/train.py", line 148, in train_model\n    sess.run({call})\n'
              '  File "site-packages/tensorflow/python/client/session.py", line 778, in run\n    run_metadata_ptr)\n'
              "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
              "shape[25088,4096]\n")
    # TensorFlow 1's initialiser allocates every variable before any step, inside a function named train_model
    (e,) = parse_text(logged + frames.format(call="tf.global_variables_initializer()")).events
    assert e.phase == "init"
    (e,) = parse_text(logged + frames.format(call="[train_op, loss]")).events
    assert e.phase == "train"


def test_a_server_ready_for_requests_fails_serving_them_unless_training_went_on():
    from oomdoctor.parse import parse_text

    load = "Loading model...\n100%|##########| 88/88 [00:03<00:00, 20.72it/s]\nModel loaded.\n"
    for ready in ("Serving on http://0.0.0.0:1234.", "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
                  "main: server is listening on http://127.0.0.1:8080 - starting the main loop",
                  "Running on local URL:  http://127.0.0.1:7860"):
        (e,) = parse_text(load + ready + "\n" + MSG).events
        assert (e.phase, e.step) == ("generate", None), ready  # the bar before it loaded the model
    # a training GUI serves its page, then trains: its steps after the ready line say training
    train = "".join(f"steps:  {k}%|#| {k}/100 [00:0{k % 10}<00:10, 1.0it/s, loss=0.1]\n" for k in (1, 2, 3))
    (e,) = parse_text(load + "Running on local URL:  http://127.0.0.1:7860\n" + train + MSG).events
    assert (e.phase, e.step) == ("train", 3)
    (e,) = parse_text(load + MSG).events
    assert e.phase != "generate"


def test_comfyui_moving_weights_to_the_gpu_is_set_up_unless_a_sampler_runs_it():
    load = ('Traceback (most recent call last):\n'
            '  File "/ComfyUI/comfy/model_management.py", line 600, in load_models_gpu\n    loaded_model.model_load()\n'
            '  File "/ComfyUI/comfy/model_patcher.py", line 909, in partially_load\n    self.load(device_to)\n')
    assert one(load + MSG).phase == "init"
    sampling = ('Traceback (most recent call last):\n'
                '  File "/ComfyUI/comfy/samplers.py", line 1010, in sample\n    comfy.model_management.load_models_gpu()\n'
                + load.split("\n", 1)[1])
    assert one(sampling + MSG).phase == "generate"


def test_comfyui_is_named_by_its_console_and_its_folders_not_by_a_word():
    # its queue's "got prompt" and the error line around every failed graph, a traceback through its package
    console = ("got prompt\n"
               "!!! Exception during processing !!! Allocation on device\n"
               "Traceback (most recent call last):\n"
               '  File "C:\\apps\\ComfyUI\\execution.py", line 327, in execute\n')
    stacks = config_from(normalize_region(1, console.splitlines()), "x.log")["stacks"].value
    assert {"comfyui", "diffusion"} <= set(stacks)
    assert "comfyui" in config_from(normalize_region(1, ["got prompt"]), "x.log")["stacks"].value
    # a prompt mentioned in prose, or a comfortable margin, names no app
    prose = ["we got prompt tokens from the tokenizer", "memory is comfortable at step 4"]
    assert "stacks" not in config_from(normalize_region(1, prose), "x.log")


def test_a_message_broken_after_its_request_keeps_the_space_between_its_sentences():
    # the line ends in the request's figure (no trailing blank left to say it was cut at a space)
    (e,) = events("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 MiB.\n"
                  "GPU 0 has a total capacity of 15.55 GiB of which 110.12 MiB is free.\n")
    assert "12.00 MiB. GPU 0 has" in e.message
    assert (e.requested_bytes, e.free_bytes) == (12 * 2**20, round(110.12 * 2**20))


def test_a_glog_checks_stack_trace_header_is_no_part_of_its_message_nor_a_message_of_its_own():
    log = ("F1216 22:28:02.183454 12168 syncedmem.cpp:78] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n"
           "*** Check failure stack trace: ***\n"
           "Could not create log file: File exists\n"
           "COULD NOT CREATE LOGFILE '20181216-222802.15444'!\n"
           "F1216 22:28:02.189438 10304 syncedmem.cpp:78] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n")
    found = events(log)
    assert found[0].message.endswith("out of memory") and found[0].line == 1
    assert all(e.line != 2 for e in found)  # the row after a whole trigger does not start another message


def test_a_bar_drawing_ten_thousand_iterations_a_second_counts_no_training_steps():
    loading = "100%|██████████| 949/949 [00:00<00:00, 834989.41it/s]loading knowledge graph from /data/train.txt\n"
    (e,) = events(loading + MSG)
    assert e.step is None
    # a toy model on a CPU steps a few thousand times a second: still its training bar
    (e,) = events(" 50%|█████     | 4/8 [00:00<00:00, 4510.00it/s]\n" + MSG)
    assert e.step == 4


def test_an_ipython_frame_reads_the_statement_its_arrow_points_at_not_the_lines_around_it():
    cell = ("OutOfMemoryError                          Traceback (most recent call last)\n"
            "[<ipython-input-4-3f1c2a9d0b7e>](https://localhost:8080/#) in <cell line: 6>()\n"
            "      5 runner = DockRunner(ckpt_file=ckpt_path)\n"
            "----> 6 result = runner.dock(\n"
            "      7     partner1=chain_a,\n"
            "\n")
    (e,) = events(cell + MSG)
    assert e.phase != "init"  # the constructor on line 5 ran and returned: it is not what failed
    # older IPython points at a multi-line statement's last line: the call on its first line is the statement's
    fit = ("<ipython-input-17-52b44d5e84db> in <module>()\n"
           "      3 history = classifier.fit(train_gen,\n"
           "      4                          steps_per_epoch=100,\n"
           "----> 5                          epochs=num_epochs)\n"
           "\n")
    (e,) = events(fit + MSG)
    assert e.phase == "train"


def test_the_sentences_of_a_cuda_errors_hints_keep_their_spaces_and_a_cut_dotted_name_its_dot():
    log = ("RuntimeError: CUDA error: out of memory\n"
           "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
           "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n")
    (e,) = events(log)
    assert "might be incorrect. For debugging" in e.message
    from oomdoctor.parse.events import _sentence_break

    assert not _sentence_break("raise torch.", "OutOfMemoryError: CUDA out of memory.")


def test_zeros_gradient_bucket_allocation_is_its_own_operation():
    frames = ('Traceback (most recent call last):\n'
              '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 1936, in '
              'backward\n'
              "    buf_0 = torch.empty(int(self.reduce_bucket_size),\n")
    (e,) = events(frames + "RuntimeError: CUDA out of memory. Tried to allocate 954.00 MiB (GPU 0; 31.75 GiB total "
                  "capacity; 29.99 GiB already allocated; 445.94 MiB free; 30.27 GiB reserved in total by PyTorch)\n")
    assert e.operation == "zero_bucket"
    (e,) = events(frames.replace("int(self.reduce_bucket_size)", "grads.numel()")
                  + "RuntimeError: CUDA out of memory. Tried to allocate 954.00 MiB (GPU 0; 31.75 GiB total capacity; "
                  "29.99 GiB already allocated; 445.94 MiB free; 30.27 GiB reserved in total by PyTorch)\n")
    assert e.operation == "backward"


def test_the_function_a_loguru_error_record_names_is_where_the_error_was_caught():
    record = ("2025-05-03 13:40:54.819 | ERROR    | lmms_eval.models.qwen2_5_omni:generate_until:302 - Error CUDA out of "
              "memory. Tried to allocate 334.76 GiB. GPU 0 has a total capacity of 44.42 GiB of which 27.48 GiB is free.\n")
    (e,) = events(record)
    assert e.phase == "generate"
    (e,) = events(record.replace("generate_until", "run_job"))  # a function that names no phase
    assert e.phase == "unknown"
    (e,) = events(record.replace("| ERROR    |", "| INFO     |"))  # only an error record is the catch site
    assert e.phase == "unknown"


def test_an_iteration_counted_in_words_is_the_step():
    (e,) = events("Iteration 120 of 500, loss 0.41\n" + MSG)
    assert (e.step, e.phase) == (120, "train")
    # Python 2 printing a tuple: "print('iter = ', i, 'of', max_iter, 'completed, loss = ', loss)"
    (e,) = events("('iter = ', 2, 'of', 20000, 'completed, loss = ', array([ 0.7446], dtype=float32))\n" + MSG)
    assert (e.step, e.phase) == (2, "train")
    (e,) = events("loading shard 2 of 8\n" + MSG)  # not an iteration
    assert e.step is None


def test_the_script_a_shells_kill_notice_names_gives_the_phase():
    (e,) = events("Emulation speed 100.0%\n[1]    1819 killed    python3 dddqn_train.py MarioNoFrameskip results\n")
    assert (e.kind, e.phase) == ("host_oom", "train")
    (e,) = events('./tools/dist_test.sh: line 13: 114146 Killed  PYTHONPATH=.. python3 $(dirname "$0")/test.py cfg.py\n')
    assert (e.kind, e.phase) == ("host_oom", "eval")
    (e,) = events("[1]    1819 killed    python3 run.py --epochs 3\n")  # a name that says nothing
    assert e.phase == "unknown"
    # the notice (in a Chinese locale, glued to mmcv's test bar) hard-wrapped by an 80-column terminal: the script's
    # name on the next row
    notice = ('[ ] 0/3, elapsed: 0s, ETA:./tools/dist_test.sh: 第 13 行： 114146 已杀死 PYTHONPATH="$(dirname $0)/..":'
              '$PYTHONPATH python3 $(dirname "$0")/test.py $CONFIG $CHECKPOINT')
    (e,) = events(notice[:80] + "\n" + notice[80:] + "\n")
    assert (e.kind, e.phase) == ("host_oom", "eval")


def test_a_cross_validation_loop_trains_unless_an_inner_frame_evaluates():
    (e,) = events(_through("cross_validation", "fit", "fit_self") + MSG)  # a tabular benchmark's folds
    assert e.phase == "train"
    (e,) = events(_through("cross_val_score", "predict") + MSG)
    assert e.phase == "eval"
    (e,) = events(_through("validate", "forward") + MSG)  # validation on its own is still evaluation
    assert e.phase == "eval"
