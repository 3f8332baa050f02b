"""Benchmark: diagnose a generated 512 MiB multi-rank training log against `grep -c "out of memory"`.

Targets (issue #2): wall time <= 8x grep's on the same cached file, peak RSS <= 150 MiB.
Usage: python bench/bench_diagnose.py [--mib 512] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

OOM = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 320.00 MiB. GPU 3 has a total capacity "
       "of 79.15 GiB of which 15.31 MiB is free. Including non-PyTorch memory, this process has 79.12 GiB memory in "
       "use. Of the allocated memory 77.85 GiB is allocated by PyTorch, and 683.86 MiB is reserved by PyTorch but "
       "unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
       "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")


def generate(path: str, mib: int) -> None:
    """A torchrun/HF-Trainer style log of 8 ranks: loss dicts, progress redraws, DeepSpeed step lines."""
    rnd = random.Random(0)
    target = mib * 1024 * 1024 - 4096
    head = ("[INFO|training_args.py:1234] 2026-01-01 00:00:00,000 >> TrainingArguments(per_device_train_batch_size=4,"
            " gradient_accumulation_steps=8, gradient_checkpointing=False, bf16=True, eval_steps=50)\n")
    with open(path, "w") as f:
        f.write(head)
        written, step = len(head), 0
        while written < target:
            lines = []
            for _ in range(2000):
                step += 1
                r = step % 8
                lines.append(f"[rank{r}]: {{'loss': {rnd.random():.4f}, 'grad_norm': {rnd.random():.3f}, "
                             f"'learning_rate': 1.9e-05, 'epoch': {step / 40000:.2f}}}\n")
                lines.append(f"[rank{r}]: [2026-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank {r}] "
                             f"step={step}, skipped=0, lr=[1.9e-05], mom=[(0.9, 0.999)]\n")
                lines.append(f"[rank{r}]: {step % 100:3d}%|█████     | {step}/400000 [01:02<19:40,  1.24s/it]\r\n")
            block = "".join(lines)
            f.write(block)
            written += len(block.encode())
        f.write(f"[rank3]: {step % 100:3d}%|█████     | {step}/400000 [01:02<19:40,  1.24s/it]\n")
        f.write(OOM)


def timed(cmd: list[str], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    fd, path = tempfile.mkstemp(suffix=".log")
    os.close(fd)
    try:
        generate(path, args.mib)
        size = os.path.getsize(path)
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        grep_s = timed(["grep", "-c", "out of memory", path])
        cmd = [sys.executable, "-m", "oomdoctor", "diagnose", path, "--format", "json"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        ours_s = timed(cmd)
        rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        out = subprocess.run(cmd, capture_output=True, text=True)
        found = out.stdout.count('"kind": "cuda_oom"')
        ratio = ours_s / grep_s
        print(f"file: {size / 2**20:.0f} MiB, {found} event(s) found (expected 1)")
        print(f"grep -c:   {grep_s:.3f} s")
        print(f"oomdoctor: {ours_s:.3f} s  ({ratio:.1f}x grep; target <= 8x)")
        print(f"peak RSS:  {rss_mib:.0f} MiB (target <= 150 MiB; children max was {before / 1024:.0f} MiB before)")
        ok = found == 1 and ratio <= 8 and rss_mib <= 150
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        if not args.keep:
            os.unlink(path)


if __name__ == "__main__":
    sys.exit(main())
