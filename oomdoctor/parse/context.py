"""Context around OOM events: training step, phase, run configuration, per-step memory, versions."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import regex

from oomdoctor.parse.formats import KILLED_TRANSLATED_ALTERNATIVES
from oomdoctor.parse.lazyregex import Literals, lazy
from oomdoctor.parse.model import Evidence, MemorySample, Value
from oomdoctor.parse.normalize import JOURNAL_HEADER, Line, cut_row, next_row, strip_prefixes
from oomdoctor.units import UnitError, parse_size, to_bytes

# ---- steps -------------------------------------------------------------------------------------------
# A bar's count over its total; tqdm's unit_scale prints a whole count below 100 with zero decimals ("4.00/8.00",
# "58.0/58.0"; 100 and up as they are, then "1.23k"), where a float total of another unit ("4356.0/4356.0 seconds")
# is no count
_COUNT = r"(?:(?P<n>\d{1,2})\.0{1,2}|(?P<n>\d{1,20}))/(?:(?P<total>\d{1,2})\.0{1,2}|(?P<total>\d{1,20}))(?![\d.])"
TQDM = lazy(
    r"(?:(?P<pct>\d{1,3})%(?:\|[^|\n]{0,160}\||\s)\s{0,4}" + _COUNT + r"\s{0,4}\[\d"
    r"|\|[^|\n]{1,160}\|\s{0,4}" + _COUNT + r"\s{0,4}\[\d{1,4}:\d\d"
    r"|(?P<pct>\d{1,3})% [━─╸╺]{1,200} (?P<n>\d{1,20})/(?P<total>\d{1,20})(?:\s|$)"
    r"|\|[█-]{1,400}\|\s{0,4}(?P<pct>\d{1,3})(?:\.\d{1,2})?%\s{1,4}\[(?P<n>\d{1,20})/(?P<total>\d{1,20})\s\d{1,4}:\d\d)"
)  # with bar glyphs, or without them (a notebook's plain-text tqdm: "63% 34/54 [00:42<00:25"); a bar_format
# without the percentage ("|▏    | 1316/181580 [23:54<42:25:21") shows its elapsed time instead; Ultralytics' own bar
# (8.3.x on) draws the glyphs between the percentage and the count: "64: 30% ━━━╸──────── 3/10 3.4it/s 1.2s<2.1s";
# fastprogress (fastai) in a console: "Epoch 2/3 : |████----| 40.00% [4/10 00:00<00:01... 2.3156]"
# Lightning's bars count batches within the epoch: tqdm "Epoch 1:  40%|####  | 4/10" and Rich "Epoch 1/2 ━━━ 4/10".
LIGHTNING = lazy(
    r"^Epoch (?P<epoch>\d{1,20})(?::\s{0,4}\d{1,3}%\|[^|\n]{0,160}\||/\d{1,20}\s{1,4}[━╸╺─ ]{0,400})\s{0,4}(?P<n>\d{1,20})/(?P<total>\d{1,20})"
)
# A bar over an iterable with no length: tqdm's "37it [00:10,  3.60it/s, loss=0.5]" (`tqdm(enumerate(loader))`, a
# streaming dataset), and Lightning's "Epoch 0: |          | 12/? [00:05<00:00, ...]" (an IterableDataset: the epoch's
# count, so the global step on its own line only in epoch 0; a later epoch's is the earlier epochs' batches plus
# its count, which Markers adds from the bars drawn before it: lightning_open_steps). The count, no total.
TQDM_OPEN = lazy(r"(?<![\w.])(?P<n>\d{1,20})it \[(?:\d{1,3}:)?\d{1,2}:\d\d[,\]]")
LIGHTNING_OPEN = lazy(
    r"^Epoch (?P<epoch>\d{1,20}):\s{0,4}(?:\d{1,3}%)?\|[^|\n]{0,160}\|\s{0,4}(?P<n>\d{1,20})/\?\s{0,4}\[\d")
# The module's own global step logged into Lightning's bar ("..., global_step=208.0]"; CompVis-style diffusion trainers
# log it so): the trainer's counter, where the bar counts batches.
GLOBAL_STEP_POSTFIX = lazy(r"[,\s]global_step=(?P<n>\d{1,20})(?:\.0)?(?=[,\]\s]|$)")
# PyTorch-Ignite's ProgressBar puts the count before the bar: "Epoch [2/10]: [63/1500]   4%|" or "Epoch: [63/1500]   4%|".
IGNITE = lazy(r"\bEpoch(?:\s\[(?P<epoch>\d{1,20})/\d{1,20}\])?:\s{0,2}\[(?P<n>\d{1,20})/(?P<total>\d{1,20})\]\s{0,8}\d{1,3}%")
# MONAI's StatsHandler, one line per training iteration: "Epoch: 2/3, Iter: 4/10 -- train_loss: 0.4807" (epochs from
# 1, the iteration within the epoch): the global step is the epochs before times the epoch's iterations, plus this one
MONAI_STATS = lazy(r"\bEpoch: (?P<epoch>\d{1,20})/\d{1,20}, Iter: (?P<n>\d{1,20})/(?P<total>\d{1,20}) -- ")
# An ignite Engine's run opening, logged under the engine's logger name: "INFO:ignite.engine.engine.SupervisedTrainer:
# Engine run resuming from iteration 0, epoch 0 until 3 epochs" (ignite 0.5; 0.4: "Engine run starting with
# max_epochs=3."), setup_logger's "... trainer INFO: Engine run ...". The name says which loop opens (MONAI's
# SupervisedTrainer, SupervisedEvaluator; ignite's examples' "trainer", "evaluator"); a plain "Engine" says neither.
IGNITE_RUN = lazy(r"(?P<engine>[\w.]{1,120})\W{1,4}(?:[A-Z]{4,8}\W{1,4})?Engine run "
                  r"(?:resuming from iteration (?P<n>\d{1,20})\b|starting with max_epochs=)")
ENGINE_EVAL = lazy(r"(?i)(?:eval|valid|test|infer|predict)\w{0,20}$")
ENGINE_TRAIN = lazy(r"(?i)train\w{0,20}$")
# torchtune's recipes describe their per-epoch bar with the global step: "2|9|Loss: 4.0701:  50%|█████     | 3/6 [..."
# (epoch|step|loss); the step is the description's, the bar counts the epoch's steps.
TORCHTUNE = lazy(r"^(?P<epoch>\d{1,9})\|(?P<n>\d{1,20})\|Loss: [\w+.-]{1,40}:\s{0,4}\d{1,3}%\|")
# Keras 3's bar counts the epoch's batches: " 7/20 ━━━━━━━━━━━━━━━━━━━━ 1s 83ms/step - loss: ..."
KERAS3 = lazy(r"^\s{0,4}(?P<n>\d{1,20})/(?P<total>\d{1,20}) ━{1,400} ")
# Poutyne's progress line counts the validation (or test) batches as it counts training's ("Epoch: 2/3 Step: 1/4
# 25.00% |█████     |ETA: 0.00s val_loss: 1.3995 val_acc: 25.0"): metrics that all name that loop, first to last
EVAL_POSTFIX = lazy(r"\|ETA: [\d.:]{1,12}s?\s{1,4}(?:val|valid|test)_\w{1,40}: ")
STEP_PATTERNS = (
    lazy(r"\bEpoch:?\s{0,2}\[\d{1,20}\]\s{0,2}\[\s{0,6}(?P<n>\d{1,20})/\d{1,20}\]"),  # Epoch: [0][511/1736] (ImageNet example, torch7)
    lazy(r"\bEpoch\(train\)\s{0,3}\[\d{1,20}\]\s{0,3}\[\s{0,6}(?P<n>\d{1,20})/\d{1,20}\]"),  # mmengine, epoch-based
    # PyTorch's word_language_model example and the LSTM LMs built on it: "| epoch   1 |   600/ 3515 batches | lr ..."
    lazy(r"^\|\s{0,4}epoch\s{1,8}\d{1,6}\s{0,4}\|\s{0,10}(?P<n>\d{1,20})/\s{0,10}\d{1,20} batches\b"),
    # Pointcept and other point-cloud trainers: "Train: [1/50][12/157] Data 1.587 ..." (epoch/epochs, iter/iters)
    lazy(r"\bTrain:?\s{0,2}\[\s{0,6}\d{1,20}/\d{1,20}\]\s{0,2}\[\s{0,6}(?P<n>\d{1,20})/\d{1,20}\]"),
    lazy(r"\bIter\(train\)\s{0,3}\[\s{0,9}(?P<n>\d{1,20})/\d{1,20}\]"),  # mmengine, iteration-based
    lazy(r"^Iter (?P<n>\d{1,20}): Train loss \d"),  # mlx-lm's trainer: "Iter 50: Train loss 1.487, Learning Rate ..."
    # MXNet's Speedometer (Module.fit, GluonCV scripts): "Epoch[0] Batch [2260]\tSpeed: 0.34 samples/sec", the batch
    # counted within the epoch
    lazy(r"\bEpoch\[\d{1,20}\]\s{0,2}Batch\s{0,2}\[(?P<n>\d{1,20})\]"),
    lazy(r"^\s{0,4}\[\s{0,4}\d{1,20},\s{0,8}(?P<n>\d{1,20})(?:/\d{1,20})?\]"),  # [epoch, iter] / [epoch, iter/total]
    lazy(r"\bstep=(?P<n>\d{1,20})\b"),  # DeepSpeed log_dist
    lazy(r"\biteration\s{1,12}(?P<n>\d{1,20})\s{0,4}/\s{0,12}\d{1,20}"),  # Megatron
    # Megatron-core's rerun state machine, as each iteration starts: "Setting rerun_state_machine.current_iteration to 0..."
    lazy(r"\brerun_state_machine\.current_iteration to (?P<n>\d{1,20})\b"),
    lazy(r"\biter:\s{0,4}(?P<n>\d{1,20})\b"),  # detectron2 metric lines
    lazy(r"[Ss]tarting training from iteration (?P<n>\d{1,20})"),  # detectron2
    lazy(r"\bStart training from epoch: \d{1,20}, iter: (?P<n>\d{1,20})"),  # BasicSR (Real-ESRGAN, GFPGAN, ...)
    lazy(r"\bstep:\s{0,4}(?P<n>\d{1,20})\b"),  # torchtitan; YAML-ish "step: 12" in any indentation
    lazy(r"['\"](?:global_)?step['\"]:\s{0,2}(?P<n>\d{1,20})"),  # {'step': 50}
    lazy(r"\bSteps:\s{0,2}(?P<n>\d{1,20})\b"),
    lazy(r"\b(?:global[_ ])?[Ss]tep\s{0,2}[#:]?\s{0,2}(?P<n>\d{1,20})(?:\s{0,2}/\s{0,2}\d{1,20})?\b(?![.%])"),
    # "Iter 120/500", "Iteration 120 of 500", also as Python 2 prints a tuple: "('iter = ', 2, 'of', 20000, 'completed,
    # loss = ', ...)"
    lazy(r"\b[Ii]ter(?:ation)?s?\s{0,2}[#:=]?\s{0,2}(?:['\"],\s{0,2})?(?P<n>\d{1,20})"
         r"(?:\s{0,2}/\s{0,2}|,?\s{1,2}['\"]?of(?:['\"],)?\s{1,2})\d{1,20}\b"),
    # Stable-Baselines3's logger table, one row per value: "|    iterations      | 3        |" (on-policy algorithms:
    # one rollout and its update per iteration)
    lazy(r"^\|\s{1,8}iterations\s{1,40}\|\s{1,4}(?P<n>\d{1,20})\s{1,40}\|"),
    lazy(r"^\s{0,4}(?P<n>\d{1,20})/\d{1,20} \[[=>.]{3,}"),  # Keras progress bar: 12/100 [====>.....]
    # HF Trainer's notebook progress as text: "[ 501/1500 06:35 < 13:11, 1.26 it/s, Epoch 1/3]" (its eval bar has no Epoch)
    lazy(r"^\s{0,4}\[\s{0,6}(?P<n>\d{1,20})/\d{1,20} [\d:]{4,12} < [\d:]{4,12}, [\d.]{1,12} (?:it/s|s/it), Epoch [\d.]{1,20}/\d{1,20}\]"),
)
# A literal each of STEP_PATTERNS needs, in the same order: a line without it is not searched (a regex search costs
# ~1 us, an `in` ~0.05; on a dense log every line is tried). tests/test_context_gates.py holds them to their patterns.
STEP_NEEDS = ("Epoch", "Epoch(train)", "epoch", "Train", "Iter(train)", ": Train loss ", "Epoch[", "[", "step=", "iteration",
              "current_iteration to ", "iter:",
              "training from iteration ", "Start training from epoch: ", "step:", "step", "Steps:", "tep", "ter",
              "iterations", " [",
              "Epoch ")
# A progress indicator or banner that names an evaluation loop: HF/Lightning/detectron2/mmengine/tqdm.
EVAL_BANNER = lazy(
    r"\*{5} Running (?:Evaluation|Prediction) \*{5}|Validation DataLoader \d|^Validation:|^Evaluating\b"
    # a loop's own start line, as TRAIN_BANNER reads training's: pytorch-accelerated's "Starting eval epoch",
    # "Starting evaluation run"
    r"|^(?:Start(?:ing)?|Begin(?:ning)?) (?:the |an? )?(?:eval|evaluation|validation|testing)\b"
    r"|Running evaluation|\bRunning validation\b|^Testing DataLoader|Predicting DataLoader|Sanity Checking DataLoader"
    r"|\bClass\s{1,20}Images\s{1,20}Instances\s{1,20}(?:Box|Mask|Pose)\(P\s"  # Ultralytics' validation bar
    r"|Inference done \d{1,20}/\d{1,20}|Start inference on \d{1,20} (?:batches|images)"
    # a prediction script walking its inputs ("Predicting file 1/1", nnU-Net's "Inference using model ...")
    r"|^Predicting (?:file|image|case|volume|sample|patient|subject)s? \d{1,9}/\d{1,9}\b"
    r"|^(?:Running )?[Ii]nference (?:using|with) (?:the )?(?:model|checkpoint|weights)\b"
    r"|^Running for \d{1,9} iterations\.\s*$"  # Caffe's test tool (caffe.cpp's test()), as "Solving <net>" is its training
    # mmengine's validation or test loop still running ("Epoch(val) [1][5/8]", "Iter(test) [ 50/100]"); at its total
    # ("Epoch(val) [1][8/8]  accuracy: ...") or without one (mmcv's "Epoch(val) [1][20]") it has finished
    r"|\b(?:Epoch|Iter)\((?:val|test)\)\s{0,4}(?:\[\d{1,20}\]\s{0,4})?\[\s{0,9}(?P<mmv>\d{1,20})/(?!(?P=mmv)\])\d{1,20}\]"
    r"|(?:^|[\s:\[(])(?:[Ee]val(?:uat\w{0,6})?|[Vv]alid\w{0,6}|[Tt]est(?:ing)?|[Pp]redict\w{0,4}|[Ii]nfer\w{0,6})"
    r"\b(?![ _-]?(?:data ?sets?|data|files|shards)\b)[^|\n%]{0,60}?\d{1,3}%(?:\||\s{1,4}\d{1,20}/\d{1,20}\s)"  # glyphs or none
    # not a bar counting examples (datasets' map/filter over an eval split: "Filtering eval >48 tokens: 100%|...|
    # 32/32 [00:00<00:00, 9744.28 examples/s]", "ba/s" before datasets 2.x): that prepares data, it runs no loop
    r"(?![^\n]{0,400}?(?:\d|\?) ?(?:examples|ba)/s\])"
    # Keras fit(): the epoch's last batch drawn but the line still showing an ETA (its closing "- 12s 40ms/step" not
    # yet written): the epoch-end validation pass is running
    r"|^\s{0,4}(?P<kdone>\d{1,20})/(?P=kdone) \[=+\] - ETA: "
    # Keras 3 the same way: the last batch drawn with its ETA of 0s and no val_ metrics yet (the closing line shows
    # the epoch's elapsed time and, after validation, "- val_loss: ...")
    r"|^\s{0,4}(?P<k3done>\d{1,20})/(?P=k3done) ━{1,400} 0s [\d.]{1,8}[mµu]?s/step(?![^\n]{0,2000}\bval_)"
)
# A loop's closing summary: mmengine's validation or test line at its total ("Epoch(val) [1][8/8]  accuracy: 10.2"), or
# mmcv's with no total ("Epoch(val) [1][20]\taccuracy: 0.10"): that loop has ended, and the banners before it are stale.
LOOP_ENDED = lazy(r"\b(?:Epoch|Iter)\((?:val|test)\)\s{0,4}(?:\[\d{1,20}\]\s{0,4})?\[\s{0,9}(?P<n>\d{1,20})(?:/(?P=n))?\](?!\[)")
KERAS3_AT_TOTAL = lazy(r"^\s{0,4}(?P<k>\d{1,20})/(?P=k) ━{1,400} 0s ")  # Keras 3's bar at its total, before validation
SAVE_BANNER = lazy(r"Saving model checkpoint to|Saving checkpoint|\[Rank \d{1,20}\] Saving|saving checkpoint at iteration"
                            r"|Saving (?:the )?model (?:to|at)\b|Saving weights"
                            # Lightning's ModelCheckpoint(verbose=True) right before it writes: "Epoch 0, global step 8:
                            # 'val_loss' reached 1.43126 (best 1.43126), saving model to '.../epoch=0-step=8.ckpt' as top 1"
                            r"|\bglobal step \d{1,20}: [^\n]{0,300}?, saving model to '"
                            # latent-diffusion's main.py and its many forks, saving on an exception or a signal
                            r"|^Summoning checkpoint\.")
TRAIN_BANNER = lazy(
    r"\*{5} Running training \*{5}|^(?:Start(?:ing)?|Begin(?:ning)?) (?:the )?training\b|\bTraining [Ss]tarted\b"
    r"|[Ss]tarting training from iteration|\bStart [Tt]raining\b"
    r"|^Epoch \d{1,6}/\d{1,6}\s*$"  # Keras fit() opening an epoch ("Epoch 1/160" on its own line)
    r"|^(?:Start(?:ing)?|Begin(?:ning)?) [Ee]poch:?\s{0,2}\d{1,6}\b"  # a script's own: "Starting Epoch: 0"
    r"|^>{3,}\s?[Ss]tart [Tt]raining\b"  # Time-Series-Library and its forks: ">>>>>>>start training : <setting>>>>>>>>"
    r"|^[Tt]raining \.\.\.\s*$"  # Megatron-LM's train() after its setup ("training ...", Megatron-Bridge "Training ...")
    r"|^Solving [\w.-]{1,200}\s*$"  # Caffe's solver starting on its net (glog's "solver.cpp:282] Solving <net>")
    # Lightning's training bar at its start, before its first epoch relabels it "Epoch 0": "Training: |  | 0/? [00:00<?,
    # ?it/s]" (1.x: "Training: 0it [00:00, ?it/s]"); it ends the default sanity check's validation bars
    r"|^Training:\s{0,4}(?:(?:0%)?\|[^|\n]{0,160}\|\s{0,4}0/(?:\?|\d{1,20})|0it)\s{0,4}\[\d"
)
FRAME = lazy(
    # CPython (a markdown code span's backtick may open it: "`File ..."); TorchScript's autograd
    r'^\s*`?File "(?P<file>[^"]{1,400})", line \d{1,20}, in (?P<func><backward op>|[\w<>.]+)'
    r"|^(?P<ipyfile>\S{1,400}\.py) in (?P<ipyfunc>\w+)\("  # IPython / Colab (before IPython 8)
    r"|^<ipython-input-[\w-]{1,80}> in (?P<cellfunc><module>|\w+)"  # a notebook cell (before IPython 8)
    r"|^\s*File (?P<ipy8file>\S[^\n]{0,400}?):\d{1,20}, in (?P<ipy8func>[\w<>.]+)"  # IPython 8+
    r"|^(?P<cell8>Cell In\[\d{1,6}\]), line \d{1,20}"  # IPython 8+: the notebook cell itself
    r"|^\s*(?P<pytestfile>[^\s:]{1,400}\.py):\d{1,20}: in (?P<pytestfunc>[\w<>.]+)"  # pytest's long traceback
    # Colab (2022+) links each file: "[/content/sam2/utils/misc.py](https://localhost:8080/#) in load_video_frames("
    r"|^\[(?P<colabfile>[^\]\n]{1,400})\]\([^)\n]{0,400}\) in (?P<colabfunc><cell line: \d{1,6}>|\w+)\("
)
# The code lines under a frame header: CPython indents one statement; IPython numbers several ("----> 5 ...").
CODE_CALL = lazy(r"(?:^|[\s.=(\[])(?P<name>[A-Za-z_]\w{0,60})\(")
IPY_CODE = lazy(r"^\s*(?:-*>\s*)?\d{1,6}\s(?P<code>.*)$")


def frame_func(m: regex.Match[str]) -> str:
    """The function name of a FRAME match, whichever traceback style it came from."""
    return m["func"] or m["ipyfunc"] or m["cellfunc"] or m["ipy8func"] or m["pytestfunc"] or m["colabfunc"] or "<module>"


PHASE_FRAMES: dict[str, frozenset[str]] = {
    "save": frozenset({
        "save_model", "_save_checkpoint", "save_checkpoint", "_save", "save_pretrained", "state_dict",
        "full_state_dict", "_full_post_state_dict_hook", "consolidated_state_dict", "_get_state_dict",
        "_save_optimizer_and_scheduler", "_zero3_consolidated_16bit_state_dict", "get_state_dict",
        "save_state", "_save_zero_checkpoint", "save_16bit_model", "gather_state_dict",
        "save",  # torch.save; Stable-Baselines3's, Keras' and fastai's model.save(); accelerate's accelerator.save()
    }),
    "eval": frozenset({
        "evaluate", "evaluation_loop", "prediction_step", "validation_step", "_evaluate", "eval_step",
        "predict", "prediction_loop", "_run_evaluate", "test_step", "predict_step", "evaluation",
        "_evaluation_step", "run_evaluation", "validate", "val_step", "_run_validation",
        "test", "run_test", "inference", "infer", "inference_on_dataset", "single_gpu_test", "multi_gpu_test",
        "test_epoch", "val_epoch", "valid_epoch", "validation_epoch", "run_eval", "eval", "eval_model",
        "test_model", "evaluate_model", "eval_epoch", "evaluation_step", "_predict", "run_inference",
        "predict_epoch", "_predict_epoch",  # pytorch-tabnet's pass over the eval set after each training epoch
        "gather_for_metrics",  # accelerate's gather of predictions and labels for metrics: an evaluation loop's
    }),
    "generate": frozenset({
        "generate", "_generate", "_sample", "sample", "greedy_search", "beam_search", "_beam_search",
        "_generate_and_score_completions", "generate_completions", "_generate_single_turn", "rollout",
        "generate_sequences", "_assisted_decoding", "contrastive_search",
    }),
    "train": frozenset({
        "training_step", "_inner_training_loop", "train_step", "backward", "run_backward",
        "optimizer_step", "_do_optimizer_step", "training_loop", "train_one_epoch", "_training_step",
        "compute_loss", "fit_loop", "_run_train", "train_epoch", "forward_backward_func",
        "forward_backward_no_pipelining", "train", "fit", "train_model", "learn", "train_loop", "train_batch",
        "training_epoch", "_fit_impl", "run_training_epoch", "run_training_batch", "update_params", "optimize_model",
        "fit_one_epoch", "train_on_batch", "run_step", "do_train", "_run_stage", "<backward op>",
        # an RL policy's log-probabilities and entropy of the rollout's actions, for the update's loss
        # (Stable-Baselines3's PPO/A2C train(), pytorch-a2c-ppo-acktr): its name says evaluate, it runs only in training
        "evaluate_actions",
        # image-to-image GANs' training steps: pix2pix/CycleGAN's and BasicSR's model.optimize_parameters(), SPADE's and
        # its descendants' trainer.run_generator_one_step() / run_discriminator_one_step()
        "optimize_parameters", "run_generator_one_step", "run_discriminator_one_step",
    }),
    "init": frozenset({
        "from_pretrained", "_load_pretrained_model", "load_state_dict", "load_checkpoint", "dispatch_model",
        "_apply", "cuda", "to", "_move_model_to_device", "initialize", "prepare", "_prepare_deepspeed",
        "load_model", "_load_state_dict_into_meta_model", "build_model", "get_model", "create_model",
        "_configure_optimizer", "_configure_zero_optimizer", "_configure_basic_optimizer", "setup_model_and_optimizer",
        "init_weights", "_init_weights", "from_config", "model_init", "initialize_optimizer_states",
        # TensorFlow 1's initialisers run in a session (see TF1_INIT_RUN)
        "global_variables_initializer", "initialize_all_variables", "local_variables_initializer",
        "variables_initializer",
        # peft readying a (quantized) base for adapters: its names say "training", but no step has run
        "prepare_model_for_kbit_training", "prepare_model_for_int8_training", "prepare_model_for_training",
        "setup", "_setup", "setup_model", "setup_data",  # pycaret's setup(), Lightning's setup hooks: before any step
        "_cuda_deserialize", "default_restore_location",  # torch.load restoring a checkpoint's tensors onto the GPU
        # ComfyUI moving a model's weights onto the GPU (a sampler's frames around them still say generate)
        "load_models_gpu", "partially_load", "patch_weight_to_device",
        "__init__",  # a model's, dataset's or trainer's constructor: set-up (a train/eval frame inside it still wins)
        # the data prepared before the first step (tokenised, featurised, cached)
        "preprocess", "prepro", "preprocessing", "build_features", "convert_examples_to_features", "build_vocab",
        "prepare_data", "build_dataset", "create_dataset", "make_dataset", "load_and_cache_examples",
        "load_data", "load_dataset", "read_data", "extract_data", "prepare_dataset", "get_dataset",
    }),
}
PHASE_ORDER = ("save", "eval", "generate", "train", "init")


def _same_rank(line: Line, rank: int | None) -> bool:
    return rank is None or line.rank is None or line.rank == rank


def _ev(source: str, line: Line) -> Evidence:
    return Evidence(source=source, line=line.number, text=line.text.strip()[:500])


class StepCount(NamedTuple):
    """A step counter as one line prints it: the count, the bar's total, and whether it is a progress bar."""

    n: int
    total: int | None
    bar: bool


