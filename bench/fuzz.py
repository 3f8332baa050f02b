"""Fuzz the whole diagnose path: mutated fixtures and adversarial shapes must end in a report or our own error.

    python bench/fuzz.py --examples 100000 --jobs 2        # the long run (the README quotes its count)
    python -m pytest tests/test_fuzz.py                    # the short run in CI (hypothesis drives the same ops)

Each example takes a real fixture log (or nothing), applies 1-6 mutations (insert an adversarial piece at a
point, repeat a piece, delete, duplicate or truncate a span, flip bytes, gzip the result) and runs what
`oomdoctor diagnose` runs: read the file, parse, diagnose with the shipped rules, render text (80 columns,
colour on), markdown, HTML and JSON. It fails when anything raises other than OomdoctorError, when it takes
longer than SECONDS_PER_KIB per KiB of input (with a floor; the fastest of 1 + RETIMES runs, so a busy core
is not counted as a hang), or when the process's peak RSS passes MAX_RSS_MIB.
Failing inputs are saved under --crashes for a regression fixture.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import resource
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from oomdoctor.diagnosis import Report  # noqa: E402
from oomdoctor.engine.engine import diagnose_with  # noqa: E402
from oomdoctor.engine.loader import load_rules  # noqa: E402
from oomdoctor.errors import OomdoctorError  # noqa: E402
from oomdoctor.parse import parse_files  # noqa: E402
from oomdoctor.report import render  # noqa: E402

SECONDS_PER_KIB = 0.05  # the bound: 50 ms per KiB of input
RETIMES = 2  # an example over the bound is run this many more times and its fastest run counts
FLOOR_SECONDS = 2.0  # start-up of a tiny example (rules, templates) is not per-KiB work
MAX_RSS_MIB = 400  # the fuzzing process as a whole (diagnose alone is bounded lower: bench/bench_hostile.py)

OOM_HEADS = (
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
    b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; ",
    b"MPS backend out of memory (",
    b"KV cache ",
    b"RuntimeError: CUDA error: out of memory",
    b"NCCL WARN Cuda failure 'out of memory'",
    b"RESOURCE_EXHAUSTED: Out of memory while trying to allocate ",
    b"HIP out of memory. Tried to allocate ",
    b"Killed",
    b"Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : ",
    b"Unable to allocate 315. GiB for an array with shape (",
    b"Ran out of memory trying to allocate ",
    b"OutOfMemoryError                          Traceback (most recent call last)\n",
    b"RuntimeError: DataLoader worker (pid(s) 8260) exited unexpectedly",
    b"[TM][ERROR] CUDA runtime error: out of memory ",
)
PIECES = (
    *OOM_HEADS,
    b"9" * 5000, b"1" * 400 + b".00 GiB", b"step: " + b"7" * 4400, b"[/INST]", b"[link=https://x]y[/link]",
    b"[rank0]: ", b"[bold red]", b"\x1b[31m", b"\x1bc", b"\x9b31m", b"\x1b]8;;http://x\x1b\\", b"\x00" * 64,
    b"\r" * 1000, b"\xff\xfe", b"\xe9", b" 45%|####5     | 450/1000 [01:02<01:10,  7.1it/s]\r",
    b"Traceback (most recent call last):\n", b'  File "train.py", line 9, in evaluate\n',
    b"{{ 7*7 }}", b"{% for x in y %}", b"\t" * 100, b"GiB" * 50, b"(GPU 0; " * 20, b"\n" * 50,
    b"Tried to allocate -3.00 GiB", b"Tried to allocate nan GiB", b"Tried to allocate 1e309 GiB",
)
OPS = ("insert", "repeat", "delete", "duplicate", "truncate", "flip", "gzip")


@dataclass(frozen=True)
class Op:
    """One mutation: what, where (a fraction of the length), which piece, how many times."""

    kind: str
    where: float
    piece: int
    count: int


def fixtures() -> list[Path]:
    return sorted(p for group in ("reconstructed", "synthetic", "benign", "generated")
                  for p in (REPO / "fixtures" / group).glob("*.log"))


def apply(data: bytes, ops: Sequence[Op]) -> bytes:
    """The mutated input (deterministic in its arguments)."""
    for op in ops:
        at = int(op.where * len(data))
        piece = PIECES[op.piece % len(PIECES)]
        if op.kind == "insert":
            data = data[:at] + piece + data[at:]
        elif op.kind == "repeat":
            data = data[:at] + piece * max(1, min(op.count, 20_000)) + data[at:]
        elif op.kind == "delete":
            data = data[:at] + data[at + op.count:]
        elif op.kind == "duplicate":
            data = data[:at] + data[at:at + op.count] * 3 + data[at:]
        elif op.kind == "truncate":
            data = data[:at]
        elif op.kind == "flip" and data:
            i = min(at, len(data) - 1)
            data = data[:i] + bytes([data[i] ^ (op.count % 255 + 1)]) + data[i + 1:]
        elif op.kind == "gzip":
            data = gzip.compress(data, compresslevel=1)
    return data


def random_ops(rng: random.Random) -> list[Op]:
    return [Op(rng.choice(OPS[:-1]) if i < 5 else rng.choice(OPS), rng.random(), rng.randrange(len(PIECES)),
               rng.choice((1, 2, 7, 64, 500, 5000))) for i in range(rng.randint(1, 6))]


_RULES = None


def run_one(data: bytes, workdir: Path) -> float:
    """Diagnose `data` as the CLI would (every output format); return the seconds it took.

    Raises whatever the path raises except OomdoctorError (a clean, one-line user error)."""
    global _RULES
    if _RULES is None:
        _RULES = load_rules()
    path = workdir / ("input.log.gz" if data[:2] == b"\x1f\x8b" else "input.log")
    path.write_bytes(data)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            facts = parse_files([str(path)])
        diagnoses = diagnose_with(facts, _RULES) if facts.events else ()
        report = Report(events=facts.events, diagnoses=tuple(diagnoses), runs=facts.runs)
        render(report, "text", color=True, width=80)
        for fmt in ("markdown", "html", "json"):
            render(report, fmt)
    except OomdoctorError:
        pass
    finally:
        path.unlink()
    return time.perf_counter() - start


def input_bytes(data: bytes) -> int:
    """What diagnose reads: a gzip's expanded size (capped at 1 GiB), else the bytes themselves."""
    if data[:2] != b"\x1f\x8b":
        return len(data)
    try:
        return max(len(data), len(zlib.decompressobj(31).decompress(data, 2**30)))
    except zlib.error:
        return len(data)


