"""verify --from: the replay config built from a failed run's log, with every assumption listed."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from oomdoctor.cli import app
from oomdoctor.verify.fromlog import build

ROOT = Path(__file__).resolve().parents[1]


def test_config_carries_the_runs_facts_and_names_its_assumptions():
    config, notes = build(str(ROOT / "fixtures/synthetic/syn-lora-eval-spike-8xa100.log"))
    p = config["workload"]["params"]
    assert (p["batch"], p["grad_accum"], p["eval_batch"], p["autocast"], p["lora_rank"]) == (4, 4, 8, "bfloat16", 16)
    assert config["phase"] == "eval" and config["memory"]["limit"] == "81050MiB"
    assert "smaller-eval-batch" in config["fixes"]
    assert any(n.startswith("seq_len: not in the log, assumed") for n in notes)


def test_write_config_then_stop(tmp_path):
    out = tmp_path / "cfg.yaml"
    r = CliRunner().invoke(app, ["verify", "--from", str(ROOT / "fixtures/synthetic/syn-first-step-batch.log"),
                                 "--write-config", str(out)])
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load(out.read_text())
    assert cfg["workload"]["model"] == "transformer" and cfg["memory"]["limit"].endswith("MiB")
    from oomdoctor.verify.config import load

    assert load(out).capacity_bytes > 0  # the written config is valid as it stands


def test_from_needs_a_gpu_oom_and_excludes_config(tmp_path):
    log = tmp_path / "host.log"
    log.write_text("Killed\n")
    r = CliRunner().invoke(app, ["verify", "--from", str(log)])
    assert r.exit_code == 2 and "no GPU out-of-memory event" in r.output
    r = CliRunner().invoke(app, ["verify", "--from", str(log), "--config", str(log)])
    assert r.exit_code == 2 and "exactly one" in r.output