def may_hold_bar(text: str) -> bool:
    """The cheap test before TQDM is tried: a count over a total beside a percentage or a bar's pipe."""
    return ("%" in text or "|" in text) and "/" in text


class Gates:
    """Which of the literals that step_of and _banner_kind test each line for a source's text holds anywhere: a line
    holds only those, so a test for one it lacks is skipped on every line (one search over the text, not one per
    line: on a dense log most of the ~60 tests per line). Built without a text, every test is made."""

    def __init__(self, whole: str | None = None) -> None:
        def has(*literals: str) -> bool:
            return whole is None or any(lit in whole for lit in literals)

        self.frame = has("File ", ".py", "<ipython-input-", "Cell In[")  # may_be_frame's
        self.lightning, self.ignite = has("Epoch "), has("%") and has("Epoch")
        self.torchtune, self.keras3, self.bar = has("|Loss: "), has("━"), has("%", "|") and has("/")
        self.open_bar, self.monai, self.engine_run = has("it ["), has(", Iter: "), has("Engine run ")
        self.steps = tuple((need, pat) for need, pat in zip(STEP_NEEDS, STEP_PATTERNS, strict=True) if has(need))
        # _banner_kind's: may_be_eval_banner and may_be_init_banner hold for a text holding one of their lines
        # (may_be_eval_banner asks a line whether it starts with "Start", "Begin" or "Predicting ": of a text, any
        # line may)
        self.eval = whole is None or may_be_eval_banner(whole) or "\nStart" in whole or "\nBegin" in whole \
            or "\nPredicting " in whole
        self.save, self.init = has("aving", "Summoning"), whole is None or may_be_init_banner(whole)
        self.train = whole is None or may_be_train_banner(whole)
        self.ended = has("Epoch(", "Iter(")
        self.serving = whole is None or may_be_serving_banner(whole)


EVERY_TEST = Gates()


def step_of(line: Line, gates: Gates = EVERY_TEST) -> StepCount | None:
    """The step counter one line prints, or None (`gates`: the tests worth making on the lines of its source)."""
    text = line.text
    if (gates.frame and may_be_frame(text) and FRAME.match(text)) or text.lstrip().startswith(("at ", "#")):
        return None
    m = LIGHTNING.search(text) if gates.lightning and text.startswith("Epoch ") else None
    if m:  # the training loop's counter: batches of the epochs before, plus this one's
        g = GLOBAL_STEP_POSTFIX.search(text, m.end()) if "global_step=" in text else None
        n = int(g["n"]) if g else int(m["epoch"]) * int(m["total"]) + int(m["n"])
        return StepCount(n, int(m["total"]), True)
    m = IGNITE.search(text) if gates.ignite and "%" in text and "Epoch" in text else None
    if m and not (NON_TRAIN_NEEDS.found_in(text) and NON_TRAIN_BAR.search(text)):  # epochs count from 1
        before = (int(m["epoch"]) - 1) * int(m["total"]) if m["epoch"] else 0
        return StepCount(before + int(m["n"]), int(m["total"]), True)
    m = MONAI_STATS.search(text) if gates.monai and ", Iter: " in text else None
    if m:
        return StepCount((int(m["epoch"]) - 1) * int(m["total"]) + int(m["n"]), None, False)
    run = ignite_run(line.raw or text) if gates.engine_run and "Engine run " in text else None  # the logger's name
    if run is not None:  # an evaluator's opening counts its own iterations, not training's
        return StepCount(run[1], None, False) if run[0] == "train" and run[1] is not None else None
    m = TORCHTUNE.match(text) if gates.torchtune and "|Loss: " in text else None
    if m:
        return StepCount(int(m["n"]), None, False)  # a printed step, not the bar's count
    m = KERAS3.search(text) if gates.keras3 and "━" in text else None
    if m:
        return StepCount(int(m["n"]), int(m["total"]), True)
    if gates.bar and may_hold_bar(text):
        bars = list(TQDM.finditer(text))
        if bars and NON_TRAIN_NEEDS.found_in(text) and NON_TRAIN_BAR.search(text):
            return None
        if bars:
            b = bars[-1]
            if DATA_RATE.match(text, b.end()):
                return None
            return StepCount(int(b["n"]), int(b["total"]), True)
        m = LIGHTNING_OPEN.match(text) if gates.lightning and "/?" in text else None
        if m and m["epoch"] == "0":
            return StepCount(int(m["n"]), None, True)
    m = TQDM_OPEN.search(text) if gates.open_bar and "it [" in text else None
    if m:  # a data bar names what it walks before its count ("Tokenizing: 512it [...]"): not a step
        label = text[: m.start()]
        walks_other = NON_TRAIN_NEEDS.found_in(label) and NON_TRAIN_OPEN.search(label)
        return None if walks_other else StepCount(int(m["n"]), None, True)
    if "ETA: " in text and EVAL_POSTFIX.search(text):
        return None
    for need, pat in gates.steps:
        m = pat.search(text) if need in text else None
        if m:
            return StepCount(int(m["n"]), None, False)
    return None


def ignite_run(text: str) -> tuple[str | None, int | None] | None:
    """An ignite Engine's run opening on this raw line (its logger's name is a prefix normalize strips): the loop that
    name says ("train", "eval", or None for neither) and the iteration it resumes from (or None); None when the line
    opens no engine run."""
    m = IGNITE_RUN.search(text)
    if m is None:
        return None
    name = m["engine"].rsplit(".", 1)[-1]
    kind = "eval" if ENGINE_EVAL.search(name) else "train" if ENGINE_TRAIN.search(name) else None
    return kind, int(m["n"]) if m["n"] is not None else None


def may_be_frame(text: str) -> bool:
    """False when FRAME cannot match: each of its forms holds one of these literals."""
    return "File " in text or ".py" in text or "<ipython-input-" in text or "Cell In[" in text


def may_be_eval_banner(text: str) -> bool:
    """False when EVAL_BANNER cannot match: each of its forms holds one of these literals (a bar's, a % and a word)."""
    return ("Running" in text or "DataLoader" in text or text.startswith(("Start", "Begin", "Predicting "))
            or "Validation:" in text or "Evaluating" in text
            or "nference" in text or "Epoch(" in text or "Iter(" in text or "] - ETA: " in text
            or "Images" in text or "━ 0s " in text  # Ultralytics' validation bar; Keras 3's bar at its total
            or ("%" in text and ("val" in text or "alid" in text or "est" in text or "redict" in text or "nfer" in text)))


def is_eval_banner(text: str) -> bool:
    """The line announces an evaluation loop (EVAL_BANNER matches; searched only where may_be_eval_banner allows)."""
    return may_be_eval_banner(text) and EVAL_BANNER.search(text) is not None


def may_be_train_banner(text: str) -> bool:
    """False when TRAIN_BANNER cannot match: each of its forms holds one of these literals."""
    return "raining" in text or "poch" in text or "Solving " in text


def may_be_serving_banner(text: str) -> bool:
    """False when SERVING_BANNER cannot match: each of its forms holds one of these literals."""
    return "http" in text or "istening on" in text or "ready to roll" in text or "startup complete" in text \
        or "eneration" in text or "ampling" in text


def may_be_init_banner(text: str) -> bool:
    """False when INIT_BANNER cannot match: each of its forms holds one of these literals."""
    return ("oad" in text or "reat" in text or "nitializ" in text or "rocessing" in text or "uilding" in text
            or "onstructing" in text or "reparing" in text or "llama_" in text or "ggml_" in text or "build = " in text)


EVAL_BAR_LOOKBACK_LINES = 200
# A progress bar that names an evaluation loop: "Validation DataLoader 0:  44%|", "Predicting:   0%|".
EVAL_BAR = lazy(r"(?:Evaluat|Validat|Predict|Test|Infer)\w{0,8}[^|%\n]{0,60}\d{1,3}%[|\s]")


def eval_progress(lines: Sequence[Line], idx: int, rank: int | None) -> tuple[int, int, Line] | None:
    """The evaluation loop's progress bar nearest before a failure in evaluation: (batches done, batches in all,
    its line), when the bar names evaluation or an evaluation banner precedes it (a training bar is not it). The
    bar may be glued to the failure's own line."""
    nearest: tuple[int, int, Line] | None = None
    for ln in reversed(lines[max(0, idx - EVAL_BAR_LOOKBACK_LINES) : idx + 1]):
        if not _same_rank(ln, rank):
            continue
        text = ln.text
        banner = is_eval_banner(text)
        bars = list(TQDM.finditer(text)) if may_hold_bar(text) else []
        named = bool(bars) and bool(EVAL_BAR.search(text))
        if bars and int(bars[-1]["total"]) >= int(bars[-1]["n"]) and nearest is None and (not banner or named):
            nearest = int(bars[-1]["n"]), int(bars[-1]["total"]), ln
            if named:
                return nearest
        if banner:
            return nearest
    return None


class Progress(NamedTuple):
    """What the log printed before a failure: the last training step, a banner's phase, and whether training
    had started (a "training started" marker with no step logged after it means the first step failed)."""

    step: Value | None
    banner_phase: str | None
    banner: Evidence | None
    started: Evidence | None
    # the last unlabelled bar after a set-up banner: maybe a data-processing one, so not the step; the training
    # loop's when the traceback shows training (the caller decides)
    bar_after_setup: Value | None = None


class Step(NamedTuple):
    """A step counter read from one line."""

    idx: int
    n: int
    total: int | None
    bar: bool


class Banner(NamedTuple):
    """A line that announces a phase: its index and the phase (eval, save, init, train for a start, or ended: a loop's
    closing summary)."""

    idx: int
    kind: str


class Witness(NamedTuple):
    """A fact read from one line (a phase, an operation, a rank) and the line that shows it."""

    value: Any
    line: Line


class Markers:
    """Step lines and banners of one source, read once, so each event finds its context by position
    (bisect) instead of rescanning the log: the cost per event does not grow with the log."""

    def __init__(self, lines: Sequence[Line], whole: str | None = None):
        """`whole`: the lines' texts joined by newlines, when the caller has it."""
        self.lines = lines
        gates = Gates("\n".join([ln.text for ln in lines]) if whole is None else whole)
        self.steps: list[Step] = []
        self.banners: list[Banner] = []  # one per line, by precedence
        self.eval_banners: list[int] = []  # every line EVAL_BANNER matches (a Lightning epoch bar too)
        epoch_bars = False
        open_bars: list[tuple[int, int | None, int, int]] = []  # Lightning's "Epoch E: ... k/?": (i, rank, E, k)
        for i, ln in enumerate(lines):
            text = ln.text
            s = step_of(ln, gates)
            if s is not None:
                self.steps.append(Step(i, s.n, s.total, s.bar))
                epoch_bars = epoch_bars or (s.bar and text.startswith("Epoch "))
            if gates.lightning and "/?" in text and text.startswith("Epoch ") and (m := LIGHTNING_OPEN.match(text)):
                open_bars.append((i, ln.rank, int(m["epoch"]), int(m["n"])))
            evb = gates.eval and is_eval_banner(text)
            if evb:
                self.eval_banners.append(i)
            kind = _banner_kind(text, s is not None, evb, gates)
            if kind is None and text.startswith("Training") and framed_heading(lines, i):
                kind = "train"
            if kind is None and gates.engine_run and "Engine run " in text and (run := ignite_run(ln.raw or text)):
                kind = run[0]  # an ignite engine named for its loop opened a run: training's start or an evaluation
            if kind:
                self.banners.append(Banner(i, kind))
        if epoch_bars:
            self.steps = lightning_without_validation(lines, self.steps)
        if later := lightning_open_steps(open_bars):
            self.steps = sorted(self.steps + later, key=lambda st: st.idx)
        self._by_rank: dict[int | None, tuple[list[int], list[Banner], list[int], list[Step]]] = {}

    def for_rank(self, rank: int | None) -> tuple[list[int], list[Banner], list[int], list[Step]]:
        """(banner indexes, banners, step indexes, steps) visible from `rank` (unranked lines count for all)."""
        if rank not in self._by_rank:
            banners = [b for b in self.banners if _same_rank(self.lines[b.idx], rank)]
            steps = [s for s in self.steps if _same_rank(self.lines[s.idx], rank)]
            self._by_rank[rank] = ([b.idx for b in banners], banners, [s.idx for s in steps], steps)
        return self._by_rank[rank]


def lightning_training_batches(lines: Sequence[Line], steps: Sequence[Step]) -> dict[int, int]:
    """Lightning before 2.0 counted the validation batches in the epoch's bar: its total is training plus validation
    batches, and the bar goes on counting while "Validation DataLoader 0: 20%| 1/5" runs ("Epoch 1: 73%| 11/15" drawn
    right after it: 10 training batches and 5 validation ones). The training batches per epoch for each such bar
    total, read from an epoch bar drawn right after a running validation bar (k of V, 0 < k < V) whose count minus k
    plus V is the bar's total; in 2.x the epoch bar stands at its total then, so that never holds."""
    found: dict[int, int] = {}
    for st in steps:
        text = lines[st.idx].text
        if not st.bar or st.idx == 0 or not text.startswith("Epoch "):
            continue
        prev = lines[st.idx - 1]
        if not _same_rank(prev, lines[st.idx].rank) or "%" not in prev.text or not EVAL_BAR.search(prev.text):
            continue
        m, val = LIGHTNING.search(text), list(TQDM.finditer(prev.text))
        if m is None or not val:
            continue
        k, v_total, n, total = int(val[-1]["n"]), int(val[-1]["total"]), int(m["n"]), int(m["total"])
        if 0 < k < v_total and n - k + v_total == total:
            found[total] = n - k
    return found


def lightning_open_steps(open_bars: Sequence[tuple[int, int | None, int, int]]) -> list[Step]:
    """The training steps of Lightning's bars over an IterableDataset after epoch 0 ("Epoch 1: |  | 5/? [...]", given
    as (line index, rank, epoch, count) in log order): the batches of the epochs before (each one's largest count
    drawn) plus the count; none for a bar whose earlier epochs the log does not all show."""
    longest: dict[tuple[int | None, int], int] = {}
    out: list[Step] = []
    for i, rank, epoch, n in open_bars:
        longest[(rank, epoch)] = max(longest.get((rank, epoch), 0), n)
        if epoch and all((rank, e) in longest for e in range(epoch)):
            out.append(Step(i, sum(longest[(rank, e)] for e in range(epoch)) + n, None, True))
    return out


def lightning_without_validation(lines: Sequence[Line], steps: list[Step]) -> list[Step]:
    """The steps with Lightning 1.x's epoch bars read as training steps (epoch x training batches + count) and their
    drawings past the training batches (the validation pass) dropped; unchanged without such bars."""
    train = lightning_training_batches(lines, steps)
    if not train:
        return steps
    out: list[Step] = []
    for st in steps:
        m = LIGHTNING.search(lines[st.idx].text) if st.bar and st.total in train else None
        if m is None:
            out.append(st)
        elif int(m["n"]) <= train[int(m["total"])]:
            out.append(st._replace(n=int(m["epoch"]) * train[int(m["total"])] + int(m["n"])))
    return out


# A script's own heading between two rules: "-----\nTraining 1 Recover and 3 Generator\n-----" (no colon, no figures:
# not a config line such as "Training set size: 5000").
HEADING_RULE = lazy(r"^\s{0,4}([-=*#~_])\1{4,}\s*$")
TRAINING_HEADING = lazy(r"^Training\b[^:=|%\n]{0,80}$")


def framed_heading(lines: Sequence[Line], i: int) -> bool:
    """lines[i] is a training heading with a rule line right above and right below it."""
    return 0 < i < len(lines) - 1 and bool(TRAINING_HEADING.match(lines[i].text)) \
        and all(HEADING_RULE.match(lines[k].text) for k in (i - 1, i + 1))


