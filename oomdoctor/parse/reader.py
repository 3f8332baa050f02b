"""Stream log files in chunks and hand back only the regions worth parsing, with their line numbers.

One pass over the bytes: a multi-literal prefilter (Aho-Corasick, SIMD in ahocorasick-rs) finds the few
lines that can carry an OOM or a per-step memory figure; each hit gets a window of context around it
(back for the traceback, the progress bar and the evaluation banner; forward for wrapped or repeated
messages). Memory lines that come on every step are thinned past the first SAMPLE_DENSE_BYTES (one per
growing stride). The head of each file is always kept: that is where configurations are printed. Memory stays
bounded by the chunk size plus the windows, whatever the file size.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import stat
import sys
import warnings
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from oomdoctor.errors import InputError
from oomdoctor.parse.formats import TRIGGERS

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

try:
    import ahocorasick_rs
except ImportError:  # pragma: no cover - exercised only without the wheel
    ahocorasick_rs = None  # type: ignore[assignment]

Bytes = bytes | bytearray  # a chunk as read, or the reader's reused buffer
CHUNK_BYTES = 2 * 1024 * 1024
TAIL_BYTES = 16 * 1024  # always read: the last lines of a log
HEAD_BYTES = 256 * 1024  # configuration dumps live at the top of a log
BACK_BYTES = 96 * 1024  # enough for a deep traceback of a few interleaved ranks and the bar above it
FORWARD_BYTES = 24 * 1024  # the rest of a wrapped message, the repeated traceback line, Root Cause blocks
SAMPLE_BACK_BYTES = 2 * 1024  # per-step memory lines only need the step printed just before them
# Per-step memory lines can be on every line of a long run: past SAMPLE_DENSE_BYTES of their windows, a sample
# window is kept only once per stride that grows with the offset (SAMPLES_PER_DOUBLING per doubling of the log),
# so a 512 MiB log keeps a few thousand spread over the run; the failure's own back window keeps the last ones.
SAMPLE_DENSE_BYTES = 256 * 1024
SAMPLES_PER_DOUBLING = 128
THINNED_SAMPLE_BACK_BYTES = 512  # a kept sample past the dense part: its line and the few just above it
SAMPLE_MIN_STRIDE = 4 * 1024
MAX_SEGMENT_BYTES = 16 * 1024 * 1024  # a "line" with neither \n nor \r this long is not a text log
# A physical line of \r redraws (a progress bar that never printed \n) can be many MiB: a window reaches at
# most this far into it, cut at a \r, instead of keeping the whole line.
LONG_LINE_REACH_BYTES = 64 * 1024

# "emory" covers every "out of memory"/"OutOfMemoryError"/"memory (MB)"/"Virtual Memory" form.
ANCHORS: tuple[bytes, ...] = (b"emory", b"OOM", b"Killed", b"SIGKILL", b"ALLOC_FAILED", b"KV cache")
# The event scan's triggers that hold no anchor ("std::bad_alloc", "exit code 137", "RESOURCE_EXHAUSTED: Failed to
# allocate ..."): each is one more literal, so every line the scan would try is kept. A shorter literal inside
# several triggers stands for all of them: "alloc" for bad_alloc and the "... to allocate" / "[metal::malloc]"
# wordings, "Malloc" for the cudaMalloc ones, "esource" for "Resource exhausted" and TensorFlow's
# ResourceExhaustedError (a line it keeps that no trigger holds is dropped by the event scan, as before). A trigger
# holding another ("Terminado (killed)" holds "killed") needs no literal of its own.
COVERING_ANCHORS: tuple[bytes, ...] = (b"alloc", b"Malloc", b"esource")
_UNANCHORED: tuple[bytes, ...] = tuple(dict.fromkeys(
    t.encode() for t in TRIGGERS if not any(a in t.encode() for a in ANCHORS)))
_UNCOVERED = [t for t in _UNANCHORED if not any(c in t for c in COVERING_ANCHORS)]
EXTRA_ANCHORS: tuple[bytes, ...] = tuple(dict.fromkeys(
    [c for c in COVERING_ANCHORS if any(c in t for t in _UNANCHORED)]
    + [t for t in _UNCOVERED if not any(o != t and o in t for o in _UNCOVERED)]))
# Lines that are (probably) a failure, not a per-step memory sample: they get the wide window.
_FAILURE_MARKS: tuple[bytes, ...] = tuple(dict.fromkeys((
    b"out of memory", b"Out of memory", b"Out Of Memory", b"OutOfMemory", b"OOM", b"Killed",
    b"SIGKILL", b"ALLOC_FAILED", b"KV cache", b"can't allocate memory", b"not enough memory",
    b"out-of-memory", b"cache blocks", b"RESOURCE_EXHAUSTED", b"ran out of memory", b"Unable to allocate",
    b"Fail to alloc memory", b"MemoryError", *_UNANCHORED,  # the triggers themselves: a cover is too broad here
)))


@dataclass(frozen=True)
class Region:
    """Consecutive lines of one source, decoded, as one text; `first_line` is the 1-based number of its first line."""

    source: str
    first_line: int
    text: str

    @property
    def lines(self) -> list[str]:
        """The region's lines (split only when needed: a region that is dropped is never split)."""
        text = self.text
        return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


