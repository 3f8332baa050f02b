"""The capture hook: a training script's OOM leaves a record, the trainer callbacks add step and phase, diagnose reads it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_cli import OOM, run

torch = pytest.importorskip("torch")

SCENARIOS = Path(__file__).with_name("capture_scenarios.py")
MESSAGE = OOM.split("torch.OutOfMemoryError: ", 1)[1].strip()  # PyTorch 2.x's message, 320 MiB on GPU 3


def _events(path) -> list[dict]:
    r = run("diagnose", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["events"]


def test_an_uncaught_oom_leaves_a_record_that_diagnose_reads(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        import oomdoctor.capture

        hook = oomdoctor.capture.install(out_dir={str(tmp_path / "reports")!r})
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(1, 6):
            hook.set(step=step, phase="train")
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            if step == 3:  # injected: the failure a 24 GiB card would give at this step
                raise torch.OutOfMemoryError({MESSAGE!r})
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in r.stderr  # the program's own traceback still prints
    assert r.stderr.count("oomdoctor.capture: no CUDA device") == 1
    records = sorted((tmp_path / "reports").glob("oom-*.json"))
    assert len(records) == 1
    doc = json.loads(records[0].read_text())
    assert (doc["format"], doc["version"], doc["step"], doc["phase"]) == ("oomdoctor-record", 1, 3, "train")
    assert doc["versions"]["torch"] == torch.__version__ and doc["oom"] is None  # no observer without CUDA
    (event,) = _events(records[0])
    assert (event["kind"], event["step"], event["phase"], event["gpu_index"]) == ("cuda_oom", 3, "train", 3)
    assert event["requested_bytes"] == 320 * 2**20 and event["reserved_unallocated_bytes"] > 0


def _observed(tmp_path, monkeypatch, largest_free: int):
    from oomdoctor import capture

    state = {"gpu": {"name": "NVIDIA A100-SXM4-80GB", "total_bytes": 85_000_000_000},
             "segments": {"count": 40, "reserved_bytes": 84_000_000_000, "allocated_bytes": 76_000_000_000,
                          "inactive_bytes": 8_000_000_000, "largest_free_block_bytes": largest_free,
                          "stranded_bytes": 7_500_000_000, "expandable_segments": False},
             "top_allocations": [{"frame": "train.py:41 forward", "bytes": 30_000_000_000, "count": 96}]}
    monkeypatch.setattr(capture, "_cuda_state", lambda device, history: state)
    hook = capture.Capture(tmp_path / "reports", history=True)
    hook.set(step=50, phase="train", args={"per_device_train_batch_size": 8})
    hook.observe(0, 1_000_000_000, 76_000_000_000, 300_000_000)
    path = hook.record(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 953.67 MiB"))
    assert path is not None and hook.records == [path]  # the observer's record got the message: one file
    return json.loads(path.read_text()), path


def test_the_observer_records_the_allocator_state_and_the_rules_measure_fragmentation(tmp_path, monkeypatch):
    doc, path = _observed(tmp_path, monkeypatch, largest_free=200_000_000)
    assert doc["oom"] == {"device": 0, "requested_bytes": 1_000_000_000, "device_allocated_bytes": 76_000_000_000,
                          "device_free_bytes": 300_000_000}
    assert doc["message"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    r = run("diagnose", str(path), "--format", "json")
    out = json.loads(r.stdout)
    (event,) = out["events"]
    assert (event["step"], event["phase"], event["total_bytes"], event["reserved_bytes"]) == (
        50, "train", 85_000_000_000, 84_000_000_000)
    first = out["diagnoses"][0]
    assert (first["category"], first["rule"]) == ("fragmentation", "snapshot-free-blocks-too-small")


def test_a_free_block_that_would_have_held_the_request_is_not_called_fragmentation(tmp_path, monkeypatch):
    _, path = _observed(tmp_path, monkeypatch, largest_free=2_000_000_000)
    rules = {d["rule"] for d in json.loads(run("diagnose", str(path), "--format", "json").stdout)["diagnoses"]}
    assert "snapshot-free-blocks-too-small" not in rules


def test_the_hook_never_raises_into_training(tmp_path, monkeypatch):
    from oomdoctor import capture

    def broken(device, history):
        raise RuntimeError("driver gone")

    monkeypatch.setattr(capture, "_cuda_state", broken)
    hook = capture.Capture(tmp_path / "reports")
    with pytest.warns(RuntimeWarning, match="could not record the OOM"):
        hook.observe(0, 1, 2, 3)
    assert hook.record(ValueError("not memory")) is None  # other errors are not recorded
    with pytest.raises(ValueError):
        hook.set(phase="warmup")


def test_a_damaged_or_future_record_is_refused_with_exit_2(tmp_path):
    bad = tmp_path / "oom.json"
    bad.write_text('{"format": "oomdoctor-record", "version": 1, "message": "CUDA out of')
    r = run("diagnose", str(bad))
    assert r.returncode == 2 and b"damaged post-mortem record" in r.stderr
    bad.write_text('{"format": "oomdoctor-record", "version": 9}')
    r = run("diagnose", str(bad))
    assert r.returncode == 2 and b"record version 9" in r.stderr


def _scenario(tmp_path, *argv: str) -> dict:
    """Run a trainer scenario in its own interpreter (a trainer's backward would set up autograd before the
    simulated device registers, for the tests that follow) and return its one record."""
    r = subprocess.run([sys.executable, str(SCENARIOS), *argv, str(tmp_path / "reports")], capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = sorted((tmp_path / "reports").glob("oom-*.json"))
    return json.loads(path.read_text()) | {"path": path}


def test_hf_trainer_callback_marks_an_evaluation_oom(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    doc = _scenario(tmp_path, "hf")
    assert (doc["step"], doc["phase"]) == (4, "eval")
    assert doc["args"]["per_device_train_batch_size"] == 2 and doc["args"]["eval_steps"] == 4
    (event,) = _events(doc["path"])
    assert (event["step"], event["phase"], event["requested_bytes"]) == (4, "eval", 320 * 2**20)


@pytest.mark.parametrize(("fail_in", "step", "phase"), [("train", 1, "train"), ("eval", 3, "eval")])
def test_lightning_callback_records_the_oom_lightning_catches(tmp_path, fail_in, step, phase):
    pytest.importorskip("lightning")
    doc = _scenario(tmp_path, "lightning", fail_in)
    assert (doc["step"], doc["phase"], doc["args"]) == (step, phase, {"batch_size": 2})


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_cuda_oom_is_recorded_by_the_observer(tmp_path):
    # 500 × 2 MiB live in 100 segments of 20 MiB, 1000 MiB free in 2 MiB holes: a 160 MiB segment does not fit
    # under the 2 GiB fraction and no segment is wholly free to release, so the allocator fails.
    doc = _scenario(tmp_path, "cuda")
    assert doc["oom"]["requested_bytes"] == 160 * 2**20
    assert "CUDA out of memory. Tried to allocate 160.00 MiB." in doc["message"]
    assert doc["memory_stats"]["allocated_bytes.all.current"] == 500 * 2 * 2**20
    assert doc["memory_stats"]["reserved_bytes.all.current"] == 100 * 20 * 2**20
    (event,) = _events(doc["path"])
    assert event["kind"] == "cuda_oom" and event["requested_bytes"] == 160 * 2**20
    assert (event["allocated_bytes"], event["reserved_unallocated_bytes"]) == (1000 * 2**20, 1000 * 2**20)


FRAGMENTING_SCRIPT = """
import torch
import oomdoctor.capture
from oomdoctor.verify.simgpu import simulate

