"""From log regions to facts: find every OOM message, read its figures, attach its context. No opinions."""

from __future__ import annotations

import functools
import warnings
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import cast

import regex

from oomdoctor.parse import context as ctx
from oomdoctor.parse import formats as P
from oomdoctor.parse import summary as memory_summary
from oomdoctor.parse.lazyregex import Literals, lazy
from oomdoctor.parse.messages import CLASSIFY_CHARS, MESSAGE_FORMATS, Classified, classify, dims_of
from oomdoctor.parse.messages import era as message_era
from oomdoctor.parse.messages import figures as message_figures
from oomdoctor.parse.model import (
    EventKind,
    Evidence,
    OOMEvent,
    Operation,
    ParseResult,
    Phase,
    RunContext,
    Value,
)
from oomdoctor.parse.normalize import (
    LOGGER_HEADER,
    RECORD_START,
    WRAP_MIN_WIDTH,
    Line,
    cut_row,
    next_row,
    normalize_region,
    unwrap,
)
from oomdoctor.parse.reader import LimitWarning, ProgressFn, Region, check_path, scan
from oomdoctor.parse.record import is_record_file
from oomdoctor.parse.record import read as read_record
from oomdoctor.parse.record import to_event as record_event
from oomdoctor.parse.snapshot import is_snapshot_file
from oomdoctor.parse.snapshot import read as read_snapshot
from oomdoctor.parse.snapshot import to_events as snapshot_events
from oomdoctor.units import IMPLAUSIBLE_BYTES

MAX_MESSAGE_LINES = 14
TRT_TACTIC_LINES = 8  # TensorRT's "Skipping tactic ..." follows the failed allocation's error and warning lines
PRINTED_ROUNDING = 0.01  # "1.50 GiB": a figure printed to two decimals is within 1% of the true value above 0.5
DUPLICATE_WINDOW_LINES = 500
# torchelastic's "failed (exitcode: -9)" line and its ChildFailedError block: one kill, not several
HOST_KILL_BLOCK_LINES = 60
# A notebook's "OutOfMemoryError  Traceback" header stands for the failure only when its message was not kept
# within this many lines after it (a notebook traceback of a deep stack, with code context, runs to a few hundred).
HEADER_REACH_LINES = 600
# A DataLoader worker that "exited unexpectedly" after a segfault or bus error report this near is not an OOM kill.
WORKER_REPORT_BACK_LINES = 20
# Bounded wildcards only: a line of many repeated heads must not cost (heads x line length).
_COMPLETE = lazy(
    r"cached\)|reserved in total by PyTorch\)|reserved by PyTorch but unallocated\.|MPS backend out of memory \([^\n]{0,400}?pool"
    r"|memory fraction\)\s{0,40}:\s{0,4}\d"  # cudaMallocAsync's last figure
    r"|out of memory \(at [^()\n]{1,300}:\d{1,6}\)"  # a C++ check's error, closed by its source location
)
# A continuation that starts a new labelled figure ("Currently allocated     : 9.43 GiB") is a new line of the
# message, not the rest of a hard-wrapped one.
_LABEL_LINE = lazy(r"^\s{0,4}[A-Z][A-Za-z ()-]{2,60}?\s{0,30}:\s{1,8}\d")  # a row cut mid-word ("CUD" / "A error: out of
# memory") is no label: every label of the message is followed by its figure
# A tracing span's fields after a multi-line record, alone on its row: " rank=0" (Text Generation Inference's shards)
_SPAN_RANK = lazy(r"^\s{0,2}rank=(?P<rank>\d{1,5})\s*$")
_FIGURE_UNIT = r"\d ?[KMGT]?i?B"  # a figure's last digit and its unit, as messages print them ("12.00 MiB", "8GB")
# Another message's head: a caught message the script cut ("... Tried to allocate 500.00 MiB. GPU ") is not continued
# by the next one. (A terminal may still have cut a logger's row right before one: unwrapping does not stop there.)
_MESSAGE_HEAD = lazy(r"^\s*(?:CUDA|HIP|XPU) out of memory\. Tried to allocate ")
# A sentence of a message that ended ("Tried to allocate 12.00 MiB.", "... might be incorrect."), then the next one
# ("GPU 0 has ...", "For debugging consider ..."): a space goes between them, whether the line broke there or a
# terminal cut the row and the copy trimmed the blank it was cut at. After a word, only a plain capitalised word starts
# a sentence: "torch." + "OutOfMemoryError: ..." is a dotted name a terminal cut.
_FIGURE_SENTENCE_END = lazy(_FIGURE_UNIT + r"\.$")
_WORD_SENTENCE_END = lazy(r"[a-z]{2}\.$")
_SENTENCE_START = lazy(r"^[A-Z][a-z]{0,20} ")


def _sentence_break(text: str, nxt: str) -> bool:
    """Whether `text` ends a sentence and `nxt` starts the next (see _FIGURE_SENTENCE_END)."""
    if not text.endswith(".") or not nxt[:1].isupper():
        return False
    tail = text[-24:]
    return bool(_FIGURE_SENTENCE_END.search(tail) or (_WORD_SENTENCE_END.search(tail) and _SENTENCE_START.match(nxt)))


def _new_record(line: Line) -> bool:
    """Whether a line starts a record of its own: by its text (RECORD_START, _MESSAGE_HEAD), or because the prefix
    normalising took off it was a program logger's record header (LOGGER_HEADER; a collector's prefix - a k8s
    timestamp, a compose service - is put on every physical line, the rows of a wrapped message too)."""
    cut = len(line.raw) - len(line.text)
    if RECORD_START.match(line.text) or _MESSAGE_HEAD.match(line.text):
        return True
    return cut > 0 and LOGGER_HEADER.search(line.raw, 0, cut) is not None


# A traceback printed after a logged message starts its own record; it is never the rest of a wrapped line.
_TRACEBACK_START = lazy(r"^\s*(?:Traceback \(most recent call last\)|During handling of|The above exception)")
_RUN_START = lazy(
    r"\*{5} Running training \*{5}|Loading checkpoint shards:\s+0%|torch\.distributed\.run|Setting ds_accelerator"
)
_RUN_START_NEEDS = ("***** Running training *****", "Loading checkpoint shards:", "torch.distributed.run",
                    "Setting ds_accelerator")  # one of them is in every line _RUN_START matches


@dataclass
class _Hit:
    """One OOM message found in a source's lines, before its context is read."""

    c: Classified
    idx: int  # index of the first line in the source's Line list
    end: int  # index of the last line consumed
    text: str  # the message text (wrapped lines rejoined), from the trigger line on
    first: int = 0  # where the message's own first line starts in `text` (a trigger line before it is not message)

    @property
    def kind(self) -> str:
        return self.c.kind