class _Finder:
    """Start offsets of the literals in a range, sorted: one leftmost-first automaton over all of them (ahocorasick-rs
    builds its SIMD Teddy prefilter only for leftmost matching), a range of at least PARALLEL_MIN_BYTES split at
    line breaks over THREADS threads. Over 512 MiB of the bench's sparse log, 2 MiB at a time on one thread: the 28
    anchors took 0.14 s as one such automaton, 0.44 s as a standard one over six plus 22 single-literal passes, and
    the 44 failure marks 0.23 s, against 0.55 s as single passes (2026-11-28). Leftmost-first reports one of two
    literals that overlap ("ran out of memory" hides the "out of memory" inside it): both start on the same line,
    and the reader asks only which lines hold one. A plain-Python fallback without the wheel."""

    def __init__(self, literals: tuple[bytes, ...]):
        self.literals = literals
        self._ac: Any = (ahocorasick_rs.BytesAhoCorasick(list(literals), matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST)
                         if ahocorasick_rs else None)

    def positions(self, data: Bytes, start: int, end: int) -> list[int]:
        """Start offsets (relative to data) of literal hits in data[start:end], sorted."""
        pool = _pool() if end - start >= PARALLEL_MIN_BYTES else None
        if pool is None:
            return self._positions(data, start, end)
        cuts = _cuts(data, start, end, THREADS)
        # the ranges meet at line breaks, which no literal holds: their hits together are the whole range's
        helpers = [pool.submit(self._positions, data, a, b) for a, b in zip(cuts[1:-1], cuts[2:])]
        out = self._positions(data, cuts[0], cuts[1])  # this thread takes its share too
        for helper in helpers:
            out += helper.result()
        return out

    def _positions(self, data: Bytes, start: int, end: int) -> list[int]:
        if self._ac is not None:
            return [start + s for _, s, _ in self._ac.find_matches_as_indexes(memoryview(data)[start:end])]
        out: list[int] = []
        for a in self.literals:
            i = data.find(a, start, end)
            while i != -1 and i + len(a) <= end:
                out.append(i)
                i = data.find(a, i + 1, end)
        return sorted(out)


