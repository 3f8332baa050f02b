"""The Python API: the same report as the CLI, picklable, thread-safe, and `import oomdoctor` stays light."""

from __future__ import annotations

import gzip
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import oomdoctor
from oomdoctor.cli import app
from oomdoctor.errors import InputError, OomdoctorError

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = [  # relative paths, so sources read as the CLI names them when run from the checkout
    "fixtures/reconstructed/b-vadr1-rank2-frag-elastic.log",
    "fixtures/reconstructed/c-hip-codegen2-interleaved-ranks.log",
    "fixtures/reconstructed/d-host-elastic-cppo-grpo-sigkill.log",
    "fixtures/reconstructed/d-kv-vllm-compose-no-cache-blocks.log",
    "fixtures/reconstructed/d-tf-keras-fit-conv.log",
    "fixtures/synthetic/syn-lora-eval-spike-8xa100.log",
    "fixtures/synthetic/syn-megatron-iteration.log",
    "fixtures/benign/syn-config-keys-healthy.log",
]


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch):
    monkeypatch.chdir(ROOT)


def read(path: str) -> str:
    """The log as text with its line endings kept: `\r` redraws stay inside lines, as the CLI reads them."""
    with open(ROOT / path, encoding="utf-8", newline="") as f:
        return f.read()


def test_universal_newlines_would_shift_line_numbers():
    """Why read() keeps newlines: Path.read_text() turns progress-bar `\r` redraws into lines of their own."""
    path = "fixtures/synthetic/syn-lora-eval-spike-8xa100.log"
    kept = oomdoctor.diagnose_text(read(path), source=path).events[0].line
    assert kept == oomdoctor.diagnose_path(path).events[0].line
    assert oomdoctor.diagnose_text((ROOT / path).read_text(), source=path).events[0].line != kept


def cli(*args: str) -> str:
    """`oomdoctor ARGS` in-process: its stdout (exit 0 an OOM, 1 none)."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code in (0, 1), result.output
    return result.stdout


@pytest.mark.parametrize("path", FIXTURES)
def test_api_json_is_the_cli_json(path):
    expected = cli("diagnose", path, "--format", "json")
    assert oomdoctor.diagnose_path(path).to_json() == expected
    text = read(path)
    assert oomdoctor.diagnose_text(text, source=path).to_json() == expected
    assert oomdoctor.diagnose_text(text.encode(), source=path).to_json() == expected


def test_several_paths_make_one_report_like_the_cli():
    paths = FIXTURES[:3]
    report = oomdoctor.diagnose_paths(paths)
    assert report.to_json() == cli("diagnose", *paths, "--format", "json")
    assert list(dict.fromkeys(e.source for e in report.events)) == paths  # input order


def test_line_numbers_and_evidence_match_the_log():
    path = "fixtures/reconstructed/b-vadr1-rank2-frag-elastic.log"
    report = oomdoctor.diagnose_path(path)
    lines = read(path).split("\n")
    event = report.events[0]
    assert (event.source, event.line, event.rank, event.gpu_index) == (path, 1, 2, 2)
    for d in report.diagnoses:
        for ev in d.evidence:
            assert ev.text[:60] in lines[ev.line - 1]
    assert "fragmentation" in {d.category for d in report.diagnoses}  # listed, with its evidence lines


def test_to_dict_is_the_json_document():
    import json

    report = oomdoctor.diagnose_path(FIXTURES[0])
    doc = report.to_dict()
    assert doc == json.loads(report.to_json())
    assert list(doc)[:2] == ["schema_version", "version"] and doc["schema_version"] == 1
    assert doc["events"][0]["requested_bytes"] == report.events[0].requested_bytes


def test_text_is_read_like_a_file_past_the_head(tmp_path):
    """A log larger than the reader's head: the in-memory text is windowed exactly as the file is."""
    head = "per_device_train_batch_size: 8\ngradient_accumulation_steps: 4\n"
    filler = "".join(f"{{'loss': 1.{i % 97:02d}, 'learning_rate': 2e-05, 'epoch': 0.{i}}}\n" for i in range(12000))
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.25 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.14 GiB memory in use. "
           "Of the allocated memory 70.02 GiB is allocated by PyTorch, and 7.61 GiB is reserved by PyTorch but "
           "unallocated.\n")
    text = head + filler + oom
    assert len(text) > 512 * 1024
    log = tmp_path / "big.log"
    log.write_text(text, encoding="utf-8")
    from_file = oomdoctor.diagnose_path(str(log))
    assert from_file.events[0].line == 12003
    assert oomdoctor.diagnose_text(text, source=str(log)) == from_file
    gz = tmp_path / "big.log.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    assert oomdoctor.diagnose_path(gz).events[0].line == 12003