def _banner_kind(text: str, has_step: bool, eval_banner: bool | None = None, gates: Gates = EVERY_TEST) -> str | None:
    """The phase a line announces; each banner is searched only on a line holding a literal its forms all need
    (`eval_banner`: whether EVAL_BANNER matches the line, when the caller knows)."""
    if eval_banner is None:
        eval_banner = gates.eval and is_eval_banner(text)
    if eval_banner and not (text.startswith("Epoch ") and LIGHTNING.search(text)):
        return "eval"
    if gates.save and ("aving" in text or "Summoning" in text) and SAVE_BANNER.search(text):
        return "save"
    if not has_step and gates.init and may_be_init_banner(text) and INIT_BANNER.search(text):
        return "init"
    if gates.train and may_be_train_banner(text) and TRAIN_BANNER.search(text):
        return "train"
    if gates.serving and may_be_serving_banner(text) and (SERVING_BANNER.search(text) or GENERATION_START.match(text)):
        return "generate"
    if gates.ended and ("Epoch(" in text or "Iter(" in text) and LOOP_ENDED.search(text):
        return "ended"
    return None


def step_and_banner(markers: Markers, idx: int, rank: int | None, source: str) -> Progress:
    """The training step at the failure on lines[idx] and the phase an eval/save banner implies.

    A training bar glued before the message on the failing line itself counts as printed before it.
    Progress bars printed after an evaluation banner belong to the evaluation loop, unless their total
    is the training bar's total (training resumed); the step is then the last training bar's count.
    A banner goes stale at the next marker: a training start or a training step line after it.
    """
    lines = markers.lines
    b_idx, banners, s_idx, steps = markers.for_rank(rank)
    g = bisect_left(s_idx, idx)
    if g < len(steps) and steps[g].idx == idx and steps[g].bar:
        idx += 1  # a bar glued before the message on its own line ("0/1000 [00:00<?, ?it/s]terminate called ...")
    k = bisect_left(b_idx, idx) - 1
    if k + 1 < len(banners) and b_idx[k + 1] == idx and _banner_glued_before_message(lines[idx].text):
        k += 1  # an evaluation bar with the message glued after it ("Predicting DataLoader 0: 0%| ...| WARNING: ...")
    nearest = banners[k] if k >= 0 else None
    if nearest is not None and nearest.kind == "ended":
        nearest = None  # a loop's closing summary names no phase, and the banners before it are stale
    banner = nearest if nearest and nearest.kind != "train" else None
    started = nearest.idx if nearest and nearest.kind == "train" else None
    own_last = banner is not None and bool(KERAS3_AT_TOTAL.search(lines[banner.idx].text))
    # own_last: the banner is the training bar's own last drawing: its batches are done
    j = bisect_left(s_idx, banner.idx + own_last if banner else idx) - 1
    j = _past_close_redraw(steps, j if own_last else _before_eval_bars(steps, j, b_idx, banners))
    step = Value(value=steps[j].n, evidence=_ev(source, lines[steps[j].idx])) if j >= 0 else None
    train_total = steps[j].total if j >= 0 else None
    if banner:
        lo, hi = bisect_right(s_idx, banner.idx), bisect_left(s_idx, idx)
        for s in reversed(steps[lo:hi]):  # the latest training step after the banner: training went on
            if not s.bar or (train_total is not None and s.total == train_total) or (
                    banner.kind == "init" and _labelled_bar(lines[s.idx].text)) or (
                    banner.kind == "generate" and _training_bar(lines[s.idx].text)) or (
                    s.total is None and LIGHTNING_OPEN.match(lines[s.idx].text)):  # Lightning's epoch bar, no total
                return Progress(Value(value=s.n, evidence=_ev(source, lines[s.idx])), None, None, None)
        bar = steps[hi - 1] if banner.kind == "init" and hi > lo else None  # every step there is an unlabelled bar
        if banner.kind == "generate":
            step = None  # a server's bars before it was ready loaded its model: no training step
        return Progress(step, banner.kind, _ev(source, lines[banner.idx]), None,
                        Value(value=bar.n, evidence=_ev(source, lines[bar.idx])) if bar else None)
    if started is not None:
        after = bisect_left(s_idx, idx) - bisect_right(s_idx, started) > 0
        if after:
            return Progress(step, None, None, None)
        # failed before any logged step: the first step, counted from where the banner says training starts
        # ("Starting training from iteration 1200", BasicSR's "Start training from epoch: 0, iter: 0")
        own = j >= 0 and steps[j].idx == started
        return Progress(step if own else None, None, None, _ev(source, lines[started]))
    return Progress(step, None, None, None)


def bar_step_at(markers: Markers, i: int, rank: int | None) -> tuple[list[Step], int] | None:
    """(the steps `rank` sees, the position among them of the bar drawn on lines[i]), or None when lines[i] draws no bar."""
    _, _, s_idx, steps = markers.for_rank(rank)
    k = bisect_left(s_idx, i)
    return (steps, k) if k < len(steps) and s_idx[k] == i and steps[k].bar else None


def finished_bar_before(markers: Markers, i: int, rank: int | None, source: str, nested: bool = False) -> Value | None:
    """In evaluation: the count of the bar that ran to its total just before the still running bar on lines[i]
    started (one of another total): the training loop's bar finished the epoch and the running one counts
    evaluation batches (fastai draws both under the same "Epoch k/n :" label). With `nested` (the traceback shows
    the training loop calling the evaluation), that bar may still be running: HF Trainer draws its evaluation bar
    below the training one ("4/12", then "0/8"). None when there is no such bar."""
    if (at := bar_step_at(markers, i, rank)) is None:
        return None
    steps, k = at
    running = steps[k]
    if running.total is None or running.n >= running.total:
        return None
    for s in reversed(steps[max(0, k - CLOSE_REDRAW_BACK_STEPS) : k]):
        if not s.bar:
            return None
        if s.total != running.total:
            return Value(value=s.n, evidence=_ev(source, markers.lines[s.idx])) if s.n == s.total or nested else None
    return None


def counter_before_inner_bars(markers: Markers, i: int, rank: int | None, source: str) -> Value | None:
    """Out of training (evaluation, a save): the printed counter before the bars that the bar on lines[i] closes, when
    those bars all started after it (the first drawn at 0): the training loop prints its progress as lines (Flair's
    "epoch 1 - iter 13/13 - loss ..."), and the unlabelled bars after it count an evaluation's batches. None when the
    bar on lines[i] is not preceded that way (a training bar drawn between counter lines resumes mid-count)."""
    if (at := bar_step_at(markers, i, rank)) is None:
        return None
    steps, k = at
    first = steps[k]
    for j in range(k - 1, max(-1, k - CLOSE_REDRAW_BACK_STEPS), -1):
        s = steps[j]
        if not s.bar:  # a counter printed in a series (the one before it printed too), not a one-off start line
            series = j > 0 and not steps[j - 1].bar
            return Value(value=s.n, evidence=_ev(source, markers.lines[s.idx])) if first.n == 0 and series else None
        first = s
    return None


# How far back a finished inner bar's first drawing at its total is looked for (its bar lines, a few hundred at most).
CLOSE_REDRAW_BACK_STEPS = 400
# A line naming an epoch by its number ("epoch 0: {'accuracy': 0.81}", "Epoch 2 done"), glued after a bar or on its own
EPOCH_MARK = lazy(r"\b[Ee]poch\s{0,2}\d{1,6}\b")
EPOCH_OPENING_BACK_LINES = 2000  # how far back from an evaluation's bar the epoch's opening line is looked for


def epoch_bar_before(markers: Markers, i: int, rank: int | None, source: str) -> Value | None:
    """Out of training: the last count of the bar that the latest line naming an epoch opened ("Starting epoch 3",
    SpeechBrain's "Going into epoch 3"), when the bar on lines[i] is a later one of another total: unlabelled bars
    that tell training from evaluation only by their order (pytorch-accelerated, SpeechBrain). None when lines[i] draws
    no bar, names an epoch itself, or no such epoch's bar precedes it."""
    if (at := bar_step_at(markers, i, rank)) is None:
        return None
    steps, k = at
    lines = markers.lines
    opening = next((e for e in range(i, max(-1, i - EPOCH_OPENING_BACK_LINES), -1)
                    if _same_rank(lines[e], rank) and "poch" in lines[e].text and EPOCH_MARK.search(lines[e].text)),
                   None)
    if opening is None or opening == i:
        return None
    first = bisect_right([s.idx for s in steps[max(0, k - CLOSE_REDRAW_BACK_STEPS) : k]], opening) \
        + max(0, k - CLOSE_REDRAW_BACK_STEPS)
    if first >= k or not all(s.bar for s in steps[first : k + 1]):
        return None
    last = first
    while last + 1 < k and steps[last + 1].total == steps[first].total:
        last += 1
    epoch_bar = steps[last]
    if epoch_bar.total is None or epoch_bar.total == steps[k].total:
        return None
    return Value(value=epoch_bar.n, evidence=_ev(source, lines[epoch_bar.idx]))


def bar_spans_epochs(markers: Markers, i: int, rank: int | None) -> bool:
    """The bar drawn on lines[i] counted on past a line that names an epoch (an evaluation's result printed between
    two of its drawings, as a no-trainer loop's accelerator.print does): it counts a training loop's steps, not an
    inference loop's inputs. A bar that only stood beside such a line, its count unchanged since, does not."""
    if (at := bar_step_at(markers, i, rank)) is None:
        return False
    steps, k = at
    start = k
    for j in range(k - 1, max(-1, k - CLOSE_REDRAW_BACK_STEPS), -1):
        s = steps[j]
        if not s.bar or s.total != steps[k].total or s.n > steps[start].n:
            break
        start = j
    for j in range(start, k):  # an epoch's line at or after drawing j, before the next: counted on past it
        if steps[k].n > steps[j].n and any(_same_rank(ln, rank) and "poch" in ln.text and EPOCH_MARK.search(ln.text)
                                           for ln in markers.lines[steps[j].idx : steps[j + 1].idx]):
            return True
    return False


def _before_eval_bars(steps: Sequence[Step], j: int, b_idx: Sequence[int], banners: Sequence[Banner]) -> int:
    """The last step marker at or before steps[j] that is not a bar whose own line names an evaluation: such a bar
    counts that loop's batches, not training's (Catalyst's "1/3 * Epoch (valid): 100%|...| 4/4" after its "(train)"
    bar, Lightning's "Sanity Checking DataLoader 0: 1/2" before any). -1 when there is none."""
    while j >= 0 and steps[j].bar:
        k = bisect_left(b_idx, steps[j].idx)
        if k == len(b_idx) or b_idx[k] != steps[j].idx or banners[k].kind != "eval":
            break
        j -= 1
    return j


def _past_close_redraw(steps: Sequence[Step], j: int) -> int:
    """The step marker to read instead of steps[j] when steps[j] only closes an inner loop that already finished: a
    bar at its total drawn again after the outer bar came back (HF Trainer's evaluation bar, closed after training
    resumed: "10/12", "8/8", "10/12", "8/8" -- the step is 10, not 8). Else j."""
    last = steps[j] if j >= 0 else None
    if last is None or not last.bar or last.total is None or last.n != last.total:
        return j
    between: int | None = None  # the latest marker of another total since the inner bar was last drawn
    for k in range(j - 1, max(-1, j - CLOSE_REDRAW_BACK_STEPS), -1):
        s = steps[k]
        if s.bar and s.total == last.total:
            return between if between is not None and s.n == last.n else j
        if between is None and s.bar and s.total is not None:
            between = k
    return j


MESSAGE_WORDS = lazy(r"out of memory|OutOfMemoryError|Tried to allocate|RESOURCE_EXHAUSTED")


def _banner_glued_before_message(text: str) -> bool:
    """An evaluation or save banner ends on the failing line before the message begins on it."""
    words = MESSAGE_WORDS.search(text)
    banner = EVAL_BANNER.search(text) or SAVE_BANNER.search(text)
    return words is not None and banner is not None and banner.end() <= words.start()


def _bar_label(text: str) -> str | None:
    """What a line prints before its progress bar ("Training:   0%|" -> "Training:   "), or None when it draws none."""
    m = TQDM.search(text)
    return text[: m.start()] if m is not None else None


def _labelled_bar(text: str) -> bool:
    """A bar with its loop's name before it ("Training:   0%|"); a bare "100%|###| 1/1" after a set-up banner is
    that set-up's own progress."""
    return bool((_bar_label(text) or "").strip())


_TRAINING_LABEL = lazy(r"(?i)\b(?:train\w{0,8}|steps?|epochs?|iter\w{0,8})\b")


def _training_bar(text: str) -> bool:
    """A bar whose label names a training loop ("steps:  3%|", "Epoch 2:  40%|"); a server's sampling bars and its
    "Total progress" are not."""
    return bool(_TRAINING_LABEL.search(_bar_label(text) or ""))


# A line a poster put in place of what they cut ("...", "[...]", "…"): what came before it is not what the run
# printed just before the failure.
ELISION = lazy(r"^\s{0,8}(?:\.{3,}|…|\[(?:\.{3}|…)\]|\((?:\.{3}|…)\))\s*$")


def elided_between(lines: Sequence[Line], first_number: int, idx: int) -> bool:
    """True when a poster's elision line sits after line `first_number` and before the failure at `lines[idx]`
    (frames cut out of the traceback itself do not count: they hide frames, not progress)."""
    k, elided = idx - 1, False
    while k >= 0 and lines[k].number > first_number:
        text = lines[k].text
        if text.lstrip().startswith("Traceback (most recent call last)"):
            elided = False  # what was cut lay inside the traceback
        elif ELISION.match(text):
            elided = True
        k -= 1
    return elided


BAR_REDRAW_LINES = 2  # a progress bar closed by the exception redraws its last state right after the message
# PyTorch's advice at the end of its message, when a terminal cut it into rows of their own ("try setting
# max_split_size_mb to avoid fragmentation.  See documentation for Mem" / "ory Management and PYTORCH_CUDA_ALLOC_CONF")
HINT_ROW_LITERALS = ("max_split_size_mb", "ALLOC_CONF", "Memory Management", "expandable_segments", "fragmentation",
                     "reserved memory is >>", "environment-variables)")
HINT_ROWS_MAX = 4


def past_hint(lines: Sequence[Line], end: int) -> int:
    """The index of the message's last row: `end`, or past the rows of its own advice that follow it."""
    k = end
    while k + 1 < len(lines) and k - end < HINT_ROWS_MAX and any(h in lines[k + 1].text for h in HINT_ROW_LITERALS) \
            and "out of memory" not in lines[k + 1].text:
        k += 1
    return k


def bar_right_after(markers: Markers, end: int, rank: int | None, source: str) -> Value | None:
    """The count of a training bar redrawn on the lines right after a message (tqdm closing on the exception)."""
    end = past_hint(markers.lines, end)
    _, _, s_idx, steps = markers.for_rank(rank)
    k = bisect_right(s_idx, end)
    if k < len(steps) and steps[k].idx <= end + BAR_REDRAW_LINES and steps[k].bar:
        return Value(value=steps[k].n, evidence=_ev(source, markers.lines[steps[k].idx]))
    return None


# detectron2's trainer, failing, still runs its hooks' after_train and the writers (its `finally:`): "Total training
# time: 0:00:01 (...)" and then the last metrics line, "iter: 1  total_loss: ...": the iteration that failed.
D2_TRAIN_ENDED = lazy(r"\bTotal training time: \d{1,6}:\d\d:\d\d\b")
D2_ENDED_AFTER_LINES = 3


def step_closed_after(markers: Markers, end: int, rank: int | None, source: str) -> Value | None:
    """The step a training loop's closing report names right after the message (see D2_TRAIN_ENDED)."""
    lines = markers.lines
    end = past_hint(lines, end)
    for i in range(end + 1, min(len(lines), end + 1 + D2_ENDED_AFTER_LINES)):
        if _same_rank(lines[i], rank) and "Total training time" in lines[i].text and D2_TRAIN_ENDED.search(lines[i].text):
            _, _, s_idx, steps = markers.for_rank(rank)
            k = bisect_right(s_idx, i)
            if k < len(steps) and steps[k].idx <= i + D2_ENDED_AFTER_LINES:
                return Value(value=steps[k].n, evidence=_ev(source, lines[steps[k].idx]))
            return None
    return None


EVAL_BAR_AFTER_LINES = 4


def eval_bar_right_after(lines: Sequence[Line], end: int, rank: int | None) -> Line | None:
    """A bar naming an evaluation loop drawn on the lines right after the message (Lightning's "Predicting: 0%|"
    redrawn as the process dies): the failure came in that loop."""
    end = past_hint(lines, end)
    for ln in lines[end + 1 : end + 1 + EVAL_BAR_AFTER_LINES]:
        if _same_rank(ln, rank) and "%" in ln.text and EVAL_BAR.search(ln.text):
            return ln
    return None


PROGRESS_AFTER_MIN = 3  # advancing step lines after a raised OOM before another run is suspected


def progress_after(markers: Markers, end: int, rank: int | None, step: int | None) -> Line | None:
    """The line where a training counter, still advancing after a raised OOM, shows another run in the same
    output (a restarted counter is a retry, not a second run); None when there is none."""
    _, _, s_idx, steps = markers.for_rank(rank)
    last = step
    later = steps[bisect_right(s_idx, end):][:PROGRESS_AFTER_MIN]
    if len(later) < PROGRESS_AFTER_MIN:
        return None
    for s in later:
        if last is not None and s.n <= last:
            return None
        last = s.n
    return markers.lines[later[-1].idx]


def _calls_under(lines: Sequence[Line], i: int, rank: int | None) -> list[tuple[str, Line]]:
    """Phase-bearing calls in the code lines printed under the frame header lines[i] (e.g. `model.fit(`,
    `trainer.evaluate(`), as pseudo-frames: the statement names what was running one level deeper."""
    out: list[tuple[str, Line]] = []
    if in_model_forward(lines[i].text):
        return out  # a model's forward calling its own predict(): no phase
    callee = _callee_in_model_forward(lines, i)
    block = lines[i + 1 : i + 1 + CODE_LINES_PER_FRAME]
    # IPython numbers the lines around the statement that ran and points at it ("----> 6 result = runner.dock("): the
    # lines around it (a constructor two lines up) are context, not what was running
    for ln in _statement_run(block):
        if not _same_rank(ln, rank):
            continue
        text = ln.text
        if _ends_code(text):
            break
        ipy = IPY_CODE.match(text)
        code = ipy["code"] if ipy else text
        if ".run(" in code and (m := TF1_TRAIN_RUN.search(code) or TF1_INIT_RUN.search(code)):
            out.append((m["op"], ln))  # TensorFlow 1 running its training op (the step itself) or its initialiser
        for m in CODE_CALL.finditer(code):
            phases = _phase_of_name(m["name"])
            if phases and phases[0] in (*STRONG_PHASES, "train") and m["name"] != callee:
                out.append((m["name"], ln))
        if "=" in code and ")(" not in code and (m := CONSTRUCTED.match(code)) and m["cls"] != callee:
            out.append(("__init__", ln))  # an object built by the statement: its constructor ran (set-up)
        if not ipy:
            break  # CPython prints one statement per frame
    return out


def _ends_code(text: str) -> bool:
    """Whether a line under a frame header ends its code lines: a blank, the next frame, a traceback's or an error's."""
    return not text.strip() or bool(FRAME.match(text)) or "Traceback" in text or "Error" in text[:60]


def _statement_run(block: Sequence[Line]) -> Sequence[Line]:
    """Of an IPython frame's numbered code lines, the statement its arrow points at (the lines around it are context:
    a constructor two lines up ran and returned); the arrow may sit on the statement's first line or, in older IPython,
    on its last ("----> 5     epochs=num_epochs)"). Other code blocks (CPython's one statement) are kept whole."""
    statements: list[list[Line]] = []
    depth = 0
    for ln in block:
        if _ends_code(ln.text):
            break
        ipy = IPY_CODE.match(ln.text)
        if ipy is None:
            return block
        if depth <= 0 or not statements:
            statements.append([])
            depth = 0
        statements[-1].append(ln)
        code = ipy["code"]
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if IPY_ARROW.match(ln.text) and depth <= 0:
            return statements[-1]
    pointed = next((st for st in statements if any(IPY_ARROW.match(ln.text) for ln in st)), None)
    return pointed if pointed is not None else block


CODE_LINES_PER_FRAME = 8
IPY_ARROW = lazy(r"^\s*-{1,8}>\s{0,4}\d{1,6}\s")  # IPython's pointer at the line that ran: "----> 6 ", "--> 1471 "
# A statement assigning a newly built object: "asr = FlaxWhisperPipeline(...)", "model = models.ResNet50(...)"; not
# a tensor wrapped in a training step ("inputs = Variable(x.cuda())", "t = torch.FloatTensor(...)"), a loss module
# ("loss = nn.CrossEntropyLoss()(out, y)"), nor an object built and called at once (the caller skips ")("), nor a
# submodule the model holds called by its capitalised attribute name ("feats = self.ConvBLSTM(lstm_feats)").
CONSTRUCTED = lazy(r"^\s{0,40}[\w.]{1,60}(?:\s{0,4},\s{0,4}[\w.]{1,60}){0,4}\s{0,4}=\s{0,4}(?!self\.)(?:[a-z_]\w{0,40}\.){0,3}"
                   r"(?P<cls>(?!(?:Variable|Parameter|\w{0,20}Tensor|\w{0,40}Loss)\()[A-Z][a-z0-9]\w{0,60})\(")