def _cuts(data: Bytes, start: int, end: int, parts: int) -> list[int]:
    """start, the line starts nearest after each of parts - 1 even splits of data[start:end], and end."""
    cuts = [start]
    for k in range(1, parts):
        nl = data.find(b"\n", max(cuts[-1], start + (end - start) * k // parts), end)
        cuts.append(end if nl == -1 else nl + 1)
    return [*cuts, end]


# ahocorasick-rs releases the GIL while it searches, so the halves of a chunk share the cores. bytes.find, the
# fallback, holds the GIL: no threads without the wheel. THREADS = 1 is the serial path.
THREADS = min(8, os.cpu_count() or 1)
PARALLEL_MIN_BYTES = 256 * 1024  # handing passes over 256 KiB to a thread saved 0.08 ms of 0.37; smaller ranges stay serial
_POOL: ThreadPoolExecutor | None = None
_READ_POOL: ThreadPoolExecutor | None = None


def _is_regular_file(stream: BinaryIO) -> bool:
    """A plain file read through a buffer (not stdin, a pipe, gzip or a decoded UTF-16 stream)."""
    return (isinstance(stream, io.BufferedReader) and stream is not sys.stdin.buffer
            and stat.S_ISREG(os.fstat(stream.fileno()).st_mode))


def _read_pool() -> ThreadPoolExecutor | None:
    """The thread that reads the chunk after next, started on first use; None for the serial path."""
    global _READ_POOL
    if THREADS < 2:
        return None
    if _READ_POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _READ_POOL = ThreadPoolExecutor(1, thread_name_prefix="oomdoctor-read")
    return _READ_POOL


def _pool() -> ThreadPoolExecutor | None:
    """The THREADS - 1 helper threads, started on first use; None for the serial path."""
    global _POOL
    if THREADS < 2 or ahocorasick_rs is None:
        return None
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor  # local: a small log needs no threads (and no logging import)

        _POOL = ThreadPoolExecutor(THREADS - 1, thread_name_prefix="oomdoctor-scan")
    return _POOL


_FINDER = _Finder(ANCHORS + EXTRA_ANCHORS)
_FAILURE_FINDER = _Finder(_FAILURE_MARKS)


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


def _open(path: str) -> BinaryIO:
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
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw))
    return raw


def _read(stream: BinaryIO, name: str, size: int) -> bytes:
    return cast(bytes, _reading(stream.read, name, size))


def _read_into(stream: BinaryIO, name: str, into: memoryview) -> int:
    """Read up to len(into) bytes into `into` (a file or stdin: no new buffer per chunk); how many, 0 at the end."""
    if isinstance(stream, io.BufferedReader):
        return cast("int | None", _reading(stream.readinto, name, into)) or 0
    chunk = _read(stream, name, len(into))  # gzip, UTF-16: decoded into a new buffer anyway
    into[: len(chunk)] = chunk
    return len(chunk)


def _reading(read: Callable[[Any], Any], name: str, arg: Any) -> Any:
    """read(arg), with the errors of a damaged or unreadable input as one-line InputErrors."""
    try:
        return read(arg)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        detail = "it ends early" if isinstance(exc, EOFError) else str(exc)
        raise InputError(f"damaged gzip file: {detail}", where=name,
                         tip="re-copy the file, or decompress what survives: zcat FILE > out.log") from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", where=name) from None


class LimitWarning(UserWarning):
    """Part of a log was not read because a bound was reached; the report says what was left out."""


class DecodeWarning(UserWarning):
    """Bytes that are not UTF-8 were replaced by U+FFFD; the rest of the log is read as usual."""


ELF_MAGIC = b"\x7fELF"
BINARY_CONTROLS = (1, 2, 3, 4, 5, 6, 14, 15, 16, 17)


def text_encoding(head: bytes, name: str) -> str:
    """"utf-8" or "utf-16" for the head of a log; InputError for what is not text at all.

    Stray bytes that are not UTF-8 (one Latin-1 byte, a cut multi-byte character) are replaced with a
    warning, never a refusal; NUL padding after the text (a crash while the file was being written) is text.
    """
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if len(head) > 64 and head[1:64:2].count(0) > 24 and head[0:64:2].count(0) < 4:
        return "utf-16"  # UTF-16-LE without a BOM: ASCII text with every other byte NUL
    sample = head[:65536]
    body = sample.rstrip(b"\0")
    if sample.startswith(ELF_MAGIC) or (sample and not body):
        raise InputError("binary data, not a text log", where=name,
                         tip="pass the training log (stdout/stderr of the run), not a program, checkpoint or archive")
    if body.count(0) > 16 or sum(body.count(c) for c in BINARY_CONTROLS) > len(body) // 20:
        raise InputError("binary data, not a text log", where=name,
                         tip="pass the training log (stdout/stderr of the run), not a checkpoint or archive")
    try:
        # a multi-byte character may straddle the sample's end: an incremental decoder waits for the rest of it
        codecs.getincrementaldecoder("utf-8")().decode(body, final=False)
    except UnicodeDecodeError as exc:
        line = body.count(b"\n", 0, exc.start) + 1
        warnings.warn(DecodeWarning(f"{name}:{line}: not valid UTF-8 (byte 0x{body[exc.start]:02x}); "
                                    "such bytes are shown as \ufffd"), stacklevel=2)
    return "utf-8"