def test_bytes_and_path_objects_are_accepted():
    path = ROOT / FIXTURES[0]
    by_path = oomdoctor.diagnose_path(path)
    assert by_path.events[0].source == str(path)
    assert oomdoctor.diagnose_text(path.read_bytes(), source=str(path)) == by_path


def test_no_oom_is_an_empty_report():
    report = oomdoctor.diagnose_text("step 1 loss 2.3\nstep 2 loss 2.1\n")
    assert report.events == () and report.diagnoses == ()
    assert report.to_dict()["events"] == []


def test_bad_input_raises_the_cli_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        oomdoctor.diagnose_path(tmp_path / "missing.log")
    with pytest.raises(OomdoctorError, match="empty"):
        oomdoctor.diagnose_text("", source="job-42")
    with pytest.raises(OomdoctorError, match="binary"):
        oomdoctor.diagnose_text(b"\x00\x01\x02" * 2000)
    assert issubclass(oomdoctor.OomdoctorError, Exception)


def test_a_preloaded_ruleset_gives_the_same_report():
    rules = oomdoctor.RuleSet.load()
    for path in FIXTURES[:4]:
        assert oomdoctor.diagnose_path(path, rules=rules) == oomdoctor.diagnose_path(path)
    only_packs = oomdoctor.RuleSet.load([], include_default=False)
    assert oomdoctor.diagnose_path(FIXTURES[0], rules=only_packs).diagnoses == ()


def test_reports_and_rulesets_pickle():
    for path in FIXTURES:
        report = oomdoctor.diagnose_path(path)
        back = pickle.loads(pickle.dumps(report))
        assert back == report and back.to_json() == report.to_json()
    rules = oomdoctor.RuleSet.load()
    assert pickle.loads(pickle.dumps(rules)) == rules


def test_reports_are_immutable():
    report = oomdoctor.diagnose_path(FIXTURES[0])
    with pytest.raises(ValidationError):
        report.events = ()  # type: ignore[misc]


def test_threads_give_the_sequential_results():
    rules = oomdoctor.RuleSet.load()
    expected = {p: oomdoctor.diagnose_path(p).to_json() for p in FIXTURES}
    jobs = FIXTURES * 3
    with ThreadPoolExecutor(max_workers=4) as pool:
        shared = list(pool.map(lambda p: oomdoctor.diagnose_path(p, rules=rules).to_json(), jobs))
        fresh = list(pool.map(lambda p: oomdoctor.diagnose_text(read(p), source=p).to_json(), jobs))
    assert shared == [expected[p] for p in jobs]
    assert fresh == [expected[p] for p in jobs]


def test_import_is_light_and_never_imports_torch():
    code = ("import sys, oomdoctor\n"
            "light = sorted(m for m in sys.modules if m.startswith(('oomdoctor', 'pydantic', 'torch', 'jinja2')))\n"
            f"r = oomdoctor.diagnose_path({FIXTURES[0]!r})\n"
            "print(light, 'torch' in sys.modules, len(r.diagnoses) > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, check=False)
    assert out.stdout.strip() == "['oomdoctor'] False True", out.stderr


def test_public_names():
    assert {"diagnose_text", "diagnose_paths", "diagnose_path", "Report", "RuleSet"} <= set(oomdoctor.__all__)
    assert set(oomdoctor.__all__) <= set(dir(oomdoctor))
    with pytest.raises(AttributeError):
        oomdoctor.no_such_name  # noqa: B018


def test_notebook_html_is_a_self_contained_summary():
    report = oomdoctor.diagnose_path(FIXTURES[0])
    html = report._repr_html_()
    assert html.startswith('<div class="oomdoctor-report"') and html.endswith("</div>")
    assert "<script" not in html and "<style" not in html and "http" not in html.split("</table>")[0]
    assert report.diagnoses[0].title.replace('"', "&quot;") in html
    assert "14.06 GiB" in html and "fixtures/reconstructed/b-vadr1-rank2-frag-elastic.log:1" in html
    assert "expandable-segments" in html
    empty = oomdoctor.diagnose_text("all good\n")._repr_html_()
    assert "no out-of-memory failure found" in empty


def test_summary_escapes_log_text():
    report = oomdoctor.diagnose_text("<script>alert(1)</script>\nRuntimeError: CUDA error: out of memory\n",
                                     source="<b>evil</b>.log")
    html = report._repr_html_()
    assert "<script>" not in html and "<b>evil" not in html and "&lt;b&gt;evil" in html


def test_to_html_is_the_cli_html():
    path = FIXTURES[0]
    assert oomdoctor.diagnose_path(path).to_html() == cli("diagnose", path, "--format", "html")
