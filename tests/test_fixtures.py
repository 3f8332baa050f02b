"""Every fixture with a sidecar: the parser must extract exactly the events the sidecar expects.

Known gaps stay visible as strict xfails (like semgrep's `todoruleid`): when one starts passing, the
test fails until it is removed from KNOWN_GAPS. A gap marked "held-out, scored only" is in the held-out third:
it is listed so the test knows it, and no change is made for it (test_held_out_gaps_are_marked keeps the mark).
"""

from __future__ import annotations

import pytest
from fixture_oracle import FIXTURES, compare, sidecars

from oomdoctor.parse import parse_files

KNOWN_GAPS = {
    "p1937-t5x-gpu-preallocate-bfc-27gib-glued-requested.log": "phase: XLA's peak-buffer listing whose operators all run under 'pjit(train_step)' before the BFC warning is not read as training",
    "p1936-t5meshtf-3b-scratch-one-gpu-root-errors-cut.log": "phase: a t5_mesh_transformer command line (default train mode, a fresh model_dir, a 3B gin) before TensorFlow's root error is not read as training",
    "p1950-ribbonfold-1625-residues-12gb-run-sample.log": "held-out, scored only: phase: RibbonFold's 'load model checkpoint success' banner before 'run sample 0...' and 'num_recycle: 0' is read as set-up (init), though the failure comes after the sample run began (unknown expected)",
    "p1955-openfold3-low-mem-runner-oom-prediction-summary.log": "held-out, scored only: detect: a runner's caught 'ERROR:<logger>:OOM for query_id(s) ... See logs/predict_err_rank0.log' line (no figures) before a Lightning predict bar is not detected",
    "p1923-practicaldl-ch2-vgg16-per-frame-bfc-quoted.log": "phase: the traceback under the BFC OOM warning ends in the VGG16 constructor (process_image -> VGG16(weights='imagenet', ...)) building the model, which is not read as set-up (init expected)",
    "p1924-dlherotutorials-llama-4gb-generate-cell.log": "detect: the notebook's 'OutOfMemoryError   Traceback (most recent call last)' header printed after the full message (pasted first) is read as a second event (1 expected)",
    "p1910-voicestudio-500-cuda-error-apierror-tauri.log": "held-out, scored only: events: one 'CUDA error: out of memory' failure printed twice (the toast text, then the front end's 'ApiError: ' re-raise of it with the same advice lines) is read as two events",
    "p1896-ds4-rtxpro6000-q8-fp16-cache-alloc-repeated.log": "phase: the engine's command line with a prompt "
    "('./ds4 -m ... -p ...') and its start-up lines before the refused cache allocation are not read as generation",
    "p1894-petals-docker-rpc-inference-caught-recover.log": "phase: a Petals server's rpc_inference step (attention-cache alloc, then backend inference_step with use_cache=True) is read as eval, not generate",
    "p1892-flexflowserve-init-ipc-handle-realm.log": "phase: a Realm CUDA-module failure right after a FlexFlow serve.init(...) call, with nothing loaded, is not read as set-up",
    "p1891-flexgen-wsl2-opt67b-pinned-copy-thread.log": "phase: FlexGen's stage line 'warmup - init weights' (after its 'model size: ...' banner) is not read as set-up",
    "p1807-kaldi-nnet3-train-region-8gb-shared-gpu.log": "phase: the program Kaldi's ERROR header names "
    "('nnet3-train[5.5]') is not read as training",
    "p1806-rnntransducer-retyped-bracketed-typos.log": "held-out, scored only: detect: a 1.4-2.0 message retyped in square brackets with its own typos ('CUDA out of the memory.', figures glued to units, 'resrved', 'Pytorch') is not detected",
    "p1816-monogs-retyped-unpunctuated-ipc-warning.log": "figures: a 2.2-2.8 message retyped without its full stops "
    "('... CUDA out of memory Tried to allocate 20.00 MiB GPU 0 has a total capacity of ...') is read up to its free "
    "figure; the process and allocated clauses after the first missing stop are not",
    "p1817-hislam2-keyframe-bar-glued-distcuda2-badalloc.log": "phase: a SLAM run's 'Processing keyframe 11 gs 0: 4%|' frame bar glued to the traceback, failing in the online mapping of that keyframe, is not read as training (the bar counts frames, so no step)",
    "p94-gpt2chitchat-tf-job-on-gpu0.log": "phase: the train.py launch reads as training; the thread does not say how far the run got on a GPU another job already filled (unknown expected)",
    "p9-colossalai-seqlen.log": "held-out, scored only: its context changed with the training-script launch read as training (not examined)",
    "p1771-nvflare-splitnn-resnet50-validate-retyped-quoted.log": "held-out, scored only: detect: the 2.1 message retyped in prose ('a \"torch.cuda.OutOfMemoryError: CUDA out of memory\" error. It says it tried to allocate 20.00 MiB, GPU 0 has ...', commas for full stops) is not detected",
    "p1651-easy-fewshot-cifarfs-test-features-batch-fs.log": "detect: the bare first clause 'RuntimeError: CUDA out of memory' quoted inside a sentence (closed by '\".') under the command line is not detected",
    "p1652-avalancherl-train-exp-backward-bare-class.log": "detect: the exception class alone, 'torch.cuda.OutOfMemoryError' with no message, above a cut frame fragment (train_exp, self.loss.backward()) is not detected",
    "p1653-tsa-imagenet-source-memory-bank-glued.log": "detect: 'RuntimeError: CUDA out of memory.' glued after a colon inside a prose line and followed by more prose is not detected",
    "p1656-adaptsegnet-gta2cityscapes-multi-1070-thcstorage.log": "held-out, scored only: phase: a pre-1.0 THCudaCheck whose traceback runs through train_gta2cityscapes_multi.py's main and loss_calc is not read as training",
    "p1680-showui-flask-concurrent-requests-two-glued.log": "detect/phase: a second message glued after the first on the same line (both behind an app's 'An error occurred during inference: ' prefix) is not detected, and the prefix is not read as generation",
    "p1681-cogcom-sat-cli-demo-quant8-rank0-cut-at-gpu.log": "phase: SAT's '[INFO] [RANK 0]' banners building the model (building CogCoMModel model, number of parameters) before the caught message are not read as set-up (init expected)",
    "p1682-omniparser-docker-gradio-killed-after-images.log": "phase: Ultralytics' per-image 'image 1/1 ...' and 'Speed: ... inference ... per image' lines before bash's 'Killed' job report are not read as inference (eval expected)",
    "p1728-stream-diffvsr-81-frames-576-48gb.log": "phase: the video SR script's 'Read 81 frames, FPS: 16.0. Resolution: 576 * 576.' input line above the message is not read as inference (eval expected)",
    "p1729-vr-baseline-fgst-deblur-demo-inline-code.log": "phase: the 'python demo/restoration_video_demo.py ...' command in an inline-code span right above the message is not read as inference (eval expected)",
    "p1730-mprnet-deblur-demo-2gb-cached-fenced.log": "held-out, scored only: phase: the fenced 'python demo.py --task Deblurring ...' command above the fenced message is not read as inference (eval expected)",
    "p1665-nncf-mmdet-load-checkpoint-58mib-reserved.log": "phase: the traceback printed after the message (train_detector -> mmcv load_checkpoint -> torch.load restoring tensors) is not read as checkpoint loading at set-up (init expected)",
    "p1621-cellbender-epoch009-poisson-lgamma-glued.log": "phase: CellBender's 'cellbender:remove-background: [epoch 009]  average training loss: ...' line right above the traceback tail is not read as training",
    "p1635-minigpt4video-llama2-a4000-init-finished-cut.log": "phase: the finished shard-loading bar is read as "
    "set-up although MiniGPT4-Video then prints 'Loading LLAMA Done' and 'Initialization Finished' (generation expected)",
    "p1579-image-retrieval-inceptionv3-cub-angular-cached.log": "held-out, scored only: phase: the 'python main.py --model inceptionv3 --mode train ...' command line above the traceback tail is not read as training",
    "p1596-torchhub-deeplabv3-resnet50-24gb-colons-retyped.log": "figures: a retyped 1.x-2.0 message with colons "
    "after the GPU index and the total ('(GPU 0: 21.99 GiB total capacity: 21.38 GiB already allocated; 21.42 "
    "GiB reserved ...') keeps only the request and GPU index, losing total, allocated and reserved",
    "p1613-char-rnn-train-lua-caddtable-rmsprop-thcudacheck-smi-cut.log": "held-out, scored only: phase: the Lua "
    "stack traceback through train.lua's opfunc under optim's rmsprop is not read as training",
    "p1611-connorjl-gpt2-sample-sequence-past-concat-monitored-session.log": "held-out, scored only: phase: the "
    "failing node 'sample_sequence/while/concat (defined at .../sample.py:61)' is not read as generation",
    "p1538-econ-infer-v100-pixie-bar-glued-bad-alloc.log": "step/phase: a bare tqdm bar at 0/1 (the per-subject "
    "bar of 'python -m apps.infer', after 'Dataset Size: 1') is read as training step 0 rather than inference "
    "(eval, no step)",
    "p1530-mimictalk-16gb-drv-secc-to-cuda-cut.log": "phase: the traceback runs through the app's infer_once_args, "
    "infer_once and forward_system (talking-head inference) but is not read as inference (eval)",
    "p1532-hallo-two-8gb-cards-windows-zero-free.log": "held-out, scored only: phase: the 'python inference.py "
    "--source_image ... --driving_audio ...' command right above the message is not read as inference (eval)",
    "p1533-ipnet-test-v100-docker-wrapped-gpu-index-lost.log": "held-out, scored only: figures: a 1.4-2.0 message "
    "wrapped after '(GPU' whose paste lost the index ('(GPU' + '15.78 GiB total capacity; ...') reads the total as "
    "GPU 15 and loses the total, allocated, free ('235.19 MiBe;') and reserved figures",
    "p1548-detr3d-dist-test-elastic-exitcode9-cut.log": "held-out, scored only: phase: the 'tools/dist_test.sh <config> <ckpt> 1 --eval=bbox' command line above torchelastic's exitcode -9 line is not read as eval",
    "p1546-cmt-spconv-tensorview-error-2-glued.log": "held-out, scored only: detect: spconv's tensorview 'RuntimeError: TensorStorage ... tensor.h 168' over 'cuda failed with error 2 out of memory.' is not found as an event",
    "p1545-transfuser-carla-agent-setup-6gb-cut.log": "phase: the CARLA leaderboard's '> Setting up the agent' banner and checkpoint loads, then 'Could not set up the required agent:' right above the message, are not read as init",
    "p1486-craftreimpl-test-fre-typo-quoted.log": "figures: a retyped 1.0-1.3 message whose free clause reads "
    "'567.00 MiB fre;' loses both the free and the cached (reserved-but-unallocated) figures",
    "p1489-swintextspotter-train-8gb-cjk-quote-glued.log": "phase: the Chinese prose glued before the message "
    "says the error came during training (训练), which is not read as train",
    "p1517-tortoise-notebook-random-voice-t4.log": "phase: the pasted notebook cell above the message calls tts.tts_with_preset(...) and saves and plays the clip (speech synthesis, inference only), but it is not read as inference (eval)",
    "p1521-comfyui-easy-indextts2-24gb-start-inference-cut.log": "phase: the node's '>> start inference...' banner right above ComfyUI's '!!! Exception during processing !!! Allocation on device' is not read as inference (eval)",
    "p1440-graphvite-wikidata5m-solver-build-check-failed.log": "phase: the glog stack through the solver's "
    "build (Memory<>::resize in SolverMixin<>::build), right after the knowledge graph's load, is not read as init",
    "p1441-gcnii-fullsupervised-features-to-device-cuda-error.log": "held-out, scored only: phase: the failing frame "
    "moves the feature matrix to the GPU ('features = features.to(device)') inside a function named train, before any "
    "epoch, and is read as training rather than set-up (init)",
    "p1445-geodock-colab-a100-relu-capacty-cut.log": "phase: the notebook cell fails inside runner.dock() "
    "(prediction with a model built two lines up): dock names no phase, so it reads unknown, not inference (eval)",
    "p1357-if-trellis-8gb-error-in-image-to-3d-cut.log": "held-out, scored only: phase: two finished 'Sampling' bars "
    "before the node's 'Error in image_to_3d:' message are not read as generation",
    "p1353-dream-in-4d-tcnn-cumemcreate-retyped-bold.log": "detect: tiny-cuda-nn's cuMemCreate failure retyped by hand "
    "('**Runtime Error:...gpu_cemory. h: 584 cuMemCreate (...) failed: CUDA-ERROR_OUT_OF-MEMORY**') is not found",
    "p1315-rwkv-runner-cpu-allocator-switch-model-500.log": "phase: the uvicorn access line after the message, "
    "'POST /switch-model' answered 500 (the model load failing), is not read as set-up (init)",
    "p1250-diplomacy-cicero-selfplay-8gb-allowed.log": "phase: ParlAI's start-up lines ('loading dictionary from ...', "
    "'BartClassifier: full interactive mode on.') before the message are not read as set-up (init)",
    "p1172-metanlrpp-retyped-thied-32gb.log": "detect: a hand-retyped message ('RuntimeError:CUDA out of memory, "
    "thied to allocate 352.00MB(GPU 0; 31.75GiB total capacity:29.93GiB ...') is not detected at all",
    "p1169-ape-gan-fgsm-generate-2gb-windows.log": "phase: the script's own name (generate.py, which generates "
    "adversarial examples with FGSM) reads as generation; the attack's backward() no longer reads as training",
    "p1115-internlm-xcomposer-2d5-hd40-beams-47gib.log": "held-out, scored only: phase: a model.chat(..., num_beams=3) "
    "call under torch.autocast above the message is not read as generation",
    "p1067-lucidrains-stylegan2-exact-iteration.log": "phase: the quoted \"stylegan2_pytorch --data ... "
    "--num-train-steps ...\" training command above the message is not read as training",
    "p1071-stargan-v2-broken-allocated.log": "held-out, scored only: figures: a message with a stray space inside "
    "\"a llocated\" and its closing backtick on the next row loses its free and reserved figures",
    "p1001-deepmd-kit-dp-test-bfc-concat.log": "phase: DeePMD-kit's \"# ----output of dp test----\" / \"# testing system :\" "
    "banner (a dp test run) above TensorFlow's BFC message is not read as evaluation",
    "p1019-phenogpt-llama2-7b-3060-caught-per-sample.log": "phase: the finished \"Loading checkpoint shards\" bar and "
    "\"model successfully loaded\" before per-sample failures read as init",
    "p1034-detpro-prompt-train-3090-backticks.log": "phase: DetPro's \"python prompt/run.py train ...\" command in a "
    "code span after the message is not read as training",
    "p967-ocsort-yoloxx-train-6g-command-backticks.log": "held-out, scored only: phase: the YOLOX "
    "tools/train.py command line in backticks (Windows 'py -3.8' launcher) above the message is not read as training",
    "p980-gssdf-libtorch-occ-prior-8gb.log": "phase: a C++ mapper's own \"Training mode initialized with config: ...\" "
    "banner (then its prior point cloud saved) before libc10's terminate/what() message is not read as training",
    "p901-raft-demo-1440x2560-corr-volume-12gib.log": "held-out, scored only: phase: RAFT's CorrBlock.__init__ frame, "
    "called from the model's forward in test mode, is read as set-up (init)",
    "p918-fauxpilot-codegen350m-ds-backticked-then-banner.log": "phase: the message is quoted above the pasted "
    "console of the same run, so the Trainer's \"***** Running training *****\" block comes after it and is not read",
    "p805-pcaccumulation-waymo-three-refusals-glued-bars.log": "held-out, scored only: a message retyped with \"GPU O\" "
    "(a letter) loses its figures or is missed, and the tqdm bar glued after each message is not read as the step",
    "p754-nunchaku-flux-loader-mio-read-fallbacks-tensor-h.log": "phase: the raised failure (line 4), after "
    "the loader's two caught ones (read as loading since 2026-11-29), has its traceback cut inside ComfyUI's executor: "
    "nothing of its own names the loading",
    "p757-autosdpaint-krita-inpaint-lora-linear-8gb-cut.log": "phase: frames through the web UI's ldm attention and Lora Linear forward (UNet sampling) are not read as generation",
    "p709-pixtral-comfy-node-217-frame-batch-16gb.log": "phase: a ComfyUI VLM node's own \"Prompt tokens: 8\" line after its image batch, then ComfyUI's \"Exception during processing\", is not read as generation",
    "p710-comfyui-molmo-4090-bnb4bit-timestamped-allocation.log": "held-out, scored only: phase: a failure after the checkpoint-shard bars finished (2/2) is read as model loading, not the node's generation",
    "p706-localaiocr-deepseekocr2-8gb-laptop-error-prefix.log": "held-out, scored only: phase: an app's own \"Error during inference: \" prefix on an OCR model that decodes text is not read as generation",
    "p663-tutel-glm-nvfp4-8xa100-cuda-graph-capture-rank6-cut.log": "phase: the message (cut after 'Tried', read since "
    "2026-11-29) comes from the script's own CUDA-graph build (build_cugraph) before serving: no frame name says set-up",
    "p661-makani-fcn3-pretrain-8xh200-mpirun-rank3.log": "phase: an mpirun command line running train.py (the stray backtick glued to its end) is not read as training",
    "p633-marieai-segmenter-70gib-page-rich-log-wrapped.log": "held-out, scored only: figures: a rich-logged message with the log time after its first row and the rest wrapped into indented, blank-padded rows keeps only the first row's figures",
    "p601-seco-train-src-bar-569-glued-killed.log": "held-out, scored only: phase: an unlabelled tqdm bar (2975 = the Cityscapes train split, a per-image pass) is read as training",
    "p596-vllmgfx906-qwen3-32b-tp2-hip-glued-engine-traceback.log": "held-out, scored only: phase: a vllm serve command line followed by the failure is not read as start-up",
    "d-host-cpualloc-fooocus-twice.log": "held-out, scored only: phase: frames name a generate pipeline, the sidecar says init",
    "d-host-k8s-openpai-oomkilled.log": "phase: the pod message embeds the job log with literal \\n",
    "d-kv-vllm-compose-no-cache-blocks.log": "held-out, scored only: line: the raise statement quoting the message is taken first",
    "d-tf-automl-bfc-int8.log": "phase: train is only implied by lines after the failure",
    "mix-espresso-fairseq-oom-summary.log": "held-out, scored only: phase: train is only in fairseq's warning wording",
    "p3-lmmr1-kvcache.log": "Ray actors: three processes' CUDA errors read as two; vLLM wake_up not a generate frame",
    "p38-tfmodels-mnist-eval.log": "phase: TF Estimator's 'Saving checkpoints' line is read as a save; evaluation followed it "
                                   "(the rules discount a save for TensorFlow)",
    "p48-nerf-testrender.log": "phase: a test render inside train() is named only by a keyword (render_kwargs_test)",
    "p61-llava-lora-epochs.log": "phase: a progress bar cut before its counts after the message is not read as training",
    "p62-ultralyticshub-autobatch-tal.log": "phase: train is implied only by the loss's box assigner frame (tal.py)",
    "p66-fasttext-wordvec-badalloc.log": "phase: fastText's own 'Read 124M words' set-up line is not read as init",
    "p66-sentencepiece-seed-badalloc.log": "phase: sentencepiece's seed-piece step is not read as init",
    "p68-monairc-unetr-val-countmap.log": "phase: the validation lines were pasted after the message, not before it",
    "p70-tacotron2-rayhane-exiting-clipnorm.log": "phase: a feeder's 'Generated N train batches' banner is not training",
    "p71-deptreernn-ngram-badalloc.log": "phase: a C++ tool's 'RnnWeights: allocate' set-up lines are not read as init",
    "p71-mitie-wordrep-cca-badalloc.log": "phase: MITIE's CCA fit banner is not read as training",
    "p71-stego-eval-concat-cpualloc.log": "step: a finished bar inside an evaluation script (Hydra hides <module>) is counted",
    "p71-twittercnn-padding-killed.log": "phase: a data helper's 'padding sentences' step is not read as init",
    "p73-legalner-spacy-trf-4gb.log": "phase: spaCy's 'Aborting and saving the final best model' after training is not read",
    "p73-scispacy-scibert-parser-epoch1.log": "step: spaCy's 'Epoch 1: 347/2300' bar is read the Lightning way "
                                              "(epoch x total + n); spaCy's bar restarts at each evaluation",
    "p75-minkowski-skip-batch-leak.log": "phase: the loss and memory prints around three skipped batches are not steps",
    "p75-scfnet-test-softmax-tf.log": "phase: a TF test loop's 'min possibility' voting line is not read as eval",
    "p76-deeprl-dqn-replay-feed.log": "phase: a replay buffer's feed() inside the agent's step is not a train frame",
    "p76-muzero-ray-replaybuffer.log": "phase: Ray's memory monitor killing a self-play run names no phase",
    "p78-ollama-rocm-steam-vram.log": "gpu/phase: ggml's 'current device: 0' and ollama's server lines are not read",
    "p81-screenshot2code-ipython-memoryerror.log": "phase: a notebook cell loading the whole dataset is not read as init",
    "p82-rtsbs-fullvideo-cpualloc.log": "phase: reading a whole video before the loop is not read as init",
    "p86-bytetrack-300cls-label-assign.log": "phase: YOLOX's caught label-assignment OOM lines are not read as training",
    "p88-dreamboothext-lora-sample-at-save.log": "phase: 'Exception saving sample' (preview images inside the save) "
                                                 "is read as training",
    "p94-rocmtf-vega-startup-retries.log": "phase: TensorFlow's 'Created TensorFlow device' start-up line is not init",
    # held-out fixtures: their gaps are recorded, not tuned away
    "p91-lightnetpp-val-bootstrap-xent.log": "held-out, scored only: phase: a 'val_loss = ...' statement inside train() is not read as eval",
    "p93-ofa-fairseq-fixed-point.log": "held-out, scored only: step/phase: OFA's fairseq progress line above a recovered-OOM warning",
    "p94-cutorch-require-busy-gpus.log": "held-out, scored only: phase: a Lua 'require' traceback while cutorch sets up every GPU is not init",
    "p85-wekws-kws-train-frame-after.log": "held-out, scored only: phase: the one train.py frame pasted after the message is not read",
    "p89-determined-rank0-two-slots.log": "held-out, scored only: rank: Determined's '[rank=0]' prefix is not read",
    "p89-easyr1-ray-save-raylet.log": "held-out, scored only: detect: the raylet's 'killed due to memory pressure (OOM)' line is not read",
    "p82-har-readvideos-vstack-memoryerror.log": "held-out, scored only: step/phase: an unlabelled video-loading bar is read as training",
    "p82-latentsync-stage1-4090-rank0.log": "held-out, scored only: figures: 'total capacityof' (no space) defeats the 2.1+ format",
    "p82-seedvr2-postproc-5730-frames-cpualloc.log": "held-out, scored only: phase: an upscaler's 'Phase 4' post-processing is not generate",
    "p84-hugectr-dlrm-terabyte-embedding.log": "held-out, scored only: detect: HugeCTR's 'Runtime error: out of memory' (general_buffer.hpp) "
                                               "is not an OOM yet",
    "p76-dt-atari-buffer-killed.log": "held-out, scored only: phase: a replay buffer loading line before a bare kill is not init",
    "p56-seq2seq-batch.log": "held-out, scored only: phase: train is named only in an encoder's 'mode=train' INFO line",
    "p22-automodel-batch.log": "held-out, scored only: allocated: an excerpt elided with '...' puts it on its own line, outside the message",
    "p73-parlai-drqa-970m-adamax.log": "held-out, scored only: step: ParlAI's 'updates = 30' lines are not read as steps",
    "p75-3dgs-simpleknn-badalloc-v100.log": "held-out, scored only: phase: a CUDA extension's distCUDA2 call at scene set-up is not init",
    "p70-zipvoice-hindi-h100-softmax.log": "held-out, scored only: step/phase: icefall's 'Epoch 1, batch N, global_batch_idx: M' is not a step",
    "p63-svdxtend-1280x720-h100-ddp-silu.log": "held-out, scored only: step/phase: a 'Steps: 0%' bar glued before 'Traceback' is not read",
    "p64-alphafold-bfc-longseq.log": "held-out, scored only: line: the BFC allocator line and XLA's report are read as one event at the second",
    "p47-mlxexamples-capacity.log": "held-out, scored only: detect: MLX's '[malloc_or_wait] Unable to allocate' abort is not read as an OOM",
    "p23-fastai-lrfind-batch.log": "held-out, scored only: phase: fastai's lr_find (training steps) is not a train frame",
    "p28-jetson-inference-hostoom.log": "held-out, scored only: detect: a MemoryError named inside a PicklingError is not read as an OOM",
    "n2-megatron-load-optim-nccl-calloc-cublas.log": "held-out, scored only: two NCCL warnings from two devices read as one; calloc sizes",
    "n2-pytorch-thd-nccl-allreduce-init-oom.log": "held-out, scored only: gpu_index: 2018 NCCL warning without the NCCL tag",
    "p100-cutagi-resnet-batchsize-realloc-leak.log": "step: an epoch-level bar's count ('Epoch 4/10 ... 4/10') is read as "
                                                     "the step",
    "p100-marian-save-adam-bad-alloc.log": "step/phase: Marian's 'Up. 50000' progress and 'Saving model' banners are not read",
    "p100-ssdtf-laptop-create-model-bad-alloc.log": "held-out, scored only: a 'Creating the model...' line is not read as init",
    "p100-t2t-eval-bad-alloc.log": "held-out, scored only: save lines then an evaluation banner read as save; the restored "
                                   "checkpoint's step is not read",
    "p96-hsmr-vitdet-detect-bar-glued.log": "held-out, scored only: a 'Batch Detection 0/7' inference bar is read as "
                                            "training step 0",
    "p101-sdsandbox-keras-generator-memoryerror.log": "phase: a MemoryError in a Keras data-generator thread is not "
                                                      "read as training",
    "p102-meshtfjax-tohf-tpu-core-oom.log": "phase: a checkpoint-conversion script building its network is not read as init",
    "p102-perceiverar-sample-cubin-tf-gpu.log": "phase: a notebook cell's sampling call is not read as generate",
    "p103-eesen-ctc-parallel-alloc-failure.log": "detect: Kaldi's 'ERROR (...) Memory allocation failure' is not read",
    "p102-colabfold-tpu-v2-hbm-program.log": "held-out, scored only: a structure-prediction loop is not read as eval",
    "p103-paddlespeech-ds2-pass0-check-failed.log": "held-out, scored only: old PaddlePaddle's 'Check failed: cudaSuccess "
                                                    "== cudaStat (0 vs. 2) Cuda Error: out of memory' is not read",
    "p106-rlswarm-mps-two-ooms-stack.log": "held-out, scored only: a launcher shutting down the trainer is not read as train",
    "p108-deepfacelab-h128-bs128-bfc.log": "phase: DeepFaceLab's trainer start banner is not read as training",
    "p109-sdfstudio-neusangelo-tcnn-cumemcreate.log": "phase: train is named only by the ns-train command line",
    "p112-caffe-testnet-init-syncedmem.log": "phase: glog's C++ stack naming Solver::InitTestNets is not read as init",
    "p107-xlnetext-conll-adam-slot-busy-gpu.log": "held-out, scored only: an Adam slot's initializer node is not read as init",
    "p108-faceswap-debug-thread-adam-oom.log": "held-out, scored only: a training thread's DEBUG record is not read as train",
    "p109-gaussianflow-densify-clone-debugger.log": "held-out, scored only: densification frames are not read as train",
    "p109-omnigs-360roam-libtorch-c10-oom.log": "held-out, scored only: libtorch C++ frames at start-up are not read as init",
    "p110-llamaedge-wasinn-compute-buffer.log": "held-out, scored only: WasmEdge-prefixed llama.cpp context lines are not init",
    "p112-ndsb-theano-chunk1-devicemem.log": "held-out, scored only: Theano's device allocator message is not read",
    "p114-mxmaskrcnn-batch2260-wrapped-fail.log": "detect: MXNet's message wrapped mid-word ('cudaMalloc fail' / 'ed: out of "
                                                  "memory') under a 'terminate called' header is not joined",
    "p114-trtdemo-sd-vae-context-20g.log": "phase: a TensorRT engine's allocate_buffers at start-up is not read as init",
    "p117-catboost-gpu-bigpool-stackpool.log": "phase: CatBoost's fit with no iteration line yet is not read as train",
    "p114-dle-ncf-tf-negatives-sigkill.log": "held-out, scored only: Open MPI's 'exited on signal 9 (Killed)' is not read",
    "p114-mxnet-hrnet-retry-failed.log": "held-out, scored only: the event is put on the message line, not the exception's "
                                         "first line",
    "p117-xgboost-dask-deep-hist-cache.log": "held-out, scored only: XGBoost's figures and worker rank are not read",
    "p122-dpr-flat-index-bad-alloc.log": "phase: building a faiss index before any search is not read as init",
    "p119-nougat-predict-stack-scores.log": "held-out, scored only: step-by-step decoding in an inference script is read "
                                            "as eval, the sidecar says generate",
    "p120-slowfast-test-6gb.log": "held-out, scored only: a test-only run (TRAIN.ENABLE False) is not read as eval",
    "p125-omegafold-model2-379res-skip.log": "phase: a structure predictor's 'Failed to generate ... due to' prefix is not "
                                             "read as eval (inference)",
    "p127-audioldm-60s-generation.log": "phase: the sidecar says generate from the thread; the log is the message alone",
    "p125-diffdock-failed-on-complex-10gb.log": "held-out, scored only: a docking run's 'Failed on [...]' prefix is not "
                                                "read as eval (inference)",
    "p132-gptsovits-batch-infer-decode.log": "held-out, scored only: phase: decode_next_token frames are not read as "
                                             "generation",
    "p132-transformertts-durations-getoetet.log": "held-out, scored only: phase: a 'Processing training set' bar of a "
                                                  "data-extraction script is not read as eval",
    "p132-uvr-mdxnet-2gb-secondary.log": "phase: an audio-separation GUI's frames (process_start, seperate, demix) "
                                         "name no phase we read; the sidecar says eval (inference)",
    "p133-tabbyapi-model-switch-scratch-wrapped.log": "held-out, scored only: Docker Compose's service prefix inside a "
                                                      "wrapped message hides its later figures",
    "p137-video2x-caffe-five-threads.log": "two processes' Caffe failures four lines apart are read as one: glog's "
                                           "thread id is not compared",
    "p137-wanwrapper-highvram-lora-h100.log": "phase: a diffusion sampler's 'Sampling 81 frames ... 25 steps' banner and "
                                              "bar are not read as generation (the LoRA-loading bar before them wins)",
    "p139-landmark-train-poses-killed.log": "held-out, scored only: phase: a kill after data loading, before any step",
    "p140-itex-arc350m-sd-fp32-xpu.log": "held-out, scored only: the allocator's line and the exception for one "
                                         "allocation: the event is put on the exception, without the XPU index",
    "p140-trtpose-nano2gb-repl-killed.log": "phase: a kill in a REPL right after the model's constructor line is not "
                                            "read as set-up",
    "p141-monai-bundle-ci-evaluator-shared-gpu.log": "phase: a MONAI bundle's evaluator config is not read as eval",
    "p141-samgeo-uav-orthomosaic-84gib.log": "figures: the message was retyped from a screenshot ('of whi ich'); its "
                                             "later figures are not read",
    "p142-maniskill-ppo-rgb-epoch103.log": "held-out, scored only: a PPO loop's 'global_step=' progress line is not "
                                           "read as the step",
    "p143-metaseq-oom-warning-huge-batch.log": "held-out, scored only: a message cut inside its reserved figure, and "
                                               "metaseq's training lines not read as train",
    "p145-pix2pix-lua-getparameters-thcudacheck.log": "phase: a Lua stack traceback's frames (getParameters) are not "
                                                      "read",
    "p145-wav2lip-opencv-frame-read-host.log": "held-out, scored only: OpenCV's '(-4:Insufficient memory) Failed to "
                                              "allocate N bytes' is not read as a host allocation failure",
    "p146-baselines-pposgd-mpi8-ctxretain.log": "TensorFlow 1's StreamExecutor context failure hard-wrapped mid-word: the "
                                                "event is put on its second line, without the ordinal or the total",
    "p146-nscl-epoch15-validation-jaccrun-killed.log": "held-out, scored only: a finished epoch's batch count is read "
                                                       "as the step",
    "p147-clipinterrogatorext-flavor-chain-12gb.log": "held-out, scored only: an inference tool's 'Flavor chain' bar is "
                                                      "read as a training loop",
    "b-msswift-rlhf-rank15-private-pools.log": "held-out, scored only (not viewed): its sidecar keeps phase unknown "
    "under the earlier convention that another rank's traceback says nothing of this rank's phase; since 2026-11-29 "
    "a traceback of another rank right after the message, with a phase's frame by name, is read (train)",
    "b-vllm-lora-private-pools.log": "held-out, scored only (not viewed): its sidecar keeps the message's sole "
    "'Process N' clause as another process; since 2026-11-29 a sole listed process that makes up the card's used "
    "memory (and at least about PyTorch's reserve) is read as the failing process under a container's pid",
    "p149-hunyuanvideo-xdit-hip-rank3.log": "phase: rank 3's message, then rank 2's traceback (borrowed since "
    "2026-11-29): its frame, the video sampler's predict(), reads as evaluation where it samples (generate)",
    "p149-hyavatar-h100-audio-sampling.log": "held-out, scored only: a lone 'Process N has' clause larger than the "
                                             "card is read as this process",
    "p149-wan21-t2v13b-vae-pad-12g.log": "held-out, scored only: phase: a VAE's F.pad frames are not read as generation",
    "p151-bertopic-ngram-probs-terminated-worker.log": "held-out, scored only: joblib's TerminatedWorkerError (a worker "
                                                       "the OS may have killed) is not read as a host kill",
    "p156-simpletuner-aoti-expandable-map-oom.log": "held-out, scored only: the allocator's 'expandable_segments: "
                                                    "memory mapping failed with OOM' warning before an AOTInductor "
                                                    "wrapper's RuntimeError is not read as an OOM",
    "p160-elmo-bilstm-crf-lookup-killed.log": "held-out, scored only: phase: a data-preparation banner before "
                                              "'Killed' is not read as init",
    "p162-hunyuanimage3-nf4-loader-tips.log": "phase: ComfyUI's newer error panel names the failing node on a line of "
                                              "its own (a loader: init); only the older 'Error occurred when "
                                              "executing <node>:' header is read",
    "p163-padim-test-embedding-fold-cpualloc.log": "held-out, scored only: phase: the caller's test_outputs name in "
                                                   "the frames is not read as evaluation",
    "p166-comfy-vfi-rife-async-frames-on-gpu.log": "held-out, scored only: phase: a ComfyUI frame-interpolation "
                                                    "node (RIFE VFI) is not read as inference",
    "p166-flavr-interpolate-cpualloc-all-frames.log": "phase: the input video's transforms before any frame is "
                                                      "interpolated are not read as set-up (transforms also run "
                                                      "inside training steps)",
    "p166-rife-flowframes-interp-parallel-low-reserved.log": "held-out, scored only: phase: frames behind a GUI's "
                                                             "'M-D-YYYY HH:MM:SS: [E]' prefix are not read",
    "p168-protenix-2-chain-3200-tokens-a100-40g.log": "phase: a traceback glued to the end of a logger's message "
                                                      "line (its predict frames) is not read",
    "p168-scanpy-zheng17-1m-cells-killed.log": "phase: scanpy's reading and filtering lines before 'Killed' are not "
                                               "read as set-up",
    "p169-centerpoint-waymo-infos-pickle-killed.log": "phase/step: an unlabelled, finished bar over a data split's "
                                                      "frames before 'Killed' is read as the training step",
    "p171-oellm-lighteval-batchprobe-slurm-killed.log": "phase: lighteval's 'Detecting largest batch size' line glued "
                                                        "to a counter is not read as evaluation",
    "p172-openpi-pi0-a6000-init-train-state.log": "phase: the init_train_state call is only in the code line (the "
                                                   "frame is main, inside a wrapper named test_train)",
    "p174-sglangomni-s2pro-vocoder-2048tok.log": "phase: a serving engine's request lines before the message are not "
                                                 "read as generation",
    "p176-datasets-concat-deepcopy-memoryerror.log": "phase: a dataset being concatenated in a notebook cell is not "
                                                     "read as set-up",
    "p178-directml-tf-conv-bs16-dml0.log": "held-out, scored only: gpu index and phase: DirectML's device:DML:0 and "
                                           "its training are not read",
    "p178-ipexllm-vllm-qwen2-int4-a770.log": "held-out, scored only: phase: an XPU serving engine's generation is not "
                                             "read",
    "p182-optsd-1660s-standard-script.log": "held-out, scored only: phase: a txt2img launch command is not read as "
                                            "generation",
    "p183-ffdl-tf-learner-pod-killed-137.log": "held-out, scored only: phase: a kill right after TensorFlow creates "
                                               "its device, before any step, is not read as set-up",
    "p183-kftrainer-operator-init-oomkilled-ocp.log": "held-out, scored only: phase: a container OOM-killed at "
                                                      "creation is not read as set-up",
    "p153-neuralplexer-6gb-triangle-softmax.log": "held-out, scored only: phase: a structure-sampling call chain "
                                                  "(frames as bare 'file line function' rows) is not read as inference",
    "p151-infinity-rich-wrapped-cotenant.log": "held-out, scored only: a message wrapped over rich's padded console "
                                               "rows, 'CUDA' on one row and 'out of memory.' on the next",
    "p135-inpaint-yml-bs16-4gb.log": "phase: the log is a training config and the TensorFlow message; the sidecar's train "
                                     "comes from the thread",
    "p192-instructlab-granite-l4-cotenant.log": "phase: an `ilab model train` command line before a snip marker is not "
                                                "read as training",
    "p196-opendm-4090d-fsdp-full-sft-split-lines.log": "figures: a message retyped one clause per line; 'Process has X' "
                                                       "without a PID and the allocated clause are not read",
    "p213-fluxtext-rank4-ocr-loss-conv-process-clause.log": "held-out, scored only: phase: frames inside the "
                                                            "project's loss package (an OCR loss's encoder) are not "
                                                            "read as training",
    "p218-maniptrans-v100-test-mode-retyped-two-lines.log": "figures: a message retyped in a shortened form of its "
                                                            "own ('(GPU 0; 31.74 GiB total; 30.31 GiB allocated; "
                                                            "10.06 MiB free)') keeps only the request and the total",
    "gen-notebook-launcher-eval-epoch1.log": "phase: an evaluation loop drawing no bar runs after the epoch's bare "
                                             "training bar reached its total; the frames name only the notebook's "
                                             "training_function",
    "p223-llamastack-8gb-parameter-fence-glued.log": "phase: a pasted source line creating a layer's weight "
                                                     "Parameter (no frame around it) is not read as set-up",
    "p270-ace-beaker-inline-inference-shm-timestamped.log": "phase: an 'Inference: starting window spanning 0 to "
                                                            "146 steps' banner (inline inference) is not read as "
                                                            "evaluation",
    "p274-amvur-launch-4gpu-childfailed-retyped-glued.log": "rank: a retyped root-cause block with its fields glued "
                                                            "('rank2 (local rank: 2)exitcode: -9') loses the rank",
    "p275-albert-race-xlarge-tpu-v2-hbm-training-loop.log": "phase: TPUEstimator's 'Error recorded from "
                                                            "training_loop' before XLA's hbm failure is not read "
                                                            "as training",
    "p255-deconvnet-caffe-testall-unpooling-aborted.log": "held-out, scored only: phase: glog's C++ stack naming "
                                                          "Solver::Test under Solver::TestAll is not read as eval",
    "p266-srgan-val-bar-glued-thcudacheck.log": "held-out, scored only: step: a validation bar's image count "
                                                "(5/176), the OOM glued to it, is read as the training step",
    "p228-thunder-litgpt-bench-fsdp-ckpt-regression-short.log": "phase: a torchrun command line of a training "
                                                                "benchmark (--checkpoint_activations, fsdp) is not "
                                                                "read as training",
    "p230-dotsocr-vllm-74gib-profile-rank0-warning.log": "held-out, scored only: rank: the failing process's own "
                                                         "[rank0] exit warning after an unprefixed message is not read",
    "p232-primus-torchtitan-mi350-hip-elastic-root-cause.log": "held-out, scored only: rank: the root-cause block "
                                                               "after the message (another rank's) lends it rank 4",
    "p233-prime-verl-ray-node-oom-after-adv-ansi.log": "held-out, scored only: phase: Ray's node OOM after the "
                                                       "step's rollout, reward and advantage lines is not training",
    "p234-skyrl-tx-jax-cumemallocasync-two-devices-stats.log": "held-out, scored only: XLA's cudaMallocAsync "
                                                               "'failed to allocate N bytes' on two devices reads as "
                                                               "one cuda_error without figures or GPU",
    "p328-comfyui-gguf-b580-xpu-ur-ignoring-copy-then-lora.log": "events: a loader's caught 'ignoring copy_' "
                                                                 "failure and the next allocation's raised one "
                                                                 "(same UR text) are read as one event",
    "p292-mlcllm-phi2-params-shard-tvm-cuda-oom.log": "held-out, scored only: detect: TVM's check failure "
                                                      "'... is false: CUDA: out of memory' inside a ValueError "
                                                      "is not found",
    "p299-sam2-colab-init-state-1581-frames.log": "phase: SAM 2's predictor set-up (init_state, load_video_frames "
    "moving the frames to the GPU) names no phase we read",
    "p311-meshsplatting-iter-25000-eval-backward-cut.log": "held-out, scored only: step: a 3DGS-style "
    "'[ITER 25000] Evaluating train: ...' report is not read as the step",
    "p335-agentr1-verl-vllm-activation-bold-glued.log": "held-out, scored only: phase: vLLM's model_executor "
    "frames (custom_op forward, activation forward_cuda) in a rollout are not read as generation",
    "p348-openvla-oft-save-five-pids-quoted-caret-m.log": "phase: the traceback after the message ends in a "
    "finetune() frame whose code line, cut at 'save_trai', is the save: no phase is read",
    "p354-framepack-eichi-lora-deepcopy-retyped-typos.log": "figures: a hand-retyped 2.2-2.8 message (glued to its "
    "frame, found since) misspells its device ('GPY 0 has a total capacity ...'): the total and free after it are lost",
    "p368-mlxserve-ltx-video-unified-log-iogpumetalerror.log": "held-out, scored only: phase: weight-loading lines "
                                                             "followed by forward-pass dtype traces read as init",
    "p379-tabpfn-predict-wrapped-original-error-beyond-card.log": "phase: TabPFN's own exception line "
    "('CUDA out of memory with 5,000 test samples.') above the wrapped message is not read as prediction (eval)",
    "p381-textgcn-model-cuda-28gib-numbered-cut.log": "held-out, scored only: phase: the module-level frame moving "
    "the model to the GPU ('model_func = model_func.cuda()') is not read as init",
    "p386-vllm-backport-enginecore-worker-failed-tp8.log": "phase: a vLLM worker's logits-processor frames (read "
    "under the Worker_TP1 label since 2026-11-29) before the engine core's 'Worker failed with error' quote name no "
    "phase: only the private-pool (CUDA graph) memory says serving had begun",
    "p387-milabench-llava-single-report-bar-prefix.log": "phase: an 'optimizer.step()' frame behind milabench's "
    "'| ' report bar is not read as training",
    "p389-exo-tinygrad-shard-cuda-error-2.log": "phase: exo's 'Error processing tensor for shard ...' (a shard's "
    "inference) above tinygrad's frames, cut inside them, is not read as generate",
    "p390-roll-qwenvl-actor-infer-died-oom-killer.log": "detect: Ray's ActorDiedError whose first listed root cause "
    "is 'killed by SIGKILL by OOM killer due to high memory usage' is not read as a host OOM",
    "p401-loradatasetstudio-seedvr2-4070s-allocation-exceeds.log": "phase: the SeedVR2 upscaler's video-VAE frames "
                                                                  "(causal_inflation_lib) are not read as generation",
    "p408-catvton-t4-36gib-bentoml-access-line.log": "held-out, scored only: phase: BentoML's access line for the failed "
                                                     "POST /generate after the message is not read as generation",
    "p409-skyreelsv2-df14b-4xa100-message-in-four-rows.log": "phase: the launch command's script name "
                                                             "(generate_video_df.py) is read as generation; nothing "
                                                             "in the log shows loading or sampling",
    "p413-ministar-sc2-actor-2gb-exception-prefixed.log": "phase: an RL actor loop's policy forward after the "
    "project's 'start_time before training' print (message behind 'ActorLoop.run() Exception ...') is not read as training",
    "p417-tfsegmentation-swap-op-requires-then-gradient-oom-cut.log": "held-out, scored only: phase: a failing TF node named "
    "'network/train-operation/gradients/...' is not read as training",
    "p421-wav2letter-finetune-ctc-epoch1-arrayfire.log": "held-out, scored only: not detected: flashlight's "
    "ArrayFire 'Failed to allocate memory of size ...' after 'Epoch 1 started!' (no event kind names ArrayFire)",
    "p437-rscnn-partseg-torch031-epoch1-thcudacheck-backward.log": "held-out, scored only: step: the progress line "
    "'[epoch   1:   0/499] \\t train loss: ...' is not read as the step",
    "p450-higherhrnet-dist-train-epoch19-spawn-sigkill-process1.log": "step: the ImageNet-example 'Epoch: [19][300/7922]' "
    "line is read as the iteration within the epoch (300); whether epochs count from 0 or 1 is not told",
    "p463-rapidsdeployment-sagemaker-hpo-xgboost-rmm-blockquote.log": "held-out, scored only: kind: XGBoost's "
    "'std::bad_alloc: out_of_memory: CUDA error at: .../cuda_memory_resource.hpp' (RMM's plain cudaMalloc "
    "resource, no pool) reads as RMM's pool failure (cuda_oom), not cuda_error",
    "p464-llmsagemakersample-gemma9b-fsdp-algorithmerror-gpu7-cut.log": "held-out, scored only: phase: SageMaker's "
    "'Error for Training job ...: AlgorithmError: ExecuteUserScriptError' summary around the message is not read "
    "as training",
    "p467-text2imagegui-dreambooth-4090-numbered-timestamped-lines.log": "held-out, scored only: phase: Lightning's "
    "trainer.fit frames after the message, each behind a GUI log's '[00000553] [01-24-2023 23:20:26]' prefix, "
    "are not read as training",
    "p469-seafusion-colab-t4-message-in-fullwidth-quotes.log": "phase: the sentence quoting the message in "
    "full-width quotes names the script it ran ('Running train.py on ...'), which is not read as training",
    "p475-deeplivecam-ort-stream-oom-glued-frame-bar.log": "events: two frames (1732, 1733) each failing with the same "
                                                            "ONNX Runtime 'CUDA failure 2' are folded into one event",
    "p509-llamatuner-70b-qlora-two-procs-interleaved.log": "held-out, scored only: phase: from_pretrained/quantize_4bit "
                                                           "frames interleaved around the message are not read as init",
    "p490-dlib-segmentation-epoch10-cudamalloc.log": "phase: dlib's epoch lines, flushed after its unbuffered error "
    "(stdout after stderr), are not read as the training the failure came in",
    "p491-nrtk-explorer-embeddings-two-refusals.log": "line: a 2.x message cut after '. GPU' inside an inline-code "
    "span is joined with the next two lines as if wrapped, so the second message (line 7) is reported at line 5",
    "p494-swa-start-epoch-bare-message-in-prose.log": "held-out, scored only: not detected: a bare 'RuntimeError: "
    "CUDA out of memory.' glued inside a sentence of prose",
    "p495-diffusionregpose-epoch3-curly-quoted-bare.log": "held-out, scored only: not detected: a 2.5+ "
    "'torch.OutOfMemoryError: CUDA out of memory. ' cut after its first sentence, in curly quotes after a "
    "full-width colon inside a sentence",
    "p520-autoround-qwen3vl-moe-oom-then-dispatch.log": "phase: a second traceback after the message (AutoRound's "
    "fallback calling accelerate's dispatch_model) is read as set-up, though the refusal came before it",
    "p566-paimegatronpatch-qwen25-7b-cpt-v100-bold-own-pid-setup.log": "rank: an unprefixed message whose own "
    "'[rank5]:' traceback follows after a blank line and a line of prose gets no rank (only the very next line counts)",
    "p567-easylm-llama13b-v3-8-pjrt-replicas-wrapped-re-source.log": "held-out, scored only: events: five PJRT "
    "'Execution of replica 0 failed' lines for five device ordinals are folded into one event",
    "p690-jmteb-mrtydi-retrieval-cdist-rank7-bel.log": "held-out, scored only: figures: a 2.1+ message whose device "
    "number reads as a caret control character ('GPU ^G has a total capacity') keeps only its request",
    "p694-crudrag-qwen7b-safe-request-bar-glued-bold.log": "held-out, scored only: step/phase: a benchmark's item bar "
    "(0/5) with an LLM wrapper's safe_request warnings glued to it is read as training at step 0, not generation",
    "p696-gpl-qgen-mt5-rewrapped-qpp1-bsz1.log": "held-out, scored only: not detected: GPL's own 'RuntimeError: CUDA "
    "out of memory during query generation (...)' re-raise, with no figures",
    "p819-rfdiffusion-c4-oligo-660-hydra-glued-6gb.log": "phase: RFdiffusion's 'python .\\scripts\\run_inference.py "
    "... inference.num_designs=1' command line above the message is not read as generation",
    "p830-nanochat-speedrun-inductor-logits-buffer.log": "figures: a shortened retyped message ('GPU has 79.19 GiB "
    "total, 6.68 GiB free, 72.48 GiB in use by this process.') on the line after the request keeps only the request",
    "p833-llmcourse-bnb-quantized-to-device-cuda-error.log": "held-out, scored only: phase: an IPython frame in "
    "transformers' set_module_quantized_tensor_to_device (placing a loaded weight) is not read as init",
    "p835-handsonml3-ch16-use-module-4gb-tf.log": "held-out, scored only: not detected: TensorFlow's op_kernel "
    "warning 'RESOURCE_EXHAUSTED: failed to allocate memory' with no request, shape or allocator",
    "p853-oneshotrlvr-colocated-workerdict-died-8-a100.log": "held-out, scored only: not detected: Ray's "
    "ActorDiedError naming the OOM killer as its first possible root cause (as p390)",
    "p854-simplerlzoo-ray-job-failed-banner-actor-died.log": "not detected: Ray's 'actor is dead' line naming the "
    "OOM killer as its first possible root cause, above Ray Jobs' failure banner and a RayActorError (as p390)",
    "p869-comfyui-echomimic-v2-600-frames-allocation-on-device.log": "phase: EchoMimic's 'infer length is 600' and "
    "'latents shape:... video_length:600' prints before ComfyUI's exception line are not read as generation",
    "p934-isaacgymenvs-job-prefix-pxgalloc.log": "gpu/phase: PhysX's refusal (read since 2026-11-29) names no "
    "device; the 'Physics Device: cuda:0' banner before it is not read as its GPU, nor the start-up (the extension "
    "build, PhysX's start banners, no step yet) as init",
    "p935-isaaclab-carb-cudainterop-startup.log": "phase: carb.cudainterop's allocation failure inside Isaac Sim's "
    "start-up (system table, then PhysX unable to create its CUDA context manager) is not read as init",
    "p953-videoretrievalc3d-hmdb-cut-quoted.log": "phase: a 'python3 train.py ...' command quoted on the same prose "
    "line as the cut message is not read as training (as p930)",
    "p1103-diff-svc-binarize-skip-item-4gb.log": "held-out, scored only: step/phase: an unlabelled 5/5 progress "
    "bar of the data binarizer (followed by its valid-set duration summary) is read as training step 5",
    "p1105-arabert-tf115-training-loop-root-errors-cut.log": "held-out, scored only: line/phase: a first root "
    "error cut after 'OOM when allocating' is placed on the '2 root error(s)' line, and the TF Estimator's "
    "'training_loop marked as finished' before the re-raised error is not read as training",
    "p1151-redundancy-relevance-gradcam-backward-torchelastic.log": "held-out, scored only: phase: a Grad-CAM "
    "backward pass in a frame named generate_cam is read as generation",
    "p1280-yunjey-tutorial-captioning-namespace-thcudacheck.log": "phase: a THCudaCheck traceback through train.py's "
    "main into the encoder's forward, after an argparse Namespace with batch_size/num_epochs, is not read as train",
    "p1305-samurai-demo-1080p-init-state-killed.log": "held-out, scored only: phase: SAMURAI's "
    "printed \"init state\" before a bare Killed is not read as init",
    "p1417-audioseparation-comfy-mdx-relayed-allocation-cut.log": "held-out, scored only: line/step/phase: the node's "
    "'[AudioSeparation ERROR] ... Allocation on device' relay is not taken as the message's first line (ComfyUI's "
    "'!!! Exception' line is), and the separator's 0/1 chunk bar is read as training step 0",
    "p1746-motip-custom-dataset-gpu1-retyped-no-head.log": "held-out, scored only: figures/phase: a retyped message starting at 'Tried to allocate' with ', of which ... is free' and 'this process has X in use' (no 'memory') loses its free and in-use figures, and the sentence above it naming training is not read as training",
}
LOGS = sidecars("reconstructed", "synthetic", "generated", "benign")