class _Utf16AsUtf8(io.RawIOBase):
    """A UTF-16 stream read as UTF-8, chunk by chunk (Windows PowerShell writes logs in UTF-16)."""

    def __init__(self, raw: BinaryIO, head: bytes):
        self._raw = raw
        bom = head.startswith((b"\xff\xfe", b"\xfe\xff"))
        self._decoder = codecs.getincrementaldecoder("utf-16" if bom else "utf-16-le")(errors="replace")
        self._pending = self._decoder.decode(head).encode("utf-8")

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._pending) < size:
            chunk = self._raw.read(CHUNK_BYTES)
            self._pending += self._decoder.decode(chunk or b"", final=not chunk).encode("utf-8")
            if not chunk:
                break
        n = len(self._pending) if size < 0 else size
        out, self._pending = self._pending[:n], self._pending[n:]
        return out


def decode(data: Bytes) -> str:
    """Bytes of a log region as text (stray invalid bytes become U+FFFD, never an error)."""
    return data.decode("utf-8", errors="replace")


# Told after every chunk: (source name, bytes read, total bytes or None for stdin/gzip, failure lines found).
ProgressFn = Callable[[str, int, "int | None", int], None]


def scan(path: str, progress: ProgressFn | None = None) -> Iterator[Region]:
    """Yield the regions of one source worth parsing, in order, never overlapping."""
    name = display_name(path)
    stream = _open(path)
    total = None
    if progress is not None and path != "-" and not isinstance(stream, gzip.GzipFile):
        total = os.fstat(stream.fileno()).st_size
    try:
        yield from _scan_stream(stream, name, progress, total)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _scan_stream(stream: BinaryIO, name: str, progress: ProgressFn | None = None,
                 total: int | None = None) -> Iterator[Region]:
    first = _read(stream, name, CHUNK_BYTES)
    if not first:
        raise InputError("empty file", where=name, tip="pass the log of the failed run")
    if text_encoding(first, name) == "utf-16":
        stream = _Utf16AsUtf8(stream, first)  # type: ignore[assignment]  # a readable byte stream
        first = _read(stream, name, CHUNK_BYTES)
    # data[:n]: the bytes kept from earlier chunks (back context, windows still waiting for forward context), then the
    # current chunk. One buffer, moved down and refilled in place: a new 2 MiB object per chunk cost page faults
    # (0.26 s of CPU over 512 MiB of a dense log, against 0.07 s for the whole read loop once the buffer is reused).
    data = bytearray(first)
    n = len(first)
    # The next chunk is read before this one is searched (is this the last?), and with THREADS, from a regular file,
    # the one after it is read on a thread of its own while this one is searched: readinto releases the GIL. Never
    # from a pipe: a read that waits on its writer would keep the process alive after Ctrl-C (threads are joined).
    ahead = [memoryview(bytearray(CHUNK_BYTES))]
    got = _read_into(stream, name, ahead[0])
    reading = _read_pool() if got and _is_regular_file(stream) else None
    if reading is not None:
        ahead.append(memoryview(bytearray(CHUNK_BYTES)))
    cur = 0  # ahead[cur] holds the next chunk's `got` bytes
    buf_line = 1  # line number of data[0]
    searched = 0  # offset in the current data up to which anchors were searched
    emitted_to = 0  # absolute offset up to which regions were already emitted
    buf_abs = 0  # absolute offset of data[0]
    pending: list[int] = []  # absolute offsets of hits waiting for forward context
    sample_bytes = 0  # bytes of per-step memory windows emitted so far
    next_sample = 0  # absolute offset before which a memory line is skipped once they are dense
    sample_end = 0  # absolute end of the last memory line's window
    head_done = False
    read_bytes, failure_lines, failure_end = len(first), 0, 0
    while True:
        read_bytes += got
        eof = got == 0
        later = reading.submit(_read_into, stream, name, ahead[1 - cur]) if reading is not None and not eof else None
        if eof:
            end = n
        else:
            end = data.rfind(b"\n", 0, n) + 1
            if end == 0 or n - end > MAX_SEGMENT_BYTES:
                cr = data.rfind(b"\r", 0, n)
                if cr == -1 or n - cr > MAX_SEGMENT_BYTES:
                    line = buf_line + data.count(b"\n", 0, n)
                    raise InputError(f"a line over {MAX_SEGMENT_BYTES // 2**20} MiB long with no line break",
                                     where=f"{name}:{line}", tip="this does not look like a text training log")
                end = max(end, cr + 1)
        hits = list(pending)
        if sample_bytes < SAMPLE_DENSE_BYTES:
            hits += [buf_abs + p for p in _FINDER.positions(data, max(0, searched), end)]
            failures = _FAILURE_FINDER.positions(data, 0, end) if hits else []  # one pass, not one test per hit
        else:  # memory lines are dense: only the failures' lines and one memory line per stride are looked at
            failures = _FAILURE_FINDER.positions(data, 0, end)
            hits += _sparse_hits(data, failures, max(0, searched), end, buf_abs, next_sample)
        windows: list[tuple[int, int]] = []
        if not head_done:
            windows.append((0, min(end, HEAD_BYTES)))
            head_done = True
        if eof:  # the end of a log is where a shell reports a kill ("[1]  16261 killed  python ...")
            tail = max(0, end - TAIL_BYTES)
            windows.append((_line_start(data, tail) if tail else 0, end))
        pending = []
        i = 0
        while i < len(hits):
            h = hits[i]
            i += 1
            rel = h - buf_abs
            ls = _line_start(data, rel)
            le = _line_end(data, rel, end)
            k = bisect_left(failures, ls)
            wide = k < len(failures) and failures[k] < le
            back, fwd = (BACK_BYTES, FORWARD_BYTES) if wide else (SAMPLE_BACK_BYTES, 0)
            if wide and buf_abs + ls >= failure_end:  # one count per failure line, however many anchors on it
                failure_lines, failure_end = failure_lines + 1, buf_abs + le
            if not wide and sample_bytes >= SAMPLE_DENSE_BYTES:
                if buf_abs + ls < next_sample:  # skip to the next kept sample or the next failure's line
                    upto = next_sample if k == len(failures) else min(next_sample, buf_abs + _line_start(data, failures[k]))
                    i = max(i, bisect_left(hits, upto, i))
                    continue
                next_sample = buf_abs + ls + _sample_stride(buf_abs + ls)
                back = THINNED_SAMPLE_BACK_BYTES
            if not wide:  # the bytes this window adds beyond the previous memory line's
                sample_bytes += max(0, buf_abs + le - max(buf_abs + ls - back, sample_end))
                sample_end = buf_abs + le
            if le + fwd > end and not eof:
                pending.append(h)
                continue
            ws = max(0, ls - back, emitted_to - buf_abs)
            we = min(end, le + fwd)
            ws = _line_start(data, ws) if ws > 0 and data[ws - 1 : ws] not in (b"\n", b"\r") else ws
            windows.append((ws, we))
        counted_to, line = 0, buf_line
        for ws, we in _merge(windows):
            ws = max(ws, emitted_to - buf_abs)
            if we <= ws:
                continue
            line += _count_lines(data, counted_to, ws)
            counted_to = ws
            text = decode(data[ws:we])
            yield Region(name, line, text)
            emitted_to = buf_abs + we
        if progress is not None:
            progress(name, read_bytes, total, failure_lines)
        if eof:
            return
        # Keep the back context, and everything from the earliest window still waiting.
        keep = max(0, end - BACK_BYTES)
        for h in pending:
            keep = min(keep, max(0, data.rfind(b"\n", 0, h - buf_abs) + 1 - BACK_BYTES))
        keep = _line_start(data, keep) if keep > 0 else 0
        # counted from the last window, not from data[0]: in a dense log that would count most chunks twice
        if keep >= counted_to:
            buf_line = line + _count_lines(data, counted_to, keep)
        else:
            buf_line = line - _count_lines(data, keep, counted_to)
        kept = n - keep
        if keep:
            data[:kept] = data[keep:n]  # same length: the buffer is not resized
        if kept + got > len(data):
            data.extend(bytes(kept + got - len(data)))  # grows to the largest chunk plus kept bytes, then stays
        data[kept : kept + got] = ahead[cur][:got]
        n = kept + got
        buf_abs += keep
        searched = end - keep
        if later is not None:
            cur = 1 - cur
            got = later.result()
        else:
            got = _read_into(stream, name, ahead[cur])


