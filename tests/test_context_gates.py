"""The literal gates before the step, frame and banner patterns never hide a line the pattern would match."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.parse import context as ctx
from oomdoctor.parse.normalize import Line, normalize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# One line per form, from the patterns' own comments, so each gate is tried on a line its pattern matches.
EXAMPLES = [
    "Epoch: [0][511/1736]\tTime 0.2", "Epoch(train) [1][ 50/782]  lr: 1e-4", "| epoch   1 |   600/ 3515 batches | lr 20",
    "Train: [1/50][12/157] Data 1.587", "Iter(train) [  50/1000]  lr: 2e-4", "Iter 50: Train loss 1.487, It/sec 0.372",
    "Setting rerun_state_machine.current_iteration to 0...", "Training ...", "[3, 1200] loss: 0.51", "[2,   400/1000]",
    "step=120, skipped=0, lr=[1e-05]", "iteration      120/   50000 | consumed samples", "eta: 1:00  iter: 19  loss 1.2",
    "Starting training from iteration 0", "Start training from epoch: 0, iter: 120", "step: 12", "{'loss': 0.5, 'step': 50}",
    "Steps: 12", "global_step 12", "Step #12/100", "Iter 120/500", "|    iterations      | 3        |",
    "12/100 [====>.....] - ETA: 3s", "epoch 0: {'accuracy': 0.19}",
    "[ 501/1500 06:35 < 13:11, 1.26 it/s, Epoch 1/3]", "Epoch 1:  40%|####  | 4/10 [00:01<00:02]",
    "Epoch 1/2 ━━━━━━━━━━ 4/10 0:00:01", "Epoch [2/10]: [63/1500]   4%|", "Epoch: [63/1500]   4%|",
    '  File "train.py", line 12, in main', "train.py in main(args)", "<ipython-input-3-abc> in <module>",
    "File /tmp/x.py:12, in f", "Cell In[3], line 5", "tests/test_x.py:12: in test_f",
    "***** Running Evaluation *****", "***** Running Prediction *****", "Validation DataLoader 0:  44%|", "Validation: 0it",
    "Evaluating: 100%|", "Running evaluation on 100 samples", "Running validation", "Testing DataLoader 0: 10%|",
    "Predicting DataLoader 0: 10%|", "Sanity Checking DataLoader 0: 100%|", "Inference done 120/500", "Start inference on 500 images",
    "Epoch(val) [1][50/100]", "Iter(test) [50/100]", "eval:  40%|####  | 4/10", " Valid  12%| 3/25 ", "test 50%|##", "Predict 10%|",
    "inference 10%|", "100/100 [==============================] - ETA: 0s", "Saving model checkpoint to out/ckpt-100",
    "Saving checkpoint", "[Rank 0] Saving", "saving checkpoint at iteration 100", "Saving the model to out", "Saving weights",
    "Summoning checkpoint.", "Loading checkpoint shards: 50%", "Loading model", "Creating model", "loading weights",
    "Load pretrained model from x", "-- loading /models/x", "loaded 3D transformer's pretrained weights from x",
    "Initializing the vision encoder", "Processing...", "Constructing datasets...", "Building data loaders",
    "llama_new_context_with_model: n_ctx = 4096", "llm_load_tensors: offloading", "***** Running training *****",
    "Starting training", "Begin the training", "Training started", "starting training from iteration 5", "Start Training",
    "Epoch 1/160", ">>>>>>>start training : setting>>>>>>>", "2|9|Loss: 4.07:  50%|█████     | 3/6 [00:03<00:02]",
    "Epoch(val) [1][8/8]  accuracy: 10.2", "Epoch(val) [1][20]\taccuracy: 0.10", "Iter(test) [100/100]  mAP: 0.5",
    "Map: 100%|██████████| 1000/1000", "Training datasets: 100%|", "Batches: 50%|█    | 1/2",
    "train: Scanning /data/labels/train... 40 images, 0 corrupt: 100% ━━━━ 40/40",
    "Epoch: 2/3, Iter: 4/10 -- train_loss: 0.4807", "trainer INFO: Engine run starting with max_epochs=3.",
    "INFO:ignite.engine.engine.SupervisedEvaluator:Engine run resuming from iteration 0, epoch 1 until 2 epochs",
]


def _texts() -> list[str]:
    texts = set(EXAMPLES)
    for path in sorted(FIXTURES.rglob("*.log")):
        for number, raw in enumerate(path.read_text(errors="replace").split("\n"), 1):
            texts.update(ln.text for ln in normalize(number, raw))
    return sorted(texts)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _texts()


def test_each_step_pattern_matches_only_lines_holding_its_literal(texts):
    assert len(ctx.STEP_NEEDS) == len(ctx.STEP_PATTERNS)
    for need, pat in zip(ctx.STEP_NEEDS, ctx.STEP_PATTERNS, strict=True):
        hits = [t for t in texts if pat.search(t)]
        assert hits, pat.pattern  # the corpus tries the gate on a line the pattern matches
        assert all(need in t for t in hits), (need, pat.pattern, [t for t in hits if need not in t][:3])


@pytest.mark.parametrize(("pattern", "gate"), [
    ("FRAME", ctx.may_be_frame), ("EVAL_BANNER", ctx.may_be_eval_banner), ("INIT_BANNER", ctx.may_be_init_banner),
    ("SAVE_BANNER", lambda t: "aving" in t or "Summoning" in t), ("TRAIN_BANNER", ctx.may_be_train_banner),
    ("LIGHTNING", lambda t: t.startswith("Epoch ")), ("IGNITE", lambda t: "%" in t and "Epoch" in t),
    ("TORCHTUNE", lambda t: "|Loss: " in t), ("LOOP_ENDED", lambda t: "Epoch(" in t or "Iter(" in t),
    ("NON_TRAIN_BAR", ctx.NON_TRAIN_NEEDS.found_in), ("NON_TRAIN_OPEN", ctx.NON_TRAIN_NEEDS.found_in),
    ("EPOCH_MARK", lambda t: "poch" in t), ("MONAI_STATS", lambda t: ", Iter: " in t),
    ("IGNITE_RUN", lambda t: "Engine run " in t),
])
def test_each_gate_passes_every_line_its_pattern_matches(texts, pattern, gate):
    pat = getattr(ctx, pattern)
    hits = [t for t in texts if pat.search(t)]
    assert hits
    assert [t for t in hits if not gate(t)] == []


def test_gates_from_a_text_keep_every_test_a_line_of_it_needs(texts):
    """Built from a text, Gates skips only tests no line of it can pass: each line read with the gates of the line
    itself (the smallest text holding it) finds the step and banner it finds with every test made."""
    for text in texts:
        line = Line(1, None, text)
        for whole in (text, "a line before it\n" + text):  # alone, and as a later line of a log
            gates = ctx.Gates(whole)
            assert ctx.step_of(line, gates) == ctx.step_of(line), text
            assert ctx._banner_kind(text, False, None, gates) == ctx._banner_kind(text, False), text


def test_gates_of_a_text_without_bars_or_banners_skip_their_tests():
    gates = ctx.Gates("{'loss': 0.5, 'step': 12}\nMA 1.0 GB         Max_MA 2.0 GB")
    assert not (gates.bar or gates.frame or gates.lightning or gates.eval or gates.save or gates.train)
    assert [need for need, _ in gates.steps] == ["step", "tep"]
    assert ctx.step_of(Line(1, None, "{'loss': 0.5, 'step': 12}"), gates) == ctx.StepCount(12, None, False)
