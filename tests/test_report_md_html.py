"""Markdown and HTML reports: structure, self-containment, memory bar and chart."""

from __future__ import annotations

from html.parser import HTMLParser

from rules_helpers import facts
from test_rules_engine import STORIES

from oomdoctor.diagnosis import Report
from oomdoctor.engine.engine import diagnose
from oomdoctor.report import html, markdown


def report_for(name: str) -> Report:
    f, _ = STORIES[name]
    return Report(events=f.events, diagnoses=diagnose(f), runs=f.runs)


class Collector(HTMLParser):
    """Tags with their attributes, and every URL-bearing attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        d = {k: v or "" for k, v in attrs}
        self.tags.append((tag, d))
        self.urls += [d[k] for k in ("src", "href", "action", "xlink:href") if k in d]

    def segments(self) -> list[str]:
        return [a["data-segment"] for _, a in self.tags if "data-segment" in a]

    def has(self, tag: str, cls: str = "") -> bool:
        return any(t == tag and cls in a.get("class", "") for t, a in self.tags)


def parse(page: str) -> Collector:
    c = Collector()
    c.feed(page)
    return c


def test_html_bar_segments_and_no_fetches() -> None:
    page = html.render(report_for("lora-eval-every-50-steps"))
    c = parse(page)
    assert {"allocated", "unallocated", "free"} <= set(c.segments())
    assert not [u for u in c.urls if u.startswith(("http", "//"))]
    assert not c.has("script") and not c.has("link") and "@import" not in page and "url(" not in page
    assert not c.has("polyline")  # no memory samples, no chart


def test_html_chart_when_samples_exist() -> None:
    c = parse(html.render(report_for("leak")))
    assert c.has("svg") and c.has("polyline", "series-allocated") and c.has("line", "oom")


def test_html_other_process_segment() -> None:
    c = parse(html.render(report_for("other-process")))
    assert "others" in c.segments()


def test_html_escapes_log_text() -> None:
    f = facts(message="<script>alert(1)</script> CUDA out of memory", requested_gib=1, total_gib=10, free_gib=0.1,
              allocated_gib=9, reserved_unallocated_gib=0.1, reserved_gib=9.1)
    r = Report(events=f.events, diagnoses=diagnose(f), runs=f.runs)
    page = html.render(r)
    assert "<script>" not in page and not parse(page).has("script")


def test_html_without_events() -> None:
    assert "No out-of-memory event" in html.render(Report())


def test_markdown_sections() -> None:
    md = markdown.render(report_for("first-step-batch-32"))
    assert md.startswith("## oomdoctor: ")
    assert "**Verdict:** batch too large" in md
    assert "| # | kind |" in md and "<details><summary>Key log lines</summary>" in md
    assert "halve-batch" in md and "train.log:500:" in md
    assert md.count("<details>") == md.count("</details>")


def test_markdown_escapes_pipes_and_fences() -> None:
    f = facts(source="a|b.log", message="x ``` y", requested_gib=1, total_gib=10, free_gib=0.1, allocated_gib=9,
              reserved_unallocated_gib=0.1, reserved_gib=9.1)
    md = markdown.render(Report(events=f.events, diagnoses=diagnose(f), runs=f.runs))
    assert "a\\|b.log" in md and "````" in md


def test_markdown_without_events() -> None:
    assert "No out-of-memory event" in markdown.render(Report())


def bare_message_report() -> Report:
    """A message-only log: no cause is primary, so the renderers name one fix per candidate cause."""
    from oomdoctor.parse import parse_text

    f = parse_text("RuntimeError: CUDA out of memory. Tried to allocate 76.00 MiB (GPU 0; 10.76 GiB total capacity; "
                   "9.57 GiB already allocated; 74.81 MiB free; 9.70 GiB reserved in total by PyTorch)\n")
    return Report(events=f.events, diagnoses=diagnose(f), runs=f.runs)


def test_markdown_without_a_primary_cause_names_one_fix_per_candidate() -> None:
    report = bare_message_report()
    md = markdown.render(report)
    assert "**Try first:** " + ", ".join(f"`{i}`" for i in report.fixes_to_try[:3]) in md
    assert len(set(report.fixes_to_try[:3])) == 3
    assert "**Try first:**" not in markdown.render(report_for("first-step-batch-32"))


def test_html_without_a_primary_cause_names_one_fix_per_candidate() -> None:
    report = bare_message_report()
    page = html.render(report)
    assert 'id="try-first"' in page and all(f"<code>{i}</code>" in page for i in report.fixes_to_try[:3])
    assert 'id="try-first"' not in html.render(report_for("first-step-batch-32"))


def test_one_candidate_cause_gets_no_try_first_line() -> None:
    """Not primary, but the only cause listed: its own fixes lead, and no line claims "one per likely cause"."""
    from pathlib import Path

    from oomdoctor.parse import parse_files
    from oomdoctor.report import try_first
    from oomdoctor.report.text import render as text_render

    log = Path(__file__).parents[1] / "fixtures/reconstructed/e1-algoperf-conformer-backward-after-eval.log"
    f = parse_files([str(log)])  # the README's example: half the card cached in fragments, a traceback, no config
    found = diagnose(f)
    assert {d.category for d in found} == {"fragmentation"} and len(found[0].fixes) >= 2
    weaker = tuple(d.model_copy(update={"role": "contributing", "confidence": 0.4}) for d in found)
    report = Report(events=f.events, diagnoses=weaker, runs=f.runs)
    assert try_first(report) == ()
    assert "try first" not in text_render(report, width=80)
    assert "Try first" not in markdown.render(report)
    # two candidate causes: the line is there
    other = found[0].model_copy(update={"role": "hypothesis", "confidence": 0.3, "category": "batch_too_large"})
    assert try_first(Report(events=f.events, diagnoses=(*weaker, other), runs=f.runs))
