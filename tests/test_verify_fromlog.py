"""verify --from: the replay config built from a failed run's log, with every assumption listed."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from oomdoctor.cli import app
from oomdoctor.verify.fromlog import build

ROOT = Path(__file__).resolve().parents[1]

# The failure both DeepSpeed ZeRO logs below end with (PyTorch 2.2+ wording)
ZERO_RUN_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 954.00 MiB. GPU 0 has a total capacity "
                "of 79.15 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 78.64 GiB "
                "memory in use. Of the allocated memory 75.10 GiB is allocated by PyTorch, and 2.92 GiB is reserved by "
                "PyTorch but unallocated.\n")


def test_config_carries_the_runs_facts_and_names_its_assumptions():
    config, notes = build(str(ROOT / "fixtures/synthetic/syn-lora-eval-spike-8xa100.log"))
    p = config["workload"]["params"]
    assert (p["batch"], p["grad_accum"], p["eval_batch"], p["autocast"], p["lora_rank"]) == (4, 4, 8, "bfloat16", 16)
    assert config["phase"] == "eval" and config["memory"]["limit"] == "81050MiB"
    assert "smaller-eval-batch" in config["fixes"]
    assert any(n.startswith("seq_len: not in the log, assumed") for n in notes)


def test_every_written_value_says_where_it_came_from(tmp_path):
    # the ZeRO-3 seed: batch and accumulation from HF Trainer's training banner (the last print of them, after
    # DeepSpeed's JSON config), the stage from its config print, the
    # limit from the OOM message; the config loads as written. A built-in replay's head count is derived.
    from oomdoctor.verify.config import load
    from oomdoctor.verify.fromlog import write

    log = ROOT / "fixtures/synthetic/syn-zero3-4k-no-ckpt.log"
    out = tmp_path / "cfg.yaml"
    write(str(log), out)
    lines = {ln.split(":", 1)[0].strip(): ln for ln in out.read_text().splitlines() if not ln.startswith("#")}
    text = log.read_bytes().decode().split("\n")  # no newline translation: \r stays inside its line
    for key, fact_line in (("batch", 177), ("grad_accum", 179), ("zero_stage", 150), ("world_size", 145)):
        quoted = lines[key].split(f"{log}:{fact_line}  ", 1)[1]
        assert quoted.rstrip("…")[:20] in text[fact_line - 1]  # the quoted text is that line's own
    assert f"{log}:249" in lines["limit"] and "phase" in lines and f"{log}:" in lines["phase"]
    params = yaml.safe_load(out.read_text())["workload"]["params"]
    assert all("  # " in lines[k] for k in params)  # every value of the workload carries its origin
    assert load(out).capacity_bytes > 0
    megatron = tmp_path / "megatron.yaml"
    write(str(ROOT / "fixtures/synthetic/syn-megatron-iteration.log"), megatron)
    assert "# derived: width / 128" in next(ln for ln in megatron.read_text().splitlines() if "heads:" in ln)


def test_an_assumed_value_is_marked_assumed_beside_it(tmp_path):
    from oomdoctor.verify.fromlog import write

    out = tmp_path / "cfg.yaml"
    write(str(ROOT / "fixtures/synthetic/syn-lora-eval-spike-8xa100.log"), out)
    line = next(ln for ln in out.read_text().splitlines() if ln.strip().startswith("seq_len:"))
    assert line.endswith("# assumed: not in the log")


def test_write_config_then_stop(tmp_path):
    out = tmp_path / "cfg.yaml"
    r = CliRunner().invoke(app, ["verify", "--from", str(ROOT / "fixtures/synthetic/syn-first-step-batch.log"),
                                 "--write-config", str(out)])
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load(out.read_text())
    import importlib.util

    # the log names Qwen/Qwen2.5-0.5B: its own architecture when transformers is there, else the built-in stand-in
    expected = "hf" if importlib.util.find_spec("transformers") else "transformer"
    assert cfg["workload"]["model"] == expected and cfg["memory"]["limit"].endswith("MiB")
    from oomdoctor.verify.config import load

    assert load(out).capacity_bytes > 0  # the written config is valid as it stands


def test_from_needs_a_gpu_oom_and_excludes_config(tmp_path):
    log = tmp_path / "host.log"
    log.write_text("Killed\n")
    r = CliRunner().invoke(app, ["verify", "--from", str(log)])
    assert r.exit_code == 2 and "no GPU out-of-memory event" in r.output
    r = CliRunner().invoke(app, ["verify", "--from", str(log), "--config", str(log)])
    assert r.exit_code == 2 and "exactly one" in r.output


def test_a_catalogued_model_is_replayed_with_its_own_architecture(tmp_path):
    import importlib.util

    import pytest

    if importlib.util.find_spec("transformers") is None:
        pytest.skip("needs transformers (the [integrations] extra)")
    log = tmp_path / "train.log"
    log.write_text(
        "TrainingArguments(per_device_train_batch_size=8, gradient_accumulation_steps=2, bf16=True)\n"
        "model_name_or_path: meta-llama/Llama-3.2-1B-Instruct\n"
        "{'loss': 1.93, 'learning_rate': 2e-05, 'epoch': 0.1}\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
        "23.64 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 22.43 GiB memory in "
        "use. Of the allocated memory 21.70 GiB is allocated by PyTorch, and 280.00 MiB is reserved by PyTorch but "
        "unallocated.\n")
    config, notes = build(str(log))
    assert config["workload"]["model"] == "hf", notes
    p = config["workload"]["params"]
    assert (p["config"], p["batch"], p["grad_accum"], p["autocast"]) == (
        "meta-llama/Llama-3.2-1B-Instruct", 8, 2, "bfloat16")
    assert "Llama-3.2-1B-Instruct's own architecture" in notes[0]
    out = tmp_path / "cfg.yaml"
    from oomdoctor.verify.config import load
    from oomdoctor.verify.fromlog import write

    write(str(log), out)
    assert load(out).config.workload.model == "hf"  # valid as written


def _seed(name: str, *modules: str) -> tuple[dict, list[str]]:
    """What `verify --from` builds for an issue-12 seed log in fixtures/synthetic; skipped without the modules the
    replay needs (the [verify,integrations] extras)."""
    import importlib.util

    import pytest

    if missing := [m for m in modules if importlib.util.find_spec(m) is None]:
        pytest.skip(f"needs {', '.join(missing)} (the [verify,integrations] extras)")
    return build(str(ROOT / "fixtures" / "synthetic" / f"{name}.log"))


def _verify_on_sim(config: dict, fixes: list[str], tmp_path: Path) -> tuple[dict, dict[str, dict]]:
    """Run `oomdoctor verify` on the simulated device with `config` and these fixes: the result and its trials by fix."""
    import json
    import subprocess
    import sys

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({**config, "device": "sim", "fixes": fixes}))
    out = tmp_path / "result.json"
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "verify", "--config", str(cfg), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    result = json.loads(out.read_text())
    return result, {t["fix"]: t for t in result["trials"]}


def test_a_resnet_log_replays_the_real_network_and_a_smaller_batch_fits(tmp_path):
    # Issue 12's seed "a ResNet-152 at batch 64 with no AMP": the simulated replay of the log reproduces the OOM
    # at the card's limit, and halving the batch fits.
    config, notes = _seed("syn-resnet152-batch64-fp32", "torch", "transformers")
    log = ROOT / "fixtures" / "synthetic" / "syn-resnet152-batch64-fp32.log"
    p = config["workload"]["params"]
    assert (config["workload"]["model"], p["config"], p["batch"]) == ("hf", "resnet152", 64) and "seq_len" not in p
    assert any("optimizer: not in the log" in n for n in notes) and not any(n.startswith("width") for n in notes)
    written = tmp_path / "written.yaml"
    from oomdoctor.verify.fromlog import write

    write(str(log), written)  # the config as --write-config saves it
    result, by_fix = _verify_on_sim(yaml.safe_load(written.read_text()), ["halve-batch", "gradient-checkpointing"],
                                    tmp_path)
    assert result["baseline_reproduced"] and by_fix["baseline"]["oom"] is True
    assert by_fix["halve-batch"]["fits"] is True
    assert by_fix["gradient-checkpointing"]["verifiable"] is False  # transformers' ResNet has no checkpointing


def test_a_7b_vision_language_lora_log_replays_the_real_model_and_half_the_batch_fits(tmp_path):
    # Issue 12's seed "a 7B vision-language model on a 40 GB card": LLaVA-1.5-7B (CLIP tower, projector, Llama-2
    # decoder) with LoRA rank 128 at batch 16, as LLaVA's train_mem.py command line says. The replay reproduces the
    # OOM at 39.39 GiB; 8 x 2 (the effective batch kept) fits, as LLaVA's README advises for smaller cards.
    config, notes = _seed("syn-llava7b-lora-40g-batch16", "torch", "transformers", "peft")
    p = config["workload"]["params"]
    assert (config["workload"]["model"], p["config"], config["phase"]) == ("hf", "liuhaotian/llava-v1.5-7b", "train")
    assert (p["batch"], p["grad_accum"], p["seq_len"], p["lora_rank"]) == (16, 1, 2048, 128)
    assert p["gradient_checkpointing"] is True and p["dtype"] == "bfloat16"  # the frozen base in the run's bf16
    assert any(n.startswith("weights: the dtype they were loaded in is not in the log") for n in notes)
    assert "halve-batch" in config["fixes"]
    result, by_fix = _verify_on_sim(config, ["halve-batch"], tmp_path)
    assert result["baseline_reproduced"] and by_fix["baseline"]["oom"] is True
    assert by_fix["halve-batch"]["fits"] is True


def test_a_zero3_log_replays_sharded_and_checkpointing_fits(tmp_path):
    # Issue 12's seed "a Llama at 4k tokens under ZeRO-3 without checkpointing": the stage and world size come from
    # DeepSpeed's own config print (zero_optimization_stage ...... 3, world_size ...... 8), the replay reproduces the
    # OOM at the card's limit, and turning on gradient checkpointing fits.
    config, _ = _seed("syn-zero3-4k-no-ckpt", "torch", "transformers")
    p = config["workload"]["params"]
    assert (p["zero_stage"], p["world_size"], p["seq_len"], p["batch"]) == (3, 8, 4096, 4)
    # Meta-Llama-3-8B's own architecture, sharded as DeepSpeed's bf16 mode does (fp32 master weights and moments)
    assert (config["workload"]["model"], p["zero3_gather_unit"], p["master_weights"]) == ("hf", "module", True)
    assert "gradient_checkpointing" not in p and "gradient-checkpointing" in config["fixes"]
    result, by_fix = _verify_on_sim(config, ["gradient-checkpointing"], tmp_path)
    assert result["baseline_reproduced"] and by_fix["baseline"]["oom"] is True
    assert by_fix["gradient-checkpointing"]["fits"] is True


def test_a_hf_evaluation_that_piles_up_logits_is_replayed_whole_and_eval_accumulation_fits(tmp_path):
    # Issue 12's seed "a LoRA fine-tune that OOMs at evaluation": HF Trainer keeps every evaluation batch's logits
    # on the device, after gathering all ranks' logits onto each (accelerate's gather_for_metrics); the failing
    # loop's bar (14/32) gives the loop's length. The replay reproduces the OOM at the card's limit; moving the
    # logits to the host every batch fits, and a smaller evaluation batch does not (the same samples pile up).
    # The weights load in the run's torch_dtype (bf16).
    config, notes = _seed("syn-lora-eval-spike-8xa100", "torch", "transformers", "peft")
    p = config["workload"]["params"]
    assert (config["workload"]["model"], p["eval_batch"], p["eval_batches"]) == ("hf", 8, 32)
    assert "eval_accumulation_steps" not in p and any("32 batches" in n for n in notes) and p["dtype"] == "bfloat16"
    # torchrun's 8 processes: HF gathers every rank's logits onto each rank before keeping them
    assert p["eval_world_size"] == 8 and any("gathers all 8 ranks' logits" in n for n in notes)
    result, by_fix = _verify_on_sim(config, ["eval-accumulation-steps", "smaller-eval-batch"], tmp_path)
    assert result["baseline_reproduced"] and by_fix["baseline"]["oom"] is True
    assert by_fix["eval-accumulation-steps"]["fits"] is True  # the fix that works: to the host after every batch
    assert by_fix["smaller-eval-batch"]["oom"] is True  # the same samples pile up in twice as many batches


def test_a_grpo_policy_update_log_replays_the_log_prob_pass_and_checkpointing_fits(tmp_path):
    # Issue 12's seed "a GRPO run with 4 generations x batch 4": TRL's GRPO update computes the completions'
    # log-probs from the policy's logits (prompt 512 + completion 1024 tokens, 4 completions per device) with no
    # activation checkpointing on a 24 GB card. The replay reproduces the OOM at the card's limit; turning on
    # gradient checkpointing (one of the fixes the diagnosis proposes) fits.
    config, notes = _seed("syn-grpo-4x4-logps-4090", "torch", "transformers")
    p = config["workload"]["params"]
    assert (config["phase"], config["workload"]["model"], p["config"]) == ("train", "hf", "Qwen/Qwen2.5-1.5B-Instruct")
    assert (p["batch"], p["seq_len"], p["completion_len"], p["dtype"]) == (4, 1536, 1024, "bfloat16")
    assert "gradient_checkpointing" not in p and any(n.startswith("RL update") for n in notes)
    assert "reference_model" not in p  # beta=0.0 as printed: TRL keeps no reference copy
    assert "gradient-checkpointing" in config["fixes"]
    result, by_fix = _verify_on_sim(config, ["gradient-checkpointing"], tmp_path)
    assert result["baseline_reproduced"] and by_fix["baseline"]["oom"] is True
    assert by_fix["gradient-checkpointing"]["fits"] is True


def test_a_grpo_log_replays_generation_with_the_real_architecture():
    config, _ = _seed("syn-grpo-generations", "transformers")
    p = config["workload"]["params"]
    assert (config["phase"], config["workload"]["model"], p["config"]) == ("generate", "hf", "Qwen/Qwen2.5-1.5B-Instruct")
    assert (p["num_generations"], p["max_new_tokens"], p["generate_in_training"], p["eval_batch"]) == (4, 1024, True, 4)
    assert p["reference_model"] is True  # beta=0.04 without PEFT: a frozen copy of the policy stays resident
    assert "lower-num-generations" in config["fixes"]


def test_data_parallel_without_zero_replays_ddps_buckets():
    # torchrun's 8 processes, no DeepSpeed or FSDP: DistributedDataParallel, whose buckets copy the gradients
    config, notes = build(str(ROOT / "fixtures/synthetic/syn-lora-eval-spike-8xa100.log"))
    assert config["workload"]["params"]["ddp_buckets"] is True and any("DDP's gradient buckets" in n for n in notes)
    zero3, _ = build(str(ROOT / "fixtures/synthetic/syn-zero3-4k-no-ckpt.log"))
    assert "ddp_buckets" not in zero3["workload"]["params"]  # ZeRO-3 reduces without DDP's buckets
    megatron, _ = build(str(ROOT / "fixtures/synthetic/syn-megatron-iteration.log"))
    assert "ddp_buckets" not in megatron["workload"]["params"]  # Megatron's grads are views into its own buffer


def test_a_zero_stage_without_deepspeed_named_gets_no_ddp_buckets(tmp_path):
    # a ZeRO stage read from a plain config line, no DeepSpeed banner: sharded, so no DDP buckets beside it (the
    # two together are an invalid replay)
    log = tmp_path / "zs.log"
    log.write_text(
        "+ torchrun --nproc_per_node=4 train.py --per_device_train_batch_size 4\nzero_stage: 2\n"
        "  1%|          | 12/1000 [00:31<42:58,  2.61s/it]\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 78.64 GiB memory in "
        "use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 3.92 GiB is reserved by PyTorch but "
        "unallocated.\n")
    params = build(str(log))[0]["workload"]["params"]
    assert params["zero_stage"] == 2 and "ddp_buckets" not in params
    from oomdoctor.verify.params import TransformerParams

    TransformerParams.model_validate(params)


def test_an_fsdp_sharding_strategy_replays_as_the_zero_stage_that_shards_the_same_state(tmp_path):
    from oomdoctor.verify.params import TransformerParams

    head = "+ torchrun --nproc_per_node=8 train.py --per_device_train_batch_size 4\n"
    oom = "  1%|          | 12/1000 [00:31<42:58,  2.61s/it]\n" + ZERO_RUN_OOM
    for printed, stage in (("fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>, <FSDPOption.AUTO_WRAP: 'auto_wrap'>],", 3),
                           ("  fsdp_sharding_strategy: SHARD_GRAD_OP", 2)):
        (tmp_path / "f.log").write_text(head + printed + "\n" + oom)
        config, notes = build(str(tmp_path / "f.log"))
        params = config["workload"]["params"]
        assert (params["zero_stage"], params["world_size"]) == (stage, 8) and "ddp_buckets" not in params, printed
        assert any(n.startswith("FSDP ") and f"ZeRO stage {stage}" in n for n in notes)
        TransformerParams.model_validate(params)
    (tmp_path / "f.log").write_text(head + "  fsdp_sharding_strategy: NO_SHARD\n" + oom)
    assert "zero_stage" not in build(str(tmp_path / "f.log"))[0]["workload"]["params"]  # replicated: no stage


def test_a_sharded_run_of_a_catalogued_model_replays_its_own_architecture_sharded(tmp_path):
    # FSDP FULL_SHARD and DeepSpeed ZeRO-2 of a model the catalog knows: `model: hf` with the log's stage and world
    # size; DeepSpeed's bf16 mode keeps fp32 master weights, FSDP's optimizer steps the weights as loaded
    import importlib.util

    import pytest

    if importlib.util.find_spec("transformers") is None:
        pytest.skip("needs transformers (the [integrations] extra)")
    from oomdoctor.verify.params import HFParams

    fsdp = ("+ torchrun --nproc_per_node=8 train.py --model_name_or_path meta-llama/Llama-3.2-1B "
            "--per_device_train_batch_size 4 --bf16\n"
            "fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>, <FSDPOption.AUTO_WRAP: 'auto_wrap'>],\n")
    deepspeed = ("[2024-05-02 10:00:01,100] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator "
                 "to cuda (auto detect)\n+ deepspeed --num_gpus 8 train.py --model_name_or_path meta-llama/Llama-3.2-1B "
                 "--deepspeed ds_config_zero2.json --per_device_train_batch_size 4 --bf16\n")
    oom = "  1%|          | 12/1000 [00:31<42:58,  2.61s/it]\n" + ZERO_RUN_OOM
    for head, stage, unit, master in ((fsdp, 3, None, None), (deepspeed, 2, "module", True)):
        (tmp_path / "s.log").write_text(head + oom)
        config, notes = build(str(tmp_path / "s.log"))
        p = config["workload"]["params"]
        assert config["workload"]["model"] == "hf" and "own architecture" in notes[0], notes
        assert (p["zero_stage"], p["world_size"], p.get("zero3_gather_unit"), p.get("master_weights")) == (
            stage, 8, unit, master)
        assert not any("stands in" in n for n in notes)
        HFParams.model_validate(p)


def test_a_data_parallel_training_step_also_tries_gradients_as_bucket_views(tmp_path):
    log = tmp_path / "ddp.log"
    log.write_text(
        "+ torchrun --nproc_per_node=4 train.py --model_name_or_path gpt2-large --per_device_train_batch_size 8\n"
        "  1%|          | 12/1000 [00:31<42:58,  2.61s/it]\n"
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 1 has a total capacity "
        "of 79.15 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 78.64 GiB memory in "
        "use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 3.92 GiB is reserved by PyTorch but "
        "unallocated.\n")
    config, _ = build(str(log))
    assert config["phase"] == "train" and config["workload"]["params"]["ddp_buckets"] is True
    assert "ddp-bucket-view" in config["fixes"]
    evaluation, _ = build(str(ROOT / "fixtures/synthetic/syn-lora-eval-spike-8xa100.log"))
    assert "ddp-bucket-view" not in evaluation["fixes"]  # evaluation keeps no gradients


def test_zeros_printed_gradient_buckets_are_replayed_and_an_unprinted_size_is_a_note(tmp_path):
    head = ("[2024-05-02 10:00:01,100] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to "
            "cuda (auto detect)\n"
            "+ deepspeed --num_gpus 8 train.py --model_name_or_path meta-llama/Llama-2-7b-hf --deepspeed ds_config_zero2.json "
            "--per_device_train_batch_size 4 --bf16\n")
    zero = ("[2024-05-02 10:00:09,500] [INFO] [config.py:1003:print]   zero_config .................. stage=2 "
            "contiguous_gradients=True reduce_scatter=True reduce_bucket_size=500000000 overlap_comm=True\n")
    oom = "  3%|▎         | 30/1000 [01:10<37:50,  2.34s/it]\n" + ZERO_RUN_OOM
    (tmp_path / "z.log").write_text(head + zero + oom)
    config, _ = build(str(tmp_path / "z.log"))
    params = config["workload"]["params"]
    assert (params["zero_stage"], params["zero_bucket_elements"], params["overlap_comm"]) == (2, 500_000_000, True)
    # DeepSpeed's bf16 mode (the bare --bf16 switch) casts the weights; its optimizer keeps the fp32 master copy
    assert params["dtype"] == "bfloat16" and "autocast" not in params
    assert "smaller-zero-buckets" in config["fixes"]
    (tmp_path / "n.log").write_text(head + oom)  # ZeRO-2 from the config file's name, no bucket size printed
    config, notes = build(str(tmp_path / "n.log"))
    assert config["workload"]["params"]["zero_stage"] == 2
    assert "zero_bucket_elements" not in config["workload"]["params"] and "smaller-zero-buckets" not in config["fixes"]
    assert any("reduce_bucket_size is not in the log" in n for n in notes)


def test_an_8bit_optimizer_in_the_log_is_replayed_as_bitsandbytes_keeps_it(tmp_path):
    log = tmp_path / "q.log"
    log.write_text(
        "optim=paged_adamw_8bit,\nper_device_train_batch_size=2,\n"
        "  1%|          | 12/1000 [00:31<42:58,  2.61s/it]\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of "
        "23.64 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 23.12 GiB memory in "
        "use. Of the allocated memory 21.10 GiB is allocated by PyTorch, and 1.52 GiB is reserved by PyTorch but "
        "unallocated.\n")
    config, notes = build(str(log))
    assert config["workload"]["params"]["optimizer"] == "adamw8bit"
    assert not any(n.startswith("optimizer:") for n in notes)
    log.write_text(log.read_text().replace("paged_adamw_8bit", "adamw_torch_fused"))
    assert build(str(log))[0]["workload"]["params"]["optimizer"] == "adamw_fused"  # no foreach temporaries


def test_zero3s_printed_prefetch_settings_are_replayed_and_unprinted_ones_assumed(tmp_path):
    head = ("[2024-05-02 10:00:01,100] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to "
            "cuda (auto detect)\n"
            "+ deepspeed --num_gpus 8 train.py --model_name_or_path my-org/unknown-13b --deepspeed ds_config_zero3.json "
            "--per_device_train_batch_size 4 --bf16\n")
    zero = ("[2024-05-02 10:00:09,500] [INFO] [config.py:1003:print]   zero_config .................. stage=3 "
            "contiguous_gradients=True reduce_bucket_size=500000000 prefetch_bucket_size=50,000,000 "
            "param_persistence_threshold=100000 max_live_parameters=300000000 max_reuse_distance=1000000000\n")
    oom = ZERO_RUN_OOM
    (tmp_path / "z.log").write_text(head + zero + oom)
    config, notes = build(str(tmp_path / "z.log"))
    params = config["workload"]["params"]
    assert params["zero3_gather_unit"] == "module"
    assert (params["zero3_prefetch_bucket_elements"], params["zero3_max_live_elements"],
            params["zero3_persistence_threshold_elements"]) == (50_000_000, 300_000_000, 100_000)
    assert "smaller-zero3-prefetch" in config["fixes"]
    assert not any("ZeRO-3 prefetch" in n for n in notes)
    (tmp_path / "n.log").write_text(head + oom)  # stage 3 from the config file's name, nothing printed
    config, notes = build(str(tmp_path / "n.log"))
    assert "zero3_max_live_elements" not in config["workload"]["params"]
    assert any("assumed DeepSpeed's defaults" in n and "max_live_parameters 1e+09" in n for n in notes)


def test_zero3_without_overlap_comm_gathers_on_the_compute_stream(tmp_path):
    # DeepSpeed all-gathers on its own stream only with overlap_comm (stage 3's default); printed false, one stream
    head = ("+ deepspeed --num_gpus 8 train.py --model_name_or_path my-org/unknown-13b --deepspeed ds_config_zero3.json "
            "--per_device_train_batch_size 4 --bf16\n")
    zero = ("[2024-05-02 10:00:09,500] [INFO] [config.py:1003:print]   zero_config .................. stage=3 "
            "contiguous_gradients=True reduce_bucket_size=500000000 overlap_comm=False\n")
    (tmp_path / "z.log").write_text(head + zero + ZERO_RUN_OOM)
    config, notes = build(str(tmp_path / "z.log"))
    assert config["workload"]["params"]["zero3_streams"] is False
    assert any("overlap_comm=false" in n for n in notes)
    (tmp_path / "d.log").write_text(head + zero.replace("overlap_comm=False", "overlap_comm=True") + ZERO_RUN_OOM)
    assert "zero3_streams" not in build(str(tmp_path / "d.log"))[0]["workload"]["params"]


def test_deepspeeds_own_optimizer_block_is_replayed_as_its_fused_adam(tmp_path):
    # An "optimizer" block in DeepSpeed's config builds DeepSpeed's FusedAdam (one kernel, in place) whatever the
    # trainer's optim says; "optimizer_name ... None" in its config print means the trainer brought its own.
    head = ("+ deepspeed --num_gpus 8 train.py --model_name_or_path my-org/unknown-13b --deepspeed ds_config_zero2.json "
            "--per_device_train_batch_size 4 --bf16 --optim adamw_torch\n")
    printed = "[2024-05-02 10:00:09,500] [INFO] [config.py:1003:print]   optimizer_name ............... {}\n"
    (tmp_path / "a.log").write_text(head + printed.format("adamw") + ZERO_RUN_OOM)
    config, notes = build(str(tmp_path / "a.log"))
    assert config["workload"]["params"]["optimizer"] == "adamw_fused"
    assert any("DeepSpeed's own (adamw in its config)" in n for n in notes)
    (tmp_path / "j.log").write_text(head + '  "optimizer": {"type": "AdamW", "params": {"lr": 2e-05}},\n' + ZERO_RUN_OOM)
    assert build(str(tmp_path / "j.log"))[0]["workload"]["params"]["optimizer"] == "adamw_fused"
    (tmp_path / "n.log").write_text(head + printed.format("None") + ZERO_RUN_OOM)
    assert build(str(tmp_path / "n.log"))[0]["workload"]["params"]["optimizer"] == "adamw"  # the trainer's adamw_torch


def test_a_liger_run_is_replayed_with_the_fused_loss_in_training_only(tmp_path):
    head = "+ torchrun --nproc_per_node=1 train.py --model_name_or_path my-org/unknown-7b --per_device_train_batch_size 4 "
    oom = "  1%|          | 12/1000 [00:31<42:58,  2.61s/it]\n" + ZERO_RUN_OOM
    for switch in ("--use_liger_kernel --bf16\n", "--bf16\nuse_liger_kernel=True,\n",
                   "--bf16\nliger_fused_linear_cross_entropy: true\n"):
        (tmp_path / "l.log").write_text(head + switch + oom)
        config, notes = build(str(tmp_path / "l.log"))
        assert config["workload"]["params"]["fused_cross_entropy"] is True, switch
        assert any(n.startswith("Liger-Kernel's fused linear cross-entropy on") for n in notes)
    (tmp_path / "o.log").write_text(head + "--bf16\nuse_liger_kernel=False,\n" + oom)
    assert "fused_cross_entropy" not in build(str(tmp_path / "o.log"))[0]["workload"]["params"]


def test_offloaded_parameters_and_optimizer_states_are_replayed_on_the_host(tmp_path):
    from oomdoctor.verify.params import TransformerParams

    head = ("+ deepspeed --num_gpus 8 train.py --model_name_or_path my-org/unknown-13b --deepspeed ds_config.json "
            "--per_device_train_batch_size 4 --bf16\n")
    zero = ("[2024-05-02 10:00:09,500] [INFO] [config.py:1003:print]   zero_config .................. stage={stage} "
            "offload_param={param} offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='cpu', nvme_path=None)\n")
    on = "DeepSpeedZeroOffloadParamConfig(device='cpu', nvme_path=None, buffer_count=5)"
    for stage, param, offload in ((3, on, "all"), (3, "None", "optimizer"), (2, "None", "optimizer")):
        (tmp_path / "z.log").write_text(head + zero.format(stage=stage, param=param) + ZERO_RUN_OOM)
        config, notes = build(str(tmp_path / "z.log"))
        params = config["workload"]["params"]
        assert params["offload"] == offload, (stage, param)
        TransformerParams.model_validate(params)
    fsdp = ("+ torchrun --nproc_per_node=8 train.py --per_device_train_batch_size 4 --bf16\n"
            "fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>, <FSDPOption.OFFLOAD: 'offload'>],\n")
    (tmp_path / "f.log").write_text(fsdp + ZERO_RUN_OOM)
    config, notes = build(str(tmp_path / "f.log"))
    assert (config["workload"]["params"]["zero_stage"], config["workload"]["params"]["offload"]) == (3, "all")
    assert any(n.startswith("parameter offload: the parameter shards") for n in notes)
