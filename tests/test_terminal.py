"""The text report at 80 and 200 columns (golden files), quoting log text safely, the verdict line and colour."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oomdoctor.api import diagnose_path, diagnose_text
from oomdoctor.cli import app
from oomdoctor.report.text import clean, render

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("OOMDOCTOR_UPDATE_GOLDENS") == "1"
CASES = ("reconstructed/b-vadr1-rank2-frag-elastic", "synthetic/syn-lora-eval-spike-8xa100", "generated/gen-hf-save-at-8")
MSG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
       "of which 1.20 GiB is free. Of the allocated memory 70.10 GiB is allocated by PyTorch, and 6.80 GiB is reserved "
       "by PyTorch but unallocated.")


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("case", CASES)
def test_text_report_matches_its_golden(case, width):
    log = ROOT / "fixtures" / f"{case}.log"
    if not log.exists():
        pytest.skip(f"no fixture {case}")
    os.chdir(ROOT)  # sources are shown relative to the repository, as a user in the checkout sees them
    got = render(diagnose_path(str(log.relative_to(ROOT))), width=width)
    golden = GOLDEN / f"{case.split('/')[-1]}.{width}.txt"
    if UPDATE or not golden.exists():
        golden.write_text(got, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"golden written: {golden.name}; review it and commit (OOMDOCTOR_UPDATE_GOLDENS=1 rewrites)")
    assert got == golden.read_text(encoding="utf-8"), f"run with OOMDOCTOR_UPDATE_GOLDENS=1 if {golden.name} should change"
    assert all(len(line) <= width for line in got.splitlines())


def test_a_path_wider_than_the_column_is_printed_whole_on_its_own_line(tmp_path):
    # a folded path cannot be copied: it goes on a line of its own, whole (the terminal wraps it, not the report)
    deep = tmp_path / ("runs-" + "x" * 40) / "job-2026-11-28-sweep-lr3e-5-bs16" / "rank0-train.log"
    deep.parent.mkdir(parents=True)
    deep.write_text(MSG + "\n", encoding="utf-8")
    got = render(diagnose_path(str(deep)), width=80)
    assert f"  {deep}:1" in got.splitlines()
    assert any(line.startswith("  GPU 0 · step ? · phase unknown") for line in got.splitlines())


DOCS = {"markdown": "md", "html": "html"}


@pytest.mark.parametrize("fmt", sorted(DOCS))
def test_markdown_and_html_reports_match_their_goldens(fmt):
    from oomdoctor.report import render as render_any

    os.chdir(ROOT)
    got = render_any(diagnose_path("fixtures/synthetic/syn-leak.log"), fmt)
    golden = GOLDEN / f"syn-leak.{DOCS[fmt]}"
    if UPDATE or not golden.exists():
        golden.write_text(got, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"golden written: {golden.name}; review it and commit")
    assert got == golden.read_text(encoding="utf-8"), f"run with OOMDOCTOR_UPDATE_GOLDENS=1 if {golden.name} should change"


def test_no_golden_is_unused():
    names = {f"{c.split('/')[-1]}.{w}.txt" for c in CASES for w in (80, 200)} | {f"syn-leak.{e}" for e in DOCS.values()}
    assert {p.name for p in GOLDEN.iterdir()} <= names


def test_log_text_is_never_markup_and_never_an_escape_sequence():
    text = "[INST] hi [/INST] [link=http://evil]x[/link] [/pytorch/c10/cuda] [rank0]\n" + MSG.replace(
        "GPU 0 has", "[/INST] \x1b]8;;http://evil\x07 \x1bc \x9b31m GPU 0 has") + "\n"
    out = render(diagnose_text(text), width=200)
    assert "[/INST]" in out and "\x1b" not in out and "\x9b" not in out and "\x07" not in out
    assert clean("a\x1b[31mb\x1b]0;title\x07c\x00d\te") == "abcd\te"


def test_verdict_first_and_quiet_prints_only_it(tmp_path):
    log = tmp_path / "t.log"
    log.write_text(MSG + "\n")
    r = CliRunner().invoke(app, ["diagnose", str(log), "-q"])
    assert r.exit_code == 0 and r.output.strip().count("\n") == 0
    assert re.fullmatch(r"1 OOM · GPU 0 · (?:most likely|possibly): [a-z_]+ \(\d{1,3}%\) → [a-z0-9-]+\n", r.output)


def test_color_flags_and_no_color(tmp_path, monkeypatch):
    log = tmp_path / "t.log"
    log.write_text(MSG + "\n")
    assert "\x1b[" in CliRunner().invoke(app, ["diagnose", str(log), "--color", "always"]).output
    assert "\x1b[" not in CliRunner().invoke(app, ["diagnose", str(log), "--color", "never"]).output
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in CliRunner().invoke(app, ["diagnose", str(log)]).output


def test_user_errors_exit_2_before_any_work(tmp_path):
    log = tmp_path / "t.log"
    log.write_text(MSG + "\n")
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "x.yaml").write_text("id: x\ncategory: nope\n")
    for args, words in (([str(log), "--rules", str(pack)], "x.yaml:2"),
                        ([str(log), "--rules", str(tmp_path / "missing")], "not a directory"),
                        ([str(log), "-o", str(tmp_path / "no" / "r.html")], "does not exist")):
        r = CliRunner().invoke(app, ["diagnose", *args])
        assert r.exit_code == 2, (args, r.output)
        assert words in r.output and "tip:" in r.output and "Traceback" not in r.output


def test_the_report_ends_with_the_verify_command_only_when_a_replay_can_prove_a_fix(tmp_path):
    from oomdoctor.api import diagnose_path, diagnose_text
    from oomdoctor.report.text import verify_command

    log = tmp_path / "my run.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                   "of 79.15 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB "
                   "memory in use. Of the allocated memory 60.00 GiB is allocated by PyTorch, and 17.00 GiB is "
                   "reserved by PyTorch but unallocated.\n")
    assert verify_command(diagnose_path(log)) == f"oomdoctor verify --from '{log}'"
    assert verify_command(diagnose_text("[1]+  Killed                  python train.py\n")) is None  # host RAM
