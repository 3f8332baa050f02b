"""`workload: {model: hf}`: the user's real transformers architecture replayed on the simulated GPU."""

from __future__ import annotations

import json

import pytest
from test_cli import run

from oomdoctor.units import GIB, MIB
from oomdoctor.verify.architectures import UnknownArchitecture, from_catalog, resolve

TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000,
              "max_position_embeddings": 4096}


def test_catalog_names_fine_tunes_by_their_base_and_refuses_unknowns(tmp_path):
    assert from_catalog("meta-llama/Llama-3.2-1B-Instruct")["num_hidden_layers"] == 16
    assert from_catalog("Qwen/Qwen2.5-7B-Instruct")["vocab_size"] == 152064
    assert from_catalog("my-org/llama-2-7b-chat-sft")["intermediate_size"] == 11008
    assert from_catalog("bert-base-uncased") is None
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(TINY_LLAMA))
    assert resolve("model", tmp_path)["hidden_size"] == 256  # a local folder with its config.json
    with pytest.raises(UnknownArchitecture, match="not in the catalog"):
        resolve("bert-base-uncased")


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _replay(phase="train", capacity=8 * GIB, steps=1, **params):
    from oomdoctor.verify.trial import run_sim

    spec = {"device": "sim", "phase": phase, "steps": steps, "capacity_bytes": capacity, "alloc_conf": "",
            "workload": {"kind": "hf", "params": {"config": TINY_LLAMA, "batch": 4, "seq_len": 512, **params}}}
    return run_sim(spec)


@pytest.fixture(scope="module")
def base():
    return _replay()


def test_weights_and_adam_states_are_the_models_own(base):
    n = 2 * 32000 * 256 + 2 * (4 * 256 * 64 * 4 // 2 + 3 * 256 * 688 + 2 * 256) + 256  # embed+head, blocks, norms
    # fp32 weights + grads + two AdamW moments: at least 16 bytes per parameter stay after the step
    assert base["unlimited_peak_allocated_bytes"] > 16 * n * 0.9


def test_checkpointing_and_a_smaller_batch_lower_the_peak(base):
    ckpt = _replay(gradient_checkpointing=True)
    half = _replay(batch=2, grad_accum=2)
    assert ckpt["unlimited_peak_allocated_bytes"] < base["unlimited_peak_allocated_bytes"]
    assert half["unlimited_peak_allocated_bytes"] < base["unlimited_peak_allocated_bytes"]


def test_optimizer_states_are_resident_from_the_second_step():
    peaks = {o: _replay(steps=2, optimizer=o)["unlimited_peak_allocated_bytes"]
             for o in ("adamw", "adamw_fused", "adamw8bit", "adafactor", "sgd")}
    # two moments (with foreach's temporaries, or fused without), two 8-bit ones (bitsandbytes), factored ones, none
    assert peaks["adamw"] >= peaks["adamw_fused"] > peaks["adamw8bit"] > peaks["sgd"], peaks
    assert peaks["adafactor"] > peaks["sgd"], peaks


def test_a_limit_below_the_peak_reproduces_the_oom(base):
    tight = _replay(capacity=int(base["unlimited_peak_allocated_bytes"] * 0.8))
    assert tight["oom"] and "CUDA out of memory" in tight["message"]


def test_verify_config_with_an_hf_model_shows_which_fixes_fit(tmp_path, base):
    limit = int(base["unlimited_peak_allocated_bytes"] * 0.9 + 600 * MIB)  # + the CUDA context's share
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({
        "workload": {"model": "hf", "params": {"config": TINY_LLAMA, "batch": 4, "seq_len": 512}},
        "device": "sim", "steps": 1, "memory": {"limit": f"{limit} bytes"},
        "fixes": ["halve-batch", "gradient-checkpointing", "expandable-segments"]}))
    r = run("verify", "--config", str(cfg), "--format", "json")
    assert r.stdout, r.stderr
    doc = json.loads(r.stdout)
    trials = {t.get("fix") or "baseline": t for t in doc["trials"]}
    assert trials["baseline"]["oom"] is True, r.stderr
    assert trials["halve-batch"]["oom"] is False and trials["gradient-checkpointing"]["oom"] is False


