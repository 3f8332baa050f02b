"""`model: hf` for Qwen2-VL and Qwen2.5-VL: the catalog, the processor's batch and the model's own step replayed."""

from __future__ import annotations

import pytest

from oomdoctor.units import GIB
from oomdoctor.verify.architectures import DYNAMIC_IMAGE_SIDE, from_catalog


def test_catalog_names_qwen_vl_models_as_logs_print_them():
    assert from_catalog("Qwen/Qwen2.5-VL-7B-Instruct")["vision_config"]["fullatt_block_indexes"] == [7, 15, 23, 31]
    assert from_catalog("/models/qwen2_5_vl_3b_sft")["text_config"]["hidden_size"] == 2048  # underscores, a path
    assert from_catalog("Qwen/Qwen2-VL-2B-Instruct")["model_type"] == "qwen2_vl"
    assert from_catalog("qwen2-vl-7b-lora-merged")["vision_config"]["hidden_size"] == 3584  # the tower's projection
    assert from_catalog("Qwen/Qwen2.5-7B-Instruct")["model_type"] == "qwen2"  # the text model is not the VL one
    assert from_catalog("qwen2_vl") is None  # a model_type names no size


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 1000,
         "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6}}
_TOKENS = {"image_token_id": 999, "video_token_id": 998, "vision_start_token_id": 997, "vision_end_token_id": 996}
TINY_QWEN2_VL = {"model_type": "qwen2_vl", **_TOKENS, "text_config": _TEXT,
                 "vision_config": {"depth": 2, "embed_dim": 64, "hidden_size": 64, "num_heads": 4, "mlp_ratio": 2,
                                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}}
# 56 px windows (2 x 2 merged tokens) in block 0, full attention in block 1
TINY_QWEN25_VL = {"model_type": "qwen2_5_vl", **_TOKENS, "text_config": _TEXT,
                  "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 96, "out_hidden_size": 64,
                                    "num_heads": 4, "patch_size": 14, "spatial_merge_size": 2,
                                    "temporal_patch_size": 2, "window_size": 56, "fullatt_block_indexes": [1]}}
TINY = {"qwen2_vl": TINY_QWEN2_VL, "qwen2_5_vl": TINY_QWEN25_VL}

# Published parameter counts (the model cards' safetensors totals), in billions.
PUBLISHED_BILLIONS = {"Qwen/Qwen2-VL-2B-Instruct": 2.21, "Qwen/Qwen2-VL-7B-Instruct": 8.29,
                      "Qwen/Qwen2.5-VL-3B-Instruct": 3.75, "Qwen/Qwen2.5-VL-7B-Instruct": 8.29}


@pytest.mark.parametrize("name", sorted(PUBLISHED_BILLIONS))
def test_catalog_entries_build_to_their_published_size(name):
    from oomdoctor.verify.hfmodel import build
    from oomdoctor.verify.params import HFParams

    model = build(HFParams(config=name), torch.device("meta"))
    billions = sum(p.numel() for p in model.parameters()) / 1e9
    assert billions == pytest.approx(PUBLISHED_BILLIONS[name], abs=0.005)


def _peak(kind: str, phase: str = "train", **params) -> int:
    from oomdoctor.verify.trial import run_sim

    spec = {"device": "sim", "phase": phase, "steps": 1, "capacity_bytes": 8 * GIB, "alloc_conf": "",
            "workload": {"kind": "hf", "params": {"config": TINY[kind], "seq_len": 512, "image_size": 224, **params}}}
    out = run_sim(spec)
    assert not out["oom"], out["message"]
    return out["unlimited_peak_allocated_bytes"]


@pytest.mark.parametrize("kind", sorted(TINY))
def test_a_training_step_grows_with_the_batch_and_the_image_side(kind):
    one, two, four = (_peak(kind, batch=b) for b in (1, 2, 4))
    # each sample adds the same activations (an image of 256 patches, 512 tokens): doubling the batch adds them again
    assert four - two == pytest.approx(2 * (two - one), rel=0.02)
    # a 448 px image is 1,024 patches, not 256: the step grows by more than twice their extra fp32 pixels (2 images x
    # 768 patches x 1,176 values x 4 bytes: the tower keeps activations of its own per patch); the text is the same
    pixels = 2 * (1024 - 256) * 3 * 2 * 14 * 14 * 4
    assert _peak(kind, batch=2, image_size=448) - two > 2 * pixels
    assert _peak(kind, "eval", batch=2) < two  # no grad: nothing saved for backward


@pytest.mark.parametrize("kind", sorted(TINY))
def test_lora_freezes_the_base_and_lowers_the_step(kind):
    pytest.importorskip("peft")
    assert _peak(kind, batch=2, lora_rank=4) < _peak(kind, batch=2)
    assert _peak(kind, batch=2, gradient_checkpointing=True) < _peak(kind, batch=2)


