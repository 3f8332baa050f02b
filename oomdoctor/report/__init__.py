"""Renderers of a Report: text (terminal), markdown, json, html."""

from __future__ import annotations

from oomdoctor.diagnosis import Report, first_event_diagnoses

FORMATS = ("text", "markdown", "json", "html")
TRY_FIRST_SHOWN = 3


def try_first(report: Report) -> tuple[str, ...]:
    """The fixes every renderer names under its verdict when no cause is primary: one per likely cause, at most
    TRY_FIRST_SHOWN; none when the first cause is primary or the only candidate (its own fixes lead) or there is
    only one fix to try."""
    if not report.diagnoses or report.diagnoses[0].role == "primary" or len(report.fixes_to_try) < 2:
        return ()
    if len({d.category for d in first_event_diagnoses(report.diagnoses)}) < 2:
        return ()
    return report.fixes_to_try[:TRY_FIRST_SHOWN]


def render(report: Report, fmt: str, color: bool = False, width: int | None = None, quiet: bool = False) -> str:
    """The report in one of FORMATS (`width`, `quiet`: text only)."""
    if fmt == "json":
        from oomdoctor.report.json_report import render as r
    elif fmt == "markdown":
        from oomdoctor.report.markdown import render as r
    elif fmt == "html":
        from oomdoctor.report.html import render as r
    else:
        from oomdoctor.report.text import render as text_render

        return text_render(report, color=color, width=width, quiet=quiet)
    return r(report)
