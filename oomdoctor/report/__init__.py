"""Renderers of a Report: text (terminal), markdown, json, html."""

from __future__ import annotations

from oomdoctor.diagnosis import Report

FORMATS = ("text", "markdown", "json", "html")


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
