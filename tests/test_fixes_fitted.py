"""Fixes fitted to the run: what is on or does not apply is left out; the stack decides the keys."""

from __future__ import annotations

from oomdoctor.facts import FACTS, Derived, derive
from oomdoctor.fixcatalog import build_fix, fitted


def run(**values) -> Derived:
    base = {name: None for name in FACTS}
    base.update({k: False for k in FACTS if k.startswith("stack_")})
    base.update(values)
    return Derived(values=base, evidence={})


def test_an_inference_only_run_gets_no_training_fixes():
    d = run(inference_only=True)
    # its batch is the inference batch: halve-batch becomes smaller-eval-batch, checkpointing has no inference form
    assert fitted(["halve-batch", "gradient-checkpointing", "lower-gpu-memory-utilization"], d) == [
        "smaller-eval-batch", "lower-gpu-memory-utilization"]
    assert fitted(["halve-batch", "smaller-eval-batch"], d) == ["smaller-eval-batch"]
    assert fitted(["halve-batch"], run(inference_only=False)) == ["halve-batch"]


def test_pure_model_parallel_gets_more_data_parallel_gpus_not_a_higher_zero_stage():
    assert fitted(["raise-zero-stage", "cpu-offload"], run(data_parallel_degree=1)) == ["more-gpus", "cpu-offload"]
    assert fitted(["raise-zero-stage"], run(data_parallel_degree=4)) == ["raise-zero-stage"]


def test_fixes_already_on_are_left_out():
    assert fitted(["gradient-checkpointing", "bf16-autocast"], run(gradient_checkpointing=True, mixed_precision=True)) == []


def test_hf_eval_moves_logits_out_first():
    ids = ["smaller-eval-batch", "eval-accumulation-steps", "eval-no-grad"]
    assert fitted(ids, run(stack_hf_trainer=True))[0] == "eval-accumulation-steps"
    assert fitted(ids, run(stack_lightning=True))[0] == "smaller-eval-batch"
    hf = build_fix("eval-accumulation-steps", run(stack_hf_trainer=True)).changes
    assert hf["training_args"]["eval_accumulation_steps"] == 4
    assert hf["trainer"] == {"preprocess_logits_for_metrics": "lambda logits, labels: logits.argmax(-1)"}
    assert "trainer" not in build_fix("eval-accumulation-steps", run(stack_axolotl=True, stack_hf_trainer=True)).changes


def test_a_trainers_own_evaluation_already_runs_without_grad():
    ids = ["smaller-eval-batch", "eval-accumulation-steps", "eval-no-grad"]
    for stack in ("stack_hf_trainer", "stack_lightning", "stack_trl"):
        assert "eval-no-grad" not in fitted(ids, run(phase="eval", **{stack: True})), stack
    assert "eval-no-grad" in fitted(ids, run(phase="eval"))  # a hand-written loop may forget it
    assert "eval-no-grad" in fitted(ids, run(phase="generate", stack_hf_trainer=True))  # a custom generation loop


def test_deepspeed_run_gets_only_zero_keys_and_zero2_no_parameter_offload():
    d = run(stack_deepspeed=True, stack_hf_trainer=True, zero_stage=2)
    raise_zero = build_fix("raise-zero-stage", d).changes
    assert set(raise_zero) == {"deepspeed_json"} and raise_zero["deepspeed_json"]["zero_optimization.stage"] == 3
    offload = build_fix("cpu-offload", d).changes
    assert set(offload) == {"deepspeed_json"}
    assert "zero_optimization.offload_param.device" not in offload["deepspeed_json"]
    assert "zero_optimization.offload_param.device" in build_fix("cpu-offload", run(stack_deepspeed=True, zero_stage=3)).changes["deepspeed_json"]


def test_host_ram_fix_covers_loaders_loading_and_kept_outputs():
    fix = build_fix("more-host-ram", run())
    text = str(fix.changes)
    assert "dataloader_num_workers" in text and "low_cpu_mem_usage" in text and "mmap=True" in text


def test_cuda_malloc_async_gets_no_caching_allocator_settings():
    ids = ["halve-batch", "expandable-segments", "max-split-size", "gc-threshold"]
    assert fitted(ids, run(allocator_async=True)) == ["halve-batch"]
    assert fitted(ids, run(allocator_async=False)) == ids


