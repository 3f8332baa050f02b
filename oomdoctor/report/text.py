"""The terminal report: a one-line verdict, each event's figures, then the causes best first, with evidence and fixes.

Everything quoted from a log or a file name is plain text here: it is never read as rich markup (`[/INST]`,
`[link=…]`, `[rank0]` print as they are) and its escape codes and control characters are removed.
"""

from __future__ import annotations

import io
import shlex
from collections.abc import Callable
from typing import Any, TextIO

import regex
from rich.console import Console
from rich.table import Table
from rich.text import Text

from oomdoctor.diagnosis import Diagnosis, Report
from oomdoctor.parse.model import OOMEvent
from oomdoctor.report import try_first
from oomdoctor.units import format_bytes

_FIGURES = (
    ("requested_bytes", "requested"), ("total_bytes", "total"), ("free_bytes", "free"),
    ("allocated_bytes", "allocated by PyTorch"), ("reserved_bytes", "reserved by PyTorch"),
    ("reserved_unallocated_bytes", "reserved but unallocated"), ("process_in_use_bytes", "this process (all)"),
    ("allowed_bytes", "allowed (memory fraction)"), ("private_pools_bytes", "in private pools"),
)
# Escape sequences (7-bit and 8-bit CSI/OSC, ESC c …) and control characters other than tab.
_UNSAFE = regex.compile(r"\x1b\[[0-9;:?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?|\x9b[0-9;:?]*[ -/]*[@-~]"
                        r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
DEFAULT_WIDTH = 80  # when the output is not a terminal and COLUMNS is unset
MESSAGE_CHARS = 300  # how much of the OOM message the report quotes
EVIDENCE_CHARS = 160


def clean(text: str) -> str:
    """Log text made safe for a terminal: escape sequences and control characters removed."""
    return _UNSAFE.sub("", text)


def _plain(text: str, style: str = "") -> Text:
    """Text that rich prints as it is (no markup, no highlighting)."""
    return Text(clean(text), style=style)


LAID_OUT_ENTRIES = 4096  # distinct printed grids remembered per report


class _Console(Console):
    """The report's console: what is printed under the same key is laid out once and its text written again after
    (1,000 OOMs of one kind repeat the same sentences, fixes and titles; laying out a rich table takes ~0.2 ms)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.laid_out: dict[tuple[Any, ...], str] = {}

    def print_once(self, key: tuple[Any, ...], make: Callable[[], Table]) -> None:
        """Print the table `make` builds; a key printed before writes the same text again."""
        text = self.laid_out.get(key)
        if text is None:
            with self.capture() as captured:
                self.print(make())
            text = captured.get()
            if len(self.laid_out) >= LAID_OUT_ENTRIES:
                self.laid_out.clear()
            self.laid_out[key] = text
        self.file.write(text)


def _indented(console: _Console, label: str, text: str, style: str = "") -> None:
    """`label text`, with continuation lines indented under the text, wrapped at the console width on words."""

    def grid() -> Table:
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold")
        table.add_row(Text(label, style="dim"), _plain(text, style))
        return table

    console.print_once(("indented", label, text, style), grid)


def _where(e: OOMEvent) -> list[str]:
    """The event's place: its file:line, then rank, GPU, step, phase and era."""
    parts = [f"{e.source}:{e.line}"]
    if e.rank is not None:
        parts.append(f"rank {e.rank}" + (" (first failure)" if e.root_cause else ""))
    if e.gpu_index is not None:
        parts.append(f"GPU {e.gpu_index}")
    parts.append(f"step {e.step}" if e.step is not None else "step ?")
    parts.append(f"phase {e.phase}")
    if e.era:
        parts.append(f"PyTorch {e.era}" if e.kind in ("cuda_oom", "hip_oom", "xpu_oom") else e.era)
    return parts


def verdict(report: Report) -> str:
    """One line: how many OOMs, where, the most likely cause and the first fix."""
    events = report.events
    if not events:
        return "No out-of-memory failure found."
    e = events[0]
    where = [f"{len(events)} OOM" + ("s" if len(events) > 1 else "")]
    where += [f"rank {e.rank}"] if e.rank is not None else []
    where += [f"GPU {e.gpu_index}"] if e.gpu_index is not None else []
    where += [f"step {e.step}"] if e.step is not None else []
    where += [e.phase] if e.phase != "unknown" else []
    top = report.diagnoses[0] if report.diagnoses else None
    if top is None:
        return " · ".join(where) + " · no rule explains it"
    cause = f"most likely: {top.category} ({top.confidence:.0%})" if top.role != "hypothesis" \
        else f"possibly: {top.category} ({top.confidence:.0%})"
    fix = f" → {report.fixes_to_try[0]}" if report.fixes_to_try else ""
    return clean(" · ".join(where) + " · " + cause + fix)


def _try_first(console: _Console, report: Report) -> None:
    """When no cause is settled, the first fixes to try cover the candidate causes, one each."""
    if ids := try_first(report):
        _indented(console, "try first:", f"{' · '.join(ids)} (one per likely cause)")


def _event(console: _Console, i: int, n: int, e: OOMEvent) -> None:
    title = Text(f"OOM {i + 1}/{n}  {e.kind}", style="bold red" if e.fatal else "bold yellow")
    if not e.fatal:
        title.append("  (non-fatal: the run went on)", style="yellow")
    console.print(title)
    where = _where(e)
    if len(where[0]) > console.width - 2:  # a path wider than the column: on a line of its own, never broken (copied)
        console.print(Text("  " + where.pop(0), style="dim"), soft_wrap=True)
    _indented(console, " ", " · ".join(where), "dim")
    table = Table(show_header=False, box=None, padding=(0, 2))
    for key, label in _FIGURES:
        value = getattr(e, key)
        if value is not None:
            flag = "  (implausible: not used)" if key in e.implausible else ""
            table.add_row(f"  {label}", format_bytes(value) + flag)
    for p in e.other_processes:
        flag = "  (implausible: not used)" if "other_processes" in e.implausible else ""
        table.add_row(f"  process {p.pid}", format_bytes(p.bytes) + flag)
    if table.row_count:
        console.print(table)
    message = e.message[:MESSAGE_CHARS] + ("…" if len(e.message) > MESSAGE_CHARS else "")
    _indented(console, " ", message, "dim")
    for line in live_memory_lines(e):
        _indented(console, " ", line)


LIVE_FRAMES_SHOWN = 3


def _short_frame(frame: str) -> str:
    """A recorded frame without its environment's prefix: from the package on, or the last three path parts."""
    path, sep, rest = frame.partition(":")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1] + sep + rest
    parts = path.replace("\\", "/").split("/")
    return ("…/" if len(parts) > 3 else "") + "/".join(parts[-3:]) + sep + rest