def _assemble(lines: Sequence[Line], i: int, mode: str, terminal: int | None = None) -> tuple[str, int, list[int]]:
    """The message starting at lines[i] with its wrapped or continued lines rejoined.

    mode "auto" joins a line that fills the terminal's width (or ends in a space) to the next without a
    space (a hard wrap may split a word), "space" always joins with a space, "tight" never adds one, "rows" joins
    only what "auto" reads as wrapped (the one line the program printed, whatever follows it).
    `terminal`: the width the log was hard-wrapped at, when it tells one (see normalize.unwrap); a trigger row
    narrower than it was not cut. Returns the text, the index of the last line used, and the text offset where each
    line starts.
    """
    first = lines[i]
    text, offsets = first.text, [0]
    width = max(len(first.raw), terminal or 0)  # else the message's first row wide enough to be a cut one (a line
    # unwrap joined is wider than the terminal: the program's own wrap, its width)
    j = i
    while j + 1 < len(lines) and j - i < MAX_MESSAGE_LINES:
        nxt = lines[j + 1]
        if not (nxt.number == lines[j].end + 1 or (nxt.escaped and nxt.number == lines[j].number)) or not nxt.text.strip():
            break  # not the next line (a string's escaped lines are each other's)
        prev_raw = lines[j].raw
        width = width if width >= WRAP_MIN_WIDTH else len(prev_raw)
        cut = len(prev_raw) == width >= WRAP_MIN_WIDTH and not _TRACEBACK_START.match(nxt.text)
        if _COMPLETE.search(text):  # the message is read; the rest of a row a terminal cut goes with it (a cut
            # told by the row before, as wide: the width of one row alone may be the line's own)
            if not (cut and j > i and len(lines[j - 1].raw) == width and len(nxt.raw) <= width
                    and not _new_record(nxt)):
                break
            offsets.append(len(text))
            text += nxt.raw
            j += 1
            continue
        wrapped = (prev_raw.endswith(" ") or (cut and (j > i or len(nxt.raw) <= width) and not _LABEL_LINE.match(nxt.text))
                   ) and not _new_record(nxt)
        if text.endswith("\\"):  # a continuation backslash: the line (even a word) goes on in the next one
            text = text[:-1]
            offsets.append(len(text))
            text += nxt.text.lstrip()
        elif mode == "tight" or (mode in ("auto", "rows") and wrapped):
            if (prev_raw.endswith(" ") and not text.endswith(" ")) or _sentence_break(text, nxt.text):
                text += " "  # wrapped at a space the line's text lost when it was trimmed: "has" + "79.25 GiB", or
                # one sentence ended and the next starts ("Tried to allocate 12.00 MiB." + "GPU 0 has ...")
            offsets.append(len(text))
            text += nxt.text if _prefixed(first) and _prefixed(nxt) else nxt.raw
        elif mode != "rows" and not _new_record(nxt) and "Traceback (most recent call last)" not in nxt.text and (
                nxt.rank == first.rank or (nxt.rank is None and lines[j].padded)):
            # (a row that ended in blanks, a wrap at a space an editor padded, goes on without the launcher's prefix)
            text += " "
            offsets.append(len(text))
            text += nxt.text.strip()
        else:
            break
        j += 1
    return text, j, offsets


def _prefixed(line: Line) -> bool:
    """Whether normalising took a prefix off the line. When the first line of a hard-wrapped message has one and its
    continuation too, the collector or launcher put it on every line after the wrap: the continuation is its text.
    Otherwise the continuation is taken raw (a fragment that looks like a prefix, "12: ...", is the message's)."""
    return len(line.raw) > len(line.text) and len(line.raw.rstrip()) > len(line.text)


def _implausible(f: dict) -> tuple[str, ...]:
    bad = [k for k, v in f.items() if k.endswith("_bytes") and isinstance(v, int) and (v >= IMPLAUSIBLE_BYTES or v < 0)]
    if any(p.bytes >= IMPLAUSIBLE_BYTES for p in f.get("other_processes", ())):
        bad.append("other_processes")
    total = f.get("total_bytes")
    if total and f.get("allocated_bytes") is not None and f["allocated_bytes"] > total and "allocated_bytes" not in bad:
        bad.append("allocated_bytes")
    if total and f.get("requested_bytes") is not None and f["requested_bytes"] > 64 * total:
        bad.append("requested_bytes")
    proc, reserved = f.get("process_in_use_bytes"), f.get("reserved_bytes")
    # NVML could not see the process (containers print 0 bytes); figures printed to two decimals may differ by
    # their rounding when nothing but PyTorch's reserve is in use
    if proc is not None and reserved and proc < reserved * (1 - PRINTED_ROUNDING) and "process_in_use_bytes" not in bad:
        bad.append("process_in_use_bytes")
    return tuple(bad)


_SQUEEZE = lazy(r"[ \t]{2,}|[*`]+|(?<=\s)> ")  # whitespace runs, markdown emphasis, quote markers
# A terminal's soft wraps pasted as the blanks that padded each row to its width ("Includi<48 blanks>ng non-PyTorch
# memory"): the rows' characters are the line's own, so the padding goes whole. No run this long is inside a message.
_WRAP_PADDING = lazy(r"[ \t]{8,}")
# ... except that a row ending in a figure's unit was cut at the space after it ("10.75 GiB<blanks>total capacity"): a
# unit is never glued to the word after it
_UNIT_BEFORE_PADDING = lazy(_FIGURE_UNIT + r"$|\d bytes$")


def _figures_end(m: regex.Match[str]) -> int:
    """Where a message's figures end: its last group other than the free-text hint after them."""
    ends = [m.end(g) for g, v in m.groupdict().items() if v is not None and g != "hint"]
    return max(ends) if ends else m.end()


def _squeeze(text: str, offsets: list[int], pattern: regex.Pattern[str] | None = None) -> tuple[str, list[int]]:
    """The text with whitespace runs, markdown emphasis and quote markers removed, and line offsets moved along; with
    `pattern` (_WRAP_PADDING), its runs removed whole."""
    out: list[str] = []
    kept_before: list[tuple[int, int]] = []  # (original offset, squeezed offset) at each cut
    pos = 0
    squeezed = 0
    for m in (pattern or _SQUEEZE).finditer(text):
        out.append(text[pos:m.start()])
        squeezed += m.start() - pos
        if pattern is None:
            repl = " " if m.group().startswith((" ", "\t")) else ""
        else:
            repl = " " if text[m.end():m.end() + 1].isalpha() and _UNIT_BEFORE_PADDING.search(text, max(0, m.start() - 12),
                                                                                            m.start()) else ""
        out.append(repl)
        squeezed += len(repl)
        pos = m.end()
        kept_before.append((pos, squeezed))
    out.append(text[pos:])

    def moved(o: int) -> int:
        prior = [(orig, sq) for orig, sq in kept_before if orig <= o]
        return o if not prior else prior[-1][1] + (o - prior[-1][0])

    return "".join(out), [moved(o) for o in offsets]


def _key(kind: str, text: str, m: regex.Match[str] | None) -> str:
    core = m.group(0) if m is not None else text
    return kind + "|" + regex.sub(r"\s+", " ", core).strip()[:400]


MEMO_ENTRIES = 256  # distinct one-line messages remembered while scanning one source


def _full(c: Classified | None) -> bool:
    return c is not None and c.full


def _recognise(lines: Sequence[Line], i: int, memo: dict[str, Classified | None], terminal: int | None = None
               ) -> tuple[Classified | None, str, int, list[int]]:
    """The best reading of a message starting at lines[i]: (classified, text, last line index, line offsets).

    Tries the three ways of rejoining wrapped lines, then the text with whitespace runs and markdown
    squeezed out, then the trigger line alone.
    """
    t = lines[i].text
    if any(f.admits(t) for f in _SINGLE_LINE_FORMATS):  # a one-line form (notebook header, worker exit) is never joined
        c = classify(t)
        if c is not None and c.fmt.single_line and not cut_row(lines, i):
            return c, t, i, [0]
        if c is not None and c.fmt.single_line:  # the fuller message a hard wrap cut it from reads first
            text, end, offsets = _assemble(lines, i, "auto", terminal)
            c2 = classify(text)
            return (c2, text, end, offsets) if _full(c2) and c2 is not None and not c2.fmt.single_line else (c, t, i, [0])
    best: tuple[Classified | None, str, int, list[int]] | None = None
    if t in memo:  # the same one-line message again (a flood of identical lines): classify it once
        best = (memo[t], t, i, [0])
    for mode in ("auto", "space", "tight") if best is None else ():
        text, end, offsets = _assemble(lines, i, mode, terminal)
        c = classify(text)
        if best is None or (_full(c) and not _full(best[0])):
            best = (c, text, end, offsets)
        if _full(c):
            break
    assert best is not None  # the mode loop ran, or the memo answered
    c, text, end, offsets = best
    if end == i and _full(c) and text == t:
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        memo[t] = c
    if not _full(c) and _SQUEEZE.search(text[:CLASSIFY_CHARS]):  # spaced-out or markdown-decorated message
        unsqueezed, unsqueezed_offsets = text, offsets
        sq, sq_offsets = _squeeze(text[:CLASSIFY_CHARS], offsets)
        c2 = classify(sq)
        if _full(c2) or (c is None and c2 is not None):
            c, text, offsets = c2, sq, sq_offsets
        if not _full(c) and _WRAP_PADDING.search(unsqueezed[:CLASSIFY_CHARS]):  # soft-wrapped rows padded with
            # blanks: drop the padding
            sq, sq_offsets = _squeeze(unsqueezed[:CLASSIFY_CHARS], unsqueezed_offsets, _WRAP_PADDING)
            c2 = classify(sq)
            if _full(c2) or (c is None and c2 is not None):
                c, text, offsets = c2, sq, sq_offsets
                if c2 is not None and c2.match is not None:  # the message ends on the line its figures end on: the
                    used = bisect_right(offsets, _figures_end(c2.match) - 1)  # lines joined past it while it read as cut
                    end, text, offsets = i + used - 1, text[: offsets[used] if used < len(offsets) else len(text)], \
                        offsets[:used]
    # the trigger's own line, with the rows a terminal may have cut it into, or alone; not when the rows after it say
    # it is no failure (TensorFlow's "... The caller indicate" / "s that this is not a failure")
    if c is None and end > i and not P.TF_NOT_A_FAILURE.search(text[:CLASSIFY_CHARS]):
        for line, line_end, line_offsets in (_assemble(lines, i, "rows", terminal) if cut_row(lines, i) else (t, i, [0]),
                                             (t, i, [0])):
            if (c := classify(line)) is not None:
                text, end, offsets = line, line_end, line_offsets
                break
    if c is None and _LOWERED.search(text):  # pasted all in lower case: read it in PyTorch's case, same length
        c = classify(_RECASE.sub(lambda m: _CANONICAL[m.group().lower()], text))
    return c, text, end, offsets