# A TensorFlow 1 session running the training op (`train_step.run(feed_dict=...)`, `sess.run([train_op, loss], ...)`):
# the op's name is the only sign of the phase the traceback gives (its frames are the script's main and ops.py's run).
TF1_TRAIN_RUN = lazy(r"\b(?P<op>train_(?:op|step))\.run\(|\.run\(\s{0,4}\[?\s{0,4}(?:self\.)?(?P<op>train_(?:op|step))\b")
# ... or the variables' initialiser: sess.run(tf.global_variables_initializer()) allocates every variable, before any step
TF1_INIT_RUN = lazy(r"\.run\(\s{0,4}(?:tf\.)?(?:compat\.v1\.)?(?P<op>global_variables_initializer|initialize_all_variables"
                    r"|local_variables_initializer|variables_initializer)\(")


def _callee_in_model_forward(lines: Sequence[Line], i: int) -> str | None:
    """The function of the frame after the header lines[i] when that frame is a model's forward pass (skorch's
    `y_pred = self.infer(Xi)` calls it): its name, called on the code line, names no phase either."""
    for ln in lines[i + 1 : i + 2 + 2 * CODE_LINES_PER_FRAME]:
        if may_be_frame(ln.text) and (m := FRAME.match(ln.text)):
            return frame_func(m) if in_model_forward(ln.text) else None
    return None


def frames_before(lines: Sequence[Line], idx: int, rank: int | None, limit: int = 600) -> list[tuple[str, Line]]:
    """Function names of the traceback frames leading to lines[idx] (same rank), innermost last; the calls in
    each frame's code line follow it as pseudo-frames."""
    out: list[tuple[str, Line]] = []
    for i in range(idx - 1, max(-1, idx - limit), -1):
        ln = lines[i]
        if not _same_rank(ln, rank):
            continue
        m = FRAME.match(ln.text)
        if m:
            out.extend(reversed(_calls_under(lines, i, rank)))
            out.append((frame_func(m), ln))
        elif ln.text.startswith("Traceback (most recent call last)"):
            break
    return out[::-1]


_PHASE_SUBSTRINGS = (("save", ("save_checkpoint", "save_model")), ("eval", ("evaluat", "validat", "inference")),
                     ("generate", ("generate",)), ("train", ("train_", "training", "_train")))
# The label of a bar that walks something other than training steps: data, an evaluation, a conversion.
_NON_TRAIN_LABEL = (
    r"(?:[Ll]oading|Map|Downloading|Fetching|Tokeniz|Filter|Generating|Extracting|Processing|Resolving|Saving|Converting"
    r"|Quantiz|Calibrat"  # post-training quantization walks the layers: not a training step
    r"|Capturing|Computing|Packing|Running tokenizer|Evaluating|Validat|Predict|Test"
    r"|Batches(?=:)"  # sentence-transformers' encode(): embedding a corpus, not training
    r"|\bmAP50-95\)"  # Ultralytics' validation bar, headed "Class Images Instances Box(P R mAP50 mAP50-95): 50%"
    r"|\b\w{1,20}[ _-](?:data ?sets?|files|shards):?"  # building data: "Training datasets: 100%|"
    # any other stage a bar names by what it is doing ("Extrapolating border: 14%|", "Adding EOS to train dataset",
    # Lightning's "Sanity Checking"): only a training verb names training steps
    r"|(?<![\w-])(?!(?:Train|Fine-?tun|Pre-?train)ing\b)[A-Z][a-z]{2,20}ing\b)"
)
# The same label before an open bar's count (tqdm over an iterable without a length): "Tokenizing: 512it [00:01, ...]"
NON_TRAIN_OPEN = lazy(_NON_TRAIN_LABEL + r"[^|%\n]{0,80}$")
NON_TRAIN_BAR = lazy(
    _NON_TRAIN_LABEL + r"[^|%]{0,80}\d{1,3}%[|\s]"
    # Ultralytics checking its labels: "train: Scanning /data/labels/train... 40 images, 0 corrupt: 100% ━━━ 40/40"
    r"|\bScanning [^|%\n]{0,400}\d{1,3}%[|\s]"
    # skorch's ProgressBar counts an epoch's training batches, then its validation ones, on one bar; its postfix names
    # the loop of the batch just drawn ("17/20 [00:02<00:00, 7.91it/s, valid_loss=2.66]"): not a training step
    r"|\d(?:it/s|s/it), valid_loss=[\w+.-]{1,24}\]"
    # datasets' map/filter under any description ("Grouping texts in chunks of 1024: 100%|...| 80/80 [00:00<00:00,
    # 41287.60 examples/s]"; "ba/s" before datasets 2.x) counts the examples it prepares
    r"|(?:\d|\?) ?(?:examples|ba)/s\]"
    # a bar over epochs ("Training epochs on cpu:  25%|██▌  | 1/4 [00:01<00:03,  1.28s/epoch, loss=1.12]", tqdm's unit
    # "epoch"), around the batches' bar that counts the steps
    r"|(?:\d|\?) ?(?:epochs?/s|s/epochs?)[,\]]"
)
# The rest of a bar's bracket after its first digit, at ten thousand iterations a second or more: no training loop
# steps that fast (a toy model on a CPU draws a few thousand); moving parameters or reading records does ("949/949
# [00:00<00:00, 834989.41it/s]", "... to cuda:0: 100%|...| 1303/1303 [00:00<00:00, 27033.79it/s]").
DATA_RATE = lazy(r"[^\]\n]{0,40}?,\s{0,4}\d{5,12}(?:\.\d{1,3})?it/s")
# A literal every form of NON_TRAIN_BAR holds (a bar line holding none is not searched: ~0.5 us against ~10); "ing"
# stands for every gerund label ("Loading", "Saving", "Scanning ", ...).
NON_TRAIN_NEEDS = Literals((
    "ing", "Map", "Tokeniz", "Filter", "Quantiz", "Calibrat", "Validat", "Predict", "Test", "Batches", "mAP50-95)",
    "data", "files", "shards", "valid_loss=", "examples/s]", "ba/s]", "epoch/s", "s/epoch", "epochs/s",
))
# The failing line itself says what it was doing: "Error saving model: CUDA out of memory", or FSDP's
# "Failed to clone() tensor ... state_dict() call ... Error: CUDA out of memory".
MESSAGE_SAVE = lazy(r"state_dict\(\) call|\b[Ss]aving (?:the )?(?:model|checkpoint)\b|\bsave_?(?:model|checkpoint)\b"
                    r"|\b[Ee]xport(?:ing)? (?:the )?(?:model|checkpoint)\b|\b[Ee]xport error\b")  # writing the model out
# A server saying it is ready for requests: what fails after it (and before any other marker) is serving a request.
# vLLM/TGI behind Uvicorn, SGLang, llama.cpp's server, mistral.rs, Ollama, a Gradio app (web UIs), ComfyUI.
SERVING_BANNER = lazy(r"Uvicorn running on https?://|Application startup complete\.|The server is fired up and ready to roll"
                      r"|server is listening on https?://|HTTP server listening|^Serving on https?://"
                      r"|^Listening on (?:\[[\da-f:]{2,40}\]|[\w.-]{1,64}):\d{2,5}\b|Running on local URL:\s{0,4}https?://"
                      r"|To see the GUI go to: https?://")
# An app starting a generation or a sampling run ("[INFO] Starting text-to-video generation...", "Start sampling"):
# what fails after it (and before a training marker) is generating, like a request after a server's ready banner.
GENERATION_START = lazy(r"^[\W_]{0,8}(?:Start(?:ing|ed)?|Begin(?:ning)?|Running) (?:the )?(?:[\w-]{1,30} ){0,3}?"
                        r"(?:generation|sampling)\b")
# llama.cpp's functions that load its model and create its context (their 2023 and 2025 names): a line they print
# before a failure is set-up (INIT_BANNER), and their "failed" after it says the set-up failed (events.LLAMA_INIT_FAILED).
LLAMA_SETUP_FUNCS = r"llama_new_context_with_model|llama_init_from_model|llm_load_tensors|load_tensors"
INIT_BANNER = lazy(r"Loading checkpoint shards|Loading model|Creating model|loading weights"
                   # a script's own loading line: "Load pretraining parameters from ...", "-- loading /models/..."
                   r"|^[-=>*#\s]{0,6}[Ll]oad(?:ing)? (?:the )?(?:pre-?train(?:ed|ing) )?(?:model|parameters|params|weights"
                   r"|checkpoint)s?\b|^[-=>*#\s]{0,6}[Ll]oading /"
                   # ... or its report that one part is in: "loaded 3D transformer's pretrained weights from ..."
                   r"|^[-=>*#\s]{0,6}[Ll]oaded (?:the )?(?:[\w'-]{1,30} ){0,3}(?:model|parameters|params|weights|checkpoint)s?"
                   r" from\b"
                   r"|\bInitializ(?:ing|e) (?:the )?(?:[\w-]{1,30} ){0,2}(?:model|decoder|encoder|backbone|network|LLM)\b"
                   # the data prepared before the first step: PyG's "Processing...", "Constructing datasets..."
                   r"|^Processing\.\.\.\s*$|^(?:Loading|Building|Constructing|Preparing|Processing|Creating) (?:the )?"
                   r"(?:[\w-]{1,30} ){0,2}(?:datasets?|data ?loaders?|graphs)\b"
                   # a TensorRT engine being built from the network (before anything runs): "start building engine"
                   r"|^(?:[Ss]tart(?:ing)? )?[Bb]uilding (?:the |an? )?(?:TensorRT |TRT )?engine\b"
                   # llama.cpp and its forks building the model and its context (KV cache, compute buffers), ggml's
                   # CUDA start-up ("ggml_init_cublas: found 2 CUDA devices:", later "ggml_cuda_init: ...") and the
                   # first line llama.cpp's main printed ("main: build = 1233 (98311c4)")
                   r"|^(?:" + LLAMA_SETUP_FUNCS + r"|llama_kv_cache_init|ggml_init_cublas|ggml_cuda_init):|^main: build = \d"
                   r"|\bload_model: loading model\b")  # llama-server: "srv    load_model: loading model '<path>'"


# pytest's long traceback separates its frames with "_ _ _ _ ..." lines and has no "Traceback" header.
PYTEST_SEPARATOR = lazy(r"^\s{0,8}(?:_ ){8,200}_?\s{0,8}$")


# The shell or the C++ runtime reporting that the process died ("Aborted (core dumped)", "line 34:  4482 Killed"):
# a traceback printed after it belongs to a later command, not to the failure above it.
PROCESS_DIED = lazy(r"\(core dumped\)|^\s{0,8}(?:Aborted|Segmentation fault|Killed)\s*$"
                    r"|\bline \d{1,9}:\s{1,8}\d{1,10} (?:Aborted|Killed|Segmentation fault)\b")


def frames_after(lines: Sequence[Line], idx: int, rank: int | None, limit: int = 300,
                 start: int | None = None) -> list[tuple[str, Line]]:
    """Frames of the traceback printed after a message (lines[start..idx]) that was logged before it was raised."""
    if any(PROCESS_DIED.search(ln.text) for ln in lines[idx if start is None else start : idx + 1]):
        return []  # the message's own lines say the process died
    for i in range(idx + 1, min(len(lines), idx + limit)):
        ln = lines[i]
        if PROCESS_DIED.search(ln.text):
            return []
        if _same_rank(ln, rank) and ("Traceback (most recent call last)" in ln.text or PYTEST_SEPARATOR.match(ln.text)
                                     or ln.text.strip() == "Traceback:"):  # Streamlit's exception panel
            out: list[tuple[str, Line]] = []
            for j in range(i + 1, min(len(lines), i + 600)):
                nxt = lines[j]
                if not _same_rank(nxt, rank):
                    continue
                m = FRAME.match(nxt.text)
                if m:  # each frame followed by the calls in its code line, as frames_before reads them
                    out.append((frame_func(m), nxt))
                    out.extend(_calls_under(lines, j, rank))
                elif regex.match(r"^\w[\w.]*(?:Error|Exception)\b", nxt.text):
                    return [] if another_exception(nxt.text) else out
            return out
    return []


def frames_of_next_rank(lines: Sequence[Line], end: int, rank: int) -> list[tuple[str, Line]]:
    """The frames of another rank's traceback that starts right after a rank's message (lines[..end]) with none of
    its own: the ranks run one program in step, and one rank's traceback tells where they all were. Only when one of
    its frames is a phase's by name (PHASE_FRAMES): a launcher's wrapper ("_training_function" around a predict run)
    says too little about another process."""
    nxt = next_row(lines, end)
    if nxt is None or nxt.rank is None or nxt.rank == rank or not nxt.text.startswith("Traceback (most recent call last)"):
        return []
    frames = frames_after(lines, end, nxt.rank)
    return frames if any(func in names for func, _ in frames for names in PHASE_FRAMES.values()) else []


# An operating system's error about a file, a connection or a pipe ("FileNotFoundError: [Errno 2] No such file or
# directory: ...") is no OOM re-raised: its traceback is a later failure's
OS_ERROR = lazy(r"^(?:\w{1,40}\.){0,4}(?:OSError|IOError|FileNotFoundError|FileExistsError|PermissionError"
                r"|IsADirectoryError|NotADirectoryError|BrokenPipeError|Connection\w{0,20}Error)\b|\[Errno \d{1,5}\]")


def another_exception(text: str) -> bool:
    """A traceback's closing exception line is another failure's, an operating system error that names no memory
    (GluonTS's train() logs the OOM, then fails to load the checkpoint it recovers from), not the OOM re-raised."""
    return "rror" in text and "emory" not in text and OS_ERROR.search(text) is not None \
        and MESSAGE_WORDS.search(text) is None


# An IDE's exception view pasted as text (VS Code / debugpy, English or Chinese locale): the banner, the message,
# then the frames innermost first with no "Traceback" header.
IDE_EXCEPTION_BANNER = lazy(r"^\s{0,4}(?:Exception has occurred|发生异常): \w")


def _rows_before(lines: Sequence[Line], idx: int) -> list[Line]:
    """The line right before lines[idx], and the row before that when a terminal may have cut the two from one line
    (wide enough, the physical line right before): the line before is one of them."""
    out = [lines[idx - 1]] if idx > 0 else []
    if idx > 1 and cut_row(lines, idx - 2):
        out.append(lines[idx - 2])
    return out


def frames_after_ide_banner(lines: Sequence[Line], idx: int, end: int, rank: int | None,
                            limit: int = 200) -> list[tuple[str, Line]]:
    """The frames an IDE's exception view lists after the message on lines[idx..end], when the line before the
    message is its banner; innermost last, like frames_before, each frame followed by the calls in its code line."""
    if not any(IDE_EXCEPTION_BANNER.match(ln.text) for ln in _rows_before(lines, idx)):
        return []
    stack: list[list[tuple[str, Line]]] = []
    for i in range(end + 1, min(len(lines), end + 1 + limit)):
        ln = lines[i]
        if not _same_rank(ln, rank):
            continue
        m = FRAME.match(ln.text)
        if m:
            stack.append([(frame_func(m), ln), *_calls_under(lines, i, rank)])
        elif not ln.text.startswith((" ", "\t")) or not stack:
            break  # the frames end at the first line that is neither a frame nor its indented code
    return [entry for frame in reversed(stack) for entry in frame]


# A loop named for both ("train_and_evaluate", "train_eval", "train_and_valid") is the training loop that
# evaluates now and then: a frame inside it is training unless an inner frame names evaluation. So is a
# cross-validation loop (scikit-learn's cross_validate, cross_val_score; "cross_validation", "run_cv"), which fits
# and scores a model per fold.
TRAIN_AND_EVAL = lazy(r"^_?(?:run_)?(?:train(?:ing)?_(?:and_)?(?:eval|evaluate|valid|validate|test)"
                      r"|cross_val(?:idat(?:e|ion))?(?:_score)?|k_?fold(?:_cv)?|run_cv)(?:_\w{1,20})?$")


# Set-up named after what it sets up: Flax's create_train_state, init_train_state, setup_training, build_trainer.
TRAIN_SETUP = lazy(r"^_?(?:init|initialize|create|setup|set_up|build|make|prepare)_\w{0,30}?(?:train|training|trainer)"
                   r"(?:_\w{1,30})?$")


# "eval" as a word of a snake_case name says evaluation on its own: pytorch-accelerated's _run_eval_epoch and
# calculate_eval_batch_loss. Not "save" (a script's quantize_and_save, or save_all pickling its data, runs more than
# the save), nor "fit" alone (scikit-learn's fit_transform in a set-up): fit over batches, epochs or a generator is
# training (Poutyne's fit_generator and _fit_batch, SpeechBrain's fit_batch, Keras 2's fit_generator).
FIT_LOOP = lazy(r"(?:^|_)fit_(?:generator|batch|batches|epoch|step|loop|dataset|data|loader|one)(?:_|$)")


def _phase_of_name(name: str) -> list[str]:
    if TRAIN_AND_EVAL.match(name):
        return ["train"]
    if TRAIN_SETUP.match(name):
        return ["init"]
    phases = [p for p in PHASE_ORDER if name in PHASE_FRAMES[p]]
    if phases:  # a listed name is what its list says, whatever words it holds
        return phases
    low = name.lower()
    phases += [p for p, subs in _PHASE_SUBSTRINGS if p not in phases and any(x in low for x in subs)]
    if "eval" in low and "eval" not in phases and "eval" in low.split("_"):
        phases.append("eval")
    if "fit_" in low and "train" not in phases and FIT_LOOP.search(low):
        phases.append("train")
    return phases


OPTIMIZER_PACKAGE = lazy(r"/(?:torch/optim|optimizers?|bitsandbytes/optim)/")  # any frame in these
OPTIMIZER_FILE = lazy(r"_optimizer\.py\b|/zero/stage")  # their step() or constructor
OPTIMIZER_FUNCS = frozenset({"initialize_optimizer_states", "optimizer_step", "_optimizer_step", "_do_optimizer_step",
                             "_init_group", "_single_tensor_adamw", "_multi_tensor_adamw", "_single_tensor_adam",
                             "_multi_tensor_adam", "_fused_adamw", "_fused_adam"})
OPTIMIZER_SETUP_FUNCS = frozenset({"initialize_optimizer_states"})  # creates the states inside the engine's constructor
# The model's forward: innermost of these, the failure is in the forward pass whatever encloses it.
FORWARD_FUNCS = frozenset({"forward", "_call_impl", "_wrapped_call_impl", "training_step", "validation_step",
                           "compute_loss", "_training_step", "closure", "_forward"})
BACKWARD_FUNCS = frozenset({"backward", "run_backward", "_engine_run_backward", "<backward op>"})
# The failing statement (a traceback's code line) allocates an attention key/value cache.
KV_STATEMENT = lazy(
    r"\b(?:kv_cache|kv_buffer|key_buffer|value_buffer|k_cache|v_cache|key_cache|value_cache|kv_pool|past_key_values)\b"
    r"|\bKVCache\b"
)


# The failing statement allocates DeepSpeed ZeRO's gradient bucket (stage_1_and_2.py's contiguous buckets for
# reduction: "buf_0 = torch.empty(int(self.reduce_bucket_size), ...)", its ipg_buffer): reduce_bucket_size elements.
ZERO_BUCKET_STATEMENT = lazy(r"\bself\.(?:reduce|allgather)_bucket_size\b|\bself\.ipg_buffer\b")


# The failing statement or innermost frame computes attention scores (batch × heads × seq² of them).
ATTENTION_STATEMENT = lazy(
    r"softmax(?:_backward_data)?\(|scaled_dot_product_attention|torch\.(?:bmm|matmul|baddbmm)\([^)]{0,80}(?:key|k)\b|@\s?(?:key|k)\.transpose"
    r"|\battn_weights\s?=|\battention_scores\s?=|\bscores\s?=\s?torch\.(?:matmul|bmm)"
)
ATTENTION_FUNCS = lazy(r"(?:^|_)(?:attn|attention)(?:_|$)|^_?(?:eager|sdpa|math)_attention|^_scaled_dot_product", regex.I)


# llama.cpp says what a failed buffer was for on the lines after its allocation error: "llama_init_from_model: failed
# to initialize the context: failed to allocate buffer for kv cache" (2025), "llama_kv_cache_init: failed to allocate
# buffer for kv cache" and "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache" (2023-24).
KV_NAMED_AFTER = lazy(r"failed to allocate buffer for kv cache|llama_kv_cache_init\(\) failed")
KV_NAMED_AFTER_LINES = 4


def kv_cache_named_after(lines: Sequence[Line], end: int, rank: int | None) -> Line | None:
    """The line just after a failure that names the buffer it was allocating the KV cache, when a C++ engine says so."""
    for ln in lines[end + 1 : end + 1 + KV_NAMED_AFTER_LINES]:
        if _same_rank(ln, rank) and "kv" in ln.text and KV_NAMED_AFTER.search(ln.text):
            return ln
    return None


TORCHSCRIPT_HERE = lazy(r"^\s*~{1,400}\s{0,4}<--- HERE\s*$")


def failing_statement(lines: Sequence[Line], idx: int, rank: int | None) -> Line | None:
    """The code line printed just above the error (the statement that raised), if the log shows one; in a
    TorchScript traceback, the line its `~~~~ <--- HERE` marker underlines."""
    for i in range(idx - 1, max(0, idx - CODE_LINES_PER_FRAME), -1):
        if TORCHSCRIPT_HERE.match(lines[i].text) and _same_rank(lines[i - 1], rank):
            return lines[i - 1]
    for i in range(idx - 1, max(-1, idx - 4), -1):
        ln = lines[i]
        text = ln.text.strip()
        if not _same_rank(ln, rank) or not text or set(text) <= set("^~ "):
            continue
        if FRAME.match(ln.text) or text.startswith(("Traceback", "During handling", "The above exception")):
            return None
        return ln if ("(" in text or "=" in text) and not text.endswith(":") else None
    return None


