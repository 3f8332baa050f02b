"""Output files: never over an input, written whole or not at all, a full disk is an error, not exit 0."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from test_cli import OOM, run

from oomdoctor.errors import OomdoctorError
from oomdoctor.outfile import check_output, write_atomic


def test_output_equal_to_the_log_is_refused_and_the_log_kept(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(OOM)
    r = run("diagnose", str(log), "-o", str(log))
    assert r.returncode == 2
    assert b"is also an input" in r.stderr and b"Traceback" not in r.stderr
    assert log.read_text() == OOM


def test_output_reaching_the_log_through_a_link_is_refused(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(OOM)
    (tmp_path / "alias.txt").symlink_to(log)
    with pytest.raises(OomdoctorError, match="is also an input"):
        check_output(tmp_path / "alias.txt", [str(log)])
    check_output(tmp_path / "report.txt", [str(log), "-"])  # a different file, and stdin, are fine


def test_verify_output_equal_to_its_config_is_refused(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model: {kind: mlp}\n")
    r = run("verify", "--config", str(cfg), "-o", str(cfg))
    assert r.returncode == 2 and b"is also an input" in r.stderr
    assert cfg.read_text() == "model: {kind: mlp}\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.txt"
    target.write_text("previous report\n")

    def full(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OomdoctorError, match="No space left"):
        write_atomic(target, "new report\n" * 1000)
    assert target.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]


def test_write_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    target = tmp_path / "report.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_behind_stdout_is_an_error_not_success(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(OOM)
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(log)], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "cannot write the report to standard output: No space left on device" in r.stderr
    assert "Traceback" not in r.stderr
