#!/usr/bin/env bash
# One device session's CUDA checks of verify (2026-11-28, eighth stop), in priority order, each under its own
# timeout so that a slow step costs only itself; every result lands in $OUT as it is made.
#   stream traces: the simulator's ZeRO-3/FSDP storage traces (recorded here with `cuda_fidelity.py traces`,
#     carried in .gpu/traces) through c10's allocator under the six settings (the stream model's first GPU check);
#   workloads: bench/fidelity.py rows never run on a GPU (torchtune's Llama-3.2-3B, Liger's fused CE);
#   seeds: `verify --from` on issue 12's seed logs with --device cuda (the simulated side is run on a CPU).
# Needs: .whl (pydantic and the transformers/peft the simulator used) and .gpu/traces, both carried.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 3
export PYTHONPATH=/tmp/site:$PWD OOMDOCTOR_CACHE_DIR=/tmp/oomcache
FINAL=${OUT:-/tmp/out}; OUT=/tmp/res; mkdir -p "$OUT" "$FINAL"  # $OUT takes 8 files back: one archive, after every step
{ nvidia-smi -L; python3 -c 'import torch, transformers, peft, pydantic; print(torch.__version__, torch.version.cuda,
  transformers.__version__, peft.__version__, pydantic.__version__, torch.cuda.get_device_name(0))'; } 2>&1 | tee "$OUT/env.txt"
step() {  # step NAME SECONDS CMD...: run, log, time
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
  echo "step $name rc=$? $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
  tar czf "$FINAL/results.tgz.part" -C "$OUT" . && mv "$FINAL/results.tgz.part" "$FINAL/results.tgz"
}
step streams 80 python3 bench/cuda_fidelity.py measure .gpu/traces --out "$OUT/streams.json" --skip-workloads \
  --trace gpt2-355m-fsdp8-b4 --trace gpt2-355m-zero3-ds8-b4
step workloads 90 python3 bench/cuda_fidelity.py measure --out "$OUT/workloads.json" --skip-allocator \
  --only Llama-3.2-3B --only Liger --only "Linear + CE"
for seed in syn-llava7b-lora-40g-batch16 syn-lora-eval-spike-8xa100 syn-grpo-4x4-logps-4090 \
            syn-resnet152-batch64-fp32 syn-zero3-4k-no-ckpt; do
  step "$seed" "$([ $seed = syn-llava7b-lora-40g-batch16 ] && echo 130 || echo 100)" python3 -m oomdoctor verify --from "fixtures/synthetic/$seed.log" --device cuda \
    --format json -o "$OUT/verify-$seed.json"
done
step cuda-tests 60 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_capture.py tests/test_verify_sim.py