def test_an_unknown_architecture_is_a_config_error_with_its_line(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("workload:\n  model: hf\n  params:\n    config: bert-base-uncased\nmemory: {limit: 24GiB}\n")
    r = run("verify", "--config", str(cfg))
    assert r.returncode == 2 and b"cfg.yaml:4" in r.stderr and b"not in the catalog" in r.stderr



# Published parameter counts (model cards), in billions: each catalog entry must build to its model's size.
PUBLISHED_BILLIONS = {
    "meta-llama/Llama-2-7b-hf": 6.74, "meta-llama/Meta-Llama-3.1-8B": 8.03, "meta-llama/Llama-3.2-1B": 1.24,
    "mistralai/Mistral-7B-v0.1": 7.24, "Qwen/Qwen2.5-7B": 7.62, "Qwen/Qwen3-0.6B": 0.60, "Qwen/Qwen3-1.7B": 1.7,
    "Qwen/Qwen3-4B": 4.0, "Qwen/Qwen3-8B": 8.2, "google/gemma-2b": 2.51, "google/gemma-7b": 8.54,
    "google/gemma-2-2b": 2.61, "google/gemma-2-9b": 9.24, "microsoft/Phi-3-mini-4k-instruct": 3.82,
    "mistralai/Mixtral-8x7B-v0.1": 46.7, "gpt2": 0.124,
}


# Published parameter counts of image classifiers (torchvision / model cards), in billions.
PUBLISHED_BILLIONS.update({"resnet50": 0.02556, "resnet101": 0.04455, "resnet152": 0.06019,
                           "google/vit-base-patch16-224": 0.08657, "google/vit-large-patch16-224": 0.30433,
                           "llava-hf/llava-1.5-7b-hf": 7.06, "llava-hf/llava-1.5-13b-hf": 13.35})


@pytest.mark.parametrize("name", sorted(PUBLISHED_BILLIONS))
def test_catalog_entries_build_to_their_published_size(name):
    import transformers

    from oomdoctor.verify.architectures import IMAGE_CLASSIFIERS
    from oomdoctor.verify.hfmodel import auto_class

    keys = dict(from_catalog(name))
    model_type = keys.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **keys)
    with torch.device("meta"):
        model = auto_class(model_type).from_config(config)
    billions = sum(p.numel() for p in model.parameters()) / 1e9
    assert billions == pytest.approx(PUBLISHED_BILLIONS[name], rel=0.02 if model_type not in IMAGE_CLASSIFIERS else 0.01)


def test_an_image_classifier_step_grows_with_batch_and_image_side():
    def peak(**params):
        from oomdoctor.verify.trial import run_sim

        spec = {"device": "sim", "phase": "train", "steps": 1, "capacity_bytes": 64 * GIB, "alloc_conf": "",
                "workload": {"kind": "hf", "params": {"config": "resnet50", "optimizer": "sgd", **params}}}
        return run_sim(spec)["unlimited_peak_allocated_bytes"]

    small, batch2, side2 = peak(batch=2, image_size=112), peak(batch=4, image_size=112), peak(batch=2, image_size=224)
    weights = 25.56e6 * 4
    # activations (above weights and grads) roughly double with the batch and quadruple with the image side
    assert 1.6 < (batch2 - 2 * weights) / (small - 2 * weights) < 2.4
    assert (side2 - 2 * weights) / (small - 2 * weights) > 2.5


TINY_LLAVA = {"model_type": "llava", "image_token_index": 999, "vision_feature_layer": -2,
              "vision_feature_select_strategy": "default", "projector_hidden_act": "gelu",
              "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 56, "patch_size": 14,
                                "projection_dim": 32},
              "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000}}


def test_a_vision_language_step_trains_through_the_image_tokens():
    def peak(phase, **params):
        from oomdoctor.verify.trial import run_sim

        spec = {"device": "sim", "phase": phase, "steps": 1, "capacity_bytes": 8 * GIB, "alloc_conf": "",
                "workload": {"kind": "hf", "params": {"config": TINY_LLAVA, "seq_len": 64, **params}}}
        out = run_sim(spec)
        assert not out["oom"], out["message"]
        return out["unlimited_peak_allocated_bytes"]

    one, four = peak("train", batch=1), peak("train", batch=4)
    assert four > one * 1.3  # 16 image tokens + 48 text tokens per sample, activations with grad
    assert peak("eval", batch=4) < four