@pytest.mark.parametrize("kind", sorted(TINY))
def test_the_weights_are_allocated_once_each_in_their_dtype(kind):
    from oomdoctor.verify import simgpu
    from oomdoctor.verify.hfmodel import build
    from oomdoctor.verify.params import HFParams
    from oomdoctor.verify.rounding import round_size

    with simgpu.simulate("1GiB") as gpu:
        assert simgpu.ACTIVE is not None
        model = build(HFParams(config=TINY[kind], dtype="bfloat16"), gpu)
        params = list(model.parameters())
        assert all(p.dtype == torch.bfloat16 for p in params)
        assert sum(p.numel() * p.element_size() for p in params) == sum(p.numel() for p in params) * 2
        # every parameter and buffer is one block of its own bytes (c10 rounds each to 512 B), none twice
        tensors = {t.untyped_storage()._cdata: t for t in [*params, *model.buffers()]}
        assert simgpu.ACTIVE.allocator.allocated == sum(round_size(t.untyped_storage().nbytes())
                                                        for t in tensors.values())


def test_the_batch_is_what_the_processor_gives():
    from oomdoctor.verify.hfmodel import build
    from oomdoctor.verify.params import HFParams
    from oomdoctor.verify.qwenvl import image_side, inputs

    p = HFParams(config=TINY_QWEN25_VL, seq_len=300, image_size=230)
    model = build(p, torch.device("cpu"))
    assert image_side(model.config, None) == DYNAMIC_IMAGE_SIDE and image_side(model.config, 230) == 224
    batch = inputs(model, p, torch.device("cpu"))(3)
    # 224 px: a 16 x 16 patch grid, each patch 3 channels x 2 frames x 14 x 14 in fp32; 8 x 8 = 64 tokens an image
    assert batch["pixel_values"].shape == (3 * 256, 1176) and batch["pixel_values"].dtype == torch.float32
    assert batch["image_grid_thw"].tolist() == [[1, 16, 16]] * 3
    assert (batch["input_ids"] == 999).sum(1).tolist() == [64] * 3 and (batch["labels"][:, :64] == -100).all()
    assert batch["image_cu_seqlens"].tolist() == [0, 256, 512, 768]  # one attention segment per image
    assert batch["image_cu_window_seqlens"].tolist() == [16 * i for i in range(49)]  # 16 windows of 4 x 4 patches
    # the decoder's 3-D positions: the image's tokens at (0, row, column), then the text from 8 on
    positions = batch["position_ids"]
    assert positions.shape == (3, 3, 300)
    assert positions[:, 0, 9].tolist() == [0, 1, 1] and positions[:, 0, 64].tolist() == [8, 8, 8]
    assert positions[0, 0, -1].item() == 8 + 300 - 64 - 1


SEED_LOG = """\
$ python train_vl.py --model_name_or_path Qwen/Qwen2.5-VL-7B-Instruct --data_path data/charts_sft.json \
--lora_enable True --lora_r 64 --lora_alpha 128 --bf16 True --output_dir out/charts --num_train_epochs 2 \
--per_device_train_batch_size 16 --gradient_accumulation_steps 1 --learning_rate 1e-5 --model_max_length 2048 \
--gradient_checkpointing True --logging_steps 10 --report_to none
Loading checkpoint shards: 100%|██████████| 5/5 [00:04<00:00,  1.10it/s]
  0%|          | 0/2500 [00:00<?, ?it/s]
Traceback (most recent call last):
  File "/srv/train/train_vl.py", line 212, in <module>
    trainer.train()
  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward
    torch.autograd.backward(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.56 GiB. GPU 0 has a total capacity of 39.39 GiB \
of which 3.47 GiB is free. Including non-PyTorch memory, this process has 35.92 GiB memory in use. Of the allocated \
memory 33.43 GiB is allocated by PyTorch, and 1.98 GiB is reserved by PyTorch but unallocated.
"""


def test_verify_from_a_qwen25_vl_log_replays_its_catalogued_architecture(tmp_path):
    # a LoRA fine-tune of Qwen2.5-VL-7B-Instruct at batch 16 on a 40 GB card: the logged model id picks the catalog
    # entry, replayed with `model: hf` (peft's LoRA, the run's bf16); the image side is not in the log, so it is noted
    pytest.importorskip("peft")
    from oomdoctor.verify.fromlog import build

    log = tmp_path / "train.log"
    log.write_text(SEED_LOG, encoding="utf-8")
    config, notes = build(str(log))
    p = config["workload"]["params"]
    assert (config["workload"]["model"], p["config"], config["phase"]) == ("hf", "Qwen/Qwen2.5-VL-7B-Instruct", "train")
    assert (p["batch"], p["seq_len"], p["lora_rank"], p["dtype"]) == (16, 2048, 64, "bfloat16")
    assert from_catalog(p["config"])["model_type"] == "qwen2_5_vl"
    assert any(n.startswith(f"images: not in the log, assumed one a sample at {DYNAMIC_IMAGE_SIDE} px") for n in notes)