# A message pasted in lower case ("cuda out of memory. tried to allocate 78.88 mib (gpu 0; ...") is read with its
# words in PyTorch's own case; every replacement keeps the length, so offsets and figures stay where they were.
_CANONICAL = {"cuda": "CUDA", "tried": "Tried", "gpu": "GPU", "kib": "KiB", "mib": "MiB", "gib": "GiB",
              "tib": "TiB", "pytorch": "PyTorch"}
_LOWERED = lazy(r"\bcuda out of memory\. tried to allocate")
_RECASE = lazy(r"(?i)\b(?:cuda|tried|gpu|kib|mib|gib|tib|pytorch)\b")


class _NextMessage:
    """Where the next line holding an OOM message is, found by one forward scan shared by every question (a log
    of thousands of notebook headers must not rescan the same lines for each)."""

    def __init__(self, lines: Sequence[Line]) -> None:
        self.lines, self.scanned, self.found = lines, 0, -1  # lines before `scanned` are searched; `found` is the
        # last message line found there (-1: none)

    def after(self, i: int, reach: int) -> bool:
        """True when a message line lies within `reach` lines after line i."""
        if self.found > i:
            return self.found - i <= reach
        start = max(self.scanned, i + 1)
        for k in range(start, min(len(self.lines), i + 1 + reach)):
            if _OOM_MESSAGE.search(self.lines[k].text):
                self.scanned, self.found = k + 1, k
                return True
        self.scanned = max(self.scanned, min(len(self.lines), i + 1 + reach))
        return False


def _superseded(lines: Sequence[Line], i: int, c: Classified, nxt: _NextMessage) -> bool:
    """A stand-in reading that the lines around it replace: a notebook header whose message follows, a worker exit
    that a segfault or bus error explains."""
    if c.fmt.gives_way:
        return nxt.after(i, HEADER_REACH_LINES)
    if c.fmt.name == "DATALOADER_EXIT":
        return any(P.DATALOADER_NOT_OOM.search(ln.text) for ln in lines[max(0, i - WORKER_REPORT_BACK_LINES) : i])
    return False


# A message line a notebook header gives way to: the GPU and TensorFlow messages, and Python's host MemoryError
# closing the traceback ("MemoryError: Unable to allocate ...", "_ArrayMemoryError: ...", a bare "MemoryError").
_OOM_MESSAGE = lazy(r"OutOfMemoryError:|out of memory|Tried to allocate|ResourceExhaustedError:|OOM when allocating"
                    r"|MemoryError:|^\s{0,8}MemoryError\s*$")
_SINGLE_LINE_FORMATS = tuple(f for f in MESSAGE_FORMATS if f.single_line)


_TRIGGERS = Literals(P.TRIGGERS)


def has_trigger(text: str) -> bool:
    """Whether a line holds one of P.TRIGGERS (tried on every line of every log)."""
    return _TRIGGERS.found_in(text)



_SEAM_CHARS = max(map(len, P.TRIGGERS)) - 1  # the most of a trigger one side of a row's end can hold


def _trigger_across(lines: Sequence[Line], i: int) -> bool:
    """Whether a trigger lies across the seam between lines[i] and the row before it, a row a terminal may have cut
    (the caller asks only past a row as wide as the widest: "... DefaultCPUAllocat" / "or: not enough memory ...");
    not one the row before holds whole (its message is read from that row)."""
    tail = lines[i - 1].raw[-_SEAM_CHARS:]
    return cut_row(lines, i - 1) and has_trigger(tail + lines[i].raw[:_SEAM_CHARS]) and not has_trigger(tail)


# An exception whose message is only a source location ("RuntimeError: .../indice_cuda.cu 124"): a check macro
# printing where it failed, its error on the next line.
_LOCATION_HEAD = lazy(r"^\w[\w.]{0,80}(?:Error|Exception): \S{1,300}" + P.CPP_SOURCE + r":? ?\d{1,6}\s*$")


def _location_head(lines: Sequence[Line], i: int) -> bool:
    """The line right before lines[i] raised an exception whose message is the failing check's source location."""
    return i > 0 and lines[i - 1].number == lines[i - 1].end and next_row(lines, i - 1) is lines[i] \
        and lines[i - 1].rank == lines[i].rank and _LOCATION_HEAD.match(lines[i - 1].text) is not None


def _wrapped_into(lines: Sequence[Line], i: int) -> bool:
    """lines[i] may be the tail of the line before it, cut by a hard wrap mid-word ("...: cudaMalloc fail" /
    "ed: out of memory"): that line comes right before it, fills at least WRAP_MIN_WIDTH columns without a
    trailing space, and holds no trigger of its own (it was tried already)."""
    if i == 0:
        return False
    prev, line = lines[i - 1], lines[i]
    return cut_row(lines, i - 1) and prev.rank == line.rank and not prev.raw.endswith(" ") and not has_trigger(prev.text)


def _widest(lines: Sequence[Line], terminal: int | None) -> int:
    """Where a terminal cut rows, if anywhere: the width the log tells (see normalize.unwrap), else its widest row."""
    return terminal or max((len(ln.raw) for ln in lines), default=0)


def _find_hits(lines: Sequence[Line], terminal: int | None, widest: int) -> Iterator[_Hit]:
    """Every OOM message in the lines, in order: where it starts and ends, its kind, its match (`terminal`: the width
    the log was hard-wrapped at, when it tells one; `widest`: _widest)."""
    memo: dict[str, Classified | None] = {}
    nxt = _NextMessage(lines)
    i = 0
    while i < len(lines):
        t, trigger = lines[i].text, i
        if not (has_trigger(t) or (i and len(lines[i - 1].raw) == widest and _trigger_across(lines, i))) \
                or ((fm := ctx.FRAME.match(t)) and not has_trigger(t[fm.end():])):  # a frame, unless a message
            i += 1  # was glued after its function ("..., in __deepcopy__torch.OutOfMemoryError: CUDA out of ...")
            continue
        # A source line quoting the phrase is not an OOM, unless a whole message with figures follows it
        # (a pasted traceback line and the error run together on one line).
        code_like = t.lstrip().startswith(("#", "except ", "raise ", "if ", "elif ", "return ", ">>>"))
        c, text, end, offsets = _recognise(lines, i, memo, terminal)
        # the message's head is on the line a hard wrap cut it from, or is a check's source location above it
        if not _full(c) and (_wrapped_into(lines, i) or _location_head(lines, i)):
            head = _recognise(lines, i - 1, memo, terminal)
            if head[0] is not None and (c is None or _full(head[0])):
                (c, text, end, offsets), i = head, i - 1
        if c is None or (code_like and not c.full) or _superseded(lines, i, c, nxt):
            i += 1
            continue
        if c.fmt.single_line:  # its line alone, or the lines a hard wrap cut it over ("...with si" / "gnal SIGKILL")
            k = max(k for k, off in enumerate(offsets) if c.match is None or off < c.match.end())
            text, end, offsets = text[:offsets[k + 1]] if k + 1 < len(offsets) else text, i + k, offsets[:k + 1]
        start, first = i, 0
        if c.match is not None:  # the message may begin on a later line than the trigger
            k = max(k for k, off in enumerate(offsets) if off <= c.match.start())
            start, first = i + k, offsets[k]
        yield _Hit(c, start, end, text, first)
        rest = text[c.match.end():] if c.match is not None and c.fmt.name.startswith("CACHING") else ""
        while "out of memory. Tried to allocate" in rest:  # interleaved writers: two messages on one line
            c2 = classify(rest)
            if c2 is None or c2.match is None:
                break
            yield _Hit(c2, start, end, rest)
            rest = rest[c2.match.end():]
        i = max(end + 1 if c.kind != "host_oom" else i + 1, trigger + 1)  # never back to a line already tried


