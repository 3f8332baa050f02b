"""Turn raw log lines into clean text: no ANSI codes, HTML escapes, redraws, quote marks, rank or logging prefixes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import regex

from oomdoctor.parse.lazyregex import lazy

ANSI = lazy(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

# Rank prefixes a launcher puts before each line of a worker (the rank is recorded).
RANK_PREFIX_RE = (
    r"""(?:
        \[(?:rank|default)(?P<rank>\d{1,5})\]:\s?          # torchrun: [rank3]: / --tee: [default3]:
      | rank(?P<rank>\d{1,5}):(?:\s|$)                      # rank3: text
      | \[\d+,(?P<rank>\d{1,5})\]<std(?:out|err)>:\s?      # mpirun --tag-output: [1,3]<stderr>:
      | (?P<rank>\d{1,4}):(?:\s|$)                          # srun --label: 3: text
    )"""
)
# systemd's journal (journalctl -u vllm): "Nov 28 12:00:01 gpu-node-3 python[12345]: ". The collector's header: the
# process name in it is not read as a stack (every unit's lines carry it, whatever the program prints).
JOURNAL_HEADER_RE = (r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s[\s\d]\d\s\d\d:\d\d:\d\d\s[\w.-]{1,64}\s"
                     r"[\w.@:/-]{1,64}\[\d{1,10}\]:(?:\s|$)")
JOURNAL_HEADER = lazy(JOURNAL_HEADER_RE)
# A program's own logger's record header, one per record (never on the rest of a row a terminal wrapped): vLLM's
# "ERROR 07-30 18:15:55 [engine.py:400] " (before 0.7 "engine.py:400] "), llama.cpp's "0.01.047.215 E ", NVIDIA
# Omniverse Kit's (Isaac Sim) "[10,436ms] [Error] [carb.cudainterop.plugin] ".
LOGGER_HEADER_RE = (r"(?:(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s\d\d-\d\d\s\d\d:\d\d:\d\d(?:\.\d+)?\s"
                    r"\[?[\w.-]{1,80}\.py:\d{1,6}\]\s?|\d{1,4}\.\d\d\.\d{3}\.\d{3}\s[IWEDT]\s"
                    r"|\[\d{1,3}(?:,\d{3}){0,4}ms\]\s\[(?:Error|Warning|Info|Verbose|Fatal)\]\s\[[\w.-]{1,80}\]\s)")
LOGGER_HEADER = lazy(LOGGER_HEADER_RE)
# Prefixes that carry no rank: timestamps, levels, logger names, pdsh host names.
LOG_PREFIX_RE = (
    r"""(?:
        \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)\sstd(?:out|err)\s[FP](?:\s|$)   # k8s CRI: ...Z stdout F
      | \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z(?:\s|$)                       # GitHub Actions' raw log: ...1234567Z text
      | \d\d/\d\d/\d{4}\s\d\d:\d\d:\d\d\s-\s(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s-\s[\w.<>-]{1,40}\s-(?:\s|$)
                                                          # HF example scripts: 05/01/2024 12:00:01 - INFO - __main__ -
      | """ + JOURNAL_HEADER_RE + r"""                                       # systemd journal (see JOURNAL_HEADER)
      | \[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*(?:[|:-]\s*)?   # 2024-01-01 12:00:00,123
      | \[\d\d:\d\d:\d\d(?:[.,]\d+)?\]\s*                                       # [12:00:00]
      | \d\d:\d\d:\d\d[.,]\d{1,6}(?!\d)\s*                                       # a collector's 16:49:33.632

      | [IWEF]\d{4}\s\d\d:\d\d:\d\d\.\d+\s+\d+\s[\w./-]+:\d+\]\s?              # glog: E0101 12:00:00.123456 1234 f.cc:12]
      | """ + LOGGER_HEADER_RE + r"""                                          # a program's own logger (see LOGGER_HEADER)
      | (?:INFO|WARNING|WARN|ERROR|DEBUG)\s\[[\w.-]{1,40}\sstd(?:out|err)\]\s(?:\[\d{1,10}\]\s)?
                                                          # a supervisor relaying a child: INFO [llamacpp-router stdout] [45979]
      | \[(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)(?:\|[\w./-]+:\d+)?\]\s*(?:\d{4}-\d\d-\d\d\s[\d:,.]+\s*>>\s?)?
                                                                              # [INFO|trainer.py:12] … >>
      | (?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s*[|:]\s*(?:[\w.<>]+:)?(?:[\w.<>]+:\d+\s-\s)?   # ERROR:root: / loguru
      | (?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+-\s                        # INFO - text
      | -\s(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s-\s(?:[\w.]+\s-\s)?      # - ERROR - module -
      | [\w.<>-]{1,40}\s-\s(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s-(?:\s|$)  # logging's name - LEVEL - (after its time)
      | \[[\w./-]+:\d+(?::\w+)?\]\s                                             # [logging.py:96:log_dist]
      | [\w.-]{1,40}[-_]\d{1,3}\s{1,30}\|(?:\s|$)                               # docker compose: vllm-1  |     indented
      | [\w.-]{1,40}\s{1,4}\|\s(?=\S)                                          # docker compose: vllm  | text
      | (?:localhost|worker-?\d+|node-?\d+|[\w-]+-\d+|\d{1,3}(?:\.\d{1,3}){3}):\s   # pdsh: worker-1: / 10.0.0.5:
    )"""
)
PREFIX_DEPTH = 6  # prefixes stripped from one line at most
# Every prefix of a line in one match (one call, not two per prefix): at each step a rank prefix is tried first, then
# a logging one; the `rank` group's captures are the ranks of the rank prefixes, in order.
PREFIXES = lazy(f"^(?:{RANK_PREFIX_RE}|{LOG_PREFIX_RE}){{1,{PREFIX_DEPTH}}}", regex.VERBOSE)

# The character references a scraped web page leaves in its text (`&gt;`, `&#39;`, `&quot;`): read as the characters.
HTML_ENTITY = lazy(r"&(?:amp|lt|gt|quot|apos|nbsp|#\d{1,5}|#[xX][0-9a-fA-F]{1,4});")
QUOTE_MARKS = ("> ", ">\t")  # a markdown quote (a log pasted into an issue): "> " on every line, ">" on empty ones

MAX_LINE_CHARS = 64 * 1024

# A log embedded in a JSON or repr string (an HTTP error body, a Kubernetes pod message, a notebook's error dump) has
# its lines joined by the two characters backslash-n. Such a line is split back into its lines when every backslash
# on it starts an escape and it holds at least two escaped newlines (a Windows path has other backslashes).
_ESCAPE = lazy(r'\\(?:[nrt"\\/bf]|u[0-9a-fA-F]{4})?')  # one escape, or a lone backslash (none of a string's)
_ESCAPES = {"\\t": "\t", '\\"': '"', "\\\\": "\\", "\\/": "/"}


class Line(NamedTuple):
    """One logical line: its 1-based line number, the rank prefix found on it, and the clean text (a named tuple:
    every kept line of a log is one, and a tuple is built in a fraction of a frozen dataclass's time)."""

    number: int
    rank: int | None
    text: str
    raw: str = ""  # the segment before prefixes were stripped (ANSI removed): wrap widths are measured on it
    last: int = 0  # the number of the last physical line, when a terminal's hard wrap was joined back (0: `number`)
    padded: int = 0  # the row's width with the padding `raw` lost (a console copy pads every row to its width)
    escaped: bool = False  # a line after the first of a string's escaped lines on one physical line (_unescaped_lines)

    @property
    def end(self) -> int:
        """The number of the last physical line this line came from."""
        return self.last or self.number


def strip_prefixes(text: str) -> tuple[int | None, str]:
    """Remove launcher and logging prefixes (in any order, up to PREFIX_DEPTH deep); return (rank, rest)."""
    m = PREFIXES.match(text)
    if m is None:
        return None, text
    ranks = m.captures("rank")
    return (int(ranks[0]) if ranks else None), text[m.end():]


def _unpadded(raw: str) -> str:
    """The raw line without padding: one trailing space may be where a terminal wrapped it (kept, it tells the wrap),
    two or more are a markdown line break, an editor's or a console copy's padding (dropped: no wrap is told)."""
    return raw.rstrip(" \t") if raw.endswith(("  ", "\t", " \t", "\t ")) else raw


def _unescape(m: regex.Match[str]) -> str:
    """One HTML character reference as its character (the html module, with its table of 2,231 names, is imported
    only by a log that holds one)."""
    import html

    return html.unescape(m.group())


def normalize(number: int, raw: str) -> list[Line]:
    """Split a physical line on \\r redraws and clean each segment; empty segments are dropped."""
    raw = ANSI.sub("", raw) if "\x1b" in raw else raw
    raw = HTML_ENTITY.sub(_unescape, raw) if "&" in raw else raw
    while raw[:1] == ">" and (raw.startswith(QUOTE_MARKS) or raw.rstrip("\r\n") == ">"):  # added on paste, after
        raw = raw[2:]  # any wrap: off the raw line too, so widths and rejoined wraps are the log's own
    out: list[Line] = []
    for seg in raw.split("\r") if "\r" in raw else (raw,):
        if len(seg) > MAX_LINE_CHARS:  # keep the end: a message glued to a long line comes last
            seg = seg[-MAX_LINE_CHARS:]
        rank = None
        for k, piece in enumerate(_unescaped_lines(seg) if "\\n" in seg else (seg,)):
            if (line := _segment(number, piece)) is not None:
                if k == 0:
                    rank = line.rank
                else:  # the launcher's prefix is the physical line's: each of its lines has it
                    line = line._replace(escaped=True, rank=rank if line.rank is None else line.rank)
                out.append(line)
    return out


def _unescaped_lines(seg: str) -> list[str]:
    """The lines of a segment that holds a string's escaped lines (see _ESCAPE), each unescaped; else the segment
    alone."""
    if seg.count("\\n") < 2:
        return [seg]
    out: list[str] = []
    cur: list[str] = []
    pos = 0
    for m in _ESCAPE.finditer(seg):
        escape = m.group()
        if len(escape) == 1:  # a lone backslash: a Windows path, not a string's escapes
            return [seg]
        cur.append(seg[pos:m.start()])
        pos = m.end()
        if escape == "\\n":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(_ESCAPES.get(escape, escape))
    out.append("".join([*cur, seg[pos:]]))
    return out if len(out) > 2 else [seg]


def _segment(number: int, seg: str) -> Line | None:
    """One redraw segment (or a whole line without any) as a Line; None when it is empty or only prefixes."""
    if not seg.strip():
        return None
    rank, text = strip_prefixes(seg.rstrip())
    if not text:  # a prefix with nothing after it ("[rank1]:", ">") is an empty line
        return None
    row = seg.rstrip("\n")
    raw_row = _unpadded(row)
    return Line(number, rank, text, raw_row, 0, len(row) if len(raw_row) < len(row) else 0)


def normalize_region(first_line: int, lines: list[str]) -> list[Line]:
    """Normalise every physical line of a region; a plain line (nothing for normalize to undo or split) goes straight
    to _segment (most lines of most logs: no list of its own, no second round of tests)."""
    out: list[Line] = []
    for number, raw in enumerate(lines, first_line):
        if "\r" in raw or "\x1b" in raw or "&" in raw or raw[:1] == ">" or len(raw) > MAX_LINE_CHARS or "\\n" in raw:
            out.extend(normalize(number, raw))
        elif (line := _segment(number, raw)) is not None:
            out.append(line)
    return out


WRAP_MIN_WIDTH = 60  # a terminal or paste that hard-wraps lines does so at 60 columns or more


def next_row(lines: Sequence[Line], i: int) -> Line | None:
    """lines[i + 1] when it is the physical line printed right after lines[i] (none dropped between them), else None."""
    return lines[i + 1] if 0 <= i < len(lines) - 1 and lines[i + 1].number == lines[i].end + 1 else None


def cut_row(lines: Sequence[Line], i: int) -> bool:
    """Whether lines[i] may be a row a terminal cut, going on in lines[i + 1]: wide enough to be one, the next physical
    line right after it."""
    return next_row(lines, i) is not None and len(lines[i].raw) >= WRAP_MIN_WIDTH


# A line that starts a record of its own: never the rest of a wrapped row, nor of a message. A traceback or its frame
# (Python's, a JVM's "at ", a C++ "frame #"), an exception line, a dated or rank-prefixed record, the shell's report of
# the process's end, a markdown code fence closing the paste, or a glog record's header (TensorFlow, Caffe, MXNet,
# Paddle: its level, [date time thread,] then file:line]: "E tensorflow/stream_executor/cuda/cuda_blas.cc:510] ...",
# "F0614 11:50:14.027064  4321 syncedmem.cpp:71] ...").
RECORD_START = lazy(
    r"^\s*(?:Traceback|File \"|During handling|The above exception|\[?\d{4}-\d\d-\d\d|\[rank\d|\w+Error:|\w+Exception:"
    r"|at |frame #"
    r"|Segmentation fault\b|Aborted \(core dumped\)|Bus error\b|```|\*\*\* Check failure stack trace"
    r"|[IWEF](?:\d{4} [\d:.]{8,15} {1,8}\d{1,8})? \S{1,300}\.(?:cc|cpp|cu|cuh|h|hpp|py):\d{1,6}\] )"
)
_TABLE_EDGES = ("|", "+")  # a table row (nvidia-smi's) starts and ends with one: it is whole, however wide


def terminal_width(lines: Sequence[Line]) -> int | None:
    """The width a terminal hard-wrapped the log at, when it looks copied from one: no line is longer than the
    longest (at least WRAP_MIN_WIDTH columns), at least two different lines fill it exactly (or with the blanks it
    cut them in), and most of those go on in a row that can be their rest (a log whose widest lines are records of
    one fixed format is not wrapped)."""
    width = max((len(ln.raw) for ln in lines), default=0)
    if width < WRAP_MIN_WIDTH:
        return None
    if _console_copy(lines, width):
        return width
    full = [k for k, ln in enumerate(lines) if len(ln.raw) == width or ln.padded == width]
    if any(lines[k].padded == width for k in full) and not _cut_in_blanks(lines, width):
        full = [k for k in full if len(lines[k].raw) == width]
    go_on = sum(1 for k in full if _goes_on(lines, k))
    return width if len({lines[k].raw for k in full}) >= 2 and 2 * go_on > len(full) else None


def _cut_in_blanks(lines: Sequence[Line], width: int) -> bool:
    """Whether the rows padded to exactly the width are rows a terminal cut inside a run of blanks (a bar's padding):
    a few of them, none padded past the width (an editor's or a markdown break's padding), not most of the rows that
    do not fill it (a console pads them all)."""
    padded = short = 0
    for ln in lines:
        if ln.padded > width:
            return False
        padded += ln.padded == width
        short += len(ln.raw) < width
    return 2 * padded < short


CONSOLE_MIN_ROWS = 8  # a console copy shows at least this many rows, nearly all padded to its width


def _console_copy(lines: Sequence[Line], width: int) -> bool:
    """Whether the log was copied from a console that pads every row to its width (Windows' conhost): nearly all rows
    are that wide with their padding, and some fill it without any (the rows it cut)."""
    padded = sum(1 for ln in lines if ln.padded == width)
    full = sum(1 for ln in lines if not ln.padded and len(ln.raw) == width)
    return padded >= CONSOLE_MIN_ROWS and full > 0 and 10 * (padded + full) >= 9 * len(lines)


# A progress bar drawn whole: tqdm sizes it to the terminal, so it fills the width without being cut ("Training:
# 0%|          | 0/28150 [00:00<?, ?it/s]" ends in its closed counts).
_WHOLE_BAR = lazy(r"%\|[^|]{0,400}\|\s{0,4}\d{1,20}/\d{1,20}\s{0,4}\[[^\[\]]{0,300}\]$")


def _goes_on(lines: Sequence[Line], k: int) -> bool:
    """Whether lines[k + 1] can be the rest of lines[k]: the next physical line, starting no record of its own and
    not as lines[k] did (a record of the same kind); a table row is whole, unless it went on in blanks ("| epoch
    001:   0%|" and a bar's padding, cut); so is a progress bar that ends in its closed counts (_WHOLE_BAR)."""
    if k + 1 >= len(lines):
        return False
    ln, nxt = lines[k], lines[k + 1]
    return (nxt.number == ln.number + 1 and not RECORD_START.match(nxt.raw) and nxt.raw[:4] != ln.raw[:4]
            and not (ln.raw.startswith(_TABLE_EDGES) and ln.raw.endswith(_TABLE_EDGES) and not ln.padded)
            and not (ln.raw.endswith("]") and "%|" in ln.raw and _WHOLE_BAR.search(ln.raw)))


def _fills(line: Line, width: int, blanks: bool) -> bool:
    """Whether a row fills the terminal's width: its text does, or the blanks it ends in do where those are a cut
    (see _cut_in_blanks; a console pads every row, so there only the text tells)."""
    return len(line.raw) == width or (blanks and line.padded == width)


BAR_BLANK_ROWS = 2  # rows a bar's padding can fill whole (a 200-column bar on an 80-column terminal)
# The rest of a progress bar a terminal cut: its last cells, then "| n/total" ("###| 158081/158081 [13:12<00:00]").
_BAR_REST = lazy(r"^[^|]{0,200}\|\s{0,4}\d{1,20}/\d{1,20}")


def _bar_cut_at(lines: Sequence[Line], k: int) -> bool:
    """Whether lines[k] is a progress bar a terminal cut (however wide it was, whatever pads its rows): a row wide
    enough to be one, with its padding, that opens a bar ("100%|####...") without closing it, and the next row closes
    it (after at most BAR_BLANK_ROWS rows of its blanks, which were dropped as empty lines)."""
    raw = lines[k].raw
    bar = raw.rfind("%|")
    return (bar != -1 and max(len(raw), lines[k].padded) >= WRAP_MIN_WIDTH and "|" not in raw[bar + 2:]
            and k + 1 < len(lines) and 0 < lines[k + 1].number - lines[k].end <= BAR_BLANK_ROWS + 1
            and _BAR_REST.match(lines[k + 1].raw) is not None)


def unwrap(lines: Sequence[Line], leave: Callable[[str], bool]) -> tuple[Sequence[Line], int | None]:
    """Lines a terminal hard-wrapped at its width joined back into the lines the program printed: a line that fills
    the width goes on in the next (see _goes_on). A line the program printed exactly that wide cannot be told from one
    cut there. A line holding what `leave` looks for (an OOM message's trigger) is left with the rows after it for
    the message reader, which tries each way of rejoining them. Where no width can be told, only a progress bar cut in
    two is joined (see _bar_cut_at). Returns the lines and the terminal's width (None: not told)."""
    width = terminal_width(lines)
    bars = {k for k, ln in enumerate(lines)  # a row whose last "|" opens a bar (no call for most rows)
            if "%|" in (raw := ln.raw) and raw.rfind("|") == raw.rfind("%|") + 1 and _bar_cut_at(lines, k)}
    if width is None:
        if not bars:
            return lines, None
        goes_on: Callable[[int], bool] = bars.__contains__
    else:
        blanks = not _console_copy(lines, width) and _cut_in_blanks(lines, width)
        goes_on = lambda j: j in bars or (_fills(lines[j], width, blanks) and _goes_on(lines, j))  # noqa: E731
    out: list[Line] | None = None
    i = 0
    while i < len(lines):
        j, raw = i, lines[i].raw
        while goes_on(j):
            raw = raw.ljust(len(raw) + lines[j].padded - len(lines[j].raw))  # a row cut inside a run of blanks (a
            j += 1  # bar's padding) keeps them
            raw += lines[j].raw
        if j > i and not leave(lines[i].text):
            out = list(lines[:i]) if out is None else out
            rank, text = strip_prefixes(raw.rstrip())
            out.append(Line(lines[i].number, rank, text, raw, lines[j].number))
        elif out is not None:
            out.extend(lines[i:j + 1])
        i = j + 1
    return (lines if out is None else out), width