def test_lora_through_peft_freezes_the_base_and_lowers_the_peak():
    pytest.importorskip("peft")
    from oomdoctor.verify.hfmodel import build
    from oomdoctor.verify.params import HFParams

    model = build(HFParams(config=TINY_LLAMA, lora_rank=4), torch.device("meta"))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # r=4 adapters (A: r x in, B: out x r) on q_proj (256 -> 256) and v_proj (256 -> 2 KV heads x 64) of 2 layers
    assert trainable == 2 * ((4 * 256 + 256 * 4) + (4 * 256 + 128 * 4))
    full, lora = _replay(steps=2), _replay(steps=2, lora_rank=4)
    assert lora["unlimited_peak_allocated_bytes"] < full["unlimited_peak_allocated_bytes"]


def test_generation_grows_the_libraries_own_kv_cache_with_the_completion():
    # 8 prompts x 4 completions of a 64-token prompt: decoding 1,024 more tokens adds at least their K and V
    # (2 layers x 2 KV heads x 64 x 4 bytes x 2 = 2 KiB per token and sequence), and not wildly more (the
    # library's own repeat_kv copies and attention scores for grouped heads come on top).
    def peak(new_tokens: int) -> int:
        return _replay(phase="generate", batch=8, seq_len=64, num_generations=4,
                       max_new_tokens=new_tokens)["unlimited_peak_allocated_bytes"]

    grown = peak(2048) - peak(1024)
    kv = 32 * 1024 * 2048
    assert kv <= grown < 3 * kv, (grown, kv)


def test_fewer_generations_lower_the_decode_peak_and_an_image_model_cannot_generate(tmp_path):
    four = _replay(phase="generate", batch=8, num_generations=4, max_new_tokens=64)
    two = _replay(phase="generate", batch=8, num_generations=2, max_new_tokens=64)
    assert two["unlimited_peak_allocated_bytes"] < four["unlimited_peak_allocated_bytes"]
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("workload:\n  model: hf\n  params:\n    config: microsoft/resnet-50\nphase: generate\n"
                   "memory: {limit: 24GiB}\n")
    r = run("verify", "--config", str(cfg))
    assert r.returncode == 2 and b"cfg.yaml:5" in r.stderr and b"not replayed for model: hf" in r.stderr


def test_an_evaluation_gathers_every_ranks_logits_before_keeping_them():
    # HF Trainer: logits = gather_for_metrics(logits); all_preds.add(logits). With 4 ranks each rank keeps 4x the
    # logits of its own batches: the kept pile of 3 earlier batches plus the gathered last one grows by 3x.
    vocab, rows = 32000, 2 * 512  # TINY_LLAMA's vocabulary; eval batch 2 x 512 tokens
    logits = rows * vocab * 4  # fp32
    one = _replay(phase="eval", eval_batch=2, eval_batches=4)["unlimited_peak_allocated_bytes"]
    four = _replay(phase="eval", eval_batch=2, eval_batches=4, eval_world_size=4)["unlimited_peak_allocated_bytes"]
    # pile (3 batches) + gathered + joined copy (4 batches): 8 batches' logits alone, 32 with four ranks
    assert 20 * logits <= four - one <= 28 * logits, (four - one) / logits
    # moved to the host every batch: only the gather is left on top of one batch
    moved = _replay(phase="eval", eval_batch=2, eval_batches=4, eval_world_size=4, eval_accumulation_steps=1)
    assert moved["unlimited_peak_allocated_bytes"] < one


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_resident_adam_states_match_what_torch_adamw_creates(lora_rank):
    """The states an evaluation or a rollout finds resident are torch.optim.AdamW's own after a step: in each
    trainable parameter's dtype (bf16 full fine-tuning keeps bf16 moments, fp32 LoRA adapters fp32 ones)."""
    from oomdoctor.verify.hfmodel import _optimizer_states, build
    from oomdoctor.verify.params import HFParams

    params = HFParams(config=TINY_LLAMA, dtype="bfloat16", lora_rank=lora_rank)
    model = build(params, torch.device("cpu"))
    for q in model.parameters():
        if q.requires_grad:
            q.data.normal_()
            q.grad = torch.zeros_like(q)
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad])
    optimizer.step()
    real = [t for state in optimizer.state.values() for k, t in state.items() if k != "step"]
    ours = _optimizer_states(model, params, torch.device("cpu"))
    assert sorted((t.dtype, t.numel()) for t in ours) == sorted((t.dtype, t.numel()) for t in real)


