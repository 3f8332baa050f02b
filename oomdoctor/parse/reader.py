"""Stream log files in chunks and hand back only the regions worth parsing, with their line numbers.

One pass over the bytes: a multi-literal prefilter (Aho-Corasick, SIMD in ahocorasick-rs) finds the few
lines that can carry an OOM or a per-step memory figure; each hit gets a window of context around it
(back for the traceback, the progress bar and the evaluation banner; forward for wrapped or repeated
messages). The head of each file is always kept: that is where configurations are printed. Memory stays
bounded by the chunk size plus the windows, whatever the file size.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from oomdoctor.errors import InputError

CHUNK_BYTES = 8 * 1024 * 1024
TAIL_BYTES = 16 * 1024  # always read: the last lines of a log
HEAD_BYTES = 256 * 1024  # configuration dumps live at the top of a log
BACK_BYTES = 96 * 1024  # enough for a deep traceback of a few interleaved ranks and the bar above it
FORWARD_BYTES = 24 * 1024  # the rest of a wrapped message, the repeated traceback line, Root Cause blocks
SAMPLE_BACK_BYTES = 2 * 1024  # per-step memory lines only need the step printed just before them
MAX_SEGMENT_BYTES = 16 * 1024 * 1024  # a "line" with neither \n nor \r this long is not a text log

# At most six literals keeps ahocorasick-rs on its SIMD (Teddy) path: ~0.4 ms/MiB instead of ~1.8.
# "emory" covers every "out of memory"/"OutOfMemoryError"/"memory (MB)"/"Virtual Memory" form.
ANCHORS: tuple[bytes, ...] = (b"emory", b"OOM", b"Killed", b"SIGKILL", b"ALLOC_FAILED", b"KV cache")
# Lines that are (probably) a failure, not a per-step memory sample: they get the wide window.
_FAILURE_MARKS: tuple[bytes, ...] = (
    b"out of memory", b"Out of memory", b"Out Of Memory", b"OutOfMemory", b"OOM", b"Killed",
    b"SIGKILL", b"ALLOC_FAILED", b"KV cache", b"can't allocate memory", b"not enough memory",
    b"out-of-memory", b"cache blocks", b"RESOURCE_EXHAUSTED", b"ran out of memory",
)


@dataclass(frozen=True)
class Region:
    """Consecutive lines of one source, decoded; `first_line` is the 1-based number of lines[0]."""

    source: str
    first_line: int
    lines: list[str]


class _Finder:
    """The multi-literal prefilter, with a plain-Python fallback when ahocorasick-rs is unavailable."""

    def __init__(self, anchors: tuple[bytes, ...]):
        self.anchors = anchors
        try:
            import ahocorasick_rs

            self._ac = ahocorasick_rs.BytesAhoCorasick(list(anchors))
        except ImportError:  # pragma: no cover - exercised only without the wheel
            self._ac = None

    def positions(self, data: memoryview | bytes, start: int, end: int) -> list[int]:
        """Start offsets (relative to data) of anchor hits in data[start:end], sorted."""
        if self._ac is not None:
            return [start + s for _, s, _ in self._ac.find_matches_as_indexes(data[start:end])]
        raw = bytes(data[start:end])
        out: list[int] = []
        for a in self.anchors:
            i = raw.find(a)
            while i != -1:
                out.append(start + i)
                i = raw.find(a, i + 1)
        return sorted(out)


_FINDER = _Finder(ANCHORS)


def display_name(path: str) -> str:
    """The name a source is reported under."""
    return "<stdin>" if path == "-" else path


def check_path(path: str) -> None:
    """Fail early, with a clear message, on a path that cannot be a readable log file."""
    if path == "-":
        return
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError("no such file", where=path, tip="check the path; use - to read standard input") from None
    except PermissionError:
        raise InputError("permission denied", where=path, tip="check the file's permissions") from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=path) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory, not a log file", where=path, tip=f"pass the files inside it: {path}/*.log")
    if not os.access(p, os.R_OK):
        raise InputError("permission denied", where=path, tip="check the file's permissions")


def _open(path: str) -> io.BufferedIOBase:
    if path == "-":
        return sys.stdin.buffer
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except PermissionError:
        raise InputError("permission denied", where=path, tip="check the file's permissions") from None
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror}", where=path) from None
    magic = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if path.endswith(".gz") or magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def _read(stream: io.BufferedIOBase, name: str, size: int) -> bytes:
    try:
        return stream.read(size)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        detail = "it ends early" if isinstance(exc, EOFError) else str(exc)
        raise InputError(f"damaged gzip file: {detail}", where=name,
                         tip="re-copy the file, or decompress what survives: zcat FILE > out.log") from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", where=name) from None


def check_text(head: bytes, name: str) -> None:
    """Reject what is not a UTF-8 text log: UTF-16, binary data, invalid UTF-8."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(head) > 64 and head[1:64:2].count(0) > 24):
        raise InputError("this is UTF-16 text, not UTF-8", where=name,
                         tip=f"convert it first: iconv -f UTF-16 -t UTF-8 {name} > log.txt")
    sample = head[:65536]
    if sample.count(0) > 16 or sum(sample.count(c) for c in (1, 2, 3, 4, 5, 6, 14, 15, 16, 17)) > len(sample) // 20:
        raise InputError("binary data, not a text log", where=name,
                         tip="pass the training log (stdout/stderr of the run), not a checkpoint or archive")
    cut = len(sample)
    while cut and cut > len(sample) - 4:  # a multi-byte character may straddle the sample's end
        try:
            sample[:cut].decode("utf-8")
            return
        except UnicodeDecodeError as exc:
            if exc.start < cut - 4:
                line = sample.count(b"\n", 0, exc.start) + 1
                raise InputError(f"not valid UTF-8 (byte 0x{sample[exc.start]:02x})", where=f"{name}:{line}",
                                 tip=f"convert it first: iconv -f LATIN1 -t UTF-8 {name} > log.txt") from None
            cut -= 1


