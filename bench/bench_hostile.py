"""Hostile and dense inputs: diagnose's time must grow linearly with the input, never worse.

Each shape is parsed at size N and 10×N in the same run; the ratio of time per unit (event or line) at 10×N
to that at N must stay near 1 (PASS under LINEAR_LIMIT). A quadratic step shows as a ratio near 10.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from oomdoctor.parse import parse_files  # noqa: E402

LINEAR_LIMIT = 2.5  # per-unit time at 10×N over per-unit time at N

MSG = ("RuntimeError: CUDA out of memory. Tried to allocate {i}.00 MiB (GPU 0; 15.78 GiB total capacity; 1.00 GiB "
       "already allocated; 0 bytes free; 2.00 GiB reserved in total by PyTorch)\n")


def distinct_events(n: int) -> str:
    """n different OOM messages, each after a step line (every event scans for its step and banner)."""
    return "".join(f"step {i} loss 0.5\n" + MSG.format(i=i) for i in range(n))


def identical_lines(n: int) -> str:
    """The same OOM line n times (a crash loop writing into one log)."""
    return MSG.format(i=2) * n


def steps_then_oom(n: int) -> str:
    """n training step lines, an eval banner far back, then one OOM (the back-scan must stay bounded)."""
    return "***** Running Evaluation *****\n" + "".join(f"{{'loss': 0.5, 'step': {i}}}\n" for i in range(n)) + MSG.format(i=2)


SHAPES: dict[str, tuple[Callable[[int], str], int]] = {
    "distinct events": (distinct_events, 300),
    "identical lines": (identical_lines, 3000),
    "steps then one OOM": (steps_then_oom, 20000),
}


def seconds(text: str, tmp: Path) -> float:
    path = tmp / "log.txt"
    path.write_text(text, encoding="utf-8")
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        parse_files([str(path)])
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    """Print per-shape timings at N and 10×N and the per-unit ratio; exit 1 if any shape is super-linear."""
    failed = False
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, (make, n) in SHAPES.items():
            small, large = seconds(make(n), tmp), seconds(make(10 * n), tmp)
            ratio = (large / (10 * n)) / max(small / n, 1e-9)
            ok = ratio <= LINEAR_LIMIT
            failed |= not ok
            print(f"{name:20} N={n:6} {small:7.3f}s   10N {large:7.3f}s   per-unit ratio {ratio:4.2f}  "
                  f"{'PASS' if ok else 'FAIL'} (<= {LINEAR_LIMIT})")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
