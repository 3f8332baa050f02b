"""Render a Report as Markdown ready to paste into a GitHub issue."""

from __future__ import annotations

import json

from oomdoctor.diagnosis import Diagnosis, Fix, Report
from oomdoctor.parse.model import Evidence, OOMEvent
from oomdoctor.report import try_first
from oomdoctor.units import format_bytes

MAX_LOG_LINES = 40


def _cell(value: object) -> str:
    text = "—" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _events_table(events: tuple[OOMEvent, ...]) -> list[str]:
    head = ["#", "kind", "where", "rank", "GPU", "step", "phase", "requested", "total", "free",
            "allocated", "reserved, unallocated", "other processes"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, e in enumerate(events):
        others = format_bytes(sum(p.bytes for p in e.other_processes)) if e.other_processes else None
        figs = [format_bytes(getattr(e, n)) if getattr(e, n) is not None else None for n in (
            "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes")]
        figs = [f"{f} ⚠" if f and n in e.implausible else f for f, n in zip(figs, (
            "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes"))]
        cells = [i + 1, f"`{e.kind}`", f"{e.source}:{e.line}", e.rank, e.gpu_index, e.step,
                 e.phase if e.phase != "unknown" else None, *figs, others]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if any(e.implausible for e in events):
        rows.append("\n⚠ figure printed but not trustworthy (e.g. NVML's 2⁶⁴ placeholder); no verdict rests on it.")
    return rows


def changes_text(changes: dict) -> str:
    """Fix changes as readable YAML-like text: one section per stack, snippets kept as written."""
    lines: list[str] = []
    for section, body in changes.items():
        lines.append(f"{section}:")
        if isinstance(body, dict):
            for key, value in body.items():
                shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                lines.append(f"  {key}: {shown}")
        else:
            lines += [f"  {line}" for line in str(body).splitlines()]
    return "\n".join(lines)


def _fix(fix: Fix) -> list[str]:
    tag = " · verifiable with `oomdoctor verify`" if fix.verifiable else ""
    lines = [f"- **`{fix.id}`** — {fix.title}{tag}"]
    if fix.effect:
        lines.append(f"  - expected effect: {fix.effect}")
    if fix.changes:
        body = "\n".join(f"  {line}" for line in _fence(changes_text(fix.changes), "yaml").splitlines())
        lines.append(body)
    return lines


def _diagnosis(n: int, g: Diagnosis) -> list[str]:
    return [
        f"{n}. **{g.title}** — `{g.rule}` · {g.category} · confidence {g.confidence:.2f} · {g.role}",
        f"   - *Seen:* {g.seen}",
        f"   - *Why:* {g.why}",
        f"   - *Do:* {g.action}",
    ]


def _log_lines(report: Report) -> list[Evidence]:
    found: dict[tuple[str, int], Evidence] = {}
    for g in report.diagnoses:
        for ev in g.evidence:
            found.setdefault((ev.source, ev.line), ev)
    for e in report.events:
        text = e.message.splitlines()[0] if e.message else e.kind
        found.setdefault((e.source, e.line), Evidence(source=e.source, line=e.line, text=text))
    return sorted(found.values(), key=lambda ev: (ev.source, ev.line))[:MAX_LOG_LINES]


def render(report: Report) -> str:
    """The whole report as GitHub-flavoured Markdown."""
    if not report.events:
        return "## oomdoctor\n\nNo out-of-memory event found in the input.\n"
    primary = next((g for g in report.diagnoses if g.role == "primary"), None)
    out = [f"## oomdoctor: {primary.title if primary else 'out-of-memory, cause not determined'}", ""]
    if primary:
        out.append(f"**Verdict:** {primary.category.replace('_', ' ')} (rule `{primary.rule}`, confidence "
                   f"{primary.confidence:.2f}). {primary.seen}")
    else:
        out.append("**Verdict:** no rule is confident; the hypotheses below are weak signals.")
        if ids := try_first(report):
            out += ["", f"**Try first:** {', '.join(f'`{i}`' for i in ids)} (one per likely cause)."]
    out += ["", f"### Out-of-memory events ({len(report.events)})", "", *_events_table(report.events), ""]
    if report.diagnoses:
        out += ["### Diagnoses (best first)", ""]
        for n, g in enumerate(report.diagnoses, 1):
            out += _diagnosis(n, g)
        out.append("")
    fixes = {f.id: f for g in report.diagnoses if g.role != "hypothesis" for f in g.fixes}
    if fixes:
        out += ["### Fixes", ""]
        for fix in fixes.values():
            out += _fix(fix)
        out.append("")
    text = "\n".join(f"{ev.source}:{ev.line}: {ev.text}" for ev in _log_lines(report))
    out += ["<details><summary>Key log lines</summary>", "", _fence(text, "text"), "", "</details>", "",
            f"<sub>oomdoctor {report.version}</sub>", ""]
    return "\n".join(out)