def operation_from_frames(frames: Sequence[tuple[str, Line]], statement: Line | None = None) -> Witness | None:
    """What was running: a KV-cache allocation, ZeRO's gradient bucket or attention scores (from the failing statement
    or the innermost frame), host memory being page-locked (the innermost frame), else the innermost recognised frame's
    optimizer (its step or its state set-up) or backward."""
    if statement is not None and KV_STATEMENT.search(statement.text):
        return Witness("kv_cache", statement)
    if statement is not None and ZERO_BUCKET_STATEMENT.search(statement.text):
        return Witness("zero_bucket", statement)
    if statement is not None and ATTENTION_STATEMENT.search(statement.text):
        return Witness("attention", statement)
    if frames and ATTENTION_FUNCS.search(frames[-1][0].rsplit(".", 1)[-1]):
        return Witness("attention", frames[-1][1])
    if frames and frames[-1][0].rsplit(".", 1)[-1] == "pin_memory":  # cudaHostAlloc: the host's page-locked memory
        return Witness("pin_memory", frames[-1][1])
    for func, ln in reversed(frames):
        name = func.rsplit(".", 1)[-1]
        if name in FORWARD_FUNCS:
            break  # a forward pass, even one run inside optimizer.step(closure) as Lightning does
        if name in OPTIMIZER_FUNCS or OPTIMIZER_PACKAGE.search(ln.text) \
                or (name in ("step", "__init__") and OPTIMIZER_FILE.search(ln.text)):
            return Witness("optimizer", ln)
        if name in BACKWARD_FUNCS:
            return Witness("backward", ln)
    return None


# TensorFlow names the failing op: one under gradients/ (TF1 graphs) or gradient_tape/ (TF2) is the backward pass, and
# a TF1 node whose attributes say is_training=true (FusedBatchNorm in training mode) runs a training step's forward.
TF_BACKWARD_OP = lazy(r"(?:\{\{node |requested by op |\[\[Node: )(?:(?:[\w.-]{1,80}/){0,3}(?:gradients|gradient_tape)/"
                      r"|[^\n]{0,2000}?\bis_training=true\b)")
TF_OP_LINES_AFTER = 4  # the node line follows the message within a few lines (a hint line may come between)


# ... and one that initialises a variable runs the graph's initialiser before any step (set-up): a node under an
# `Initializer/` scope (an optimizer's slot: "embeddings/Adam/Initializer/zeros"), or a variable's Assign from a random
# or constant initial value ("z_mean/kernel/Assign = Assign[...](z_mean/kernel, z_mean/random_uniform)").
TF_INIT_OP = lazy(r"(?:\{\{node |requested by op |\[\[Node: )[\w./-]{0,300}?/(?:Initializer/|Assign\b[^\n]{0,600}?/"
                  r"(?:random_uniform|random_normal|truncated_normal|zeros|ones|Const)\b)")


def tf_backward_op(lines: Sequence[Line], idx: int, end: int) -> Line | None:
    """The line naming a backward-pass op for the failure on lines[idx..end], if TensorFlow printed one."""
    return _tf_op(lines, idx, end, TF_BACKWARD_OP)


def tf_init_op(lines: Sequence[Line], idx: int, end: int) -> Line | None:
    """The line naming a variable-initialising op for the failure on lines[idx..end], if TensorFlow printed one."""
    return _tf_op(lines, idx, end, TF_INIT_OP)


def _tf_op(lines: Sequence[Line], idx: int, end: int, pattern: regex.Pattern[str]) -> Line | None:
    """The first line from the failure's to a few after its end that names an op `pattern` matches."""
    for ln in lines[idx : end + 1 + TF_OP_LINES_AFTER]:
        if pattern.search(ln.text):
            return ln
    return None


# A traceback cut to its last source line, or that line glued before the message: autograd's engine entry is the
# backward pass ("Variable._execution_engine.run_backward(  # Calls into the C++ engine ..."), so training.
AUTOGRAD_BACKWARD_LINE = lazy(r"_execution_engine\.run_backward\(|\btorch\.autograd\.backward\(")
BACKWARD_LINES_BEFORE = 3  # the source line sits right above the message (or on its line)


def autograd_backward_line(lines: Sequence[Line], idx: int) -> Line | None:
    """The source line of autograd's engine entry printed just before (or glued to) the failure on lines[idx]."""
    for ln in reversed(lines[max(0, idx - BACKWARD_LINES_BEFORE) : idx + 1]):
        if AUTOGRAD_BACKWARD_LINE.search(ln.text) and not FRAME.match(ln.text):
            return ln
    return None


# The message's own prefix names the training loop (Chainer's Trainer reports any exception of its run so; its
# evaluation extensions run inside it too, so this is a fallback, not a strong witness).
MESSAGE_TRAINING_LOOP = lazy(r"^\s{0,8}Exception in main training loop:")


# The text before the OOM phrase on its line says it came while evaluating: "Error while evaluating MSMARCO: CUDA out
# of memory", "Error during validation: ...".
_FAILED_WHILE = r"\b(?:[Ee]rror|[Ee]xception|[Ff]ailed|[Ff]ailure) (?:while |when |during |in )?(?:the )?"
MESSAGE_EVAL = lazy(_FAILED_WHILE + r"(?:[Ee]valuat|[Vv]alidat)\w{0,6}\b")


# ... or while the model was being loaded or built: Triton's "failed to load 'llm' version 1: Internal: unexpected error
# when creating modelInstanceState: ...", "Error while loading the model: ...", ONNX Runtime's "[E:onnxruntime:,
# inference_session.cc:1644 operator()] Exception during initialization: ...".
MESSAGE_INIT = lazy(r"\b(?:[Ee]rror|[Ff]ailed|[Ff]ailure) (?:while |when |during )?(?:creating|loading|initiali[sz]ing) "
                    r"(?:the )?(?:model|modelInstanceState|engine|pipeline|checkpoint)\b|\bcreating modelInstanceState\b"
                    r"|\bfailed to load '[^'\n]{1,120}' version \d"
                    # a loader's own report ("Failed to load safetensors using method MIO: CUDA error: ...")
                    r"|\b[Ff]ailed to load (?:the )?(?:safetensors|weights|model|checkpoint|state dict)\b"
                    r"|\] Exception during initialization: ")  # ONNX Runtime creating its session (inference_session.cc)


# ... or while generating: "Error during text-to-video generation: CUDA out of memory", "Failed while sampling: ...".
MESSAGE_GENERATE = lazy(_FAILED_WHILE + r"(?:[\w-]{1,30} ){0,3}?(?:generation|generating|sampling)\b"
                        r"|\b[Gg]eneration failed\b")


MESSAGE_HEAD_CHARS = 2000  # what the failing line says before the OOM phrase, read back this far


def _message_head(text: str) -> str:
    """The text before the OOM phrase on the failing line (its last MESSAGE_HEAD_CHARS)."""
    return text.split("out of memory", 1)[0][-MESSAGE_HEAD_CHARS:]


def eval_from_message(text: str) -> bool:
    """True when the text before the OOM phrase on its own line says the failure came while evaluating."""
    return bool(MESSAGE_EVAL.search(_message_head(text)))


def init_from_message(text: str) -> bool:
    """True when the text before the OOM phrase on its own line says the failure came while loading the model."""
    return bool(MESSAGE_INIT.search(_message_head(text)))


def generate_from_message(text: str) -> bool:
    """True when the text before the OOM phrase on its own line says the failure came while generating."""
    return bool(MESSAGE_GENERATE.search(_message_head(text)))


def phase_from_message(text: str) -> bool:
    """True when the text before the OOM phrase on its own line says the failure came while saving."""
    return bool(MESSAGE_SAVE.search(_message_head(text)))


STRONG_PHASES = ("save", "eval", "generate")  # a frame naming one of these decides; train/init frames are weaker


# A frame whose file sits in an evaluation package or is an evaluation script: its helpers (IoU matching, metric
# accumulation) have names of their own, but what runs them is evaluation.
# ComfyUI's sampling code (its samplers and the diffusion models they call) and diffusers' pipelines (a pipeline's
# __call__ denoises, then decodes): a frame there is generation.
GENERATE_PATH = lazy(r'File "(?:[^"]{0,300}?[/\\])?comfy[/\\](?:ldm|k_diffusion)[/\\][^"]{1,200}"'
                     r'|File "(?:[^"]{0,300}?[/\\])?comfy[/\\](?:samplers?|sample)\.py"'
                     r'|File "(?:[^"]{0,300}?[/\\])?diffusers[/\\]pipelines[/\\][^"]{1,200}"'
                     # AUTOMATIC1111's web UI and its forks (Forge, SD.Next): text-to-image, image-to-image, its samplers
                     r'|File "(?:[^"]{0,300}?[/\\])?modules[/\\](?:txt2img|img2img|sd_samplers\w{0,30})\.py"')
EVAL_PATH = lazy(r'File "(?:[^"]{0,300}?[/\\])?(?:(?:eval|evals|evaluation|evaluator|evaluators|validation)[/\\][^"]{1,200}'
                 r'|(?:evaluate|evaluation|eval)(?:_\w{1,40})?\.py)"')
# PyTorch's own files are named for what they do inside torch, not for the user's loop: torch/_dynamo/eval_frame.py
# sits in every traceback through a compile-disabled wrapper (activation checkpointing since torch 2.1).
TORCH_PACKAGE_FILE = lazy(r'File "(?:[^"]{0,300}?[/\\])?torch[/\\]')
# A model class's own forward pass, whatever its methods are called: Ultralytics' BaseModel.predict() and
# _predict_once() run under training (loss()) as under validation, so they name no phase.
# skorch's NeuralNet.infer() is the module's call under train_step_single() as under evaluation_step().
MODEL_FORWARD_FILE = lazy(r'File "(?:[^"]{0,300}?[/\\])?(?:ultralytics[/\\]nn[/\\]|skorch[/\\]net\.py", line \d{1,20}, in infer$)')


# The compiler's internals (TorchDynamo, Inductor: its CUDA-graph trees build a CUDAGraphNode on a compiled function's
# first calls) run inside whatever step called the compiled code: their constructors are not the run's set-up.
COMPILER_FILE = lazy(r'File "(?:[^"]{0,300}?[/\\])?torch[/\\]_(?:inductor|dynamo)[/\\]')


def in_model_forward(frame_text: str) -> bool:
    """The frame header is in a model class's own forward pass (MODEL_FORWARD_FILE): it names no phase."""
    return ("ultralytics" in frame_text or "skorch" in frame_text) and bool(MODEL_FORWARD_FILE.search(frame_text))


# A script run as a program (its `<module>` frame) says what it is by its file name: test.py, eval_x.py and
# predict.py evaluate; preprocess.py and data_loader.py prepare data before any training. Weakest evidence: used
# only when no function in the traceback names a phase.
# Script names, shared by a traceback's <module> frame and the launch command: evaluation scripts (test.py,
# eval_x.py, x_eval.py, predict.py) and generative models' sampling scripts (sample.py, image_sample.py, generate.py).
EVAL_SCRIPT = r"test|tests?_\w{1,40}|\w{1,40}_(?:test|eval)|eval\w{0,40}|predict\w{0,40}"
TRAIN_SCRIPT = r"(?:\w{1,30}_)?train(?:ing|er)?(?:_\w{1,40})?|\w{0,20}fine_?tun\w{0,30}|\w{0,20}pretrain\w{0,30}"
SAMPLING_SCRIPT = r"(?:\w{1,20}_)?sample(?:_\w{1,40})?|generate(?:_\w{1,40})?"
SCRIPT_PHASES = (
    ("eval", lazy(r'[/\\"](?:' + EVAL_SCRIPT + r'|infer\w{0,40})\.py"')),
    ("generate", lazy(r'[/\\"](?:' + SAMPLING_SCRIPT + r'|(?:txt|img)2(?:img|vid|video)\w{0,20})\.py"')),
    ("init", lazy(r'[/\\"](?:prepro\w{0,40}|preprocess\w{0,40}|prepare_\w{1,40}|data_?loader\w{0,40}'
                  r'|make_dataset\w{0,40}|build_dataset\w{0,40})\.py"')),
)


# The command that launched the run, as a shell prompt or a log echoes it: "$ bash ./scripts/test.sh 0 ...",
# "python tools/test.py cfg.py", "torchrun --nproc_per_node 8 sample.py". Its script's name is the weakest evidence
# of the phase, used when nothing else in the log names one; only names that say eval, generation or training count.
LAUNCH = lazy(r"^\s{0,4}`?"  # (a code span's backtick may open it)
              # a shell's prompt: "$ ", "# ", "> ", or bash's own with its environment, "(env) user@host:~/repo$ "
              r"(?:(?:\([\w.-]{1,40}\)\s{1,2})?[\w.-]{1,40}@[\w.-]{1,60}:[^$#\s]{0,200}[$#]\s{1,2}|[$#>]\s{1,2})?"
              r"(?:[A-Z_]{1,40}=\S{1,80}\s{1,4}){0,4}"
              # the interpreter or launcher, by name or by its path (~/miniforge3/envs/x/bin/python), then the script; or
              # the script run by its own path ("./tools/dist_test.sh cfg.py ckpt.pth 8")
              r"(?:(?:[^\s'\"]{0,200}[/\\])?(?:python\d?(?:\.\d{1,2})?(?:\s{1,4}-u)?|bash|sh|torchrun|deepspeed"
              r"|accelerate\s{1,4}launch)(?:\s{1,4}--?[\w-]{1,40}(?:[= ][\w.:/-]{1,80})?){0,6}\s{1,4}"
              r"(?P<script>[\w./\\-]{1,200}\.(?:py|sh))|(?P<script>\.{1,2}/[\w./-]{1,200}\.(?:py|sh)))\b")
LAUNCH_PHASES = (
    # not "inference.py": a generative model's inference is generation, a classifier's is evaluation
    ("eval", lazy(r"(?:^|[/\\])(?:" + EVAL_SCRIPT + r")\.(?:py|sh)$")),
    ("generate", lazy(r"(?:^|[/\\])(?:" + SAMPLING_SCRIPT + r")\.(?:py|sh)$")),
    # a training script ("tools/train.py", "CLAN_train.py", "finetuning.py", "pretrain_gpt.sh") that failed before any
    # step, evaluation or save it logs was most often in its training loop
    ("train", lazy(r"(?:^|[/\\])(?:" + TRAIN_SCRIPT + r")\.(?:py|sh)$", regex.I)),
)
LAUNCH_LINES_AFTER = 40


def first_launch(lines: Sequence[Line]) -> tuple[int, Witness | None] | None:
    """(index, the phase its script names or None) of the first launch command the log echoes, or None. Read once
    per source: a failure uses it when the command comes before it or within LAUNCH_LINES_AFTER lines after."""
    for idx, ln in enumerate(lines):
        if ("python" in ln.text or ".sh" in ln.text or "torchrun" in ln.text or "launch" in ln.text) and (
                m := LAUNCH.match(ln.text)):
            return idx, next((Witness(phase, ln) for phase, pattern in LAUNCH_PHASES if pattern.search(m["script"])),
                             None)
    return None



# The command a shell's kill notice names after the kill word: "[1]    1819 killed    python3 dddqn_train.py ...",
# "line 13: 114146 Killed  PYTHONPATH=... python3 $(dirname "$0")/test.py $CONFIG ..."
KILLED_SCRIPT = lazy(r"(?:(?i:killed)|" + KILLED_TRANSLATED_ALTERNATIVES + r")\s[^\n]{0,400}?"
                     r"(?P<script>[\w./\\-]{1,200}\.py)\b")


def killed_script_phase(text: str) -> str | None:
    """The phase the script a kill notice names says (as a launch command's would), or None."""
    m = KILLED_SCRIPT.search(text)
    return next((phase for phase, pattern in LAUNCH_PHASES if pattern.search(m["script"])), None) if m else None


def _script_phase(func: str, ln: Line) -> str | None:
    if func != "<module>":
        return None
    return next((phase for phase, pattern in SCRIPT_PHASES if pattern.search(ln.text)), None)


# Code that takes gradients with respect to its inputs, not to train: an adversarial attack or an attribution method
# (Grad-CAM, Captum). A backward pass under it is no training step; what encloses it (a training loop hardening the
# model, an evaluation of robustness) still names the phase.
INPUT_GRADIENT_FILE = lazy(r"[/\\](?:pytorch_grad_cam|captum|torchattacks|advertorch|foolbox|cleverhans)[/\\]"
                           r"|[/\\]art[/\\]attacks[/\\]")
INPUT_GRADIENT_FUNCS = frozenset({"fgsm", "fgsm_attack", "pgd", "pgd_attack", "bim", "deepfool", "cw_attack",
                                  "perturb", "attack", "grad_cam", "gradcam", "saliency", "integrated_gradients",
                                  "attribute"})
# loguru's record header names the function that logged it ("2025-05-03 13:40:54.819 | ERROR    | lmms_eval.models.
# qwen2_5_omni:generate_until:302 - Error CUDA out of memory ..."): where the error was caught.
LOGURU_SITE = lazy(r"\|\s{0,4}(?:ERROR|CRITICAL|WARNING|EXCEPTION)\s{0,8}\|\s{0,4}[\w.<>]{1,200}:(?P<func>[\w<>]{1,120}):\d{1,6}"
                   r"\s{1,4}-\s")


def logged_from(line: Line) -> tuple[str, Line] | None:
    """(the function, the line) a loguru error record names as the one that logged it, from the header normalising took
    off the message's line; None when the line has no such header."""
    cut = len(line.raw) - len(line.text)
    if cut <= 0 or "|" not in line.raw[:cut]:
        return None
    m = LOGURU_SITE.search(line.raw, 0, cut)
    return (m["func"], line) if m and m["func"] != "<module>" else None


def phase_from_frames(frames: Sequence[tuple[str, Line]]) -> Witness | None:
    """The phase the traceback frames name: the innermost save/eval/generate frame when there is one, else the
    innermost of train and init (a module's .to() inside train() is still model set-up). Optimizer internals
    take the phase of what encloses them: a step inside engine construction is set-up, else training. A script's
    own name (test.py, preprocess.py) decides only when no frame does. A backward pass under an attack or an
    attribution method (INPUT_GRADIENT_FUNCS) names nothing."""
    strong: Witness | None = None
    innermost: Witness | None = None
    script: Witness | None = None
    input_gradients = False
    for func, ln in frames:
        if script is None and (by_name := _script_phase(func, ln)):
            script = Witness(by_name, ln)
        name = func.rsplit(".", 1)[-1]
        input_gradients = input_gradients or name in INPUT_GRADIENT_FUNCS or bool(INPUT_GRADIENT_FILE.search(ln.text))
        if in_model_forward(ln.text) or (("_inductor" in ln.text or "_dynamo" in ln.text) and COMPILER_FILE.search(ln.text)) \
                or (input_gradients and name in BACKWARD_FUNCS):
            continue
        if name == "convert" and "/torch/nn/modules/" in ln.text:  # Module.to() (a constructor is an init name)
            innermost = Witness("init", ln)
            continue
        if "/torch/optim/" in ln.text or (name in OPTIMIZER_FUNCS and name not in OPTIMIZER_SETUP_FUNCS):
            if innermost is None or innermost.value != "init":  # inside optimizer.step()
                innermost = Witness("train", ln)
            continue
        phases = _phase_of_name(name)
        for phase in phases:
            if phase in STRONG_PHASES:
                strong = Witness(phase, ln)
                break
        else:
            if phases:
                innermost = Witness(phases[0], ln)
            elif strong is None and EVAL_PATH.search(ln.text) and not TORCH_PACKAGE_FILE.search(ln.text):
                strong = Witness("eval", ln)  # the evaluation package's own helpers (matching, metrics)
            elif strong is None and sampler_frame(ln.text):
                strong = Witness("generate", ln)  # ComfyUI sampling, a diffusers pipeline's denoising or decoding
    return strong or innermost or script


# A loss function's frame (torch.nn.functional's, a project's losses/ package, any *_loss): the weakest sign of
# training, used only when nothing else in the log names a phase (validation computes losses too).
LOSS_FUNCS = frozenset({"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy",
                        "binary_cross_entropy_with_logits", "kl_div", "ctc_loss", "huber_loss", "loss"})
LOSS_PATH = lazy(r"/losses?/[\w/]{0,80}\.py\"")


def loss_frame(frames: Sequence[tuple[str, Line]]) -> Line | None:
    """The innermost frame that computes a loss, if any."""
    for func, ln in reversed(frames):
        name = func.rsplit(".", 1)[-1]
        if name in LOSS_FUNCS or name.endswith("_loss") or LOSS_PATH.search(ln.text):
            return ln
    return None


def training_calls_evaluation(frames: Sequence[tuple[str, Line]]) -> bool:
    """A training frame encloses the innermost evaluation frame (HF Trainer's _inner_training_loop calling
    evaluate()): the evaluation runs inside the training loop, whose bar is still open."""
    names = [_phase_of_name(func.rsplit(".", 1)[-1]) for func, _ in frames]
    first_eval = next((k for k, phases in enumerate(names) if "eval" in phases), None)
    return first_eval is not None and any("train" in phases for phases in names[:first_eval])


