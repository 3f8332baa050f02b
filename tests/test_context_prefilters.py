"""The literal prefilters in front of configuration and stack patterns never hide a match (they only skip lines and
the compiling of patterns a log does not need): every fixture line and the lines below, each pattern against them."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.parse import context as C

REPO = Path(__file__).resolve().parents[1]
LINES = [
    "  File \"/opt/conda/lib/python3.10/site-packages/transformers/trainer.py\", line 1859, in _inner_training_loop",
    "***** Running training *****", "DEEPSPEED ZeRO Stage 3", "zero_optimization: {'stage': 2}", "ZeRO-Stage 2",
    "'offload_optimizer': {'device': 'cpu'}", "--per_device_train_batch_size 8 --bf16", "LLaMA-Factory", "TPU v4",
    "XlaRuntimeError: RESOURCE_EXHAUSTED", "import keras", "Using TensorRT-LLM", "[TM][WARNING] x", "İnfo: vLLM",
    "text_generation_launcher: warmup", "ComfyUI: comfy/model_management.py", "OpenRLHF actor", "verl.trainer",
    "trl/trainer/grpo_trainer.py", "lightning.pytorch", "Validation DataLoader 0", "accelerate launch train.py",
    "fully_shard(model)", "torchtitan step", "MEGATRON", "ds_config.json", "FSDP", "\u212aeras", "ſglang",
]


def _fixture_lines():
    lines = list(LINES)
    for log in sorted(REPO.glob("fixtures/*/*.log")):
        lines += [ln[:2000] for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    return lines


@pytest.fixture(scope="module")
def lines():
    return _fixture_lines()


def test_no_stack_is_named_without_one_of_its_literals(lines):
    assert C.STACK_LITERALS.keys() == C.STACKS.keys()
    for text in lines:
        folded = C._fold(text)
        for name, pat in C.STACKS.items():
            if pat.search(text):
                assert C._may_name(name, text, folded), (name, text)


def test_no_configuration_is_read_without_its_literal(lines):
    matched = 0
    for text in lines:
        if C.CONFIG_KV.search(text):
            matched += 1
            assert C.CONFIG_KEYS.found_in(text), text
        if C.ZERO_STAGE.search(text):
            assert "zero" in text or "ZeRO" in text, text
        if C.OFFLOAD.search(text):
            assert "offload_" in text, text
    assert matched > 100


def test_the_literal_scan_without_ahocorasick_agrees(monkeypatch, lines):
    from oomdoctor.parse import lazyregex

    assert lazyregex.ahocorasick_rs is not None
    with_automaton = [C.CONFIG_KEYS.found_in(t) for t in lines]
    monkeypatch.setattr(lazyregex, "ahocorasick_rs", None)
    assert [C.CONFIG_KEYS.found_in(t) for t in lines] == with_automaton
    assert any(with_automaton) and not all(with_automaton)


def test_a_line_shape_drops_exactly_the_digits_the_pattern_drops(lines):
    texts = [*lines, "step ٣ loss ١٫٢", "ｓｔｅｐ １２", "epoch 3 ²", "loss 0.5 ⁴₂ 𝟙𝟚"]
    assert [C._shape(t) for t in texts] == [C.DIGITS.sub("", t) for t in texts]
    assert C._shape("step ٣") == "step " and C._shape("{'loss': 0.25, 'step': 12}") == "{'loss': ., 'step': }"


def test_the_run_start_and_root_cause_literals_are_in_every_line_their_patterns_match(lines):
    from oomdoctor.parse import events as E
    from oomdoctor.parse import formats as P
    from oomdoctor.parse import summary as S

    texts = [*lines, "***** Running training *****", "Loading checkpoint shards:   0%|", "python -m torch.distributed.run",
             "Setting ds_accelerator to cuda (auto detect)", "Root Cause (first observed failure):",
             "|                  PyTorch CUDA memory summary, device ID 0                 |"]
    for pat, gate in ((E._RUN_START, lambda t: any(lit in t for lit in E._RUN_START_NEEDS)),
                      (P.ROOT_CAUSE, lambda t: P.ROOT_CAUSE_TEXT in t), (S.HEAD, lambda t: S.HEAD_NEEDS in t)):
        hits = [t for t in texts if pat.search(t)]
        assert hits and all(gate(t) for t in hits), pat.pattern
