"""Many logs in one call: the report is written piece by piece, each event derived against its own log."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from oomdoctor.diagnosis import Report
from oomdoctor.engine.engine import diagnose_with
from oomdoctor.engine.loader import load_rules
from oomdoctor.parse import parse_files
from oomdoctor.report import json_report, text

ROOT = Path(__file__).resolve().parents[1]
LOGS = [str(p) for p in sorted((ROOT / "fixtures").rglob("*.log"))[::40]]  # 20 logs of every kind and stack
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 320.00 MiB. GPU 3 has a total capacity of "
       "79.15 GiB of which 15.31 MiB is free. Including non-PyTorch memory, this process has 79.12 GiB memory in use. "
       "Of the allocated memory 77.85 GiB is allocated by PyTorch, and 683.86 MiB is reserved by PyTorch but "
       "unallocated.\n")


def report_of(paths: list[str]) -> Report:
    facts = parse_files(paths)
    return Report(events=facts.events, diagnoses=diagnose_with(facts, load_rules([])), runs=facts.runs)


def test_the_json_written_piece_by_piece_is_the_document_dumped_whole():
    for report in (report_of(LOGS), Report()):
        whole = json.dumps(json_report.to_dict(report), indent=2, ensure_ascii=False) + "\n"
        assert json_report.render(report) == whole


def test_each_log_gets_the_diagnoses_it_gets_alone():
    together = report_of(LOGS)
    for log in LOGS:
        alone = report_of([log])
        mine = [i for i, e in enumerate(together.events) if e.source == log]
        local = {i: k for k, i in enumerate(mine)}
        got = [d.model_copy(update={"event_index": local[d.event_index]}) for d in together.diagnoses
               if d.event_index in local]
        assert got == list(alone.diagnoses), log


def test_text_is_written_in_whole_lines_without_trailing_spaces():
    out = io.StringIO()
    buf = io.StringIO("a  \nb \nunfinished ")
    buf.seek(0, io.SEEK_END)
    text._flush(buf, out)
    assert (out.getvalue(), buf.getvalue()) == ("a\nb\n", "unfinished ")
    buf.write("line  \n")
    text._flush(buf, out, last=True)
    assert out.getvalue() == "a\nb\nunfinished line\n"


def test_a_reader_that_stops_early_leaves_the_exit_code_alone(tmp_path):
    paths = []
    for i in range(200):
        log = tmp_path / f"job-{i:03d}.log"
        log.write_text("".join(f"{{'loss': 0.5, 'step': {s}}}\n" for s in range(20)) + OOM)
        paths.append(str(log))
    proc = subprocess.Popen([sys.executable, "-m", "oomdoctor", "diagnose", *paths, "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"{\n"
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""
