"""oomdoctor scan: one row per job, a summary, and unreadable files reported without stopping the scan."""

from __future__ import annotations

import json

from test_cli import OOM, run


def _folder(tmp_path):
    (tmp_path / "job1").mkdir()
    (tmp_path / "job1" / "rank0.log").write_text("step 10 loss 0.5\n" + OOM)
    (tmp_path / "job2.log").write_text("step 1 loss 0.5\nstep 2 loss 0.4\ntraining finished\n")
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "model.bin.log").write_bytes(b"\x7fELF\x00\x00\x00" + bytes(range(256)) * 8)
    (tmp_path / "job1" / "config.yaml").write_text("lr: 1e-4\n")  # not a log: skipped
    (tmp_path / ".hidden.log").write_text(OOM)  # hidden: skipped
    return tmp_path


def test_jsonl_rows_for_every_job_and_unreadable_ones_do_not_stop_the_scan(tmp_path):
    folder = _folder(tmp_path)
    r = run("scan", str(folder), "--format", "jsonl")
    rows = [json.loads(line) for line in r.stdout.decode().splitlines()]
    by_name = {row["path"].rsplit("/", 1)[-1]: row for row in rows}
    assert sorted(by_name) == ["empty.log", "job2.log", "model.bin.log", "rank0.log"]
    assert by_name["rank0.log"]["status"] == "oom" and by_name["rank0.log"]["first_fix"]
    assert by_name["job2.log"]["status"] == "no_oom"
    assert by_name["empty.log"]["status"] == by_name["model.bin.log"]["status"] == "error"
    assert r.returncode == 2  # unreadable files are said at the end, after every job ran
    assert b"empty.log" in r.stderr and b"(skipped)" in r.stderr


def test_parallel_jobs_give_the_same_rows_and_the_summary_counts_them(tmp_path):
    folder = _folder(tmp_path)
    one = run("scan", str(folder), "--format", "json", "--jobs", "1")
    two = run("scan", str(folder), "--format", "json", "--jobs", "2")
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert sorted(a["jobs"], key=lambda r: r["path"]) == sorted(b["jobs"], key=lambda r: r["path"])
    s = a["summary"]
    assert (s["jobs"], s["oom_jobs"], s["no_oom_jobs"], len(s["unreadable"])) == (4, 1, 1, 2)
    table = run("scan", str(folder)).stdout.decode()
    assert table.startswith("4 job(s): 1 OOM, 1 without OOM, 2 unreadable")


def test_a_glob_that_matches_nothing_is_a_usage_error(tmp_path):
    r = run("scan", str(tmp_path / "*.nothing"))
    assert r.returncode == 2 and b"no file matches" in r.stderr