MIB = 2**20
hook = oomdoctor.capture.install(out_dir={out!r}, history=True)
with simulate("800MiB", alloc_conf={conf!r}, history=True) as gpu:
    scratch = torch.empty(600 * MIB, dtype=torch.uint8, device=gpu)
    del scratch  # one 600 MiB segment, cached
    kept, dropped = [], []
    for i in range(20):  # split into 30 MiB blocks
        (kept if i % 2 else dropped).append(torch.empty(30 * MIB, dtype=torch.uint8, device=gpu))
    dropped.clear()  # every other one freed: 300 MiB free, in 30 MiB holes between live blocks
    hook.set(step=7, phase="train")
    big = torch.empty(250 * MIB, dtype=torch.uint8, device=gpu)
print("fits")
"""


@pytest.mark.parametrize("conf", ["", "expandable_segments:True"])
def test_a_script_on_the_simulated_gpu_meets_its_oom_and_the_record_measures_fragmentation(tmp_path, conf):
    # Issue 13: the one-line hook in a script run on the simulated device until it OOMs. The failing allocation
    # raises in the script itself; the record holds the allocator model's segments and the allocating stacks.
    pytest.importorskip("torch._subclasses.fake_tensor")
    script = tmp_path / "train.py"
    script.write_text(FRAGMENTING_SCRIPT.format(out=str(tmp_path / "reports"), conf=conf))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    records = sorted((tmp_path / "reports").glob("oom-*.json"))
    if conf:  # expandable segments map the 250 MiB into the free space: the what-if model's answer, lived
        assert r.returncode == 0 and "fits" in r.stdout and records == [], r.stderr
        return
    assert r.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 250.00 MiB" in r.stderr
    (record,) = records
    doc = json.loads(record.read_text())
    seg = doc["segments"]
    assert (seg["reserved_bytes"], seg["allocated_bytes"], seg["largest_free_block_bytes"], seg["stranded_bytes"]) == (
        600 * 2**20, 300 * 2**20, 30 * 2**20, 300 * 2**20)
    assert doc["top_allocations"][0]["frame"].endswith("train.py:13 <module>")
    assert doc["oom"]["requested_bytes"] == 250 * 2**20 and (doc["step"], doc["phase"]) == (7, "train")
    d = json.loads(run("diagnose", str(record), "--format", "json").stdout)
    first = d["diagnoses"][0]
    assert (first["rule"], first["category"]) == ("snapshot-free-blocks-too-small", "fragmentation")


def test_simulate_gives_torch_back_as_it_was():
    pytest.importorskip("torch._subclasses.fake_tensor")
    from oomdoctor.verify.simgpu import simulate

    before = (torch.nn.Module.to, torch.nn.Module.cuda, torch.tensor)
    with simulate("1GiB") as gpu:
        model = torch.nn.Linear(4, 4)
        assert model.to(gpu) is model  # a no-op on the simulator (patched here, or by an earlier in-process replay)
    assert (torch.nn.Module.to, torch.nn.Module.cuda, torch.tensor) == before
    assert torch.nn.Linear(2, 2).to("cpu").weight.device.type == "cpu"


def test_a_record_written_on_a_real_h200_reads_back():
    # written by capture_scenarios.py cuda on an H200 (torch 2.11, 2026-11-27): the observer's figures, the
    # message with its memory-fraction clause, the segment summary and the recorded stacks
    path = Path(__file__).with_name("records") / "h200-fragmentation-2gib-fraction.json"
    (event,) = _events(path)
    assert (event["kind"], event["requested_bytes"], event["allowed_bytes"]) == ("cuda_oom", 160 * 2**20, 2 * 2**30)
    assert event["reserved_unallocated_bytes"] == 1000 * 2**20
    r = run("diagnose", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["diagnoses"][0]["category"] == "fragmentation"