@pytest.mark.parametrize("log", LOGS, ids=[f"{p.parent.name}/{p.name}" for p in LOGS])
def test_fixture(log):
    if log.name in KNOWN_GAPS:
        pytest.xfail(KNOWN_GAPS[log.name]) if compare(log, list(parse_files([str(log)]).events)) else pytest.fail(
            f"known gap now passes, remove it from KNOWN_GAPS: {log.name}")
    problems = compare(log, list(parse_files([str(log)]).events))
    assert not problems, "\n".join(problems)


def test_enough_captured_fixtures_from_enough_projects():
    import yaml

    captured = sidecars("reconstructed")
    repos = {yaml.safe_load(p.with_suffix(".yaml").read_text())["source"].split("#")[0] for p in captured}
    assert len(captured) >= 40 and len(repos) >= 25


def test_captured_sidecars_name_a_source():
    import yaml

    for p in sidecars("reconstructed"):
        doc = yaml.safe_load(p.with_suffix(".yaml").read_text())
        assert doc.get("captured") is True and "#" in doc.get("source", ""), p.name
    assert (FIXTURES / "README.md").exists()


def test_held_out_gaps_are_marked():
    # nobody tunes the parser on a held-out fixture by mistake: its gap says so
    import sys
    from pathlib import Path

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.accuracy import held_out, project_of

    for name, reason in KNOWN_GAPS.items():
        (sidecar,) = [p.with_suffix(".yaml") for p in LOGS if p.name == name]
        project = project_of(yaml.safe_load(sidecar.read_text()).get("source"))
        assert held_out(project) == reason.startswith("held-out"), name


def test_no_rule_is_tested_on_a_held_out_fixture():
    # a rule's own firing and silent fixtures are what it is written against: never the held-out third
    import sys
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from bench.accuracy import held_out, project_of

    for rule in sorted((root / "rules").glob("*/*.yaml")):
        tests = yaml.safe_load(rule.read_text()).get("tests") or {}
        for path in [*(tests.get("fires") or []), *(tests.get("silent") or [])]:
            if path.startswith("fixtures/"):
                meta = yaml.safe_load((root / path).with_suffix(".yaml").read_text()) or {}
                assert not held_out(project_of(meta.get("source"))), f"{rule.name}: {path}"