def live_memory_lines(e: OOMEvent) -> list[str]:
    """What held the device, from a snapshot or record: live bytes by category and the largest stacks."""
    d = e.detail
    if not d.get("snapshot"):
        return []
    lines = []
    by_cat = d.get("live_by_category") or {}
    live = sum(int(b) for b in by_cat.values())
    if live:
        parts = [f"{cat.replace('_', ' ')} {format_bytes(int(b))} ({int(b) / live:.0%})"
                 for cat, b in sorted(by_cat.items(), key=lambda kv: -int(kv[1])) if int(b)]
        lines.append("live by what made it (recorded stacks): " + ", ".join(parts))
    for frame, nbytes in (d.get("top_frames") or [])[:LIVE_FRAMES_SHOWN]:
        lines.append(f"live {format_bytes(int(nbytes))} from {_short_frame(str(frame))}")
    floors = d.get("live_floors") or []
    if floors:
        trend = "rising every part" if all(b >= a for a, b in zip(floors, floors[1:])) else "not rising throughout"
        lines.append(f"lowest live level across the recorded trace: {format_bytes(int(floors[0]))} → "
                     f"{format_bytes(int(floors[-1]))} ({trend})")
    if d.get("snapshot_at_failure") is False:
        lines.append("(the segments were dumped after the failure: this is what was live then)")
    return lines


