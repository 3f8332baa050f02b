"""Benchmark: `oomdoctor scan --jobs 2` against `--jobs 1` on a folder of N logs (copies of the fixtures).

Target (issue 14): --jobs 2 at >= 1.8x the speed of --jobs 1, the same rows, the parent's peak RSS bounded.
Usage: python bench/bench_scan.py [--logs 10000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build(folder: Path, n: int) -> None:
    logs = sorted(p for group in ("reconstructed", "synthetic", "benign", "generated")
                  for p in (REPO / "fixtures" / group).glob("*.log"))
    for i in range(n):
        shutil.copyfile(logs[i % len(logs)], folder / f"job{i:06d}.log")


def timed(folder: Path, jobs: int) -> tuple[float, list[dict]]:
    exe = Path(sys.executable).with_name("oomdoctor")
    start = time.perf_counter()
    out = subprocess.run([str(exe), "scan", str(folder), "--jobs", str(jobs), "--format", "jsonl"],
                         capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    return seconds, sorted((json.loads(line) for line in out.stdout.splitlines()), key=lambda r: r["path"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build(folder, args.logs)
        one, rows1 = timed(folder, 1)
        many, rows_n = timed(folder, args.jobs)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    speedup = one / many
    print(f"{args.logs} logs on {os.cpu_count()} CPU(s): --jobs 1 {one:.2f} s ({1000 * one / args.logs:.2f} ms/log), "
          f"--jobs {args.jobs} {many:.2f} s: {speedup:.2f}x (target >= 1.8x); same rows: {rows1 == rows_n}; "
          f"largest process RSS {peak:.0f} MiB")
    return 0 if speedup >= 1.8 and rows1 == rows_n else 1


if __name__ == "__main__":
    raise SystemExit(main())
