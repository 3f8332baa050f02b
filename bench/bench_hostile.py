"""Hostile and dense inputs: diagnose's time must grow linearly with the input, and its memory stay flat.

Time: each shape is parsed at size N and 10×N in the same run; the ratio of time per unit (event or line) at
10×N to that at N must stay near 1 (PASS under LINEAR_LIMIT). A quadratic step shows as a ratio near 10.
Memory: `oomdoctor diagnose` runs as a child on each flood at S and 4×S; its peak RSS at 4×S over that at S
must stay near 1 (RSS_FLAT_LIMIT) and under RSS_CAP_MIB (Linux: ru_maxrss of the child).
"""

from __future__ import annotations

import gzip
import subprocess
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


def notebook_headers(n: int) -> str:
    """n notebook "OutOfMemoryError  Traceback" headers, then the message (each header looks ahead for it)."""
    return "OutOfMemoryError                          Traceback (most recent call last)\n" * n + MSG.format(i=2)


SHAPES: dict[str, tuple[Callable[[int], str], int]] = {
    "distinct events": (distinct_events, 150),  # 10N stays under MAX_EVENTS_PER_SOURCE
    "identical lines": (identical_lines, 3000),
    "steps then one OOM": (steps_then_oom, 20000),
    "notebook headers": (notebook_headers, 60),
}


RSS_FLAT_LIMIT = 1.3  # peak RSS at 4×S over peak RSS at S
RSS_CAP_MIB = 150
BAR = "\r 45%|####▌     | 4500/10000 [01:23<01:42, 53.21it/s, loss=0.123]"


def redraw_flood(path: Path, mib: int) -> None:
    """A progress bar redrawn with \r only, no \n for the whole file, then an OOM."""
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(mib * 2**20 // (len(BAR) * 1000)):
            f.write(BAR * 1000)
        f.write("\r" + MSG.format(i=2))


def oom_dense_gzip(path: Path, mib: int) -> None:
    """A gzip that expands to `mib` MiB of distinct OOM messages (a crash loop, or a bomb)."""
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i in range(mib * 2**20 // len(MSG)):
            f.write(MSG.format(i=i % 5000 + 1))


def stdin_stream(path: Path, mib: int) -> None:
    """Distinct OOM messages written into diagnose's standard input (piped, like `tail -f | oomdoctor -`)."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(mib * 2**20 // len(MSG)):
            f.write(MSG.format(i=i % 5000 + 1))


FLOODS: dict[str, tuple[Callable[[Path, int], None], str, int]] = {
    "\\r redraw flood": (redraw_flood, "redraw.log", 64),
    "OOM-dense gzip": (oom_dense_gzip, "dense.log.gz", 16),
    "stdin stream": (stdin_stream, "stream.log", 16),
}

_CHILD = """
import resource, subprocess, sys
path, via_stdin = sys.argv[1], sys.argv[2] == "1"
cmd = [sys.executable, "-m", "oomdoctor", "diagnose", "-q", "-" if via_stdin else path]
with open(path, "rb") as f:
    subprocess.run(cmd, stdin=f if via_stdin else None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_mib(path: Path, via_stdin: bool) -> float:
    """Peak RSS of one `oomdoctor diagnose` child (measured by a fresh wrapper so no other child counts)."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), "1" if via_stdin else "0"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return int(out.stdout.strip()) / 1024


def memory(tmp: Path) -> bool:
    ok_all = True
    for name, (make, filename, mib) in FLOODS.items():
        rss = []
        for size in (mib, 4 * mib):
            path = tmp / filename
            make(path, size)
            rss.append(peak_rss_mib(path, name == "stdin stream"))
        ratio = rss[1] / rss[0]
        ok = ratio <= RSS_FLAT_LIMIT and rss[1] <= RSS_CAP_MIB
        ok_all &= ok
        print(f"{name:20} S={mib:4} MiB  peak RSS {rss[0]:6.0f} MiB   4S {rss[1]:6.0f} MiB   ratio {ratio:4.2f}  "
              f"{'PASS' if ok else 'FAIL'} (<= {RSS_FLAT_LIMIT}, <= {RSS_CAP_MIB} MiB)")
    return ok_all


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
        if "--no-memory" not in sys.argv:
            failed |= not memory(tmp)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