def parse_lines(lines: Sequence[Line], source: str) -> tuple[list[OOMEvent], RunContext]:
    """Every OOM event in one source's normalised lines, in order, plus the run's context."""
    lines, terminal = unwrap(lines, has_trigger)
    lines = ctx.without_process_labels(ctx.join_cut_frames(lines))
    # The source's text in one string: a pass that reads only lines holding some literal is skipped, one search over
    # it, when the source holds none of them (no line can), instead of testing every line.
    whole = "\n".join([ln.text for ln in lines])
    root_rank = _root_cause_rank(lines, source) if P.ROOT_CAUSE_TEXT in whole else None
    widest = _widest(lines, terminal)
    hits = _find_hits(lines, terminal, widest)  # a generator: hits are read one at a time, never all held
    first_hit = next(hits, None)
    reader = _EventReader(lines, source, root_rank, ctx.Markers(lines, whole) if first_hit else ctx.Markers(()), widest)
    events: list[OOMEvent] = []
    seen: dict[str, int] = {}  # dedupe key -> index in events
    echoed: dict[str, int] = {}  # a ranked event's key without its rank -> index in events
    placed: dict[str, int] = {}  # an event's key without its GPU, for an event that names one -> index in events
    unplaced: dict[str, int] = {}  # run|rank|kind of an event with neither device nor figures -> index in events
    run_starts = [k for k, ln in enumerate(lines) if _RUN_START.search(ln.text)] \
        if first_hit and any(lit in whole for lit in _RUN_START_NEEDS) else []
    run, last_idx, over = 0, -1, 0
    last_end = -1  # the last line (index) of the last event's message
    for hit in chain((first_hit,), hits) if first_hit else ():
        if events and bisect_right(run_starts, last_idx) < bisect_left(run_starts, hit.idx):
            run += 1  # a new run started between the previous message and this one
        last_idx = hit.idx
        first = lines[hit.idx]
        rank, rank_ev = reader.rank(hit)
        f = reader.figures(hit)
        if hit.kind == "host_oom" and (_merge_host_kill(events, lines, hit, rank) or _raised_from_oom(events, lines, hit)):
            continue
        if hit.kind == "tf_oom" and _merge_tf_op(events, first, f, rank, run, hit.idx - last_end):
            continue
        key = _dedupe_key(run, rank, f, hit)
        if _recent(events, seen, key, first.number):
            continue  # the same message again: logged, then raised; or re-raised "during handling"
        unranked = _dedupe_key(run, None, f, hit)
        if rank is None and _recent(events, echoed, unranked, first.number):
            continue  # a ranked worker's message echoed with no rank by whoever collects it (Ray's driver, its controller)
        no_gpu = _dedupe_key(run, rank, {**f, "gpu_index": None}, hit)
        if f.get("gpu_index") is None and _recent(events, placed, no_gpu, first.number):
            continue  # the same failure restated without its device (XLA's allocator names it, its runtime does not)
        bare = f"{run}|{rank}|{hit.kind}"
        if f.get("gpu_index") is not None and hit.c.fmt.same_failure and bare in unplaced \
                and first.number - events[unplaced[bare]].end_line <= SAME_FAILURE_FOLLOW_LINES:
            k = unplaced.pop(bare)  # ... or told first bare: Ollama's runner error, then ggml's own buffer line
            events[k] = _placed(events[k], f)
            placed[no_gpu] = k
            continue
        if len(events) >= MAX_EVENTS_PER_SOURCE:
            over += 1
            continue
        seen[key] = len(events)
        if rank is not None:
            echoed[unranked] = len(events)
        if f.get("gpu_index") is not None:
            placed[no_gpu] = len(events)
        elif not any(v is not None for k, v in f.items() if k.endswith("_bytes")):
            unplaced[bare] = len(events)
        events.append(_with_tf_shape(reader.event(hit, f, run, rank, rank_ev)))
        last_end = hit.end
    if over:
        warnings.warn(LimitWarning(f"{source}: {over:,} more OOM messages after the first {MAX_EVENTS_PER_SOURCE:,} "
                                   "were counted, not reported one by one"), stacklevel=2)
    _attach_root_cause_rank(events, root_rank)
    if events and memory_summary.HEAD_NEEDS in whole:
        events = memory_summary.attach(events, memory_summary.tables(lines, source))
    run_ctx = RunContext(
        source=source, config=ctx.config_from(lines, source),
        memory=tuple(ctx.memory_samples(lines, source, reader.markers, whole)),
        eval_lines=_eval_lines(lines, source, reader.markers if first_hit else None),
        torch_version=_first_value(lines, source, P.TORCH_VERSION, "version"),
        alloc_conf=_alloc_conf(lines, source) if "ALLOC_CONF" in whole else None, root_cause_rank=root_rank,
    )
    if run_ctx.torch_version:
        events = [e.model_copy(update={"torch_version": run_ctx.torch_version.value}) for e in events]
    return events, run_ctx


def _eval_lines(lines: Sequence[Line], source: str, markers: ctx.Markers | None) -> tuple[Evidence, ...]:
    """The lines an evaluation banner matches: those the markers of the lines found, or read anew without them."""
    if markers is not None:
        return tuple(ctx._ev(source, lines[k]) for k in markers.eval_banners)
    return tuple(ctx._ev(source, ln) for ln in lines if ctx.is_eval_banner(ln.text))


def _recent(events: list[OOMEvent], index: dict[str, int], key: str, number: int) -> bool:
    """Whether an event filed under `key` in `index` ended at most DUPLICATE_WINDOW_LINES before line `number`."""
    return key in index and number - events[index[key]].end_line <= DUPLICATE_WINDOW_LINES


# A message with neither device nor figures, and a library's own line for one failure (a same_failure format) naming
# the device this close after it, are one failure.
SAME_FAILURE_FOLLOW_LINES = 2


def _placed(event: OOMEvent, f: dict) -> OOMEvent:
    """An event told first bare, with the device and the figures the same failure's next line adds (ggml's "failed
    to allocate CUDA0 buffer of size N" after a runner's bare "cudaMalloc failed: out of memory")."""
    added = {k: v for k, v in f.items() if (k == "gpu_index" or k.endswith("_bytes")) and getattr(event, k) is None}
    return event.model_copy(update=added)


# XLA's BFC allocator rounds a request up to its 256-byte minimum ("47.20GiB (rounded to 50677266944)"); the runtime's
# line for the same failure names the exact bytes ("trying to allocate 50677266816 bytes")
XLA_BFC_ROUNDING_BYTES = 256


