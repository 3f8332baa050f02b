"""Renderers of a Report: text (terminal), markdown, json, html."""

from __future__ import annotations

import io
from typing import TextIO

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
    out = io.StringIO()
    write(report, fmt, out, color=color, width=width, quiet=quiet)
    return out.getvalue()


def write(report: Report, fmt: str, out: TextIO, color: bool = False, width: int | None = None,
          quiet: bool = False) -> None:
    """What `render` returns, written to `out`: text and json piece by piece, never the whole report as one string."""
    if fmt == "json":
        from oomdoctor.report.json_report import write as json_write

        json_write(report, out)
    elif fmt == "markdown":
        from oomdoctor.report.markdown import render as markdown_render

        out.write(markdown_render(report))
    elif fmt == "html":
        from oomdoctor.report.html import render as html_render

        out.write(html_render(report))
    else:
        from oomdoctor.report.text import write as text_write

        text_write(report, out, color=color, width=width, quiet=quiet)