def sampler_frame(text: str) -> bool:
    """The frame header is a diffusion sampler's own code (GENERATE_PATH, after its literal prefilter)."""
    return ("comfy" in text or "pipelines" in text or "modules" in text) and bool(GENERATE_PATH.search(text))


def in_sampler(frames: Sequence[tuple[str, Line]]) -> bool:
    """A diffusion sampler's own code is in the traceback (ComfyUI, a diffusers pipeline, AUTOMATIC1111's web UI): its
    bars count denoising steps and images, never training steps."""
    return any(sampler_frame(ln.text) for _, ln in frames)


# Where a thread's traceback starts, as `<module>` starts the main thread's: Python's threads and executors, a web UI's
# request queue (gradio; AUTOMATIC1111's modules/call_queue.py)
THREAD_ROOT = lazy(r'[/\\](?:threading|concurrent[/\\]futures[/\\]thread|call_queue|gradio[/\\]\w{1,40})\.py"')


def outside_training(frames: Sequence[tuple[str, Line]], phase: str) -> bool:
    """The whole traceback (from `<module>`, or a thread's or request queue's entry) runs an evaluation or generation
    with no training loop around it: a progress bar's count there is not a training step."""
    if phase not in ("eval", "generate") or not frames or not (
            frames[0][0] == "<module>" or THREAD_ROOT.search(frames[0][1].text)):
        return False
    return not any("train" in _phase_of_name(func.rsplit(".", 1)[-1]) for func, _ in frames)


# ComfyUI's error panel names the node that failed ("Error occurred when executing KSampler:"): a sampler (or a node
# that samples or generates: Hy3DSampleMultiView, a pack's ...Generate) or a decoder is generating (the VAE's and a
# video wrapper's own: VAEDecodeTiled, CogVideoDecode, WanVideoDecode), a loader is setting up.
# Its console's header, and the "ComfyUI Error Report" its frontend writes ("- **Node Type:** KSampler").
# (a custom node's name may carry its pack in parentheses: "KSampler (Efficient)")
COMFY_NODE = lazy(r"^\s{0,4}(?:Error occurred when executing (?P<node>[\w .()-]{1,80}?):"
                  r"|-\s\*\*Node Type:\*\*\s(?P<node>[\w .()-]{1,80}?))\s*$")
COMFY_NODE_PHASES = (("generate", lazy(r"Sampl|Generat|Decode|Encode|Upscale|Detailer", regex.I)),
                     ("init", lazy(r"Load(?:er)?(?:\b|[A-Z_])")))
COMFY_HEADER_LINES = 6


def comfy_node_phase(lines: Sequence[Line], idx: int) -> Witness | None:
    """The phase of the ComfyUI node whose failure this message reports, from the panel's header above it."""
    for ln in reversed(lines[max(0, idx - COMFY_HEADER_LINES) : idx + 1]):
        if ("executing" in ln.text or "Node Type" in ln.text) and (m := COMFY_NODE.match(ln.text)):
            node = m["node"]
            return next((Witness(phase, ln) for phase, pattern in COMFY_NODE_PHASES if pattern.search(node)), None)
    return None


# Ray names the remote task a failure came from: its task error's header ("ray::WorkerDict.generate_sequences()
# (pid=2396579, ...)", printed around the traceback), or, when its memory monitor killed a worker, the table of top
# memory users row of the killed pid ("4100606  56.57  ray::WorkerDict.actor_rollout_generate_sequences"). The
# method is the phase (an actor's own name, "WorkerDict.__init__", is only how it was created).
RAY_TASK_HEADER = lazy(r"\bray::(?:\w{1,80}\.)?(?P<method>\w{1,120})\(\)\s\(pid=")
RAY_KILLED_PID = lazy(r"\bpid=(?P<pid>\d{1,10}), memory used=")
RAY_WORKER_ROW = lazy(r"^\s{0,8}(?P<pid>\d{1,10})\s{1,8}\S{1,16}\s{1,8}ray::(?:\w{1,80}\.)?(?P<method>\w{1,120})")
RAY_LINES_BEFORE, RAY_LINES_AFTER = 3, 40


def _method_witness(m: regex.Match[str], ln: Line) -> Witness | None:
    """The phase a Ray task's method names (generate_sequences: generate), on its line."""
    phases = _phase_of_name(m["method"])
    return Witness(phases[0], ln) if phases else None


def ray_task_phase(lines: Sequence[Line], idx: int, end: int) -> Witness | None:
    """The phase named by the Ray task a failure came from: the task error's header, else the killed worker's row."""
    near = lines[max(0, idx - RAY_LINES_BEFORE) : end + RAY_LINES_AFTER]
    header = next(((m, ln) for ln in near if "ray::" in ln.text and (m := RAY_TASK_HEADER.search(ln.text))), None)
    if header and (witness := _method_witness(*header)):
        return witness
    pid = next((m["pid"] for ln in lines[idx : end + 3] if (m := RAY_KILLED_PID.search(ln.text))), None)
    row = next(((m, ln) for ln in near if (m := RAY_WORKER_ROW.match(ln.text)) and m["pid"] == pid), None) if pid else None
    return _method_witness(*row) if row else None


# XLA names the jitted function in its op names: "pjit(train_step)", "jit(eval_step)/..."
JIT_NAME = lazy(r"\b(?:p?jit|pmap|xmap)\((?P<name>\w{1,80})\)")


def phase_from_jit(text: str) -> str | None:
    """The phase of the jitted function an XLA message names, if any."""
    for m in JIT_NAME.finditer(text):
        phases = _phase_of_name(m["name"])
        if phases:
            return phases[0]
    return None


# ---- configuration -----------------------------------------------------------------------------------
CONFIG_ALIASES: dict[str, tuple[str, ...]] = {
    "per_device_train_batch_size": ("per_device_train_batch_size", "train_micro_batch_size_per_gpu",
                                    "micro_batch_size", "per_gpu_train_batch_size", "batch_size", "train_batch_size",
                                    "batch-size", "samples_per_gpu", "batch_size_per_gpu", "micro_batch_size_per_gpu"),
    "per_device_eval_batch_size": ("per_device_eval_batch_size", "eval_batch_size", "per_gpu_eval_batch_size",
                                   "eval_micro_batch_size"),
    "gradient_accumulation_steps": ("gradient_accumulation_steps", "accumulate_grad_batches",
                                    "gradient_accumulation", "grad_accum", "accumulation_steps", "grad_accum_steps"),
    "gradient_checkpointing": ("gradient_checkpointing", "activation_checkpointing", "use_gradient_checkpointing",
                               "grad_checkpoint", "use_checkpoint", "recompute_activations", "checkpoint_activations",
                               "enable_activation_checkpointing"),  # torchtune's recipe configs
    "bf16": ("bf16", "precision", "mixed_precision", "Mixed precision type", "bfloat16_enabled"),  # DeepSpeedEngine's
    "fp16": ("fp16", "amp", "use_amp", "fp16_enabled"),
    "max_seq_length": ("max_seq_length", "max_seq_len", "sequence_len", "seq_length", "cutoff_len",
                       "model_max_length", "max_length", "block_size", "seq_len", "max_source_length",
                       "max_len", "context_length", "max_position_embeddings_used", "max_seq_len_to_capture"),
    "eval_steps": ("eval_steps", "eval_interval", "val_check_interval", "evals_per_epoch"),
    "eval_accumulation_steps": ("eval_accumulation_steps",),
    "save_steps": ("save_steps", "save_interval"),
    "zero_stage": ("zero_stage",),
    "overlap_comm": ("overlap_comm",),  # DeepSpeed ZeRO: double-buffered gradient buckets at stage 1/2
    "fsdp_forward_prefetch": ("forward_prefetch", "fsdp_forward_prefetch"),  # PyTorch FSDP, accelerate, HF fsdp_config
    "fsdp_limit_all_gathers": ("limit_all_gathers", "fsdp_limit_all_gathers"),
    "num_generations": ("num_generations", "n_samples_per_prompt", "rollout_n", "num_return_sequences"),
    "max_completion_length": ("max_completion_length", "max_new_tokens", "max_response_length", "generate_max_length"),
    "max_prompt_length": ("max_prompt_length", "max_prompt_len"),
    # TRL's KL coefficient (GRPO/PPO/DPO configs): above 0 the trainer keeps a frozen reference copy of the policy
    "kl_beta": ("beta", "kl_coef", "init_kl_coef", "kl_beta"),
    # not HF's n_gpu: the GPUs one process drives (1 under DDP, "_n_gpu=1" in every TrainingArguments dump)
    "world_size": ("world_size", "WORLD_SIZE", "num_processes", "nproc_per_node", "num_gpus",
                   "Num processes"),  # accelerate's environment summary ("Num processes: 8")
    "model_name": ("model_name_or_path", "base_model", "pretrained_model_name_or_path", "model_name", "model_id",
                   "model_path", "pretrained", "arch"),  # arch: torchvision reference scripts (resnet152)
    "optimizer": ("optim", "optimizer"),
    "model_dtype": ("torch_dtype",),
    "lora_r": ("lora_r", "lora_rank"),
    "max_steps": ("max_steps", "train_iters"),
    # model shape, as HF prints the model config and Megatron its arguments
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "num_layers", "n_layer", "n_layers"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "tensor_parallel": ("tensor_model_parallel_size", "tensor_parallel_size", "tensor_parallel_degree"),
    # Liger-Kernel's fused linear cross-entropy: HF/TRL TrainingArguments, LLaMA-Factory, axolotl's plugin key
    "liger_kernel": ("use_liger_kernel", "enable_liger_kernel", "liger_fused_linear_cross_entropy"),
}
_ALIAS_TO_KEY = {a: k for k, aliases in CONFIG_ALIASES.items() for a in aliases}
CONFIG_KV = lazy(
    r"(?<![\w.])-{0,2}(?P<key>" + "|".join(sorted(map(regex.escape, _ALIAS_TO_KEY), key=len, reverse=True)) + r")"
    # DeepSpeed pads its config print to a column with dots, down to one or two: "gradient_accumulation_steps .. 8"
    r"['\"]?\s{0,3}(?:[:=]\s{0,3}|(?:(?<=\s)\.{1,2}|\.{3,})\s{1,3}|\s(?=\S))['\"]?(?P<value>(?!--)[\w./@:+-]{1,200})"  # "--x" is the next option
)
# A switch given bare in a launch command ("... --bf16 --gradient_checkpointing \\"): argparse's store_true, HF's
# bool fields. Only where no value follows: the next token is another option, a line continuation or the end.
_SWITCHES = ("bf16", "fp16", "amp", "use_amp", *CONFIG_ALIASES["gradient_checkpointing"], "use_liger_kernel")

CONFIG_KEYS = Literals(sorted(_ALIAS_TO_KEY))  # CONFIG_KV's key is one of these, as written
BARE_SWITCH = lazy(r"(?<!\S)--(?P<key>" + "|".join(sorted(map(regex.escape, _SWITCHES), key=len, reverse=True)) + r")"
                   r"(?=\s*(?:\\\s*)?$|\s+-{1,2}[A-Za-z])")
# Parameter counts: PEFT's print_trainable_parameters, HF Trainer's banner, Lightning's summary, Megatron.
PEFT_PARAMS = lazy(r"trainable params: (?P<trainable>\d[\d,]{0,20}) \|\| all params: (?P<total>\d[\d,]{0,20})")
HF_PARAMS = lazy(r"Number of trainable parameters = (?P<trainable>\d[\d,]{0,20})")
LIGHTNING_PARAMS = lazy(r"^\s{0,8}(?P<n>\d{1,4}(?:\.\d{1,3})?) (?P<unit>[KMBT]) {1,10}(?P<what>Trainable|Total) params")
MEGATRON_PARAMS = lazy(r"number of parameters on \(tensor, pipeline\) model parallel rank \(\d{1,20}, \d{1,20}\): (?P<total>\d{1,15})")
_COUNT_UNIT = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
ZERO_STAGE = lazy(
    r"['\"]?(?:zero_optimization['\"]?:\s{0,3}\{[^}]{0,200}?['\"]stage['\"]:\s{0,3}|ZeRO[ -][Ss]tage\s{0,3}"
    r"|zero[_ ]stage['\"]?\s{0,3}[:=]\s{0,3}"
    r"|zero_optimization_stage\s{0,3}\.{2,}\s{0,3}|zero_config\s{0,3}\.{2,}\s{0,3}stage="  # DeepSpeed's config print
    r")(?P<stage>[0-3])\b"
)
# The DeepSpeed config a run names, by the usual naming: deepspeed_configs/zero3_bf16.json, ds_config_zero2.json.
ZERO_CONFIG_FILE = lazy(r"(?:^|[/\\\s'\"=_])zero(?P<stage>[0-3])(?:_\w{1,40})?\.json\b")
# A DeepSpeed element count as its JSON (5e8), HF's resolved config or its own config print (500000000, thousands
# separated in some versions) write it; "auto" is resolved later, unread
_DS_ELEMENTS = r"['\"]?\s{0,3}[:=]\s{0,3}(?P<n>\d{1,3}(?:,\d{3}){1,4}(?!\d)|\d{1,13}(?:\.\d{1,6})?(?:[eE]\+?\d{1,2})?)"
# DeepSpeed's reduce_bucket_size (elements)
ZERO_BUCKET = lazy(r"reduce_bucket_size" + _DS_ELEMENTS)
# DeepSpeed ZeRO-3's gathering settings, elements: its JSON and HF's resolved config name them stage3_*, its own config
# print (zero_config ... prefetch_bucket_size=50000000 param_persistence_threshold=100000 ...) without the prefix
ZERO3_SETTING = lazy(r"(?<![\w])(?:stage3_)?(?P<key>prefetch_bucket_size|max_live_parameters|param_persistence_threshold"
                     r"|max_reuse_distance)" + _DS_ELEMENTS)


def _ds_elements(m: regex.Match[str]) -> int:
    """The element count a _DS_ELEMENTS match read ("5e8", "500,000,000")."""
    return int(float(m["n"].replace(",", "")))
# FSDP's sharding strategy as HF's TrainingArguments (fsdp=[<FSDPOption.FULL_SHARD: 'full_shard'>], --fsdp
# "full_shard auto_wrap"), accelerate's config (fsdp_sharding_strategy: FULL_SHARD, or 1-4 in older versions) and
# plugin print (sharding_strategy=<ShardingStrategy.FULL_SHARD: 1>) or Lightning's FSDPStrategy name it
FSDP_SHARDING = lazy(r"(?:\bfsdp\w{0,20}|sharding_strategy|FSDPOption\.|ShardingStrategy\.)['\"]?[^\n]{0,40}?"
                     r"\b(?P<s>FULL_SHARD|SHARD_GRAD_OP|_?HYBRID_SHARD(?:_ZERO2)?|NO_SHARD)\b", regex.I)
FSDP_SHARDING_NUMBER = lazy(r"fsdp_sharding_strategy['\"]?\s{0,3}[:=]\s{0,3}['\"]?(?P<n>[1-5])\b")
FSDP_STRATEGY_BY_NUMBER = {"1": "FULL_SHARD", "2": "SHARD_GRAD_OP", "3": "NO_SHARD", "4": "HYBRID_SHARD",
                           "5": "_HYBRID_SHARD_ZERO2"}  # torch.distributed.fsdp.ShardingStrategy's values
# FSDP's backward_prefetch as accelerate's plugin (BackwardPrefetch.BACKWARD_PRE), torch's repr or HF's fsdp_config
# ("backward_pre") prints it; None/NO_PREFETCH: no prefetch
FSDP_BACKWARD_PREFETCH = lazy(r"backward_prefetch['\"]?\s{0,3}[:=]\s{0,3}['\"<]?(?:BackwardPrefetch\.)?"
                              r"(?P<v>BACKWARD_PRE|BACKWARD_POST|NO_PREFETCH|None|null)\b", regex.I)
OFFLOAD = lazy(r"offload_(?:optimizer|param)['\"]?\s{0,3}[:=]\s{0,3}\{?[^}\n]{0,80}?['\"]?device['\"]?\s{0,3}[:=]\s{0,3}['\"]?(?P<dev>cpu|nvme|none)")
# Which state DeepSpeed offloads (its config print's offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', ...), the
# JSON's "offload_param": {"device": "cpu"}); the device is read before the next offload_ key
OFFLOAD_EACH = lazy(r"offload_(?P<what>optimizer|param)['\"]?\s{0,3}[:=]\s{0,3}\{?(?:(?!offload_)[^}\n]){0,80}?['\"]?device['\"]?"
                    r"\s{0,3}[:=]\s{0,3}['\"]?(?P<dev>cpu|nvme|none)")
# PyTorch FSDP's parameter offload: accelerate's fsdp_offload_params, HF's `fsdp` option "offload", the plugin's
# CPUOffload(offload_params=True), FSDP2's CPUOffloadPolicy
FSDP_OFFLOAD = lazy(r"fsdp_offload_params['\"]?\s{0,3}[:=]\s{0,3}['\"]?(?P<v>true|false)\b|CPUOffload\(offload_params=(?P<v>True|False)\)"
                    r"|(?P<on>FSDPOption\.OFFLOAD\b|\bCPUOffloadPolicy\(|--fsdp[= ]['\"]?[a-z_ ]{0,60}\boffload\b)", regex.I)
# The banner HF Trainer (and accelerate's example loops) print as training and evaluation start: "***** Running
# training *****", then "  Instantaneous batch size per device = 4", "  Gradient Accumulation steps = 2"; "*****
# Running Evaluation *****", then "  Batch size = 8" (the evaluation batch per device); transformers 5 logs them
# under its "[transformers] " name. Unsloth's banner puts them on one row: "O^O/ \_/ \    Batch size per device = 2 |
# Gradient accumulation steps = 4", and its GPUs on another ("Num GPUs used = 1", "Data Parallel GPUs = 1").
HF_BANNER_BATCH = lazy(r"(?:(?<=^(?:\[[\w.]{1,40}\] )?\s{0,8})|(?<=\s{2}|\|\s))(?P<what>Instantaneous batch size per device"
                       r"|Batch size per device|Gradient [Aa]ccumulation steps|Num GPUs used|Data Parallel GPUs"
                       r"|(?<=^(?:\[[\w.]{1,40}\] )?\s{0,8})Batch size) = (?P<v>\d{1,9})(?=\s*(?:\||$))")
# kohya-ss sd-scripts (LoRA and DreamBooth for Stable Diffusion) print their summary in English and Japanese:
# "  batch size per device / バッチサイズ: 4", "  gradient accumulation steps / 勾配を合計するステップ数 = 1".
KOHYA_SUMMARY = lazy(r"^\s{0,8}(?P<what>batch size per device|gradient accumulation steps) / [^\n:=]{1,40}?\s{0,2}[:=]\s{0,2}"
                     r"(?P<v>\d{1,9})\s*$")
# Lightning's start-up lines: its automatic mixed precision ("Using bfloat16 Automatic Mixed Precision (AMP)", "Using
# 16bit ..." for 16-mixed) and its process group ("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4", "All
# distributed processes registered. Starting with 4 processes").
LIGHTNING_RUN = lazy(r"\bUsing (?P<amp>bfloat16|16bit) Automatic Mixed Precision \(AMP\)"
                     r"|\bMEMBER: \d{1,6}/(?P<world>\d{1,6})\b|\bStarting with (?P<world>\d{1,6}) processes\b")
# A memory saver the run meant to use that did not load: bitsandbytes built without GPU support ("The installed version
# of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are
# unavailable."), xFormers without its extensions ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. ...
# Memory-efficient attention, SwiGLU, sparse and more won't be available.") or missing (AUTOMATIC1111's "No module
# 'xformers'. Proceeding without it.").
SAVER_UNAVAILABLE = lazy(r"(?P<bitsandbytes>bitsandbytes was compiled without GPU support)"
                         r"|(?P<xformers>xFormers can't load C\+\+/CUDA extensions|No module 'xformers'\. Proceeding without it)")
_KOHYA_KEYS = {"batch size per device": "per_device_train_batch_size",
               "gradient accumulation steps": "gradient_accumulation_steps"}
_HF_BANNER_KEYS = {"Instantaneous batch size per device": "per_device_train_batch_size",
                   "Batch size per device": "per_device_train_batch_size",
                   "Gradient Accumulation steps": "gradient_accumulation_steps",
                   "Gradient accumulation steps": "gradient_accumulation_steps",
                   "Num GPUs used": "world_size", "Data Parallel GPUs": "world_size",
                   "Batch size": "per_device_eval_batch_size"}
PEFT_OFF = lazy(r"\buse_peft['\"]?\s{0,2}[=:]\s{0,2}False\b")
LORA = lazy(r"\bLoraConfig\(|\blora_alpha\b|\bpeft_config\b|adapter:\s{0,3}q?lora\b|finetuning_type:\s{0,3}lora")
# vLLM labels each line with the process that wrote it: "(EngineCore pid=4108) ERROR 05-28 08:00:36 [core.py:1142] ...",
# "(EngineCore_0 pid=...)", "(EngineCore_DP1 pid=...)", its workers "(VllmWorker rank=1 pid=...)", "(Worker_TP1 pid=...)",
# "(Worker_PP0_TP1_EP1 pid=...)", V0's "(VllmWorkerProcess pid=...)"; "(APIServer pid=...)" serves.
_VLLM_ENGINE = (r"EngineCore(?:_(?:DP)?\d{1,3})?|VllmWorker(?: rank=\d{1,4})?|VllmWorkerProcess"
                r"|Worker(?:_(?:DP|PP|PCP|TP|DCP|EP)\d{1,4}){1,6}")
