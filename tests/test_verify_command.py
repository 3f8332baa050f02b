"""verify's config handling, exit codes, JSON contract and trial isolation."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oomdoctor.units import GIB, MIB
from oomdoctor.verify import command, config, runner

# Trials run in a subprocess that imports torch: without it they can only report its absence.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="verify trials need torch")

TINY = "{layers: 2, width: 256, heads: 4, vocab: 8192, seq_len: 256, batch: 8}"


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def bad(tmp_path, capsys, text: str) -> str:
    assert command.run(write(tmp_path, text)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("tip: ")
    return lines[0]


def test_unknown_key_names_file_and_line(tmp_path, capsys):
    line = bad(tmp_path, capsys, """
        workload: {model: transformer}
        memory:
          limit: 24GiB
          limt: 3
        """)
    assert line.startswith(f"{tmp_path / 'cfg.yaml'}:4: memory.limt")


def test_unknown_fix_id_points_at_the_item(tmp_path, capsys):
    line = bad(tmp_path, capsys, """
        workload: {model: transformer}
        memory: {limit: 24GiB}
        fixes:
          - halve-batch
          - buy-a-bigger-gpu
        """)
    assert ":5: fixes.1: unknown fix id 'buy-a-bigger-gpu'" in line


def test_bad_transformer_param_points_into_params(tmp_path, capsys):
    line = bad(tmp_path, capsys, """
        workload:
          model: transformer
          params:
            layers: 2
            widht: 64
        memory: {limit: 24GiB}
        """)
    assert ":5: workload.params.widht" in line


@pytest.mark.parametrize("text,where,what", [
    ("workload: {model: transformer}\nmemory: {limit: lots}\n", ":2:", "not a size"),
    ("workload: {model: transformer}\nmemory: {limit: 1GiB}\nalloc_conf: max_split_size_mb:4\n", ":3:", "too small"),
    ("workload: {model: transformer}\nmemory: {limit: 1GiB}\nphase: warmup\n", ":3:", "phase"),
    ("workload: {entry: nocolon}\nmemory: {limit: 1GiB}\n", ":1:", "entry"),
    ("workload: {model: transformer}\nmemory: {limit: 1GiB, diagnosis: d.json}\n", ":2:", "exactly one"),
    ("workload: [\n", ":2:", "not valid YAML"),
    ("workload: {model: transformer}\nmemory: {limit: 80}\n", ":2:", "did you mean 80GiB"),
    ("workload: {model: transformer}\nmemory: {limit: '80'}\n", ":2:", "has no unit"),
    ("workload: {model: transformer}\nmemory: {limit: 80 GB}\n", ":2:", "ambiguous"),
    ("workload: {model: transformer}\nmemory: {limit: 0GiB}\n", ":2:", "0 bytes"),
    ("workload: {model: transformer}\nmemory: {limit: -1GiB}\n", ":2:", "negative"),
    ("workload: {model: transformer}\nmemory: {limit: 300MiB}\n", ":2:", "leaves nothing"),
    ("workload: {model: transformer}\nmemory: {limit: 1GiB}\ntimeout: .inf\n", ":3:", "timeout"),
    ("workload: {entry: missing_step.py:make}\nmemory: {limit: 1GiB}\n", ":1:", "no such file"),
    ("workload: {model: transformer}\nmemory: {limit: 1GiB}\ncublas_workspace_config: '4096'\n", ":3:", ":SIZE:COUNT"),
])
def test_bad_values(tmp_path, capsys, text, where, what):
    line = bad(tmp_path, capsys, text)
    assert where in line and what in line


def test_missing_config_file(tmp_path, capsys):
    assert command.run(tmp_path / "nope.yaml") == 2
    assert "cannot read config" in capsys.readouterr().err


def _diagnosis(tmp_path: Path) -> Path:
    doc = {"version": "0.1.0", "events": [{
        "kind": "cuda_oom", "total_bytes": 24 * GIB, "reserved_bytes": 20 * GIB,
        "process_in_use_bytes": 20 * GIB + 300 * MIB,
        "other_processes": [{"pid": 7, "bytes": 2 * GIB}], "message": "CUDA out of memory."}],
        "diagnoses": [{"rule": "r", "category": "capacity", "confidence": 0.9, "title": "t", "evidence": [],
                       "fixes": [{"id": "gradient-checkpointing", "title": "", "changes": {}},
                                 {"id": "free-other-process", "title": "", "changes": {}},
                                 {"id": "halve-batch", "title": "", "changes": {}}]}]}
    path = tmp_path / "diag.json"
    path.write_text(json.dumps(doc))
    return path


def test_memory_and_fixes_from_diagnosis(tmp_path):
    _diagnosis(tmp_path)
    res = config.load(write(tmp_path, "workload: {model: transformer}\nmemory: {diagnosis: diag.json}\n"))
    assert res.capacity_bytes == 22 * GIB  # total minus the other process
    assert res.non_pytorch_bytes == 300 * MIB  # this process's in-use minus PyTorch's reserved
    assert res.fixes == ["gradient-checkpointing", "halve-batch"] and res.fixes_from == "diagnosis"


def test_diagnosis_event_index_out_of_range(tmp_path, capsys):
    _diagnosis(tmp_path)
    line = bad(tmp_path, capsys, "workload: {model: transformer}\nmemory: {diagnosis: diag.json, event: 3}\n")
    assert ":2: memory.event" in line


def test_default_fixes_by_phase(tmp_path):
    res = config.load(write(tmp_path, "workload: {model: transformer}\nmemory: {limit: 1GiB}\nphase: eval\n"))
    assert res.fixes[0] == "eval-no-grad" and res.fixes_from == "default"


def test_command_module_does_not_import_torch():
    code = "import sys, oomdoctor.verify.command; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "False", out.stderr


@needs_torch
def test_baseline_ooms_and_a_fix_fits_json_contract(tmp_path, capsys):
    cfg = write(tmp_path, f"""
        workload:
          model: transformer
          params: {TINY}
        device: sim
        memory: {{limit: 300MiB, non_pytorch: 0}}
        fixes: [halve-batch, free-other-process]
        """)
    out = tmp_path / "out.json"
    assert command.run(cfg, fmt="json", output=out) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(out.read_text())
    assert doc["device"] == "sim" and doc["capacity_bytes"] == 300 * MIB
    base, halve, other = doc["trials"]
    for t in doc["trials"]:
        assert {"fix", "oom", "peak_allocated_bytes", "peak_reserved_bytes", "seconds"} <= set(t)
    assert base["fix"] == "baseline" and base["oom"] is True
    assert base["message"].startswith("CUDA out of memory. Tried to allocate")
    assert halve["oom"] is False and halve["fits"] and halve["headroom_bytes"] > 0
    assert halve["params"]["batch"] == 4 and halve["params"]["grad_accum"] == 2 and halve["effective_batch"] == 8
    assert other["verifiable"] is False and other["oom"] is None and "not something" in other["error"]


@needs_torch
def test_crashing_entry_point_is_reported_not_fatal(tmp_path, capsys):
    (tmp_path / "crash.py").write_text("import os\ndef make(params, device):\n    os.abort()\n")
    cfg = write(tmp_path, """
        workload: {entry: crash.py:make, params: {batch: 2}}
        device: sim
        memory: {limit: 1GiB}
        fixes: [expandable-segments, gradient-checkpointing]
        """)
    assert command.run(cfg, fmt="json") == 1
    doc = json.loads(capsys.readouterr().out)
    base, exp, ckpt = doc["trials"]
    assert "exited with status" in base["error"] and "exited with status" in exp["error"]
    assert ckpt["verifiable"] is False and "gradient_checkpointing" in ckpt["error"]


@needs_torch
def test_trial_timeout_is_reported(tmp_path):
    (tmp_path / "slow.py").write_text("import time\ndef make(params, device):\n    time.sleep(60)\n")
    spec = {"device": "sim", "phase": "train", "steps": 1, "capacity_bytes": GIB, "base_dir": str(tmp_path),
            "workload": {"kind": "entry", "entry": "slow.py:make", "params": {}}}
    out = runner.run_trial(spec, timeout=4)
    assert out["error"] == "timed out after 4 s"


def test_max_batch_bisection(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from oomdoctor.verify.trial import run_sim
    monkeypatch.setattr(runner, "run_trial", lambda spec, timeout: run_sim(spec))  # in-process: fast
    res = config.load(write(tmp_path, f"""
        workload: {{model: transformer, params: {TINY}}}
        memory: {{limit: 260MiB, non_pytorch: 0}}
        steps: 1
        """))
    out = runner.max_batch(res, "sim")
    best = out["max_batch"]
    assert 1 <= best < 8
    assert out["grad_accum"] * best >= 8
    limit = 260 * MIB * (1 - res.config.margin)

    def peak(batch):
        spec = runner.spec_for(res, "sim", runner.fixmod.Variant({**runner.base_variant(res).params,
                                                                  "batch": batch}, ""))
        r = run_sim(spec)
        return r["oom"] or r["peak_reserved_bytes"] > limit
    assert not peak(best) and peak(best + 1)


def test_cuda_requested_without_gpu_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "detect_device", lambda requested: "sim" if requested == "auto" else requested)
    cfg = write(tmp_path, "workload: {model: transformer}\nmemory: {limit: 1GiB}\ndevice: cuda\n")
    assert command.run(cfg) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{cfg}:3: device cuda requested") and err[1].startswith("tip: ")


def test_cli_user_errors_exit_2_before_any_trial(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from oomdoctor.cli import app

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("workload: {model: transformer}\nmemory: {limit: 1GiB}\n")
    r = CliRunner().invoke(app, ["verify", "-c", str(cfg), "-o", str(tmp_path / "no" / "out.json")])
    assert r.exit_code == 2 and "does not exist" in r.output and "verify:" not in r.output
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    r = CliRunner().invoke(app, ["verify", "-c", str(cfg)])
    assert r.exit_code == 2 and "needs PyTorch" in r.output and "tip:" in r.output
    r = CliRunner().invoke(app, ["verify", "-c", str(cfg), "--format", "html"])
    assert r.exit_code == 2


def test_table_fits_80_columns_and_names_the_best_fix():
    import io

    doc = {"device": "sim", "capacity_bytes": 24 * GIB, "non_pytorch_bytes": 512 * MIB, "phase": "train", "trials": [
        {"fix": "baseline", "oom": True, "peak_reserved_bytes": 30 * GIB, "seconds": 4.2},
        {"fix": "gradient-checkpointing", "oom": False, "fits": True, "peak_reserved_bytes": 14 * GIB,
         "headroom_bytes": 9 * GIB, "relative_time": 1.31, "changes": {"checkpointing": [False, True]}},
        {"fix": "lower-gpu-memory-utilization", "verifiable": False, "error": "not something a step replay can test"},
        {"fix": "expandable-segments", "oom": True, "fits": False, "peak_reserved_bytes": 29 * GIB, "relative_time": 1.0},
    ]}
    for width in (80, 200):
        buf = io.StringIO()
        command.render_table(doc, stream=buf, width=width)
        out = buf.getvalue()
        assert all(len(line) <= width for line in out.splitlines())
        assert "lower-gpu-memory-utilization" in out and "gradient-checkpointing" in out
        assert "best fix: gradient-checkpointing (9.00 GiB headroom)" in out


def test_progress_line_per_trial():
    assert command.progress_line("halve-batch", {"oom": False, "peak_reserved_bytes": 20 * GIB, "seconds": 3.21}) == (
        "  halve-batch: fits, peak reserved 20.00 GiB (3.2 s)")
    assert "error: timed out" in command.progress_line("x", {"error": "timed out after 5 s"})


@needs_torch
def test_a_fit_with_under_5_percent_headroom_is_marginal_not_a_fit(tmp_path, capsys):
    def trials(limit: int) -> dict:
        cfg = write(tmp_path, f"""
            workload:
              model: transformer
              params: {TINY}
            device: sim
            memory: {{limit: {limit} bytes, non_pytorch: 0}}
            fixes: [halve-batch]
            """)
        code = command.run(cfg, fmt="json")
        return {t["fix"]: t for t in json.loads(capsys.readouterr().out)["trials"]} | {"code": code}

    first = trials(260 * MIB)
    peak = first["halve-batch"]["peak_reserved_bytes"]
    roomy, tight = trials(int(peak / 0.9)), trials(int(peak / 0.97))
    assert roomy["halve-batch"]["fits"] is True and not roomy["halve-batch"].get("marginal")
    assert tight["halve-batch"]["fits"] is False and tight["halve-batch"]["marginal"] is True
    assert tight["code"] == 1  # only a marginal fit: not fixed


def test_max_batch_predicts_from_two_probes_and_confirms(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from oomdoctor.verify.trial import run_sim

    calls: list[int] = []

    def trial(spec, timeout):
        calls.append(spec["workload"]["params"]["batch"])
        return run_sim(spec)

    monkeypatch.setattr(runner, "run_trial", trial)
    res = config.load(write(tmp_path, f"""
        workload: {{model: transformer, params: {TINY}}}
        memory: {{limit: 1GiB, non_pytorch: 0}}
        steps: 1
        """))
    out = runner.max_batch(res, "sim")
    best = out["max_batch"]
    assert best > 16  # far from the configured batch of 8: bisection from 8 would take 8 or more trials
    assert out["trials"] == len(calls) <= 6, calls
    limit = 1024 * MIB * (1 - res.config.margin)
    for batch, fits_expected in ((best, True), (best + 1, False)):
        v = runner.fixmod.Variant({**runner.base_variant(res).params, "batch": batch}, "")
        r = run_sim(runner.spec_for(res, "sim", v))
        assert (not r["oom"] and r["peak_reserved_bytes"] <= limit) is fits_expected, batch


@needs_torch
def test_allocator_only_fixes_replay_the_baseline_trace_with_the_same_result(tmp_path, monkeypatch):
    # expandable segments / max split size change only the allocator: on the simulator they are the baseline's
    # storage trace replayed, and must equal what re-running the model under those settings gives
    cfg = write(tmp_path, f"""
        workload:
          model: transformer
          params: {TINY}
        device: sim
        memory: {{limit: 300MiB, non_pytorch: 0}}
        fixes: [expandable-segments, max-split-size, halve-batch]
        """)
    res = config.load(cfg)
    started = []
    real = runner.run_trial
    monkeypatch.setattr(runner, "run_trial", lambda spec, timeout: started.append(spec["alloc_conf"]) or real(spec, timeout))
    rows = runner.run_all(res, "sim", jobs=1)
    assert len(started) == 2  # the baseline and halve-batch ran the model; the allocator fixes did not
    assert [r["fix"] for r in rows] == ["baseline", "expandable-segments", "max-split-size", "halve-batch"]
    assert rows[1].get("from_baseline_trace") and rows[2].get("from_baseline_trace")
    assert "_trace" not in rows[0]
    monkeypatch.setattr(runner, "allocator_only", lambda v, base: False)  # re-run everything
    again = runner.run_all(res, "sim", jobs=1)
    for reused, rerun in zip(rows[1:3], again[1:3]):
        for key in ("oom", "peak_allocated_bytes", "peak_reserved_bytes", "headroom_bytes", "fits",
                    "unlimited_peak_allocated_bytes", "flops", "message"):
            assert reused.get(key) == rerun.get(key), key


def test_a_damaged_trace_file_is_not_read(tmp_path):
    from oomdoctor.verify.trial import read_trace, write_trace

    path = tmp_path / "t.bin"
    write_trace(str(path), [("a", 1, 512), ("f", 1, 512)])
    assert read_trace(path, 1024) == [("a", 1, 512), ("f", 1, 512)]
    assert read_trace(path, 16) is None  # over the size bound
    path.write_bytes(path.read_bytes()[:-3])
    assert read_trace(path, 1024) is None
    path.write_bytes((7).to_bytes(8, "little") * 3)
    assert read_trace(path, 1024) is None
    assert read_trace(tmp_path / "missing.bin", 1024) is None
