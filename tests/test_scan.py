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


def _rows(r) -> dict:
    return {row["path"].rsplit("/", 1)[-1]: row for row in map(json.loads, r.stdout.decode().splitlines())}


def test_include_exclude_and_since_select_the_files(tmp_path):
    import os
    import time

    folder = _folder(tmp_path)
    assert sorted(_rows(run("scan", str(folder), "-f", "jsonl", "--include", "rank*.log"))) == ["rank0.log"]
    assert "empty.log" not in _rows(run("scan", str(folder), "-f", "jsonl", "--exclude", "empty*"))
    old = time.time() - 10 * 86400
    for name in ("job2.log", "empty.log", "model.bin.log"):
        os.utime(folder / name, (old, old))
    assert sorted(_rows(run("scan", str(folder), "-f", "jsonl", "--since", "7d"))) == ["rank0.log"]
    r = run("scan", str(folder), "--since", "last tuesday")
    assert r.returncode == 2 and b"neither an age nor a date" in r.stderr


def test_group_by_makes_the_ranks_of_one_job_a_single_job(tmp_path):
    (tmp_path / "job7-rank0.log").write_text("step 3 loss 0.5\n")
    (tmp_path / "job7-rank1.log").write_text("step 3 loss 0.5\n[rank1]: " + OOM)
    (tmp_path / "job8-rank0.log").write_text("step 3 loss 0.5\n")
    rows = [json.loads(line) for line in run("scan", str(tmp_path), "-f", "jsonl", "--group-by", r"rank\d+")
            .stdout.decode().splitlines()]
    by_path = {r["path"].rsplit("/", 1)[-1]: r for r in rows}
    assert sorted(by_path) == ["job7-rank*", "job8-rank0.log"]
    assert by_path["job7-rank*"]["status"] == "oom" and len(by_path["job7-rank*"]["files"]) == 2
    r = run("scan", str(tmp_path), "--group-by", "rank(")
    assert r.returncode == 2 and b"not a valid regular expression" in r.stderr


def test_a_state_file_skips_unchanged_logs_and_rereads_changed_ones(tmp_path):
    (tmp_path / "logs").mkdir()
    folder = _folder(tmp_path / "logs")
    state = tmp_path / "scan-state.json"
    first = _rows(run("scan", str(folder), "-f", "jsonl", "--state", str(state)))
    assert not any(r.get("cached") for r in first.values())
    second = _rows(run("scan", str(folder), "-f", "jsonl", "--state", str(state)))
    assert second["rank0.log"]["cached"] and second["job2.log"]["cached"]
    assert not second["empty.log"].get("cached")  # unreadable files are tried again
    (folder / "job2.log").write_text("step 1 loss 0.5\n" + OOM)
    third = _rows(run("scan", str(folder), "-f", "jsonl", "--state", str(state)))
    assert not third["job2.log"].get("cached") and third["job2.log"]["status"] == "oom"
    summary = run("scan", str(folder), "--state", str(state)).stdout.decode()
    assert "unchanged (from the state file)" in summary.splitlines()[0]
    (tmp_path / "bad-state.json").write_text("[1, 2]")
    r = run("scan", str(folder), "--state", str(tmp_path / "bad-state.json"))
    assert r.returncode == 2 and b"not an oomdoctor scan state file" in r.stderr


def test_markdown_summary(tmp_path):
    out = run("scan", str(_folder(tmp_path)), "--format", "markdown").stdout.decode()
    assert out.startswith("**4 job(s): 1 OOM, 1 without OOM, 2 unreadable**")
    assert "| first cause | jobs | share |" in out and "|---|---:|---:|" in out


def test_ray_engine_gives_the_same_rows_as_the_local_scan(tmp_path):
    import pytest

    pytest.importorskip("ray", reason="the [ray] extra is not installed: --engine ray is not tested here")
    folder = _folder(tmp_path)
    (folder / "job3-rank0.log").write_text("step 3 loss 0.5\n")
    (folder / "job3-rank1.log").write_text("step 3 loss 0.5\n[rank1]: " + OOM)
    local = run("scan", str(folder), "-f", "json", "--group-by", r"rank\d+")
    on_ray = run("scan", str(folder), "-f", "json", "--group-by", r"rank\d+", "--engine", "ray")
    assert on_ray.returncode == local.returncode == 2, on_ray.stderr  # the unreadable files, on both
    a, b = json.loads(local.stdout), json.loads(on_ray.stdout)
    assert sorted(a["jobs"], key=lambda r: r["path"]) == sorted(b["jobs"], key=lambda r: r["path"])
    assert a["summary"] == b["summary"]


def test_a_named_pipe_in_the_folder_is_reported_not_waited_on(tmp_path):
    import os

    (tmp_path / "job.log").write_text("step 10 loss 0.5\n" + OOM)
    os.mkfifo(tmp_path / "stream.log")  # nobody writes to it: opening it to read would block forever
    r = run("scan", str(tmp_path), "--format", "jsonl")
    rows = {json.loads(line)["path"].rsplit("/", 1)[-1]: json.loads(line) for line in r.stdout.decode().splitlines()}
    assert rows["job.log"]["status"] == "oom"
    assert rows["stream.log"]["status"] == "error" and "named pipe" in rows["stream.log"]["error"]
    assert r.returncode == 2