def budget(data: bytes) -> float:
    """The time allowed: SECONDS_PER_KIB per KiB of what diagnose reads, never under FLOOR_SECONDS."""
    return max(FLOOR_SECONDS, SECONDS_PER_KIB * input_bytes(data) / 1024)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker(args: tuple[int, int, str]) -> tuple[int, int, int, float, list[str]]:
    """Run `count` examples from `seed`; return (examples, crashes, hangs, peak RSS MiB, notes)."""
    seed, count, crash_dir = args
    rng = random.Random(seed)
    logs = fixtures()
    texts = [p.read_bytes() for p in logs]
    crashes = hangs = 0
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(count):
            base = rng.randrange(len(texts) + 1)
            ops = random_ops(rng)
            data = apply(texts[base] if base < len(texts) else b"", ops)
            try:
                seconds = run_one(data, Path(tmp))
            except Exception:
                crashes += 1
                name = f"crash-{seed}-{n}.bin"
                Path(crash_dir, name).write_bytes(data)
                notes.append(f"{name}: {traceback.format_exc().strip().splitlines()[-1]}")
                continue
            if seconds > budget(data):  # timing noise (another process on the core) is ruled out by re-timing it
                seconds = min([seconds] + [run_one(data, Path(tmp)) for _ in range(RETIMES)])
            if seconds > budget(data):
                hangs += 1
                name = f"slow-{seed}-{n}.bin"
                Path(crash_dir, name).write_bytes(data)
                notes.append(f"{name}: {seconds:.1f} s for {input_bytes(data) / 1024:.0f} KiB")
    return count, crashes, hangs, peak_rss_mib(), notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--crashes", default="fuzz-crashes", help="folder for failing inputs")
    args = ap.parse_args(argv)
    Path(args.crashes).mkdir(exist_ok=True)
    chunk = 500
    tasks = [(args.seed * 1_000_003 + i, min(chunk, args.examples - i * chunk), args.crashes)
             for i in range((args.examples + chunk - 1) // chunk)]
    from concurrent.futures import ProcessPoolExecutor

    done = crashes = hangs = 0
    peak = 0.0
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for n, c, h, rss, notes in pool.map(_worker, tasks):
            done, crashes, hangs, peak = done + n, crashes + c, hangs + h, max(peak, rss)
            for note in notes:
                print(note, flush=True)
            print(f"{done}/{args.examples} examples, {crashes} crashes, {hangs} over time, peak RSS {peak:.0f} MiB, "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    over = peak > MAX_RSS_MIB
    print(f"fuzz: {done} examples, {crashes} crashes, {hangs} over {SECONDS_PER_KIB * 1000:.0f} ms/KiB, "
          f"peak RSS {peak:.0f} MiB per worker{' (over the bound)' if over else ''}, "
          f"{time.perf_counter() - start:.0f} s")
    return 1 if crashes or hangs or over else 0


if __name__ == "__main__":
    raise SystemExit(main())