VLLM_PROCESS = lazy(r"\((?:" + _VLLM_ENGINE + r") pid=\d{1,10}\)")  # in the prefix taken off a line
# ComfyUI named by its package and folders (custom nodes are "ComfyUI-<name>" repositories) or its sampler node: a
# diffusion run, and the ComfyUI app's
_COMFYUI = r"\bcomfy[/.\\]|ComfyUI|\bKSampler\b"
_COMFYUI_LITERALS = ("comfy", "ComfyUI", "KSampler")
STACKS: dict[str, regex.Pattern[str]] = {
    # a bare trainer.py frame only with a function HF's Trainer alone has (Lightning, Chainer and others have trainer.py);
    # its banner only when the user's own script did not log it: the accelerate and diffusers example loops print the
    # same "***** Running training *****" from their __main__ logger
    "hf_trainer": lazy(r"transformers[/.]trainer|TrainingArguments"
                       r"|(?<!\b__main__\s{0,3}-\s{0,3}(?:\[RANK \d{1,6}\]\s{0,3})?)\*{5} Running training \*{5}"
                       r"|trainer\.py\"?, line \d{1,6}, in (?:_inner_training_loop|training_step|compute_loss|evaluation_loop"
                       r"|prediction_step|_maybe_log_save_evaluate|_save_checkpoint)\b"),
    "accelerate": lazy(r"\baccelerate[/.]|Distributed environment:|accelerate launch"),
    "deepspeed": lazy(r"\bdeepspeed\b|DeepSpeed|ds_config|zero_optimization", regex.I),
    "fsdp": lazy(r"\bFSDP\b|FullyShardedDataParallel|fully_shard|fsdp_config|FSDPOption"),
    "axolotl": lazy(r"\baxolotl\b"),
    "llama_factory": lazy(r"llamafactory|LLaMA-Factory|llmtuner", regex.I),
    "lightning": lazy(r"pytorch_lightning|lightning[/.](?:pytorch|fabric)|Validation DataLoader|LightningModule"),
    "trl": lazy(r"\btrl[/.]|GRPOTrainer|SFTTrainer|DPOTrainer|PPOTrainer|GRPOConfig"),
    # An RL trainer that generates rollouts between optimizer steps (TRL's GRPO/PPO/RLOO/online DPO, verl, OpenRLHF):
    # a generation there is a rollout, sized by the generations per prompt, not an evaluation's sampling
    "rl_trainer": lazy(r"GRPOTrainer|GRPOConfig|PPOTrainer|RLOOTrainer|OnlineDPOTrainer|grpo_trainer|ppo_trainer"
                       r"|rloo_trainer|online_dpo_trainer|_generate_and_score_completions|\bverl[/.]|openrlhf", regex.I),
    "torchtitan": lazy(r"torchtitan"),
    "megatron": lazy(r"megatron", regex.I),
    # (its process label anywhere: behind a collector's prefix it sits in the middle of what normalising took off)
    # (the package, not a folder named after it: "mamba-vllm/lib/python3.10/..."; a version may follow: "vllm-0.6.3")
    "vllm": lazy(r"(?<![-\w])vllm(?!\w|-\D)|\((?:" + _VLLM_ENGINE + r"|APIServer) pid=\d", regex.I),
    # Serving engines that size a KV cache of their own: LMDeploy/TurboMind, TGI, SGLang, TensorRT-LLM, FasterTransformer,
    # llama.cpp and what runs it (llama-server, Ollama): its context set-up lines, its server, its CUDA start-up
    "serving_engine": lazy(r"\blmdeploy\b|turbomind|\[TM\]\[|text[-_]generation[-_](?:inference|server|launcher)"
                           r"|\bsglang\b|tensorrt_llm|TensorRT-LLM|FasterTransformer"
                           r"|\bllama_(?:new_context_with_model|init_from_model|model_load|kv_cache_init)\b|\bllama-server\b"
                           r"|\bllm_load_tensors\b|\bggml_(?:cuda_init|init_cublas)\b|\bollama\b", regex.I),
    # Image and video diffusion: diffusers pipelines, ComfyUI (its comfy package, nodes and panels), the web UIs
    "diffusion": lazy(r"\bdiffusers[/.]|DiffusionPipeline|StableDiffusion\w{0,24}Pipeline|" + _COMFYUI
                      + r"|stable-diffusion-webui|\bsd_samplers|modules[/\\](?:txt2img|img2img)\.py|\bFooocus\b|\binvokeai\b"),
    # A TPU: its HBM belongs to one process, so no other process or preallocation competes for it.
    # (not Lightning's "TPU available: False, using: 0 TPU cores" on every GPU run)
    "tpu": lazy(r"(?<!\b0 )\bTPU(?:s|v\d\w{0,3}| v\d)?\b(?!\s{0,2}available:\s{0,2}False)|\blibtpu\b|memory space hbm"
                r"|_HBM\d\b|\bXRT\b"),
    "jax": lazy(r"\bjax\b|jaxlib|XlaRuntimeError|flax", regex.I),
    "tensorflow": lazy(r"tensorflow|keras", regex.I),
    # AUTOMATIC1111's Stable Diffusion web UI and its forks (Forge, SD.Next): its modules, its request errors, its bar
    "webui": lazy(r"stable-diffusion-webui|\bmodules[/\\](?:txt2img|img2img|call_queue)\.py|^\*{3} Error completing request"
                  # its memory summary under every generation: "A: 2.82 GB, R: 2.90 GB, Sys: 3.8/3.8125 GB (99.7%)"
                  r"|^Total progress:|^A: \d{1,4}\.\d{1,3} GB, R: \d{1,4}\.\d{1,3} GB, Sys: "),
    # ComfyUI, a node-graph app that generates: _COMFYUI, and its console's "got prompt" and "!!! Exception during
    # processing !!!" around every queued graph
    "comfyui": lazy(_COMFYUI + r"|^got prompt\s*$|^!!! Exception during processing !!!"),
    # kohya-ss sd-scripts, LoRA and DreamBooth training for Stable Diffusion, SDXL, SD3 and FLUX (its bilingual
    # "running training / 学習開始" banner, its scripts, the repository's name)
    "sd_scripts": lazy(r"\bsd-scripts\b|\bkohya|学習開始|\b(?:sdxl|flux|sd3)_train(?:_network)?\.py"),
    # skorch's scikit-learn style wrapper: its frames, or its net classes named in a repr or a traceback
    "skorch": lazy(r"\bskorch[/.\\]|\bNeuralNet(?:Classifier|Regressor|BinaryClassifier)\b"),
}
# Literals one of which every match of a stack's pattern holds (its alternatives, shortened): a line without any
# does not name the stack. Case-insensitive patterns are tested against the casefolded text.
STACK_LITERALS: dict[str, tuple[str, ...]] = {
    "hf_trainer": ("transformers", "TrainingArguments", "Running training", "trainer.py"),
    "accelerate": ("accelerate", "Distributed environment:"),
    "deepspeed": ("deepspeed", "ds_config", "zero_optimization"),
    "fsdp": ("FSDP", "FullyShardedDataParallel", "fully_shard", "fsdp_config"),
    "axolotl": ("axolotl",),
    "llama_factory": ("llamafactory", "llama-factory", "llmtuner"),
    "lightning": ("lightning", "Validation DataLoader", "LightningModule"),
    "trl": ("trl", "Trainer", "GRPOConfig"),
    "rl_trainer": ("trainer", "grpoconfig", "_generate_and_score_completions", "verl", "openrlhf"),
    "torchtitan": ("torchtitan",),
    "megatron": ("megatron",),
    "vllm": ("vllm", "enginecore", "apiserver pid=", "worker_"),
    "serving_engine": ("lmdeploy", "turbomind", "[tm][", "generation", "sglang", "tensorrt", "fastertransformer", "llama_",
                       "llama-server", "llm_load_tensors", "ggml_", "ollama"),
    "diffusion": ("diffusers", "DiffusionPipeline", "StableDiffusion", *_COMFYUI_LITERALS, "stable-diffusion-webui", "sd_samplers", "txt2img", "img2img", "Fooocus", "invokeai"),
    "tpu": ("TPU", "libtpu", "memory space hbm", "_HBM", "XRT"),
    "jax": ("jax", "xlaruntimeerror", "flax"),
    "tensorflow": ("tensorflow", "keras"),
    "skorch": ("skorch", "NeuralNet"),
    "sd_scripts": ("sd-scripts", "kohya", "学習開始", "_train"),
    "comfyui": (*_COMFYUI_LITERALS, "got prompt", "!!! Exception during processing !!!"),
    "webui": ("stable-diffusion-webui", "txt2img", "img2img", "call_queue", "Error completing request", "Total progress:",
              " GB, Sys: "),
}


_FOLDED_STACKS = frozenset(name for name, pat in STACKS.items() if pat.flags & regex.IGNORECASE)


def _fold(text: str) -> str:
    """The text as the case-insensitive patterns see it: casefolded, and İ as the i it matches (casefold adds a dot)."""
    return text.replace("\u0130", "i").casefold()


def _may_name(stack: str, text: str, folded: str) -> bool:
    """False when `text` cannot name `stack` (`folded`: _fold(text), for the case-insensitive patterns)."""
    within = folded if stack in _FOLDED_STACKS else text
    return any(lit in within for lit in STACK_LITERALS[stack])


# TrainingArguments prints every field, used or not: `deepspeed=None`, `fsdp=[]`, `fsdp_config={...}`.
ARG_DUMP = lazy(r"^\s{0,8}(?P<name>deepspeed|fsdp\w{0,40})\s{0,2}=\s{0,2}(?P<value>.{0,400}?),?\s*$")
_UNSET = frozenset({"None", "[]", "''", '""', "False", "", "{}"})


def _stack_line_counts(text: str) -> bool:
    """False for a TrainingArguments dump line that names a stack without using it."""
    m = ARG_DUMP.match(text)
    if m is None:
        return True
    return m["name"] in ("deepspeed", "fsdp") and m["value"].strip() not in _UNSET


OPTIMIZER_NAME = lazy(r"adam|sgd|adafactor|lion|lamb|adagrad|rmsprop|muon|sophia|galore|lomo|novograd|came|prodigy"
                      r"|schedule_?free|shampoo|adadelta|lars|ademamix", regex.I)
_BOOL = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False, "on": True, "off": False}


def _config_value(key: str, raw: str):
    raw = raw.rstrip(",.;)'\"")
    if key in ("gradient_checkpointing", "bf16", "fp16", "overlap_comm", "fsdp_forward_prefetch", "fsdp_limit_all_gathers",
               "liger_kernel"):
        low = raw.lower()
        if key == "bf16" and low in ("bf16-mixed", "bf16-true", "bf16", "bfloat16"):
            return True
        if key == "bf16" and low in ("16-mixed", "16", "fp16", "float16", "32", "32-true", "no", "fp32"):
            return False  # precision given, and it is not bf16 (fp16 is read from its own keys)
        return _BOOL.get(low)
    if key == "optimizer" and not OPTIMIZER_NAME.search(raw):
        return None  # prose ("after optimizer step 6") names no optimizer
    if key == "model_dtype":  # torch_dtype='bfloat16', torch_dtype=torch.float16
        dtype = raw.removeprefix("torch.").lower()
        return dtype if dtype in ("bfloat16", "float16", "float32") else None
    if key in ("model_name", "optimizer"):  # a flag's value (pretrained=False) names no model
        return raw if raw.lower() not in ("none", "null", "true", "false", "") else None
    try:
        number: int | float = int(raw)
    except ValueError:
        try:
            f = float(raw)
        except ValueError:
            return None
        number = int(f) if f.is_integer() else f
    return number if number >= 0 else None  # -1 is "unset" (HF max_steps=-1, torchvision world_size=-1)


def _count(raw: str) -> int:
    return int(raw.replace(",", ""))


def _param_counts(text: str, cfg: dict[str, Value], ev: Evidence) -> bool:
    """trainable_params / total_params from the lines that print them; True when the line printed one."""
    if m := PEFT_PARAMS.search(text):
        cfg["trainable_params"] = Value(value=_count(m["trainable"]), evidence=ev)
        cfg["total_params"] = Value(value=_count(m["total"]), evidence=ev)
    elif m := HF_PARAMS.search(text):
        cfg["trainable_params"] = Value(value=_count(m["trainable"]), evidence=ev)
    elif m := LIGHTNING_PARAMS.search(text):
        key = "trainable_params" if m["what"] == "Trainable" else "total_params"
        cfg[key] = Value(value=round(float(m["n"]) * _COUNT_UNIT[m["unit"]]), evidence=ev)
    elif m := MEGATRON_PARAMS.search(text):
        cfg["total_params"] = Value(value=int(m["total"]), evidence=ev)
    else:
        return False
    return True


# The optimizer DeepSpeed builds from its own config (not the trainer's): its config print ("optimizer_name
# ............... adamw"; "None" when the trainer brings one) or the JSON block ("optimizer": {"type": "AdamW", ...}).
DS_OPTIMIZER = lazy(r"\boptimizer_name\s{0,3}\.{2,}\s{0,3}(?P<name>\w{1,40})"
                    r"|[\"']optimizer[\"']\s{0,3}:\s{0,3}\{\s{0,3}[\"']type[\"']\s{0,3}:\s{0,3}[\"'](?P<type>\w{1,40})")


# Serving engines' memory-profiling summaries: what the card holds, what the weights took, what is left for the KV cache.
# vLLM (gpu_worker.py): "the current vLLM instance can use total_gpu_memory (22.06GiB) x gpu_memory_utilization (0.90)
# = 19.86GiB" / "model weights take 14.99GiB; non_torch_memory takes 0.07GiB; PyTorch activation peak memory takes
# 1.33GiB; the rest of the memory reserved for KV Cache is 3.47GiB." / "Available KV cache memory: 3.47 GiB" /
# "Model loading took 14.9924 GiB". SGLang (model_runner.py, GB meaning GiB): "Load weight end. type=..., avail
# mem=0.81 GB, mem usage=22.47 GB." / "KV Cache is allocated. #tokens: 113042, K size: 6.04 GB, V size: 6.04 GB".
_GIB_FIGURE = r"\d{1,7}(?:\.\d{1,6})?\s?(?:GiB|GB)"
SERVING_MEMORY = (
    lazy(r"total_gpu_memory \((?P<serving_total_bytes>" + _GIB_FIGURE + r")\) x gpu_memory_utilization "
         r"\((?P<gpu_memory_utilization>[01](?:\.\d{1,4})?)\)"),
    lazy(r"model weights take (?P<weights_bytes>" + _GIB_FIGURE + r");[^\n]{0,200}?activation peak memory takes "
         r"(?P<activation_peak_bytes>" + _GIB_FIGURE + r");[^\n]{0,80}?reserved for KV Cache is "
         r"(?P<kv_cache_budget_bytes>-?" + _GIB_FIGURE + r")"),
    lazy(r"Available KV cache memory: (?P<kv_cache_budget_bytes>-?" + _GIB_FIGURE + r")"),
    lazy(r"Model loading took (?P<weights_bytes>" + _GIB_FIGURE + r")"),
    lazy(r"Load weight end\.[^\n]{0,300}?avail mem=(?P<free_after_weights_bytes>" + _GIB_FIGURE + r"), mem usage="
         r"(?P<weights_bytes>" + _GIB_FIGURE + r")"),
    lazy(r"KV Cache is allocated\. #tokens: \d{1,12}, K size: (?P<k>" + _GIB_FIGURE + r"), V size: (?P<v>"
         + _GIB_FIGURE + r")"),
)
_SERVING_WORDS = ("total_gpu_memory", "weights take", "KV cache memory", "Model loading took", "Load weight end",
                  "KV Cache is allocated")


# Weights loaded quantised: bitsandbytes' switches set to true and its layer classes as a model prints them, GPTQ/AWQ
# releases and kernels, QLoRA, GGUF files. (A BitsAndBytesConfig dump alone prints its 4-bit fields even when off.)
QUANTIZED_WEIGHTS = lazy(r"load_in_(?:4|8)bit['\"]?\s{0,3}[:=]\s{0,3}['\"]?[Tt]rue|\bLinear(?:4bit|8bitLt)\b"
                         r"|\b(?:GPTQ|AWQ|QLoRA)|quant_method['\"]?\s{0,3}[:=]\s{0,3}['\"]?(?:gptq|awq|bitsandbytes)"
                         r"|\.gguf\b")


def _serving_memory(ln: Line, text: str, source: str, cfg: dict[str, Value]) -> bool:
    """A serving engine's memory-profiling figures on this line, into cfg (bytes; the utilisation as a float)."""
    found = False
    for pat in SERVING_MEMORY:
        if (m := pat.search(text)) is None:
            continue
        values: dict[str, float | int] = {}
        for key, raw in m.groupdict().items():
            if raw is None:
                continue
            if key == "gpu_memory_utilization":
                values[key] = float(raw)
            elif key in ("k", "v"):  # SGLang's pool: its K and V halves
                values["kv_cache_budget_bytes"] = values.get("kv_cache_budget_bytes", 0) + parse_size(raw)
            else:  # vLLM prints a negative KV budget when the weights and peak leave nothing
                values[key] = -parse_size(raw[1:]) if raw.startswith("-") else parse_size(raw)
        for key, value in values.items():
            cfg[key] = Value(value=value, evidence=_ev(source, ln))
        found = found or bool(values)
    return found


def config_from(lines: Sequence[Line], source: str) -> dict[str, Value]:
    """Run configuration printed anywhere in the given lines; the last value seen wins."""
    cfg: dict[str, Value] = {}
    stacks: dict[str, Evidence] = {}
    barren: set[str] = set()  # line shapes (digits dropped) that named no configuration: dense per-step lines
    for ln in lines:
        text = ln.text
        if len(text) > 20000:
            continue
        if "out of memory" in text:  # the message configures nothing, but its path can name the engine that raised it
            _stacks_named(ln, text, source, stacks)
            continue
        shape = _shape(text)
        if shape in barren:
            continue
        if not _config_line(ln, text, source, cfg, stacks) and len(barren) < BARREN_SHAPES:
            barren.add(shape)
    if stacks:
        first = min(stacks.values(), key=lambda e: e.line)
        cfg["stacks"] = Value(value=sorted(stacks), evidence=first)
    return cfg


DIGITS = lazy(r"\d{1,40}")
BARREN_SHAPES = 4096  # shapes remembered per source
_ASCII_DIGITS = b"0123456789"


def _shape(text: str) -> str:
    """The line without its digits (an ASCII line's are only 0-9: deleted from its bytes, ~10x cheaper than DIGITS)."""
    return text.encode().translate(None, _ASCII_DIGITS).decode() if text.isascii() else DIGITS.sub("", text)


