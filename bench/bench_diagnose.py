"""Benchmark: diagnose generated logs of the shapes users have against `grep -c "out of memory"` on the same files.

Shapes: sparse (loss dicts, DeepSpeed step lines, tqdm redraws), dense (a memory line on every rank every step:
DeepSpeed see_memory_usage, HF metric dicts with memory keys, hand-written torch.cuda.memory_allocated prints),
redraws (a tqdm-only log whose redraws are joined by \r into 100k-character lines), many (10,000 small logs in
one call). Targets: wall time <= 8x grep's on the same cached files, peak RSS <= 150 MiB.
Usage: python bench/bench_diagnose.py [--shape sparse|dense|redraws|many] [--mib 512] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
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


def generate_dense(path: str, mib: int) -> None:
    """8 ranks, every step: a DeepSpeed see_memory_usage pair, an HF metric dict with memory keys, a hand print."""
    rnd = random.Random(0)
    target = mib * 1024 * 1024 - 4096
    with open(path, "w") as f:
        written, step = 0, 0
        while written < target:
            lines = []
            for _ in range(500):
                step += 1
                r = step % 8
                ma = 40 + rnd.random() * 20
                lines.append(f"[rank{r}]: [2026-01-01 00:00:00,000] [INFO] [utils.py:781:see_memory_usage] after step {step}\n")
                lines.append(f"[rank{r}]: MA {ma:.2f} GB         Max_MA {ma + 8:.2f} GB         CA {ma + 10:.2f} GB"
                             f"         Max_CA {ma + 12:.0f} GB \n")
                lines.append(f"[rank{r}]: CPU Virtual Memory:  used = 212.5 GB, percent = 21.1%\n")
                lines.append(f"[rank{r}]: {{'loss': {rnd.random():.4f}, 'train_mem_gpu_alloc_delta': 1024, "
                             f"'memory_allocated': {ma:.2f}, 'step': {step}}}\n")
                lines.append(f"[rank{r}]: step {step} torch.cuda.memory_allocated()={ma:.2f}GB max={ma + 8:.2f}GB\n")
            block = "".join(lines)
            f.write(block)
            written += len(block.encode())
        f.write(OOM)


def generate_redraws(path: str, mib: int) -> None:
    """tqdm only: each line holds ~100k characters of \r-joined redraws."""
    target = mib * 1024 * 1024 - 4096
    with open(path, "w") as f:
        written, step = 0, 0
        while written < target:
            parts = []
            for _ in range(1500):
                step += 1
                parts.append(f"{step % 100:3d}%|█████     | {step}/900000 [01:02<19:40,  1.24it/s]")
            line = "\r".join(parts) + "\n"
            f.write(line)
            written += len(line.encode())
        f.write(OOM)


def generate_many(folder: str, count: int = 10000) -> list[str]:
    """count small logs, one in ten ending in an OOM."""
    paths = []
    for i in range(count):
        p = os.path.join(folder, f"job-{i:05d}.log")
        with open(p, "w") as f:
            f.write("".join(f"{{'loss': 0.5, 'step': {s}}}\n" for s in range(50)))
            if i % 10 == 0:
                f.write(OOM)
        paths.append(p)
    return paths


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
    ap.add_argument("--shape", choices=("sparse", "dense", "redraws", "many"), default="sparse")
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    folder = tempfile.mkdtemp()
    try:
        if args.shape == "many":
            paths = generate_many(folder)
            expected = len(paths) // 10
        else:
            paths = [os.path.join(folder, f"{args.shape}.log")]
            {"sparse": generate, "dense": generate_dense, "redraws": generate_redraws}[args.shape](paths[0], args.mib)
            expected = 1
        size = sum(os.path.getsize(p) for p in paths)
        subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        grep_s = timed(["grep", "-c", "out of memory", *paths])
        cmd = [sys.executable, "-m", "oomdoctor", "diagnose", *paths, "--format", "json"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        ours_s = timed(cmd)
        rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        out = subprocess.run(cmd, capture_output=True, text=True)
        found = out.stdout.count('"kind": "cuda_oom"')
        ratio = ours_s / grep_s
        print(f"shape {args.shape}: {len(paths)} file(s), {size / 2**20:.0f} MiB, {found} event(s) found (expected {expected})")
        print(f"grep -c:   {grep_s:.3f} s")
        print(f"oomdoctor: {ours_s:.3f} s  ({ratio:.1f}x grep; target <= 8x)")
        print(f"peak RSS:  {rss_mib:.0f} MiB (target <= 150 MiB; children max was {before / 1024:.0f} MiB before)")
        ok = found == expected and ratio <= 8 and rss_mib <= 150
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
