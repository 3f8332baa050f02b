"""The terminal report: each event's figures, then the causes best first, with evidence and fixes."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from oomdoctor.diagnosis import Diagnosis, Report
from oomdoctor.parse.model import OOMEvent
from oomdoctor.units import format_bytes

_FIGURES = (
    ("requested_bytes", "requested"), ("total_bytes", "total"), ("free_bytes", "free"),
    ("allocated_bytes", "allocated by PyTorch"), ("reserved_bytes", "reserved by PyTorch"),
    ("reserved_unallocated_bytes", "reserved but unallocated"), ("process_in_use_bytes", "this process (all)"),
    ("allowed_bytes", "allowed (memory fraction)"), ("private_pools_bytes", "in private pools"),
)


def _where(e: OOMEvent) -> str:
    parts = [f"{e.source}:{e.line}"]
    if e.rank is not None:
        parts.append(f"rank {e.rank}" + (" (first failure)" if e.root_cause else ""))
    if e.gpu_index is not None:
        parts.append(f"GPU {e.gpu_index}")
    parts.append(f"step {e.step}" if e.step is not None else "step ?")
    parts.append(f"phase {e.phase}")
    if e.era:
        parts.append(f"PyTorch {e.era}" if e.kind in ("cuda_oom", "hip_oom", "xpu_oom") else e.era)
    return " · ".join(parts)


def _event(console: Console, i: int, n: int, e: OOMEvent) -> None:
    title = Text(f"OOM {i + 1}/{n}  {e.kind}", style="bold red" if e.fatal else "bold yellow")
    if not e.fatal:
        title.append("  (non-fatal: training went on)", style="yellow")
    console.print(title)
    console.print(f"  {_where(e)}", style="dim")
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
    console.print(f"  {e.message[:300]}{'…' if len(e.message) > 300 else ''}", style="dim", highlight=False)


def _diagnosis(console: Console, d: Diagnosis) -> None:
    style = {"primary": "bold green", "contributing": "bold", "hypothesis": "italic"}[d.role]
    console.print(Text(f"{d.role.upper():<12} {d.title}  [{d.category}, {d.confidence:.0%}]", style=style))
    for label, text in (("seen", d.seen), ("why", d.why), ("do", d.action)):
        if text:
            console.print(f"  {label:>4}: {text}", highlight=False)
    for ev in d.evidence[:4]:
        console.print(f"        {ev.source}:{ev.line}  {ev.text[:140]}", style="dim", highlight=False)
    for fix in d.fixes:
        console.print(f"    fix {fix.id}: {fix.title}" + (f"  → {fix.effect}" if fix.effect else ""), highlight=False)
        for where, change in fix.changes.items():
            console.print(f"        {where}: {_change(change)}", style="cyan", highlight=False)


def _change(change: object) -> str:
    """A fix's change for one place (env, training_args, deepspeed …) as the user would type it."""
    if isinstance(change, dict):
        return ", ".join(f"{k}={v}" for k, v in change.items())
    return str(change)


def render(report: Report, color: bool = False) -> str:
    """Readable text (ANSI colour only when `color`)."""
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=120, soft_wrap=False)
    events = report.events
    if not events:
        console.print("No out-of-memory failure found.")
        return buf.getvalue()
    console.print(Text(f"{len(events)} out-of-memory event(s) found", style="bold"))
    console.print()
    for i, e in enumerate(events):
        _event(console, i, len(events), e)
        mine = [d for d in report.diagnoses if d.event_index == i]
        if mine:
            console.print()
            for d in mine:
                _diagnosis(console, d)
        console.print()
    return buf.getvalue()