def _config_line(ln: Line, text: str, source: str, cfg: dict[str, Value], stacks: dict[str, Evidence]) -> bool:
    """The configuration one line prints, into cfg and stacks; True when it printed any."""
    found = False
    if ("=" in text or ":" in text or "--" in text or " " in text) and CONFIG_KEYS.found_in(text):
        for m in CONFIG_KV.finditer(text):
            key = _ALIAS_TO_KEY[m["key"]]
            if key == "model_dtype" and text[m.start("key") - 1 : m.start("key")] == '"':
                continue  # a checkpoint's config.json ("torch_dtype": "float16") says how it was saved, not loaded
            val = _config_value(key, m["value"])
            if val is not None:
                cfg[key] = Value(value=val, evidence=_ev(source, ln))
                found = True
        if "--" in text:
            for m in BARE_SWITCH.finditer(text):
                cfg[_ALIAS_TO_KEY[m["key"]]] = Value(value=True, evidence=_ev(source, ln))
                found = True
    if " = " in text and ("atch size" in text or "ccumulation steps" in text or " GPUs " in text):
        for m in HF_BANNER_BATCH.finditer(text):
            cfg[_HF_BANNER_KEYS[m["what"]]] = Value(value=int(m["v"]), evidence=_ev(source, ln))
            found = True
    if ("without GPU support" in text or "xFormers can" in text or "xformers" in text) and (
            m := SAVER_UNAVAILABLE.search(text)):
        cfg["bitsandbytes_unavailable" if m["bitsandbytes"] else "xformers_unavailable"] = Value(
            value=True, evidence=_ev(source, ln))
        found = True
    if ("Mixed Precision (AMP)" in text or "MEMBER: " in text or "Starting with " in text) and (
            m := LIGHTNING_RUN.search(text)):
        key, val = ("world_size", int(m["world"])) if m["world"] else ("bf16" if m["amp"] == "bfloat16" else "fp16", True)
        cfg[key] = Value(value=val, evidence=_ev(source, ln))
        found = True
    if " / " in text and ("atch size" in text or "ccumulation steps" in text) and (m := KOHYA_SUMMARY.match(text)):
        cfg[_KOHYA_KEYS[m["what"]]] = Value(value=int(m["v"]), evidence=_ev(source, ln))
        found = True
    if ("params" in text or "parameters" in text) and _param_counts(text, cfg, _ev(source, ln)):
        found = True
    if ("zero" in text or "ZeRO" in text) and ((m := ZERO_STAGE.search(text)) or ("zero" in text and (m := ZERO_CONFIG_FILE.search(text)))):
        cfg["zero_stage"] = Value(value=int(m["stage"]), evidence=_ev(source, ln))
        found = True
    if "reduce_bucket_size" in text and (m := ZERO_BUCKET.search(text)):
        cfg["reduce_bucket_size"] = Value(value=_ds_elements(m), evidence=_ev(source, ln))
        found = True
    if "_" in text and ("stage3_" in text or "zero_config" in text or "max_live" in text):
        for m in ZERO3_SETTING.finditer(text):
            cfg[f"zero3_{m['key']}"] = Value(value=_ds_elements(m), evidence=_ev(source, ln))
            found = True
    if ("SHARD" in text or "shard" in text) and (m := FSDP_SHARDING.search(text)):
        cfg["fsdp_sharding_strategy"] = Value(value=m["s"].upper(), evidence=_ev(source, ln))
        found = True
    elif "fsdp_sharding_strategy" in text and (m := FSDP_SHARDING_NUMBER.search(text)):
        cfg["fsdp_sharding_strategy"] = Value(value=FSDP_STRATEGY_BY_NUMBER[m["n"]], evidence=_ev(source, ln))
        found = True
    if "backward_prefetch" in text and (m := FSDP_BACKWARD_PREFETCH.search(text)):
        value = m["v"].upper()
        cfg["fsdp_backward_prefetch"] = Value(value="NONE" if value in ("NULL", "NO_PREFETCH") else value,
                                              evidence=_ev(source, ln))
        found = True
    if "offload_" in text and (m := OFFLOAD.search(text)):
        cfg["offload"] = Value(value=m["dev"] != "none", evidence=_ev(source, ln))
        for each in OFFLOAD_EACH.finditer(text):
            cfg[f"offload_{each['what']}"] = Value(value=each["dev"] != "none", evidence=_ev(source, ln))
        found = True
    if ("ffload" in text or "OFFLOAD" in text) and (m := FSDP_OFFLOAD.search(text)):
        cfg["offload_param"] = Value(value=bool(m["on"]) or m["v"].lower() == "true", evidence=_ev(source, ln))
        found = True
    if "optimizer" in text and (m := DS_OPTIMIZER.search(text)) and (m["name"] or m["type"]).lower() != "none":
        cfg["deepspeed_optimizer"] = Value(value=(m["name"] or m["type"]).lower(), evidence=_ev(source, ln))
        found = True
    if ("bit" in text or "Q" in text or "quant" in text or "gguf" in text) and QUANTIZED_WEIGHTS.search(text):
        cfg.setdefault("quantized_weights", Value(value=True, evidence=_ev(source, ln)))
        found = True
    if any(w in text for w in _SERVING_WORDS) and _serving_memory(ln, text, source, cfg):
        found = True
    if "use_peft" in text and PEFT_OFF.search(text):  # TRL's ModelConfig prints its lora_* defaults with PEFT off
        cfg["lora"] = Value(value=False, evidence=_ev(source, ln))
        found = True
    elif ("lora" in text.lower() and LORA.search(text)) or "lora_r" in cfg:
        cfg.setdefault("lora", Value(value=True, evidence=_ev(source, ln)))
        found = True
    return _stacks_named(ln, text, source, stacks) or found


_MONTH_INITIALS = frozenset("JFMASOND")


def _stacks_named(ln: Line, text: str, source: str, stacks: dict[str, Evidence]) -> bool:
    """The stacks a line names, in its text or in the prefix normalising took off it ("INFO:tensorflow:")."""
    found = False
    prefix = ln.raw[: min(400, len(ln.raw) - len(text))] if len(ln.raw) > len(text) else ""
    if prefix[:1] in _MONTH_INITIALS and (m := JOURNAL_HEADER.match(prefix)):  # the journal's, not the program's
        prefix = prefix[m.end():]
    folded, folded_prefix = _fold(text), _fold(prefix)
    for name, pat in STACKS.items():
        if ((_may_name(name, text, folded) and pat.search(text))
                or (prefix and _may_name(name, prefix, folded_prefix) and pat.search(prefix))) \
                and _stack_line_counts(text):
            stacks.setdefault(name, _ev(source, ln))
            found = True
    return found


# ---- per-step memory ---------------------------------------------------------------------------------
DS_MEMORY = lazy(
    r"MA (?P<ma>\d{1,20}(?:\.\d{1,20})?) GB\s+Max_MA (?P<maxma>\d{1,20}(?:\.\d{1,20})?) GB\s+CA (?P<ca>\d{1,20}(?:\.\d{1,20})?) GB\s+Max_CA (?P<maxca>\d{1,20}(?:\.\d{1,20})?) GB"
)
MEGATRON_MEMORY = lazy(
    r"\(after (?P<step>\d{1,20}) iterations\) memory \(MB\) \| allocated: (?P<a>[\d.]+) \| max allocated: (?P<ma>[\d.]+)"
    r" \| reserved: (?P<r>[\d.]+) \| max reserved: (?P<mr>[\d.]+)"
)
TITAN_MEMORY = lazy(r"\bstep:\s{0,4}(?P<step>\d{1,20})\b.{0,200}?\bmemory:\s{0,4}(?P<mem>\d{1,20}(?:\.\d{1,20})?)\s?(?P<unit>GiB|MiB)")
# mmengine's training log lines (OpenMMLab 2: mmdet 3, mmseg 1, mmpose 1, ...) carry the peak allocated memory since the
# last line, in MiB with no unit: "Epoch(train)  [1][  50/7330]  ...  memory: 9410  loss: ..." (get_max_cuda_memory
# resets the peak after reading it). mmcv 1.x's "Epoch [1][50/7330]\t..., memory: 8712, ..." is the peak since the
# start (no reset): never falling by construction, it would read as growth every step, so it is not a sample.
MMENGINE_MEMORY = lazy(r"^(?:Epoch|Iter)\(train\)\s{0,3}\[[^\n]{0,400}?\bmemory:\s{0,3}(?P<mem>\d{1,9})(?=[,\s]|$)")
# Hand-written and library memory prints: torch.cuda.memory_allocated()/max_memory_allocated()/memory_reserved()
# with any unit, detectron2's max_mem, Lightning DeviceStatsMonitor keys, "Allocated memory: 12.3 GB"; axolotl's
# metrics, the unit in the key ("'memory/max_mem_allocated(gib)': 34.89, 'memory/device_mem_reserved(gib)': 41.26"),
# and torchtune's, in GiB with no unit ("Step 10 | loss:1.23 ... peak_memory_alloc:16.4 peak_memory_reserved:17.1").
HAND_MEMORY = lazy(
    r"(?P<key>(?:max_mem_active|max_mem_allocated|device_mem_reserved)\((?P<kunit>gib|mib)\)"
    r"|peak_memory_(?:active|alloc|reserved)(?=:)|(?<=, )Peak mem(?= \d)"  # mlx-lm: "..., Peak mem 34.108 GB"
    r"|max_memory_allocated|memory_allocated|max_memory_reserved|memory_reserved|max_mem|allocated_bytes\.all\.current"
    r"|reserved_bytes\.all\.current|[Aa]llocated(?: memory| mem)?|[Rr]eserved(?: memory| mem)?|GPU mem(?:ory)?(?: used)?)"
    r"(?:\(\))?['\"]?\s{0,3}[:=]?\s{0,3}(?P<v>\d{1,12}(?:\.\d{1,6})?(?:[eE][+-]?\d{1,2})?)\s{0,2}"
    r"(?P<unit>[KMGT]i?B|[KMGT](?![a-zA-Z])|bytes|B\b)?"
)
OOM_TEXT = lazy(r"out of memory|Tried to allocate|OutOfMemory|OOM when allocating|RESOURCE_EXHAUSTED", regex.I)
_HAND_UNIT = {"K": "KiB", "M": "MiB", "G": "GiB", "T": "TiB", "bytes": "B", "B": "B"}
_KEY_UNIT = {"gib": "GiB", "mib": "MiB"}  # the unit an axolotl metric's key names
HF_MEMORY = lazy(r"['\"](?:train_)?(?:max_)?(?:memory_allocated|gpu_mem(?:ory)?|mem_gpu_peaked_delta)['\"]:\s{0,2}(?P<v>\d{1,20}(?:\.\d{1,20})?)")


Sample = MemorySample | Callable[[], MemorySample]  # a sample, or how to build it once it is known to be kept


class SampleSeries:
    """Memory samples kept in bounded space: the first ones, the last ones before the end, and a stride sample
    of the middle whose stride doubles as it fills, so a run of 10^6 steps keeps its shape in ~2,300 samples. A
    sample may come as the call that builds it: only the kept ones are built (most of a dense log's are dropped)."""

    FIRST, MIDDLE, LAST = 256, 1024, 1024

    def __init__(self) -> None:
        self.first: list[Sample] = []
        self.middle: list[Sample] = []
        self.last: deque[Sample] = deque()
        self.stride, self.passed = 1, 0

    def append(self, sample: Sample) -> None:
        if len(self.first) < self.FIRST:
            self.first.append(sample)
            return
        self.last.append(sample)
        if len(self.last) > self.LAST:
            old = self.last.popleft()
            if self.passed % self.stride == 0:
                self.middle.append(old)
                if len(self.middle) > self.MIDDLE:
                    self.middle, self.stride = self.middle[::2], self.stride * 2
            self.passed += 1

    def items(self) -> list[MemorySample]:
        return [s if isinstance(s, MemorySample) else s() for s in (*self.first, *self.middle, *self.last)]


def memory_samples(lines: Sequence[Line], source: str, markers: Markers | None = None,
                   whole: str | None = None) -> list[MemorySample]:
    """Per-step memory lines (DeepSpeed, Megatron, torchtitan, hand-written prints), each with the step printed
    before it, in bounded space (SampleSeries). `markers` of the same lines, when built, hold their steps already;
    `whole`, the lines' texts joined, when the caller has it: a form whose literal it lacks is not tried on any line."""
    out = SampleSeries()
    last = _LastStep(lines, markers.steps if markers is not None and markers.lines is lines else None)
    ds, megatron = whole is None or "MA " in whole, whole is None or "memory" in whole
    hand = whole is None or "mem" in whole or "llocated" in whole or "eserved" in whole
    if not (ds or megatron or hand):
        return []
    for k, ln in enumerate(lines):
        text = ln.text
        if ds and "MA " in text:
            m = DS_MEMORY.search(text)
            if m:
                out.append(partial(_ds_sample, m, last.before(k), source, ln))
                last.skip(k)
                continue
        if megatron and "memory" in text:
            m = MEGATRON_MEMORY.search(text)
            if m:
                out.append(MemorySample(
                    step=int(m["step"]), allocated_bytes=to_bytes(m["a"], "MiB"), max_allocated_bytes=to_bytes(m["ma"], "MiB"),
                    reserved_bytes=to_bytes(m["r"], "MiB"), max_reserved_bytes=to_bytes(m["mr"], "MiB"),
                    evidence=_ev(source, ln)))
                last.skip(k)
                continue
            m = TITAN_MEMORY.search(text)
            if m:
                last.set(k, int(m["step"]))
                out.append(MemorySample(step=last.step, max_reserved_bytes=to_bytes(m["mem"], m["unit"]),
                                        evidence=_ev(source, ln)))
                continue
            m = MMENGINE_MEMORY.match(text) if text.startswith(("Epoch(train)", "Iter(train)")) else None
            if m:  # the line is its own step's: its counter is read as the step
                out.append(MemorySample(step=last.before(k + 1), max_allocated_bytes=to_bytes(m["mem"], "MiB"),
                                        evidence=_ev(source, ln)))
                continue
        if hand and ("mem" in text or "llocated" in text or "eserved" in text) and not OOM_TEXT.search(text):
            step = last.before(k + 1)
            if got := _hand_figures(ln):
                out.append(partial(_sample, step, source, ln, got))
    return out.items()


def _ds_sample(m: regex.Match[str], step: int | None, source: str, ln: Line) -> MemorySample:
    """The sample of a DeepSpeed see_memory_usage line (its figures are digits: converting them cannot fail)."""
    return MemorySample(step=step, allocated_bytes=to_bytes(m["ma"], "GiB"), max_allocated_bytes=to_bytes(m["maxma"], "GiB"),
                        reserved_bytes=to_bytes(m["ca"], "GiB"), max_reserved_bytes=to_bytes(m["maxca"], "GiB"),
                        evidence=_ev(source, ln))


def _sample(step: int | None, source: str, ln: Line, got: dict[str, int]) -> MemorySample:
    return MemorySample(step=step, evidence=_ev(source, ln), **got)


class _LastStep:
    """The step counter printed last before a line, read only when a memory sample asks for it: most lines of most
    logs are never a sample, and trying every step pattern on each of them was most of the cost of a small log."""

    def __init__(self, lines: Sequence[Line], steps: list[Step] | None = None) -> None:
        self.lines = lines
        self.steps = steps  # every line's step, when they were read already (Markers)
        self.step_idx = [s.idx for s in steps] if steps is not None else []
        self.step: int | None = None
        self.unread = 0  # lines before this one have been read for a step

    def before(self, k: int) -> int | None:
        """The last step printed on lines[:k] (the lines a sample took are not step lines)."""
        if self.steps is not None:
            j = bisect_left(self.step_idx, k) - 1
            if j >= 0 and self.step_idx[j] >= self.unread:
                self.step = self.steps[j].n
            self.unread = max(self.unread, k)
            return self.step
        for j in range(k - 1, self.unread - 1, -1):
            if (s := step_of(self.lines[j])) is not None:
                self.step = s.n
                break
        self.unread = max(self.unread, k)
        return self.step

    def skip(self, k: int) -> None:
        """lines[k] is a sample line: its text is not read for a step."""
        self.before(k)
        self.unread = k + 1

    def set(self, k: int, step: int) -> None:
        """lines[k] printed `step` itself."""
        self.step, self.unread = step, k + 1


def _hand_figures(ln: Line) -> dict[str, int]:
    """The figures of a hand-written or library memory print, by field; none unless a figure carries a unit or is
    bytes."""
    got: dict[str, int] = {}
    for m in HAND_MEMORY.finditer(ln.text):
        unit = m["unit"]
        raw = m["v"]
        if unit is None and m["kunit"]:
            unit = _KEY_UNIT[m["kunit"]]
        elif unit is None and m["key"].startswith("peak_memory_"):
            unit = "GiB"  # torchtune's get_memory_stats: bytes / 1024**3
        elif unit is None:
            if "bytes" not in m["key"] or "e" in raw.lower():
                continue  # a bare number is only trusted as bytes from a *_bytes key
            unit = "B"
        try:
            value = to_bytes(raw, _HAND_UNIT.get(unit, unit))
        except UnitError:
            continue
        key = m["key"].lower()
        peak = "max" in key or "peak" in key
        field = ("max_reserved_bytes" if "reserved" in key and peak else "reserved_bytes" if "reserved" in key
                 else "max_allocated_bytes" if peak else "allocated_bytes")
        got.setdefault(field, value)
    return got


# ---- ranks -------------------------------------------------------------------------------------------
# Where a log names the failing rank without a line prefix: torch.multiprocessing.spawn's failure header,
# Lightning-style "[rank: 3]" / "(rank: 3/8)" banners, "on rank 3" in warnings and errors.
# A process label before each line a child process writes: Ray's actors and tasks ("(RayTrainWorker pid=25256,
# ip=10.0.0.5) text", "(WorkerDict pid=8812)", "(pid=4410)"), vLLM V1's engine and workers ("(EngineCore_DP0 pid=4108)",
# "(Worker_PP1_TP0 pid=..)", "(VllmWorker rank=1 pid=..)"). The program's own logging prefix may follow it.
PROCESS_LABEL = lazy(r"^\((?:(?P<name>[A-Za-z_][\w.:/-]{0,100})(?: rank=\d{1,5})? )?pid=(?P<pid>\d{1,10})"
                     r"(?:, ip=[\w.:-]{1,64})?\)\s?")
# Ray Train: the controller lists which worker pid holds which rank ("- (ip=10.0.0.5, pid=25256) world_rank=1,
# local_rank=1, ...") or the worker says it when it joins ("(RayTrainWorker pid=25230) Setting up process group for:
# env:// [rank=0, ...").
RAY_TRAIN_WORKER = "RayTrainWorker"
RAY_RANK_OF_PID = lazy(r"\bpid=(?P<pid>\d{1,10})\) world_rank=(?P<rank>\d{1,6})\b"
                       r"|^\(RayTrainWorker pid=(?P<pid>\d{1,10})[^)]{0,80}\) Setting up process group for: \S{1,200} "
                       r"\[rank=(?P<rank>\d{1,6})\b")
# Ray folds a worker's repeated lines into one printed later, the latest of them: "step 20 loss 2.3 [repeated 9x
# across cluster]" came before a failure that is printed above it.
RAY_DEDUP = lazy(r"\[repeated \d{1,9}x across cluster\]")
RAY_DEDUP_AFTER_LINES = 40


FRAME_ROWS = 3  # a CPython frame header a terminal cut goes on over at most this many rows


def join_cut_frames(lines: Sequence[Line]) -> Sequence[Line]:
    """CPython frame headers a terminal cut into rows (`File ".../conv.py",` / ` line 330, in __init__`) joined back:
    a row that starts one but is no FRAME, when it is one with the physical rows right after it."""
    out: list[Line] | None = None
    k = 0
    while k < len(lines):
        ln, j = lines[k], k
        if 'File "' in ln.text and ln.text.lstrip().startswith('File "') and not FRAME.match(ln.text):
            text = ln.text
            while j - k + 1 < FRAME_ROWS and next_row(lines, j) is not None:
                text += lines[j].raw[len(lines[j].raw.rstrip()):] + lines[j + 1].raw  # a cut at a space keeps it
                j += 1
                if FRAME.match(text):
                    break
            else:
                j = k
            if j > k:
                out = list(lines[:k]) if out is None else out
                out.append(ln._replace(text=text, raw="".join(r.raw for r in lines[k:j + 1]), last=lines[j].end))
                k = j + 1
                continue
        if out is not None:
            out.append(ln)
        k += 1
    return lines if out is None else out


def without_process_labels(lines: Sequence[Line]) -> Sequence[Line]:
    """Lines with a child process's label (PROCESS_LABEL) and the logging prefix after it removed; a Ray Train
    worker's line takes the rank its pid holds, when the log says it. The label stays in the line's raw text."""
    if not any(ln.text.startswith("(") and "pid=" in ln.text[:120] for ln in lines):
        return lines
    ranks = {m["pid"]: int(m["rank"]) for ln in lines if "pid=" in ln.text and (m := RAY_RANK_OF_PID.search(ln.text))}
    out = []
    for ln in lines:
        m = PROCESS_LABEL.match(ln.text) if ln.text.startswith("(") else None
        if m is None:
            out.append(ln)
            continue
        rank, text = strip_prefixes(ln.text[m.end():])
        if m["name"] == RAY_TRAIN_WORKER and ln.rank is None:
            rank = ranks.get(m["pid"])
        out.append(ln._replace(rank=ln.rank if ln.rank is not None else rank, text=text))
    return out


def ray_dedup_step_after(markers: Markers, end: int, rank: int | None, source: str) -> Value | None:
    """The step of the failing worker's folded step line that Ray printed after the message (see RAY_DEDUP)."""
    _, _, s_idx, steps = markers.for_rank(rank)
    for s in steps[bisect_right(s_idx, end):]:
        if s.idx > end + RAY_DEDUP_AFTER_LINES:
            break
        if RAY_DEDUP.search(markers.lines[s.idx].text):
            return Value(value=s.n, evidence=_ev(source, markers.lines[s.idx]))
    return None


SPAWN_HEADER = lazy(r"-- Process (?P<rank>\d{1,6}) terminated with the following error")
RANK_BANNER = lazy(r"[\[(]rank:?\s{0,2}(?P<rank>\d{1,6})(?:\s{0,2}/\s{0,2}\d{1,6})?[\])]", regex.I)
ON_RANK = lazy(r"\bon (?:global )?rank (?P<rank>\d{1,6})\b", regex.I)
RANK_LOOKBACK_LINES = 40  # a spawn header sits just above the traceback it introduces


def rank_near(lines: Sequence[Line], idx: int) -> Witness | None:
    """The rank the log attributes the message on lines[idx] to, when no line prefix says it."""
    first = lines[idx]
    m = ON_RANK.search(first.text) or RANK_BANNER.search(first.text)
    if m:
        return Witness(int(m["rank"]), first)
    for i in range(idx - 1, max(-1, idx - RANK_LOOKBACK_LINES), -1):
        ln = lines[i]
        m = SPAWN_HEADER.search(ln.text)
        if m:
            return Witness(int(m["rank"]), ln)
        if not ln.text.strip() and i < idx - 1 and not FRAME.match(lines[i + 1].text) \
                and "Traceback" not in lines[i + 1].text:
            break  # a blank line that does not open a traceback ends this failure's block
    return None
