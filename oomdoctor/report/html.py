"""Render a Report as one self-contained HTML page: memory bar of the failing GPU, memory-over-steps chart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from oomdoctor.diagnosis import Report
from oomdoctor.parse.model import OOMEvent, RunContext
from oomdoctor.report.markdown import changes_text
from oomdoctor.units import GIB, format_bytes

TEMPLATES = Path(__file__).resolve().parent / "templates"
ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True),
                  trim_blocks=True, lstrip_blocks=True)
ENV.filters["bytes"] = format_bytes
ENV.filters["changes_text"] = changes_text

CHART_W, CHART_H, PAD_L, PAD_B, PAD_T, PAD_R = 760, 260, 56, 34, 14, 16


@dataclass(frozen=True)
class Segment:
    """One part of the memory bar."""

    key: str
    label: str
    bytes: int
    percent: float


def memory_bar(e: OOMEvent) -> list[Segment]:
    """Allocated, reserved-unallocated, non-PyTorch, other processes, free: shares of the GPU's total."""
    total = e.total_bytes
    if not total or "total_bytes" in e.implausible:
        return []
    trusted = {n: getattr(e, n) for n in ("allocated_bytes", "reserved_unallocated_bytes", "free_bytes", "process_in_use_bytes")
               if getattr(e, n) is not None and n not in e.implausible}
    alloc, unalloc, free = (trusted.get(n, 0) for n in ("allocated_bytes", "reserved_unallocated_bytes", "free_bytes"))
    others = sum(p.bytes for p in e.other_processes) if "other_processes" not in e.implausible else 0
    own = trusted.get("process_in_use_bytes")
    non_pt = max(0, own - alloc - unalloc) if own is not None else 0
    parts = [("allocated", "allocated by tensors", alloc), ("unallocated", "reserved, unallocated", unalloc),
             ("nonpytorch", "this process, outside PyTorch", non_pt), ("others", "other processes", others)]
    used = sum(b for _, _, b in parts)
    rest = max(0, total - used - free)
    parts += [("unknown", "not accounted for", rest), ("free", "free", free)]
    return [Segment(k, label, b, 100 * b / max(total, used + free)) for k, label, b in parts if b > 0]


def _scale(v: float, lo: float, hi: float, out_lo: float, out_hi: float) -> float:
    return out_lo if hi == lo else out_lo + (v - lo) * (out_hi - out_lo) / (hi - lo)


def _nice_step(top: float) -> float:
    """A round tick step (in bytes) giving four to eight ticks up to `top`."""
    for gib in (0.25, 0.5, 1, 2, 4, 5, 10, 20, 40, 50, 100, 200, 500):
        if top / (gib * GIB) <= 8:
            return gib * GIB
    return top / 4


def memory_chart(run: RunContext | None, e: OOMEvent) -> dict | None:
    """SVG coordinates for allocated/reserved over steps, with the OOM step and evaluation marks."""
    samples = [s for s in (run.memory if run else ()) if s.step is not None]
    series = {"allocated": [(s.step, s.allocated_bytes if s.allocated_bytes is not None else s.max_allocated_bytes) for s in samples],
              "reserved": [(s.step, s.reserved_bytes if s.reserved_bytes is not None else s.max_reserved_bytes) for s in samples]}
    series = {k: [(x, y) for x, y in v if y is not None] for k, v in series.items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    xs = [x for v in series.values() for x, _ in v] + ([e.step] if e.step is not None else [])
    ys = [y for v in series.values() for _, y in v] + ([e.total_bytes] if e.total_bytes else [])
    x0, x1 = min(xs), max(xs)
    step = _nice_step(max(ys) * 1.05)
    y1 = step * -(-max(ys) * 1.05 // step)
    fx = lambda x: round(_scale(x, x0, x1, PAD_L, CHART_W - PAD_R), 1)  # noqa: E731
    fy = lambda y: round(_scale(y, 0, y1, CHART_H - PAD_B, PAD_T), 1)  # noqa: E731
    lines = {k: " ".join(f"{fx(x)},{fy(y)}" for x, y in v) for k, v in series.items()}
    evals = []
    for ev in (run.eval_lines if run else ()):
        before = [s.step for s in samples if s.evidence.line <= ev.line]
        if before:
            evals.append(fx(before[-1]))
    ticks = [(fy(v * step), f"{v * step / GIB:g} GiB") for v in range(int(y1 // step) + 1)]
    return {"w": CHART_W, "h": CHART_H, "lines": lines, "evals": sorted(set(evals)),
            "oom_x": fx(e.step) if e.step is not None else None,
            "total_y": fy(e.total_bytes) if e.total_bytes else None, "ticks": ticks,
            "x0": x0, "x1": x1, "left": PAD_L, "right": CHART_W - PAD_R, "bottom": CHART_H - PAD_B, "top": PAD_T}


def _focus(report: Report) -> int:
    """The event the first diagnosis explains (else the first event)."""
    return report.diagnoses[0].event_index if report.diagnoses else 0


def render(report: Report) -> str:
    """The report as a standalone HTML page (no scripts, fonts or fetches)."""
    events = report.events
    focus = events[_focus(report)] if events else None
    run = next((r for r in report.runs if focus and r.source == focus.source), None)
    fixes = {f.id: f for g in report.diagnoses if g.role != "hypothesis" for f in g.fixes}
    return ENV.get_template("report.html.j2").render(
        report=report, focus=focus, bar=memory_bar(focus) if focus else [],
        chart=memory_chart(run, focus) if focus else None, fixes=list(fixes.values()),
        primary=next((g for g in report.diagnoses if g.role == "primary"), None),
    )