def test_no_allocator_setting_when_free_plus_the_caches_spare_bytes_are_less_than_the_request(tmp_path):
    from oomdoctor.facts import derive
    from oomdoctor.parse import parse_files

    ids = ["halve-batch", "expandable-segments", "max-split-size", "gc-threshold"]
    assert fitted(ids, run(free_plus_slack_over_requested=0.34)) == ["halve-batch"]
    assert fitted(ids, run(free_plus_slack_over_requested=3.0)) == ids  # the bytes exist, in pieces
    assert fitted(ids, run()) == ids  # figures unknown: nothing to rule out
    # 13.62 MiB free + 30.72 MiB cached spare against a 128 MiB request: no layout of 44 MiB holds 128 MiB
    (tmp_path / "tgi.log").write_text(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 15.77 GiB total "
        "capacity; 15.37 GiB already allocated; 13.62 MiB free; 15.40 GiB reserved in total by PyTorch)\n")
    d = derive(parse_files([str(tmp_path / "tgi.log")]), 0)
    assert fitted(["expandable-segments", "halve-batch"], d) == ["halve-batch"]


def test_the_async_message_and_the_backend_setting_both_say_async(tmp_path):
    from oomdoctor.facts import derive
    from oomdoctor.parse import parse_files

    msg = ("torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
           "Currently allocated     : 9.43 GiB\nRequested               : 640.00 MiB\n")
    native = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
              "9.00 GiB of which 1.00 MiB is free. Of the allocated memory 8.00 GiB is allocated by PyTorch, and 10.00 "
              "MiB is reserved by PyTorch but unallocated.\n")
    cases = {"async.log": (msg, True), "conf.log": ("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync\n" + native, True),
             "native.log": (native, False)}
    for name, (text, want) in cases.items():
        (tmp_path / name).write_text(text)
        parsed = parse_files([str(tmp_path / name)])
        assert derive(parsed, 0).values["allocator_async"] is want, name