# bytes.count(b"\n") looks at every byte (~0.3 ms/MiB); where lines are long (a flood of \r redraws) hopping from
# one \n to the next with bytes.find (memchr) is ~10x cheaper: 512 MiB of 100 KiB lines took 0.024 s, not 0.154.
HOP_MIN_LINE_BYTES = 1024  # past HOP_TRIES hops, lines shorter than this on average are counted, not hopped
HOP_TRIES = 16


def _count_lines(data: Bytes, start: int, end: int) -> int:
    """The \n in data[start:end]: hopped from one to the next while lines are long, then counted."""
    n, i = 0, start
    while n < HOP_TRIES or i - start >= n * HOP_MIN_LINE_BYTES:
        i = data.find(b"\n", i, end) + 1
        if i == 0:
            return n
        n += 1
    return n + data.count(b"\n", i, end)


def _sample_stride(offset: int) -> int:
    """The distance to the next kept memory line once they are dense: SAMPLES_PER_DOUBLING per doubling."""
    return max(SAMPLE_MIN_STRIDE, offset // SAMPLES_PER_DOUBLING)


def _sparse_hits(data: Bytes, failures: list[int], start: int, end: int, base: int, next_sample: int) -> list[int]:
    """Anchor hits (absolute, sorted) in data[start:end] on the failures' lines, and the first hit at or after
    each stride from next_sample: the hits the dense-sample policy would keep, without listing every one."""
    out: list[int] = []
    for f in failures:
        if f >= start:
            out += [base + p for p in _FINDER.positions(data, _line_start(data, f), _line_end(data, f, end))]
    pos = max(start, next_sample - base)
    while pos < end:
        probe = _FINDER.positions(data, pos, min(end, pos + SAMPLE_MIN_STRIDE))
        if not probe:
            pos += SAMPLE_MIN_STRIDE
            continue
        out.append(base + probe[0])
        pos = probe[0] + _sample_stride(base + probe[0])
    return sorted(set(out))


def _line_start(data: Bytes, pos: int) -> int:
    """Where the line holding `pos` starts: its \n, or a \r at most LONG_LINE_REACH_BYTES back in a redraw flood."""
    start = data.rfind(b"\n", 0, pos) + 1
    if pos - start > LONG_LINE_REACH_BYTES:
        cr = data.find(b"\r", pos - LONG_LINE_REACH_BYTES, pos)
        start = cr + 1 if cr != -1 else pos - LONG_LINE_REACH_BYTES
    return start


def _line_end(data: Bytes, pos: int, end: int) -> int:
    """Just past the line holding `pos`: its \n, or a \r at most LONG_LINE_REACH_BYTES on in a redraw flood."""
    stop = data.find(b"\n", pos, min(end, pos + LONG_LINE_REACH_BYTES))
    if stop != -1:
        return stop + 1
    if end - pos <= LONG_LINE_REACH_BYTES:
        return end
    cr = data.rfind(b"\r", pos, pos + LONG_LINE_REACH_BYTES)
    return cr + 1 if cr != -1 else pos + LONG_LINE_REACH_BYTES


def _merge(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for ws, we in sorted(windows):
        if out and ws <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], we))
        else:
            out.append((ws, we))
    return out