def _diagnosis(console: _Console, d: Diagnosis, event: OOMEvent) -> None:
    style = {"primary": "bold green", "contributing": "bold", "hypothesis": "italic"}[d.role]

    def heading() -> Table:
        title = Text(clean(d.title), style=style)
        title.append(f"  [{d.category}, {d.confidence:.0%}]", style="dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, min_width=12)
        grid.add_column(overflow="fold")
        grid.add_row(Text(d.role.upper(), style=style), title)
        return grid

    console.print_once(("heading", d.role, d.title, d.category, f"{d.confidence:.0%}"), heading)
    if d.role == "hypothesis":  # a hedge: why it is listed and what would decide it, then its fixes by id
        if d.why:
            _indented(console, "   why:", d.why)
        if d.fixes:
            _indented(console, "  fixes:", ", ".join(f.id for f in d.fixes))
        return
    for label, text in (("seen:", d.seen), ("why:", d.why), ("do:", d.action)):
        if text:
            _indented(console, f"  {label:>5}", text)
    for ev in d.evidence[:4]:
        if (ev.source, ev.line) == (event.source, event.line):
            continue  # the message itself is quoted above
        _indented(console, "       ", f"{ev.source}:{ev.line}  {ev.text[:EVIDENCE_CHARS]}", "dim")
    for fix in d.fixes:
        _indented(console, "   fix", f"{fix.id}: {fix.title}" + (f" → {fix.effect}" if fix.effect else ""))
        for where, change in fix.changes.items():
            _indented(console, "       ", f"{where}: {_change(change)}", "cyan")


def _change(change: object) -> str:
    """A fix's change for one place (env, training_args, deepspeed …) as the user would type it."""
    if isinstance(change, dict):
        return ", ".join(f"{k}={v}" for k, v in change.items())
    return str(change)


def render(report: Report, color: bool = False, width: int | None = None, quiet: bool = False) -> str:
    """Readable text at `width` columns (ANSI colour only when `color`); `quiet`: the verdict line only."""
    out = io.StringIO()
    write(report, out, color=color, width=width, quiet=quiet)
    return out.getvalue()


def write(report: Report, out: TextIO, color: bool = False, width: int | None = None, quiet: bool = False) -> None:
    """What `render` returns, written to `out` one event (with its diagnoses) at a time."""
    buf = io.StringIO()
    console = _Console(file=buf, force_terminal=color, no_color=not color, color_system="standard" if color else None,
                       width=width or DEFAULT_WIDTH, highlight=False, markup=False, emoji=False, soft_wrap=False)
    console.print(Text(verdict(report), style="bold"))
    if quiet or not report.events:
        _flush(buf, out, last=True)
        return
    _try_first(console, report)
    console.print()
    by_event = diagnoses_by_event(report)
    for i, e in enumerate(report.events):
        _event(console, i, len(report.events), e)
        mine = by_event.get(i, [])
        if mine:
            console.print()
            for d in mine:
                _diagnosis(console, d, e)
        console.print()
        _flush(buf, out)
    command = verify_command(report, by_event)
    if command and " --snapshot " in command:
        console.print(Text("prove it: replay the recorded trace under each allocator setting (no GPU, no torch):",
                           style="dim"))
        console.print(Text("  " + command), soft_wrap=True)
    elif command:
        console.print(Text("prove it: replay the failing step under this GPU's limit with each fix (needs torch; "
                           "a simulated GPU without one):", style="dim"))
        console.print(Text("  " + command), soft_wrap=True)  # one line, never broken: it is copied
    _flush(buf, out, last=True)


def _flush(buf: io.StringIO, out: TextIO, last: bool = False) -> None:
    """The whole lines printed into `buf` so far (all of it when `last`) written to `out` without trailing spaces;
    what remains of an unfinished line stays in `buf`."""
    text = buf.getvalue()
    cut = len(text) if last else text.rfind("\n") + 1
    out.write("\n".join(line.rstrip() for line in text[:cut].split("\n")))
    buf.seek(0)
    buf.truncate()
    buf.write(text[cut:])


def diagnoses_by_event(report: Report) -> dict[int, list[Diagnosis]]:
    """Each event's diagnoses, best first (looked up once: scanning every diagnosis per event was quadratic)."""
    out: dict[int, list[Diagnosis]] = {}
    for d in report.diagnoses:
        out.setdefault(d.event_index, []).append(d)
    return out


def verify_command(report: Report, by_event: dict[int, list[Diagnosis]] | None = None) -> str | None:
    """The `oomdoctor verify --from LOG` command that replays the first GPU failure, when a fix can be verified;
    for a memory snapshot whose trace recorded the failure, `oomdoctor verify --snapshot FILE`."""
    from oomdoctor.fixids import VERIFIABLE

    for e in report.events:
        if e.detail.get("snapshot") and not e.detail.get("record") and e.source != "-":
            return f"oomdoctor verify --snapshot {shlex.quote(clean(e.source))} --gpu {e.gpu_index or 0}"
    if by_event is None:
        by_event = diagnoses_by_event(report)
    for i, e in enumerate(report.events):
        if e.kind not in ("cuda_oom", "hip_oom") or e.total_bytes is None or e.source == "-" \
                or e.detail.get("snapshot"):
            continue
        fixes = {f.id for d in by_event.get(i, ()) for f in d.fixes}
        if fixes & VERIFIABLE:
            return f"oomdoctor verify --from {shlex.quote(clean(e.source))}"
    return None