def decode(data: bytes) -> str:
    """Bytes of a log region as text (stray invalid bytes become U+FFFD, never an error)."""
    return data.decode("utf-8", errors="replace")


def is_failure_line(line: bytes | memoryview) -> bool:
    """Whether an anchored line looks like a failure (wide window) rather than a memory sample."""
    b = bytes(line)
    return any(m in b for m in _FAILURE_MARKS)


def scan(path: str) -> Iterator[Region]:
    """Yield the regions of one source worth parsing, in order, never overlapping."""
    name = display_name(path)
    stream = _open(path)
    try:
        yield from _scan_stream(stream, name)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _scan_stream(stream: io.BufferedIOBase, name: str) -> Iterator[Region]:
    first = _read(stream, name, CHUNK_BYTES)
    if not first:
        raise InputError("empty file", where=name, tip="pass the log of the failed run")
    check_text(first, name)
    buf = b""  # data kept from earlier chunks (back context and windows still waiting for forward context)
    buf_line = 1  # line number of buf[0]
    searched = 0  # offset in the current data up to which anchors were searched
    emitted_to = 0  # absolute offset up to which regions were already emitted
    buf_abs = 0  # absolute offset of buf[0]
    pending: list[int] = []  # absolute offsets of hits waiting for forward context
    chunk = first
    head_done = False
    while True:
        nxt = _read(stream, name, CHUNK_BYTES) if chunk else b""
        eof = not nxt
        data = buf + chunk
        view = memoryview(data)
        if eof:
            end = len(data)
        else:
            end = data.rfind(b"\n") + 1
            if end == 0 or len(data) - end > MAX_SEGMENT_BYTES:
                cr = data.rfind(b"\r")
                if cr == -1 or len(data) - cr > MAX_SEGMENT_BYTES:
                    line = buf_line + data.count(b"\n")
                    raise InputError(f"a line over {MAX_SEGMENT_BYTES // 2**20} MiB long with no line break",
                                     where=f"{name}:{line}", tip="this does not look like a text training log")
                end = max(end, cr + 1)
        hits = list(pending)
        hits += [buf_abs + p for p in _FINDER.positions(view, max(0, searched), end)]
        windows: list[tuple[int, int]] = []
        if not head_done:
            windows.append((0, min(end, HEAD_BYTES)))
            head_done = True
        if eof:  # the end of a log is where a shell reports a kill ("[1]  16261 killed  python ...")
            tail = max(0, end - TAIL_BYTES)
            windows.append((data.rfind(b"\n", 0, tail) + 1 if tail else 0, end))
        pending = []
        for h in hits:
            rel = h - buf_abs
            ls = data.rfind(b"\n", 0, rel) + 1
            le = data.find(b"\n", rel, end)
            le = end if le == -1 else le + 1
            wide = is_failure_line(view[ls:le])
            back, fwd = (BACK_BYTES, FORWARD_BYTES) if wide else (SAMPLE_BACK_BYTES, 0)
            if le + fwd > end and not eof:
                pending.append(h)
                continue
            ws = max(0, ls - back, emitted_to - buf_abs)
            we = min(end, le + fwd)
            ws = data.rfind(b"\n", 0, ws) + 1 if ws > 0 and data[ws - 1 : ws] != b"\n" else ws
            windows.append((ws, we))
        counted_to, line = 0, buf_line
        for ws, we in _merge(windows):
            ws = max(ws, emitted_to - buf_abs)
            if we <= ws:
                continue
            line += data.count(b"\n", counted_to, ws)
            counted_to = ws
            text = decode(data[ws:we])
            yield Region(name, line, text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"))
            emitted_to = buf_abs + we
        if eof:
            return
        # Keep the back context, and everything from the earliest window still waiting.
        keep = max(0, end - BACK_BYTES)
        for h in pending:
            keep = min(keep, max(0, data.rfind(b"\n", 0, h - buf_abs) + 1 - BACK_BYTES))
        keep = data.rfind(b"\n", 0, keep) + 1 if keep > 0 else 0
        buf_line += data.count(b"\n", 0, keep)
        buf = data[keep:]
        buf_abs += keep
        searched = end - keep
        chunk = nxt


def _merge(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for ws, we in sorted(windows):
        if out and ws <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], we))
        else:
            out.append((ws, we))
    return out
