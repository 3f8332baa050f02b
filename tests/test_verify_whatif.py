"""verify --snapshot: a recorded alloc/free trace replayed through the allocator model under other settings."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from test_cli import run

from oomdoctor.verify.whatif import what_if

M = 2**20
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "snapshots"


def fragmenting(device_free: int = 100 * M, pre: bool = False) -> dict:
    """200 MiB cached, split by two 90 MiB blocks, the first freed: a 150 MiB request cannot be placed natively."""
    trace = [{"action": "alloc", "addr": 1000, "size": 200 * M}, {"action": "free_completed", "addr": 1000, "size": 200 * M},
             {"action": "alloc", "addr": 1000, "size": 90 * M}, {"action": "alloc", "addr": 2000, "size": 90 * M},
             {"action": "free_completed", "addr": 1000, "size": 90 * M}]
    if pre:  # a block from before the recording, freed inside it
        trace.insert(0, {"action": "free_completed", "addr": 9000, "size": 4 * M})
    trace.append({"action": "oom", "size": 150 * M, "device_free": device_free})
    blocks = [{"address": 1000, "size": 90 * M, "state": "inactive"},
              {"address": 2000, "size": 90 * M, "state": "active_allocated"},
              {"address": 3000, "size": 20 * M, "state": "inactive"}]
    return {"segments": [{"device": 0, "address": 1000, "total_size": 200 * M, "blocks": blocks}],
            "device_traces": [trace]}


def test_fragmentation_reproduced_natively_and_expandable_segments_fit():
    w = what_if(fragmenting())
    assert w.reproduced and w.capacity_bytes == 300 * M and w.requested_bytes == 150 * M
    result = {t.setting: t.result.oom for t in w.trials}
    assert result == {"as recorded": True, "expandable-segments": False, "max-split-size": False, "gc-threshold": True}


def test_room_on_the_device_means_a_memory_fraction_refused_the_request():
    # 400 MiB free on the device at the failure: the driver would have given a 150 MiB segment, so a cap below the
    # device refused it (seen on an H200 under set_per_process_memory_fraction); the replay caps at the peak held
    w = what_if(fragmenting(device_free=400 * M))
    assert w.reproduced and w.capacity_bytes == 200 * M
    assert any("a cap below the device" in n for n in w.notes)


def test_a_failure_the_model_does_not_reproduce_credits_nothing():
    data = fragmenting()
    data["device_traces"][0].insert(-1, {"action": "free_completed", "addr": 2000, "size": 90 * M})
    w = what_if(data)  # the whole 200 MiB segment is free again: the model places the request and does not fail
    assert not w.reproduced and any("cannot be credited" in n for n in w.notes)


def test_blocks_from_before_the_trace_are_placed_first_and_said():
    w = what_if(fragmenting(pre=True))
    assert w.preexisting_blocks == 1 and any("before the trace began" in n for n in w.notes)
    assert w.reproduced


def test_cli_json_and_exit_codes(tmp_path):
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps(fragmenting()))
    r = run("verify", "--snapshot", str(snap), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["reproduced"] is True and doc["requested_bytes"] == 150 * M
    fits = {t["setting"]: t["fits"] for t in doc["trials"]}
    assert fits == {"as recorded": False, "expandable-segments": True, "max-split-size": True, "gc-threshold": False}
    text = run("verify", "--snapshot", str(snap)).stdout.decode()
    assert "OOM (reproduced)" in text and "would have fit: expandable-segments, max-split-size" in text
    data = fragmenting()
    data["device_traces"][0].pop()  # no oom entry
    snap.write_bytes(pickle.dumps(data))
    r = run("verify", "--snapshot", str(snap))
    assert r.returncode == 2 and b"has no oom entry" in r.stderr


def test_a_real_snapshot_oom_is_reproduced_by_the_model():
    path = SHARED / "Constructor-Sun-code_location-oom-3gpu.pickle"
    if not path.exists():
        pytest.skip("third-party snapshots live in ../shared/data/snapshots")
    from oomdoctor.parse.snapshot import load

    w = what_if(load(path))
    assert (w.device, w.requested_bytes) == (1, 5_308_694_528)
    assert w.reproduced  # the model fails at the very request the real allocator failed on
    assert [t.setting for t in w.trials] == ["as recorded"]  # it already ran with expandable segments


def test_diagnose_of_a_snapshot_ends_with_the_what_if_command(tmp_path):
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps(fragmenting()))
    r = run("diagnose", str(snap))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().rstrip().endswith(f"oomdoctor verify --snapshot {snap} --gpu 0")


def test_the_text_report_fits_80_columns():
    from oomdoctor.verify.whatif import render_text

    text = render_text(what_if(fragmenting(device_free=400 * M)), "snap.pickle")  # the longest note: the inferred cap
    assert "a cap below the device" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80