def test_a_policy_update_keeps_only_the_completions_logits():
    # TRL's GRPO update: logits for the completion only, in the weights' dtype, one sequence's log-softmax at a
    # time; the causal-LM loss upcasts every position's logits to fp32. Same model, batch and sequence.
    common = {"dtype": "bfloat16", "batch": 4, "seq_len": 512, "steps": 1}
    lm = _replay(**common)["unlimited_peak_allocated_bytes"]
    half = _replay(**common, completion_len=256)["unlimited_peak_allocated_bytes"]
    short = _replay(**common, completion_len=64)["unlimited_peak_allocated_bytes"]
    assert short < half < lm
    with pytest.raises(Exception, match="leaves no prompt"):
        _replay(**common, completion_len=512)


def test_a_reference_model_adds_one_frozen_copy_of_the_weights():
    from oomdoctor.verify.hfmodel import build
    from oomdoctor.verify.params import HFParams

    common = {"dtype": "bfloat16", "batch": 2, "seq_len": 256, "completion_len": 128, "steps": 1}
    without = _replay(**common)["unlimited_peak_allocated_bytes"]
    with_ref = _replay(**common, reference_model=True)["unlimited_peak_allocated_bytes"]
    model = build(HFParams(config=TINY_LLAMA, dtype="bfloat16"), torch.device("meta"))
    weights = sum(q.numel() * q.element_size() for q in model.parameters())
    assert abs((with_ref - without) - weights) <= 0.01 * weights


def test_ddp_buckets_of_a_real_model_copy_its_trainable_gradients():
    from oomdoctor.verify.hfmodel import build
    from oomdoctor.verify.params import HFParams

    plain = _replay(steps=2, dtype="bfloat16", batch=2, seq_len=128)["unlimited_peak_allocated_bytes"]
    ddp = _replay(steps=2, dtype="bfloat16", batch=2, seq_len=128, ddp_buckets=True)["unlimited_peak_allocated_bytes"]
    model = build(HFParams(config=TINY_LLAMA, dtype="bfloat16"), torch.device("meta"))
    grads = sum(q.numel() * q.element_size() for q in model.parameters() if q.requires_grad)
    assert abs((ddp - plain) - grads) <= 0.01 * grads + 4096
    # gradient_as_bucket_view through torch's own optimizer (zero_grad(set_to_none=True) each step): a step whose
    # peak is the optimizer's keeps one copy only
    small = {"steps": 2, "dtype": "bfloat16", "batch": 1, "seq_len": 8}
    plain, copies, views = (_replay(**small, **extra)["unlimited_peak_allocated_bytes"]
                            for extra in ({}, {"ddp_buckets": True}, {"ddp_buckets": True, "ddp_bucket_view": True}))
    assert copies - plain >= 0.9 * grads and abs(views - plain) <= 0.1 * grads


def test_activation_offload_of_a_real_model_lowers_its_training_peak():
    plain, offloaded = (_replay(steps=1, dtype="bfloat16", batch=8, seq_len=512, **extra)["unlimited_peak_allocated_bytes"]
                        for extra in ({}, {"activation_offload": True}))
    assert offloaded < plain


def test_grouped_key_value_heads_reach_flash_attention_unrepeated_as_on_cuda():
    # transformers gives an unpacked batch no mask (SDPA's is_causal), and FlashAttention takes the 2 key/value heads
    # as they are. Under fake tensors transformers took the batch for packed: a full mask, the memory-efficient kernel
    # and the heads repeated, 3% over an H200's measured peak for Llama-3.2-3B (now byte-exact; bench/measured/)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from oomdoctor.verify import simgpu
    from oomdoctor.verify.hfmodel import hf

    class Attention(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: set[tuple[str, int]] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if "scaled_dot_product" in name:  # the key: forward (query, key, ...), backward (grad, query, key, ...)
                self.seen.add((name, args[2 if name.endswith("backward") else 1].shape[1]))
            return func(*args, **(kwargs or {}))

    device = simgpu.setup()
    attention = Attention()
    with FakeTensorMode(allow_non_fake_inputs=True), simgpu.StorageTracker(), torch.device(device), attention:
        hf({"config": TINY_LLAMA, "batch": 2, "seq_len": 256, "dtype": "bfloat16"}, device)()
    assert attention.seen == {("_scaled_dot_product_flash_attention", 2),
                              ("_scaled_dot_product_flash_attention_backward", 2)}