def _dedupe_key(run: int, rank: int | None, f: dict, hit: _Hit) -> str:
    """Two messages with this key near each other are one failure printed twice."""
    figures = tuple((k, -(-v // XLA_BFC_ROUNDING_BYTES) if hit.kind == "xla_oom" and k == "requested_bytes" else v)
                    for k, v in sorted(f.items()) if k.endswith("_bytes") and v is not None)
    what = ("same-failure" if hit.c.fmt.same_failure
            else f"{hit.kind}|{figures}" if figures else _key(hit.kind, hit.text, hit.c.match))
    return f"{run}|{rank}|{f.get('gpu_index')}|{what}"


TF_OP_AFTER_BFC_LINES = 3


def _with_tf_shape(event: OOMEvent) -> OOMEvent:
    """A BFC allocator failure whose message region also holds the kernel's "OOM when allocating tensor with
    shape[...]" line: the shape belongs to this event."""
    if event.kind != "tf_oom" or "shape" in event.detail or "OOM when allocating" not in event.message:
        return event
    m = P.TF_OOM.search(event.message)
    if m is None or not m["shape"]:
        return event
    return event.model_copy(update={"detail": {**event.detail, "shape": dims_of(m["shape"])}})


def _merge_tf_op(events: list[OOMEvent], first: Line, f: dict, rank: int | None, run: int, lines_after: int) -> bool:
    """TensorFlow reports one failed allocation twice: the BFC allocator's "Ran out of memory trying to allocate X",
    then the kernel's "OOM when allocating tensor with shape[...]". The second adds the shape to the first. The
    Python exception raised for it after the traceback ("ResourceExhaustedError: OOM when allocating tensor with
    shape[...]", TF1 prints no dtype there, so no size) restates the same shape: it is that failure, not another."""
    prev = events[-1] if events else None
    if prev is None or prev.kind != "tf_oom" or prev.rank != rank or prev.run != run:
        return False
    shape = (f.get("detail") or {}).get("shape")
    gap = first.number - prev.end_line
    kernel = shape is not None or "OOM when allocating" in first.text  # its shape may be cut off the line
    # (lines_after: in lines as printed, the rows a terminal wrapped them into joined back)
    if not kernel or not (0 < lines_after <= TF_OP_AFTER_BFC_LINES
                          or (shape is not None and 0 < gap <= DUPLICATE_WINDOW_LINES and prev.detail.get("shape") == shape)):
        return False
    events[-1] = prev.model_copy(update={"detail": {**(f.get("detail") or {}), **prev.detail},
                                         "requested_bytes": prev.requested_bytes or f.get("requested_bytes")})
    return True


def _merge_host_kill(events: list[OOMEvent], lines: Sequence[Line], hit: _Hit, rank: int | None) -> bool:
    """A host kill reported by several lines of one torchelastic block is one kill: merge it into the last."""
    prev = events[-1] if events else None
    block_rank = rank if rank is not None else _block_rank(lines, hit.idx, hit.end)
    if prev and prev.kind == "host_oom" and (prev.rank is None or block_rank is None or prev.rank == block_rank) \
            and lines[hit.idx].number - prev.end_line <= HOST_KILL_BLOCK_LINES:
        if prev.rank is None and block_rank is not None:  # the Root Cause block names the rank
            events[-1] = prev.model_copy(update={"rank": block_rank})
        return True
    return False


RAISED_FROM_WINDOW_LINES = 400  # the wrapping exception's traceback, between the OOM's message and its own
_DIRECT_CAUSE = "The above exception was the direct cause of the following exception"


def _raised_from_oom(events: list[OOMEvent], lines: Sequence[Line], hit: _Hit) -> bool:
    """A MemoryError raised from the device OOM just read ("raise MemoryError(...) from error", as torch_max_mem does
    when even a batch of one failed): the same failure, wrapped, not a second one on the host."""
    prev = events[-1] if events else None
    if prev is None or prev.kind == "host_oom" or lines[hit.idx].number - prev.end_line > RAISED_FROM_WINDOW_LINES:
        return False
    for ln in reversed(lines[max(0, hit.idx - RAISED_FROM_WINDOW_LINES) : hit.idx]):
        if ln.number <= prev.end_line:
            return False
        if ln.text.lstrip().startswith(_DIRECT_CAUSE):
            return True
    return False


def _attach_root_cause_rank(events: list[OOMEvent], root_rank: Value | None) -> None:
    """torchelastic names the failing rank; give it to the one event whose message carried no prefix."""
    if root_rank is None:
        return
    unranked = [k for k, e in enumerate(events) if e.rank is None and e.kind != "host_oom"]
    if len(unranked) == 1 and not any(e.rank is not None for e in events if e.kind != "host_oom"):
        k = unranked[0]
        events[k] = events[k].model_copy(update={
            "rank": root_rank.value, "root_cause": True,
            "evidence": {**events[k].evidence, "rank": root_rank.evidence}})


@dataclass
class _EventReader:
    """Reads the context of each message in one source: rank, figures, step, phase, operation."""

    lines: Sequence[Line]
    source: str
    root_rank: Value | None
    markers: ctx.Markers
    widest: int  # where a terminal cut rows (_widest)
    figures_of: dict[str, dict] = field(default_factory=dict)

    @functools.cached_property
    def launch(self) -> tuple[int, ctx.Witness | None] | None:
        """The source's launch command (read once, whatever the number of failures)."""
        return ctx.first_launch(self.lines)

    def rank(self, hit: _Hit) -> tuple[int | None, Evidence | None]:
        first = self.lines[hit.idx]
        if first.rank is None and hit.idx > 0 and (prev := self.lines[hit.idx - 1]).rank is not None \
                and len(prev.raw) == self.widest and cut_row(self.lines, hit.idx - 1) and not prev.raw.endswith(" "):
            return prev.rank, None  # the rest of a row a terminal cut: the launcher's prefix is on the row it came from
        if first.rank is None and (nxt := next_row(self.lines, hit.end)) is not None and nxt.rank is not None \
                and _TRACEBACK_START.match(nxt.text):
            # the exception's own traceback, under its rank, on the very next line
            return nxt.rank, ctx._ev(self.source, nxt)
        if first.rank is None and (traced := self._traced_rank(hit)) is not None:
            return traced
        if first.rank is None and hit.kind != "host_oom" and (named := ctx.rank_near(self.lines, hit.idx)):
            return named.value, ctx._ev(self.source, named.line)
        return first.rank, None

    def _traced_rank(self, hit: _Hit) -> tuple[int, Evidence] | None:
        """The rank a tracing span field gives on the message's own last row or the row after it: Text Generation
        Inference's shard logs end a multi-line record with its span's fields (" rank=0")."""
        for ln in (self.lines[hit.end], next_row(self.lines, hit.end)):
            if ln is not None and "rank=" in ln.text and (m := _SPAN_RANK.match(ln.text)):
                return int(m["rank"]), ctx._ev(self.source, ln)
        return None

    def figures(self, hit: _Hit) -> dict:
        """The message's figures (a repeated message is read once; the copy is the caller's)."""
        if hit.text not in self.figures_of:
            if len(self.figures_of) >= MEMO_ENTRIES:
                self.figures_of.clear()
            self.figures_of[hit.text] = message_figures(hit.c, hit.text)
        return dict(self.figures_of[hit.text])

    def event(self, hit: _Hit, f: dict, run: int, rank: int | None, rank_ev: Evidence | None) -> OOMEvent:
        lines, source = self.lines, self.source
        first = lines[hit.idx]
        detail = dict(f.pop("detail", {}) or {})  # the cached figures are shared: never mutate their detail
        evidence: dict[str, Evidence] = {"message": ctx._ev(source, first)}
        # vLLM's own engine or worker process raised it, not a process beside it (its label opens the message's line,
        # or the row before when a terminal cut the message's start onto the next row)
        rows = (lines[hit.idx - 1], first) if hit.idx > 0 and cut_row(lines, hit.idx - 1) else (first,)
        if any("pid=" in row.raw and ctx.VLLM_PROCESS.search(row.raw, 0, len(row.raw) - len(row.text)) for row in rows):
            detail["raised_in_engine"] = "vllm"
        if hit.c.fmt.own_allocator:  # a library's own device allocation, not PyTorch's caching allocator
            detail["own_allocator"] = True
        step, banner_phase, banner_ev, started, bar_after_setup = ctx.step_and_banner(self.markers, hit.idx, rank,
                                                                                      source)
        if step is None and banner_phase is None:
            step = ctx.bar_right_after(self.markers, hit.end, rank, source) \
                or ctx.ray_dedup_step_after(self.markers, hit.end, rank, source) \
                or ctx.step_closed_after(self.markers, hit.end, rank, source)
            started = None if step else started
        frames = ctx.frames_before(lines, hit.idx, rank)
        if not frames:  # logged first, raised after: read the traceback printed after it
            frames = ctx.frames_after(lines, hit.end, rank, start=hit.idx)
        if not frames:  # an IDE's exception view: banner, message, then the frames innermost first
            frames = ctx.frames_after_ide_banner(lines, hit.idx, hit.end, rank)
        if not frames and rank is not None:  # another rank's traceback right after this rank's message
            frames = ctx.frames_of_next_rank(lines, hit.end, rank)
        if (site := ctx.logged_from(lines[hit.idx])) is not None:
            frames = [site, *frames]  # the function that logged the error caught it: the outermost frame
        op = ctx.operation_from_frames(frames, ctx.failing_statement(lines, hit.idx, rank))
        if op is None and (kv := ctx.kv_cache_named_after(lines, hit.end, rank)) is not None:
            op = ctx.Witness("kv_cache", kv)
        if op:
            evidence["operation"] = ctx._ev(source, op.line)
        phase, phase_ev = self._phase(hit, frames, step, banner_phase, banner_ev, started, evidence["message"])
        if step is not None and ctx.elided_between(lines, step.evidence.line, hit.idx):
            step = None  # the poster cut the log after this counter: it showed training, not the failing step
        if step is None and phase == "train":  # the frames show training: the bar after the set-up banner is its loop's
            step = bar_after_setup
        if step is not None and phase in ("eval", "save") and (
                opened := ctx.epoch_bar_before(self.markers, self._index_of(step.evidence.line), rank, source)):
            step = opened  # the bars after the one an epoch's line opened count the evaluation's batches
        if step is not None and ctx.outside_training(frames, phase) and (ctx.in_sampler(frames) or (
                self._unfinished_bar_before(step, frames) and not self._training_bar(step, rank))):
            step = None  # the bar counts an inference loop's inputs or a diffusion sampler's steps, not training steps
        if step is not None and phase in ("eval", "save") and (
                counter := ctx.counter_before_inner_bars(self.markers, self._index_of(step.evidence.line), rank, source)):
            step = counter  # the bars after the training loop's printed counter count the evaluation's batches
        # the training loop called the evaluation (HF Trainer's evaluate() from _inner_training_loop; generate() in it)
        nested = step is not None and ctx.training_calls_evaluation(frames)
        if step is not None and (phase == "eval" or (phase == "generate" and nested)) and banner_phase is None:
            # an evaluation bar after the training one, or below it
            step = ctx.finished_bar_before(self.markers, self._index_of(step.evidence.line), rank, source,
                                           nested=nested) or step
        if started and phase == "train":  # failed before any logged step (the banner may say where it starts)
            detail["first_step"] = True
            evidence["first_step"] = started
        if step:
            evidence["step"] = step.evidence
        if phase_ev:
            evidence["phase"] = phase_ev
        if rank_ev:
            evidence["rank"] = rank_ev
        if phase == "eval" and (bar := ctx.eval_progress(lines, hit.idx, rank)):
            detail["eval_batches_done"], detail["eval_batches_total"] = bar[0], bar[1]
            evidence["eval_progress"] = ctx._ev(source, bar[2])
        if hit.kind == "host_oom" and rank is None:
            rank = _block_rank(lines, hit.idx, hit.end)
        if hit.kind == "nccl":
            detail["fatal"] = _nccl_fatal(lines, hit.end)
            for ln in lines[hit.end + 1 : hit.end + 5]:
                cm = P.NCCL_CALLOC.search(ln.text)
                if cm:
                    f["requested_bytes"] = int(cm["requested"])
                    break
        if _went_on(lines, hit):
            detail["fatal"] = False
        if frames and (later := ctx.progress_after(self.markers, hit.end, rank, step.value if step else None)):
            detail["progress_after"] = True  # raised, yet a training counter went on: another run writes here
            evidence["progress_after"] = ctx._ev(source, later)
        if hit.kind in ("tf_oom", "xla_oom") and f.get("total_bytes") is None:
            _bfc_stats(lines, hit.idx, f)
        if hit.kind == "cuda_error" and f.get("gpu_index") is None and hit.idx + 1 < len(lines) and (
                dm := P.CURRENT_DEVICE.match(lines[hit.idx + 1].text)):
            f["gpu_index"] = int(dm["gpu"])  # ggml's check names the device on the line after its error
        if hit.kind == "tf_oom" and f.get("gpu_index") is None:
            f["gpu_index"] = _tf_node_device(lines, hit.end, rank)
        fatal = detail.pop("fatal", True)
        row = self._row_of(hit)
        return OOMEvent(
            kind=cast(EventKind, hit.kind), source=source, line=row, end_line=max(row, lines[hit.end].number),
            rank=rank, step=step.value if step else None, phase=cast(Phase, phase),
            operation=cast(Operation, op.value) if op else None,
            message=regex.sub(r"\s+", " ", hit.text[hit.first:]).strip()[:4000],
            era=message_era(hit.c, hit.text), fatal=fatal, implausible=_implausible(f),
            root_cause=self.root_rank is not None and rank == self.root_rank.value, run=run, detail=detail,
            evidence=evidence, **{k: v for k, v in f.items() if v is not None or k == "gpu_index"},
        )

    def _row_of(self, hit: _Hit) -> int:
        """The line the message starts on: where a terminal cut the first line into rows of the log's width and
        unwrap joined them, the row a caching-allocator message's match starts in (it starts the message: "...
        extraction failed: " / "CUDA out of memory. ..."); other formats' records start with their line."""
        first, m = self.lines[hit.idx], hit.c.match
        if first.end == first.number or m is None or not hit.c.fmt.name.startswith("CACHING") \
                or m.start() >= len(first.text) or self.widest < WRAP_MIN_WIDTH or not hit.text.startswith(first.text):
            return first.number
        offset = len(first.raw.rstrip()) - len(first.text) + m.start()  # the prefixes normalising took off come first
        return first.number + min(offset // self.widest, first.end - first.number)

    def _index_of(self, number: int) -> int:
        """The index in self.lines of the first line with line number `number` (a step's evidence points there)."""
        return bisect_left(self.lines, number, key=lambda ln: ln.number)

    def _unfinished_bar_before(self, step: Value, frames: list) -> bool:
        """The step came from a bar still running (n < total) just before the traceback: the failing loop's bar."""
        traceback_line = frames[0][1].number if frames else None
        k = self._index_of(step.evidence.line)
        count = ctx.step_of(self.lines[k]) if traceback_line and k < len(self.lines) else None
        return bool(count and count.bar and count.total and count.n < count.total
                    and traceback_line is not None and 0 < traceback_line - step.evidence.line <= 3)

    def _training_bar(self, step: Value, rank: int | None) -> bool:
        """The step's bar is the loop a training-start banner began ("***** Running training *****", then bars of one
        total), or one that counted on past an epoch's line: an evaluation run inline after it, with no bar of its
        own, leaves the training bar the last drawn."""
        b_idx, banners, s_idx, steps = self.markers.for_rank(rank)
        k = self._index_of(step.evidence.line)
        if ctx.bar_spans_epochs(self.markers, k, rank):
            return True
        b = bisect_right(b_idx, k) - 1
        if b < 0 or banners[b].kind != "train":
            return False
        first = bisect_right(s_idx, banners[b].idx)
        here = bisect_left(s_idx, k)
        return first < len(steps) and here < len(steps) and steps[first].bar and steps[here].bar \
            and steps[first].total is not None and steps[first].total == steps[here].total

    def _phase(self, hit: _Hit, frames: list, step: Value | None, banner_phase: str | None,
               banner_ev: Evidence | None, started: Evidence | None, message_ev: Evidence) -> tuple[str, Evidence | None]:
        """The phase, from the strongest witness: the message itself, the frames, a banner, progress, a start."""
        first = self.lines[hit.idx]
        pf = ctx.phase_from_frames(frames)
        jit_phase = ctx.phase_from_jit(hit.text) if "jit(" in hit.text or "pmap(" in hit.text else None
        if ctx.phase_from_message(first.text):
            return "save", message_ev
        if ctx.eval_from_message(first.text):
            return "eval", message_ev
        if ctx.init_from_message(first.text):
            return "init", message_ev
        if ctx.generate_from_message(first.text):
            return "generate", message_ev
        if jit_phase and not pf:
            return jit_phase, message_ev
        if not pf and (node := ctx.comfy_node_phase(self.lines, hit.idx)) is not None:
            return node.value, ctx._ev(self.source, node.line)
        if pf and (pf.value != "train" or banner_phase in (None, "init")):  # a load banner is stale under training frames
            return pf.value, ctx._ev(self.source, pf.line)
        if banner_phase:
            return banner_phase, banner_ev
        if pf:
            return pf.value, ctx._ev(self.source, pf.line)
        if (bar := ctx.eval_bar_right_after(self.lines, hit.end, first.rank)) is not None:
            return "eval", ctx._ev(self.source, bar)
        if (ray := ctx.ray_task_phase(self.lines, hit.idx, hit.end)) is not None:
            return ray.value, ctx._ev(self.source, ray.line)
        if hit.kind == "kv_cache":  # vLLM sizes its KV cache while the engine starts
            return "init", message_ev
        if step:  # no traceback, no banner: the last thing the log shows is training progress
            return "train", step.evidence
        if started:  # training started and failed before its first logged step
            return "train", started
        if (said := _caller_said_after(self.lines, hit.idx, hit.end)) is not None:
            return said[0], ctx._ev(self.source, said[1])
        if (backward := ctx.tf_backward_op(self.lines, hit.idx, hit.end)) is not None:
            return "train", ctx._ev(self.source, backward)
        if (initialising := ctx.tf_init_op(self.lines, hit.idx, hit.end)) is not None:
            return "init", ctx._ev(self.source, initialising)
        if (backward := ctx.autograd_backward_line(self.lines, hit.idx)) is not None:
            return "train", ctx._ev(self.source, backward)
        if (loss := ctx.loss_frame(frames)) is not None:  # nothing else: a loss being computed is most often training
            return "train", ctx._ev(self.source, loss)
        if ctx.MESSAGE_TRAINING_LOOP.search(first.text):  # Chainer: "Exception in main training loop: out of memory ..."
            return "train", message_ev
        if hit.kind == "host_oom" and (killed := ctx.killed_script_phase(hit.text)) is not None:
            return killed, message_ev  # the shell's kill notice names the script it killed
        if (launch := self.launch) is not None and launch[1] is not None and launch[0] <= hit.end + ctx.LAUNCH_LINES_AFTER:
            return launch[1].value, ctx._ev(self.source, launch[1].line)
        return "unknown", None


# The error a caller raised on top of the OOM, saying what it was doing: "Exception: Failed to load SDXL model".
LOADING_FAILED = lazy(r"^\s{0,8}[\w.]{0,80}(?:Error|Exception): (?:Failed to|Could not|Unable to|Error) load(?:ing)? "
                      r"(?:the )?[\w.-]{0,40} ?(?:model|checkpoint|weights|pipeline)\b"
                      r"|^Error: ShardCannotStart\b", regex.I)  # TGI's launcher: a shard died loading or warming up
# ... or that the decode it ran failed: llama.cpp's "llama_decode: failed to decode, ret = -3" (older builds'
# "llama_eval: failed to eval"), KoboldCpp's "Failed to predict at 43!": generation (prompt or tokens)
DECODE_FAILED = lazy(r"^\s{0,8}(?:llama_decode: failed to decode|llama_eval: failed to eval|Failed to predict at \d)")
# ... or that building the model or its context failed: llama.cpp's "llama_new_context_with_model: failed to allocate
# compute buffers", "llama_init_from_gpt_params: error: failed to create context with model ...", "llama_model_load:
# error loading model: ...", "llm_load_tensors: failed to allocate ..." (and their 2025 names): set-up
LLAMA_INIT_FAILED = lazy(r"^\s{0,8}(?:" + ctx.LLAMA_SETUP_FUNCS + r"|llama_init_from_gpt_params|common_init_from_params"
                         r"|llama_kv_cache_init"  # the context's KV cache, sized when the model is set up
                         r"|llama_model_load|llama_load_model_from_file): (?:error:? )?(?:failed|error loading model)\b")
# ... or a web server's access line for the request that failed with a server error, after its handler logged the
# message (Uvicorn's 'INFO:     127.0.0.1:41070 - "POST /clone_voice HTTP/1.1" 500 Internal Server Error', Werkzeug's
# and Gunicorn's common log format): the app was serving a request (generate, as after a server's ready banner)
FAILED_REQUEST = lazy(r'^[^"\n]{0,120}"(?:POST|GET|PUT|PATCH) /[^\s"]{0,200} HTTP/\d(?:\.\d)?" 5\d\d\b')
CALLER_SAID = ((LOADING_FAILED, "init"), (DECODE_FAILED, "generate"), (LLAMA_INIT_FAILED, "init"),
               (FAILED_REQUEST, "generate"))
CALLER_SAID_LOOKAHEAD_LINES = 12


def _caller_said_after(lines: Sequence[Line], idx: int, end: int) -> tuple[str, Line] | None:
    """The phase a caller's own report right after the message on lines[idx..end] names (a load that failed, a decode
    that failed); a report on the rows the message's reader joined to it counts (a C++ library's lines, no blank
    between them)."""
    for ln in lines[idx + 1 : end + 1 + CALLER_SAID_LOOKAHEAD_LINES]:
        for pat, phase in CALLER_SAID:
            if pat.match(ln.text):
                return phase, ln
    return None


def _bfc_stats(lines: Sequence[Line], end: int, f: dict) -> None:
    """TensorFlow's BFC allocator prints its stats table after the failure: Limit is the device budget."""
    for ln in lines[end + 1 : end + 400]:
        m = P.BFC_STAT.match(ln.text)
        if m and m["key"] == "Limit":
            f["total_bytes"] = int(m["value"])
        elif m and m["key"] == "InUse" and f.get("allocated_bytes") is None:
            f["allocated_bytes"] = int(m["value"])
        if f.get("total_bytes") is not None and f.get("allocated_bytes") is not None:
            return


def _first_value(lines: Sequence[Line], source: str, pat: regex.Pattern[str], group: str) -> Value | None:
    for ln in lines:
        if "torch" in ln.text or "PyTorch" in ln.text:
            m = pat.search(ln.text)
            if m and not ctx.FRAME.match(ln.text):
                return Value(value=m[group], evidence=ctx._ev(source, ln))
    return None


def _alloc_conf(lines: Sequence[Line], source: str) -> Value | None:
    """The allocator settings the run printed; the OOM message's own advice ("try setting
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation") is not a setting, also when a
    console wrapped it onto a line of its own."""
    found = None
    for k, ln in enumerate(lines):
        if "ALLOC_CONF" in ln.text and "try setting" not in ln.text and "out of memory" not in ln.text:
            m = P.ALLOC_CONF.search(ln.text)
            if m is None or ln.text[m.end():].lstrip().startswith("to avoid fragmentation") \
                    or (k and lines[k - 1].text.rstrip().endswith("try setting")):
                continue
            found = Value(value=m["value"], evidence=ctx._ev(source, ln))
    return found


def _root_cause_rank(lines: Sequence[Line], source: str) -> Value | None:
    for k, ln in enumerate(lines):
        if P.ROOT_CAUSE.search(ln.text):
            for nxt in lines[k + 1 : k + 12]:
                m = P.ROOT_RANK.match(nxt.text)
                if m:
                    return Value(value=int(m["rank"]), evidence=ctx._ev(source, nxt))
    return None


def _block_rank(lines: Sequence[Line], idx: int, end: int) -> int | None:
    """The `rank : N` line of the torchelastic failure block around a kill (lines[idx:end + 1]; the rows a terminal
    cut the kill's own line into are none: "... local_" / "rank: 2 (pid: 8530) ...")."""
    for ln in chain(lines[max(0, idx - 6) : idx + 1], lines[end + 1 : end + 6]):
        m = P.ROOT_RANK.match(ln.text)
        if m:
            return int(m["rank"])
    return None


# A logger's line saying the program caught the error and goes on: hivemind's "Caught CUDA out of memory. Tried to
# allocate ... , attempting to recover", Dorado's "Caught Torch error 'CUDA out of memory. ...', clearing CUDA cache and
# retrying."
CAUGHT_AND_RETRIED = lazy(r"\bCaught\b[^\n]{1,1200}?(?:attempting to recover|and retrying|, retrying|skipping (?:this )?batch)")


def _went_on(lines: Sequence[Line], hit: _Hit) -> bool:
    """The program caught the failure and went on: a format that is always caught (detectron2's retry on the CPU),
    TensorRT skipping a tactic, or a logger's line saying it caught the error and retries (CAUGHT_AND_RETRIED)."""
    return hit.c.fmt.caught or (hit.c.fmt.name == "TENSORRT_OOM" and _tactic_skipped(lines, hit.idx, hit.end)) \
        or ("Caught" in hit.text and CAUGHT_AND_RETRIED.search(hit.text) is not None)


TF_NODE_LINES = 2  # TensorFlow prints the failing node on the line right after its message


def _tf_node_device(lines: Sequence[Line], end: int, rank: int | None) -> int | None:
    """The GPU a TensorFlow message's failing node was placed on, from the node line printed after it: TF 1.x before
    1.4 wrote its device attribute ('[[Node: ... _device="/job:localhost/replica:0/task:0/gpu:0"](...)]]')."""
    for ln in lines[end + 1 : end + 1 + TF_NODE_LINES]:
        if ln.rank == rank and "_device=" in ln.text and (m := P.TF_NODE_DEVICE.search(ln.text)):
            return int(m["gpu"])
    return None


def _nccl_fatal(lines: Sequence[Line], end: int) -> bool:
    """An NCCL allocation warning is fatal when an error follows it, not when training goes on."""
    for ln in lines[end + 1 : end + 200]:
        t = ln.text
        if "Error" in t or "error" in t or "Traceback" in t or "failed" in t:
            return True
        if ctx.step_of(ln):
            return False
    return True


def _tactic_skipped(lines: Sequence[Line], first: int, end: int) -> bool:
    """TensorRT's builder survived the allocation: it skipped the tactic that asked for it and went on."""
    return any(P.TRT_TACTIC_SKIPPED.search(ln.text) for ln in lines[first + 1 : end + TRT_TACTIC_LINES])


# Bounds per source, each with its reason. Region text kept for parsing: the first part (where configuration
# and the first failures are) and the last part (where the fatal one is); what lies between is counted and
# said, not kept. An OOM-dense log (a flood of messages, a gzip bomb) then costs bounded memory and time.
KEPT_HEAD_CHARS = 8 * 1024 * 1024
KEPT_TAIL_CHARS = 2 * 1024 * 1024
KEPT_PIECE_CHARS = 256 * 1024  # the tail ring drops whole pieces: a region is cut into pieces this long
MAX_EVENTS_PER_SOURCE = 2000  # distinct failures reported per source; more are counted and said


@dataclass
class _Kept:
    """The region text kept for one source: a head up to KEPT_HEAD_CHARS (normalised as it comes), then a ring
    of the last KEPT_TAIL_CHARS kept as raw text and normalised only at the end (dropped text is never split)."""

    head: list[Line] = field(default_factory=list)
    head_chars: int = 0
    tail: deque[Region] = field(default_factory=deque)
    tail_chars: int = 0
    dropped_lines: int = 0
    dropped_from: int | None = None
    dropped_to: int | None = None

    def add(self, region: Region) -> None:
        if not self.tail and self.head_chars + len(region.text) <= KEPT_HEAD_CHARS:
            self.head.extend(normalize_region(region.first_line, region.lines))
            self.head_chars += len(region.text)
            return
        for piece in _pieces(region):
            if not self.tail and self.head_chars + len(piece.text) <= KEPT_HEAD_CHARS:
                self.head.extend(normalize_region(piece.first_line, piece.lines))
                self.head_chars += len(piece.text)
                continue
            self.tail.append(piece)
            self.tail_chars += len(piece.text)
            while self.tail_chars > KEPT_TAIL_CHARS and len(self.tail) > 1:
                gone = self.tail.popleft()
                self.tail_chars -= len(gone.text)
                n = gone.text.count("\n") + (not gone.text.endswith("\n"))
                self.dropped_lines += n
                self.dropped_from = gone.first_line if self.dropped_from is None else self.dropped_from
                self.dropped_to = gone.first_line + n - 1

    def lines(self, source: str) -> list[Line]:
        if self.dropped_lines:
            warnings.warn(LimitWarning(
                f"{source}: {self.dropped_lines:,} lines of {self.dropped_from:,}-{self.dropped_to:,} not read "
                f"(over the {(KEPT_HEAD_CHARS + KEPT_TAIL_CHARS) // 2**20} MiB of failure context kept per log); "
                "the beginning and the end were. Split the log to read the middle."), stacklevel=2)
        out = self.head
        for region in self.tail:
            out.extend(normalize_region(region.first_line, region.lines))
        return out


def _pieces(region: Region) -> Iterator[Region]:
    """A region cut at line ends into pieces of about KEPT_PIECE_CHARS (the tail ring drops whole pieces)."""
    text, start, line = region.text, 0, region.first_line
    while start < len(text):
        cut = text.find("\n", start + KEPT_PIECE_CHARS) + 1 or len(text)
        piece = text[start:cut] if start or cut < len(text) else text
        yield Region(region.source, line, piece)
        line += piece.count("\n")
        start = cut


def parse_regions(regions: Iterable[Region]) -> ParseResult:
    """The parse result from the regions of any number of sources (regions of one source arrive together, in order)."""
    events: list[OOMEvent] = []
    runs: list[RunContext] = []
    by_source: dict[str, _Kept] = {}
    done: set[str] = set()

    def finish(source: str) -> None:  # each source is parsed as soon as its last region came: its text is dropped
        evs, run = parse_lines(by_source.pop(source).lines(source), source)
        events.extend(evs)
        runs.append(run)
        done.add(source)

    for region in regions:
        if region.source not in by_source:
            for earlier in list(by_source):
                finish(earlier)
            if region.source in done:
                raise ValueError(f"regions of {region.source} arrived apart")  # a bug in the caller, not input
            by_source[region.source] = _Kept()
        by_source[region.source].add(region)
    for source in list(by_source):
        finish(source)
    return ParseResult(events=tuple(events), runs=tuple(runs))


def parse_text(text: str, source: str = "<text>") -> ParseResult:
    """The parse result from a log already in memory (tests, verify's own replay messages)."""
    return parse_regions([Region(source, 1, text)])


def parse_files(paths: Sequence[str], progress: ProgressFn | None = None) -> ParseResult:
    """The parse result from log files (`-` is standard input; .gz is read compressed), streamed with bounded memory,
    from PyTorch memory snapshot pickles (read with an unpickler that refuses every global), and from the
    post-mortem records `oomdoctor.capture` writes."""
    for p in paths:
        check_path(p)
    snapshots = [p for p in paths if is_snapshot_file(p)]
    records = [p for p in paths if p not in snapshots and is_record_file(p)]
    logs = list(dict.fromkeys(p for p in paths if p not in snapshots and p not in records))  # a path named twice is read once
    result = parse_regions(region for p in logs for region in scan(p, progress))  # streamed: never all held
    if not snapshots and not records:
        return result
    events = list(result.events)
    for p in snapshots:
        summary = read_snapshot(p)
        if not summary.ooms:
            warnings.warn(LimitWarning(
                f"{p}: a memory snapshot with no `oom` entry in its trace: nothing failed while it recorded "
                "(record with torch.cuda.memory._record_memory_history before the failure, or dump it from "
                "an OOM observer)"), stacklevel=2)
        events.extend(snapshot_events(summary))
    for p in records:
        doc = read_record(p)
        message = doc.get("message") if isinstance(doc.get("message"), str) else None
        found = parse_text(message, source=p).events if message else ()
        event = record_event(doc, p, found[0] if found else None)
        if event is None:
            warnings.warn(LimitWarning(f"{p}: a post-mortem record without an OOM message or figures"), stacklevel=2)
        else:
            events.append(event)
    return ParseResult(events=tuple(events), runs=result.runs)
