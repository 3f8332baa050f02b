"""Render a Report as one self-contained HTML page: memory bar of the failing GPU, memory-over-steps chart."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from oomdoctor.diagnosis import Diagnosis, Report
from oomdoctor.parse.model import OOMEvent, RunContext
from oomdoctor.report import try_first
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
    allocated = [(s.step, s.allocated_bytes if s.allocated_bytes is not None else s.max_allocated_bytes) for s in samples]
    series = {"allocated": allocated,
              "reserved": [(s.step, s.reserved_bytes if s.reserved_bytes is not None else s.max_reserved_bytes) for s in samples]}
    points: dict[str, list[tuple[int, int]]] = {
        k: [(x, y) for x, y in v if x is not None and y is not None] for k, v in series.items()}
    points = {k: v for k, v in points.items() if v}
    if not points:
        return None
    xs = [x for v in points.values() for x, _ in v] + ([e.step] if e.step is not None else [])
    ys = [y for v in points.values() for _, y in v] + ([e.total_bytes] if e.total_bytes else [])
    x0, x1 = min(xs), max(xs)
    step = _nice_step(max(ys) * 1.05)
    y1 = step * -(-max(ys) * 1.05 // step)
    fx = lambda x: round(_scale(x, x0, x1, PAD_L, CHART_W - PAD_R), 1)  # noqa: E731
    fy = lambda y: round(_scale(y, 0, y1, CHART_H - PAD_B, PAD_T), 1)  # noqa: E731
    lines = {k: " ".join(f"{fx(x)},{fy(y)}" for x, y in v) for k, v in points.items()}
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
        primary=next((g for g in report.diagnoses if g.role == "primary"), None), try_first=try_first(report),
    )


# --- the compact summary Jupyter shows (Report._repr_html_) ------------------------------------------------------

_BOX = "font:13px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;max-width:980px"
_CELL = "text-align:left;padding:2px 10px 2px 0;border-bottom:1px solid #e4e7eb;vertical-align:top"
_MUTED = "color:#5d6874"
_ROLE_COLOR = {"primary": "#c0392b", "contributing": "#e67e22", "hypothesis": "#bdc3c7"}
_SUMMARY_FIGURES = (("requested_bytes", "requested"), ("free_bytes", "free"), ("total_bytes", "total"),
                    ("allocated_bytes", "allocated"), ("reserved_bytes", "reserved"))


def _figures_text(e: OOMEvent) -> str:
    return " · ".join(f"{label} {format_bytes(getattr(e, key))}" for key, label in _SUMMARY_FIGURES
                      if getattr(e, key) is not None and key not in e.implausible)


def _events_table(report: Report) -> str:
    heads = ("#", "kind", "where", "rank", "GPU", "step", "phase", "figures")
    rows = ["<tr>" + "".join(f'<th style="{_CELL};{_MUTED}">{h}</th>' for h in heads) + "</tr>"]
    for i, e in enumerate(report.events):
        cells = (str(i + 1), e.kind, f"{e.source}:{e.line}", _dash(e.rank), _dash(e.gpu_index), _dash(e.step),
                 e.phase, _figures_text(e))
        rows.append("<tr>" + "".join(f'<td style="{_CELL}">{escape(c)}</td>' for c in cells) + "</tr>")
    return f'<table style="border-collapse:collapse;margin:4px 0 10px">{"".join(rows)}</table>'


def _dash(v: object) -> str:
    return "–" if v is None else str(v)


def _diagnosis_card(d: Diagnosis) -> str:
    tag = f"{d.category} · {d.confidence:.0%} · {d.role} · event {d.event_index + 1}"
    out = [f'<div style="border-left:4px solid {_ROLE_COLOR[d.role]};padding:2px 10px;margin:6px 0">',
           f'<div><b>{escape(d.title)}</b> <span style="{_MUTED}">[{escape(tag)}]</span></div>']
    for label, text in (("seen", d.seen), ("do", d.action)):
        if text:
            out.append(f'<div><span style="{_MUTED}">{label}:</span> {escape(text)}</div>')
    for f in d.fixes:
        effect = f" → {escape(f.effect)}" if f.effect else ""
        out.append(f'<div>fix <code>{escape(f.id)}</code>: {escape(f.title)}{effect}</div>')
        if f.changes:
            out.append('<pre style="margin:2px 0 4px 16px;padding:4px 8px;background:#f0f2f5;white-space:pre-wrap">'
                       f"{escape(changes_text(f.changes))}</pre>")
    out.append("</div>")
    return "".join(out)


def summary(report: Report) -> str:
    """The report as a compact HTML fragment for notebooks: inline styles only, no scripts or fetches."""
    n = len(report.events)
    head = f"oomdoctor · {n} out-of-memory event{'s' if n != 1 else ''}" if n else \
        "oomdoctor · no out-of-memory failure found"
    parts = [f'<div class="oomdoctor-report" style="{_BOX}">', f'<div style="font-weight:600">{escape(head)}</div>']
    if n:
        parts.append(_events_table(report))
    confident = [d for d in report.diagnoses if d.role != "hypothesis"]
    hypotheses = [d for d in report.diagnoses if d.role == "hypothesis"]
    parts += [_diagnosis_card(d) for d in confident]
    if hypotheses:
        parts.append(f'<details><summary style="{_MUTED}">{len(hypotheses)} hypothesis(es) the log cannot '
                     "confirm</summary>" + "".join(_diagnosis_card(d) for d in hypotheses) + "</details>")
    parts.append("</div>")
    return "".join(parts)