def test_a_tensorflow_failure_gets_keras_settings_and_no_pytorch_only_fixes():
    tf = run(kind="tf_oom", per_device_train_batch_size=32)
    ids = ["eval-no-grad", "smaller-eval-batch", "eval-accumulation-steps", "expandable-segments", "halve-batch",
           "no-preallocation"]
    assert fitted(ids, tf) == ["smaller-eval-batch", "halve-batch", "no-preallocation"]
    assert build_fix("halve-batch", tf).changes == {
        "keras": {"model.fit(batch_size=)": 16, "optimizer(gradient_accumulation_steps=)": 2}}
    assert build_fix("gradient-checkpointing", tf).changes == {}  # no Keras setting, and PyTorch's code is no use
    assert build_fix("no-preallocation", tf).changes["env"]["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    # a PyTorch failure in a log that also shows TensorFlow's start-up lines keeps PyTorch's fixes and keys
    torch_run = run(kind="cuda_oom", stack_tensorflow=True, stack_hf_trainer=True, per_device_train_batch_size=32)
    assert fitted(ids, torch_run)[0] == "eval-accumulation-steps" and set(fitted(ids, torch_run)) == set(ids)
    # (phase unknown: HF Trainer's own evaluation, which already runs without grad, is not known to be the failure)
    assert "training_args" in build_fix("halve-batch", torch_run).changes
    # a PyTorch failure in a log that names neither TensorFlow nor JAX: their preallocation settings are no advice
    plain = run(kind="cuda_oom", per_device_train_batch_size=32)
    assert "no-preallocation" not in fitted(ids, plain)
    assert "no-preallocation" in fitted(ids, run(kind="cuda_oom", stack_jax=True))


def test_a_diffusion_pipeline_gets_its_own_offload_batch_and_weights_settings():
    sampling = run(stack_diffusion=True, phase="generate", inference_only=True)
    assert fitted(["cpu-offload", "smaller-eval-batch", "halve-batch"], sampling) == ["cpu-offload", "smaller-eval-batch"]
    offload = build_fix("cpu-offload", sampling)
    assert set(offload.changes) == {"diffusers"} and "enable_model_cpu_offload" in offload.changes["diffusers"]
    assert "host RAM" in (offload.effect or "") and "optimizer" not in (offload.effect or "")
    assert set(build_fix("quantize-weights", sampling).changes) == {"diffusers"}  # no LLM loading line, no ComfyUI node
    # other inference (a language model served alone) still gets no optimizer offload
    assert fitted(["cpu-offload"], run(phase="generate", inference_only=True)) == []


def test_a_loop_of_its_own_gets_loop_code_for_its_evaluation_not_trainer_keys():
    # an accelerate loop (no HF Trainer): no TrainingArguments, no Trainer hook, no Keras
    d = run(stack_accelerate=True)
    for fix in ("smaller-eval-batch", "eval-accumulation-steps"):
        changes = build_fix(fix, d).changes
        assert list(changes) == ["code"], (fix, changes)
        assert "Keras" not in changes["code"] and "preprocess_logits_for_metrics" not in changes["code"]
    assert build_fix("eval-accumulation-steps", run(stack_hf_trainer=True)).changes == {
        "training_args": {"eval_accumulation_steps": 4, "prediction_loss_only": True},
        "trainer": {"preprocess_logits_for_metrics": "lambda logits, labels: logits.argmax(-1)"}}


def test_a_serving_engine_gets_its_own_flags_and_no_training_or_eval_loop_advice():
    tgi = run(stack_serving_engine=True, inference_only=True, tensor_parallel=2)
    ids = ["halve-batch", "bf16-autocast", "eval-no-grad", "eval-accumulation-steps", "quantize-weights",
           "more-gpus", "smaller-eval-batch", "shorter-max-seq"]
    # halve-batch takes its inference form (smaller-eval-batch) where the rule put it
    assert fitted(ids, tgi) == ["smaller-eval-batch", "quantize-weights", "more-gpus", "shorter-max-seq"]
    assert build_fix("more-gpus", tgi).changes == {"serving_engine": {
        "text-generation-inference": "--num-shard 4", "sglang": "--tp-size 4", "lmdeploy": "--tp 4"}}
    assert set(build_fix("quantize-weights", tgi).changes) == {"serving_engine"}  # no transformers loading line
    vllm = run(stack_vllm=True, inference_only=True, max_seq_length=32768)
    assert build_fix("shorter-max-seq", vllm).changes == {"vllm_args": {"max_model_len": 16384}}
    assert "max_num_seqs" in build_fix("smaller-eval-batch", vllm).changes["vllm_args"]
    # a trainer that calls vLLM for its rollouts is still a training run
    grpo = run(stack_vllm=True, stack_trl=True, inference_only=False)
    assert fitted(["bf16-autocast", "more-gpus"], grpo) == ["bf16-autocast", "more-gpus"]
    assert "shell" in build_fix("more-gpus", grpo).changes


def test_before_any_step_activation_fixes_give_way_to_smaller_weights_and_states():
    ids = ["halve-batch", "gradient-checkpointing", "expandable-segments"]
    loading = run(phase="init", kind="cuda_oom")
    assert fitted(ids, loading) == ["quantize-weights", "cpu-offload", "more-gpus", "expandable-segments"]
    assert fitted(ids, run(phase="train", kind="cuda_oom")) == ids
    # host memory at start-up: the loader's batch lives in that RAM too
    assert fitted(["halve-batch"], run(phase="init", kind="host_oom")) == ["halve-batch"]
    assert fitted(["halve-batch"], run(phase="init", kind="tf_oom", host_device=True)) == ["halve-batch"]
    # what the substitutes themselves must pass: a serving engine gets no optimizer offload
    engine = run(phase="init", kind="cuda_oom", stack_serving_engine=True, inference_only=True)
    assert fitted(["halve-batch"], engine) == ["quantize-weights", "more-gpus"]


def test_a_skorch_run_gets_its_nets_parameters_not_training_arguments():
    d = run(stack_skorch=True, per_device_train_batch_size=64)
    batch = build_fix("halve-batch", d).changes
    assert batch == {"skorch": {"NeuralNet(iterator_train__batch_size=)": 32,
                                "train_step": "accumulate 2 batches before optimizer_.step() (an overridden train_step)"}}
    assert build_fix("smaller-eval-batch", d).changes == {"skorch": {"NeuralNet(iterator_valid__batch_size=)": 1}}
    assert list(build_fix("bf16-autocast", d).changes) == ["skorch"]
    # nothing of skorch's own to offload with: no DeepSpeed, accelerate or axolotl keys instead
    assert build_fix("cpu-offload", d).changes == {}
    # skorch hands each batch's predictions to the host already; HF's eval accumulation has nothing to do there
    assert fitted(["smaller-eval-batch", "eval-accumulation-steps"], run(stack_skorch=True)) == ["smaller-eval-batch"]
    assert "training_args" in build_fix("halve-batch", run()).changes  # no stack named: HF's form stays offered


def test_skorch_logs_name_the_stack_and_get_skorch_keys():
    from oomdoctor.api import diagnose_path

    for name, fix_id, key in (("gen-skorch-bar-valid-epoch2", "smaller-eval-batch", "NeuralNet(iterator_valid__batch_size=)"),
                              ("gen-skorch-bar-train-epoch2-batch9", "halve-batch", "NeuralNet(iterator_train__batch_size=)")):
        report = diagnose_path(f"fixtures/generated/{name}.log")
        fixes = {f.id: f for g in report.diagnoses for f in g.fixes}
        assert key in fixes[fix_id].changes["skorch"], name
        assert not any("training_args" in f.changes or "deepspeed_json" in f.changes for f in fixes.values()), name


def test_the_web_uis_own_settings_replace_the_diffusion_librarys():
    d = run(stack_webui=True, stack_diffusion=True, phase="generate", inference_only=True, generating_app=True)
    assert list(build_fix("cpu-offload", d).changes) == ["webui"]  # --medvram, not a pipeline call or ComfyUI's flags
    assert "--medvram" in build_fix("cpu-offload", d).changes["webui"]
    assert list(build_fix("smaller-eval-batch", d).changes) == ["webui"]
    assert list(build_fix("quantize-weights", d).changes) == ["webui"]  # no transformers loading line either
    plain = run(stack_diffusion=True, phase="generate", inference_only=True)
    assert set(build_fix("cpu-offload", plain).changes) == {"diffusers"}  # a pipeline is no ComfyUI graph


def test_comfyuis_own_settings_replace_the_diffusion_librarys():
    d = run(stack_comfyui=True, stack_diffusion=True, inference_only=True, generating_app=True)
    assert list(build_fix("cpu-offload", d).changes) == ["comfyui"]
    assert "--lowvram" in build_fix("cpu-offload", d).changes["comfyui"]
    assert list(build_fix("smaller-eval-batch", d).changes) == ["comfyui"]


def test_a_comfyui_graph_that_only_generates_gets_no_training_fix_and_no_evaluation_hypothesis():
    from oomdoctor.api import diagnose_path

    report = diagnose_path("fixtures/reconstructed/p1386-diffrhythm-comfy-3050-4gb-allocation-on-device.log")
    offered = [f.id for g in report.diagnoses for f in g.fixes]
    assert "smaller-eval-batch" in offered
    assert not {"halve-batch", "gradient-checkpointing", "eval-no-grad", "fix-leak"} & set(offered)
    assert "eval_spike" not in [g.category for g in report.diagnoses]
    # a ComfyUI trainer node's run shows its steps: it trains, and keeps the training fixes
    trainer = diagnose_path("fixtures/reconstructed/p677-comfyui-fluxtrainer-3090-epoch-bar-rich-allocation.log")
    assert "halve-batch" in [f.id for g in trainer.diagnoses for f in g.fixes]


def test_kohya_sd_scripts_runs_get_its_options_and_nothing_of_accelerate_or_transformers():
    d = run(stack_sd_scripts=True, stack_accelerate=True, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    assert build_fix("halve-batch", d).changes == {
        "sd_scripts": {"--train_batch_size": 2, "--gradient_accumulation_steps": 2}}
    assert build_fix("gradient-checkpointing", d).changes == {"sd_scripts": {"--gradient_checkpointing": True}}
    assert build_fix("quantize-weights", d).changes == {"sd_scripts": {"--fp8_base": True}}
    assert set(build_fix("fix-leak", d).changes) <= {"sd_scripts", "code"}  # never another stack's config keys


def test_an_accelerate_loop_of_its_own_gets_loop_code_for_a_smaller_batch():
    changes = build_fix("halve-batch", run(stack_accelerate=True, per_device_train_batch_size=8)).changes
    assert list(changes) == ["code"] and "batch_size=4" in changes["code"]
    assert "training_args" in build_fix("halve-batch", run()).changes  # no stack named: HF's form (the code is dropped)


def test_with_no_stack_named_both_hf_keys_and_loop_code_are_offered():
    changes = build_fix("halve-batch", run(per_device_train_batch_size=8)).changes
    assert set(changes) == {"training_args", "code"} and "batch_size=4" in changes["code"]
    assert "code" not in build_fix("halve-batch", run(stack_hf_trainer=True, per_device_train_batch_size=8)).changes


def test_a_shorter_input_for_a_loop_of_its_own_is_truncation_or_cropping_code():
    changes = build_fix("shorter-max-seq", run(max_seq_length=4096)).changes
    assert set(changes) == {"training_args", "code"} and "max_length=2048" in changes["code"]
    assert "crop" in changes["code"]  # an image or volume model's "length" is its size
    assert "code" not in build_fix("shorter-max-seq", run(stack_axolotl=True, max_seq_length=4096)).changes


def test_an_8bit_optimizer_bitsandbytes_could_not_give_is_offered_with_the_install_first():
    assert fitted(["lighter-optimizer"], run(optimizer_is_8bit=True)) == []
    d = run(optimizer_is_8bit=False, bitsandbytes_unavailable=True, stack_hf_trainer=True)
    assert fitted(["lighter-optimizer"], d) == ["lighter-optimizer"]
    fix = build_fix("lighter-optimizer", d)
    assert "pip install -U bitsandbytes" in fix.changes["shell"] and "without GPU support" in (fix.effect or "")
    assert "shell" not in build_fix("lighter-optimizer", run(stack_hf_trainer=True)).changes


def test_a_web_ui_generation_gets_its_own_batch_and_no_training_or_eval_loop_advice():
    webui = run(stack_webui=True, inference_only=True, generating_app=True)
    ids = ["halve-batch", "gradient-checkpointing", "eval-no-grad", "eval-accumulation-steps", "shorter-max-seq",
           "fix-leak", "cpu-offload"]
    assert fitted(ids, webui) == ["smaller-eval-batch", "shorter-max-seq", "cpu-offload"]
    assert set(build_fix("smaller-eval-batch", webui).changes) == {"webui"}
    # an image model's length is its pixels
    assert set(build_fix("shorter-max-seq", webui).changes) == {"webui"}
    assert "pipe(height=, width=)" in build_fix("shorter-max-seq", run(stack_diffusion=True)).changes["diffusers"]


def test_more_gpus_for_a_run_that_only_infers_splits_its_model_not_its_ranks():
    fix = build_fix("more-gpus", run(inference_only=True))
    assert 'device_map="auto"' in fix.changes["loading"] and "torchrun" not in str(fix.changes)
    assert "torchrun" in build_fix("more-gpus", run(inference_only=False, world_size=4)).changes["shell"]


def test_a_kv_cache_sized_at_start_up_keeps_the_shorter_context_and_llama_cpp_gets_its_flags():
    at_init = run(phase="init", kind="cuda_error", inference_only=True, stack_serving_engine=True)
    # at start-up activation fixes give way to what shrinks the weights ...
    assert "shorter-max-seq" not in fitted(["lower-gpu-memory-utilization", "shorter-max-seq"], at_init)
    # ... but a KV cache allocated there is sized by the context: a shorter one shrinks it
    kv = run(phase="init", kind="cuda_error", inference_only=True, stack_serving_engine=True, operation="kv_cache")
    assert fitted(["lower-gpu-memory-utilization", "shorter-max-seq"], kv) == ["lower-gpu-memory-utilization",
                                                                               "shorter-max-seq"]
    assert build_fix("shorter-max-seq", kv).changes["serving_engine"]["llama.cpp"].startswith("-c ")
    assert "--parallel" in build_fix("lower-gpu-memory-utilization", kv).changes["serving_engine"]["llama.cpp"]


def test_a_library_allocating_on_its_own_gets_no_pytorch_allocator_or_autograd_fixes():
    ids = ["expandable-segments", "eval-no-grad", "smaller-eval-batch"]
    assert fitted(ids, run(own_allocator=True)) == ["smaller-eval-batch"]
    assert fitted(ids, run(own_allocator=False)) == ids
    # ONNX Runtime's or TensorRT's batch is not set through TrainingArguments or a PyTorch DataLoader: the title says it
    assert build_fix("smaller-eval-batch", run(own_allocator=True)).changes == {}
    assert "training_args" in build_fix("smaller-eval-batch", run(own_allocator=False)).changes


def test_vllms_no_room_for_the_kv_cache_is_not_told_to_shrink_the_cache():
    vllm = build_fix("lower-gpu-memory-utilization", run(kind="kv_cache", stack_vllm=True, inference_only=True)).changes
    assert vllm["vllm_args"]["max_model_len"].startswith("<shorter")
    assert "higher" in vllm["vllm_args"]["gpu_memory_utilization"]  # 0.8 would be below vLLM's own 0.9
    tgi = build_fix("lower-gpu-memory-utilization", run(kind="kv_cache", message_says="prefill_warmup",
                                                        stack_serving_engine=True, inference_only=True)).changes
    assert "--max-batch-prefill-tokens" in tgi["serving_engine"]["text-generation-inference"]


def test_other_ranks_contexts_on_this_gpu_get_device_selection_code_not_a_process_to_stop():
    fix = build_fix("free-other-process", run(other_processes_alike_contexts=True, other_processes_bytes=3 << 30))
    assert "torch.cuda.set_device(local_rank)" in fix.changes["code"] and "shell" not in fix.changes
    fix = build_fix("free-other-process", run(other_processes_alike_contexts=False, other_processes_bytes=3 << 30))
    assert "nvidia-smi" in fix.changes["shell"] and "code" not in fix.changes


def test_an_allocator_setting_older_than_the_messages_pytorch_says_to_upgrade():
    # the message's wording dates the PyTorch that printed it: 1.0-1.3's "cached" form reads no allocator settings
    old = run(kind="cuda_oom", era="1.0-1.3")
    assert build_fix("expandable-segments", old).changes["shell"].startswith("pip install -U 'torch>=2.1'")
    assert "torch>=1.10" in build_fix("max-split-size", old).changes["shell"]
    hinted = run(kind="cuda_oom", era="1.10-2.0")  # its own hint names max_split_size_mb
    assert "shell" not in build_fix("max-split-size", hinted).changes
    assert "torch>=2.1" in build_fix("expandable-segments", hinted).changes["shell"]
    assert "shell" not in build_fix("expandable-segments", run(kind="cuda_oom", era="2.2-2.8")).changes


def test_allocator_settings_only_for_pytorchs_caching_allocator():
    ids = ["expandable-segments", "max-split-size", "halve-batch"]
    assert fitted(ids, run(kind="cuda_oom")) == ids
    for kind in ("xla_oom", "tf_oom", "mps_oom", "host_oom"):  # XLA's, TensorFlow's, MPS's allocator, the host
        assert fitted(ids, run(kind=kind)) == ["halve-batch"], kind
    assert fitted(ids, run(kind="cuda_error", own_allocator=True)) == ["halve-batch"]  # a library's own cudaMalloc


def test_paddles_own_allocator_gets_no_pytorch_allocator_settings():
    from oomdoctor.parse import parse_text

    paddle = ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 1.000244GB memory on GPU 0, "
              "14.687500GB memory has been allocated and available memory is only 512.000000MB.\n")
    d = derive(parse_text(paddle), 0)
    assert d.values["own_allocator"] is True
    assert fitted(["expandable-segments", "eval-no-grad", "halve-batch"], d) == ["halve-batch"]



def test_fsdp_only_accelerate_keys_go_to_fsdp_runs_only():
    deepspeed = run(stack_accelerate=True, stack_deepspeed=True)
    assert "accelerate_config" not in build_fix("gradient-checkpointing", deepspeed).changes
    assert "accelerate_config" not in build_fix("empty-cache-before-save", deepspeed).changes
    fsdp = run(stack_accelerate=True, stack_fsdp=True)
    assert build_fix("gradient-checkpointing", fsdp).changes["accelerate_config"] == {
        "fsdp_config.fsdp_activation_checkpointing": True}
