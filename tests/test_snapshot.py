"""Memory snapshots: read with a refusing unpickler, summarised to the figures the shared README measured."""

from __future__ import annotations

import pickle
import resource
from pathlib import Path

import pytest

from oomdoctor.parse.snapshot import SnapshotError, loads, read, summarize

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "snapshots"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="third-party snapshots live in ../shared/data/snapshots")

# file -> (reserved, allocated, largest free block) over all devices, as measured in DATA/README.md
MEASURED = {
    "Constructor-Sun-code_location-oom-3gpu.pickle": (114_628_231_168, 28_728_827_904, 27_493_662_720),
    "hlinander-equivariant-posteriors-oom-observer.pickle": (40_691_040_256, 39_293_964_288, 147_062_784),
    "Yiyi-philosophy-LLM-inference-oom-history.pickle": (11_844_714_496, 11_840_159_744, 2_080_768),
    "Wedsonlin-assignment2-systems-medium1024-train.pickle": (25_178_406_912, 6_874_481_152, 268_435_456),
    "cranberrii-ftcourse-snapshot.pickle": (6_471_811_072, 2_297_283_072, 130_023_424),
    "Maphsge4-select_n-snapshot.pickle": (18_566_086_656, 16_199_101_440, 2_097_152_000),
    "volcengine-verl-mem.pickle": (26_189_234_176, 24_916_034_560, 272_629_760),
    "Muduard-LayoutEditing-segment-list.pickle": (3_649_044_480, 3_353_639_424, 31_457_280),
}


@needs_data
@pytest.mark.parametrize("name", sorted(MEASURED))
def test_real_snapshots_match_the_measured_figures(name):
    s = read(DATA / name)
    reserved, allocated, largest = MEASURED[name]
    assert sum(d.reserved_bytes for d in s.devices) == reserved
    assert sum(d.allocated_bytes for d in s.devices) == allocated
    assert max(d.largest_free_block_bytes for d in s.devices) == largest


@needs_data
def test_the_oom_entry_is_found_with_its_request_and_free_memory():
    s = read(DATA / "Constructor-Sun-code_location-oom-3gpu.pickle")
    assert [(o.device, o.requested_bytes, o.device_free_bytes) for o in s.ooms] == [(1, 5_308_694_528, 95_682_560)]


@needs_data
def test_a_snapshot_is_read_within_a_bounded_multiple_of_its_size():
    path = DATA / "Wedsonlin-assignment2-systems-medium1024-train.pickle"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    read(path)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown <= 20 * path.stat().st_size  # Python objects, not the browser viewer's 100x; 2x needs a stream parser


def test_a_pickle_that_names_any_global_is_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(SnapshotError, match=r"names builtins\.print"):
        loads(pickle.dumps(Evil(), protocol=4))
    with pytest.raises(SnapshotError, match="names"):
        loads(pickle.dumps({"segments": [], "x": Path("/")}, protocol=4))


def test_plain_data_that_is_not_a_snapshot_is_refused():
    with pytest.raises(SnapshotError, match="not a CUDA memory snapshot"):
        summarize({"weights": [1, 2, 3]})
    with pytest.raises(SnapshotError, match="not a readable pickle"):
        loads(b"\x80\x04garbage")


def test_stranded_bytes_are_free_blocks_beside_live_ones():
    seg = {"device": 0, "total_size": 100, "blocks": [
        {"size": 60, "state": "active_allocated", "frames": [{"filename": "train.py", "line": 9, "name": "step"}]},
        {"size": 40, "state": "inactive"}]}
    empty = {"device": 0, "total_size": 50, "blocks": [{"size": 50, "state": "inactive"}]}
    (d,) = summarize({"segments": [seg, empty], "device_traces": [[]]}).devices
    assert (d.reserved_bytes, d.allocated_bytes, d.inactive_bytes, d.stranded_bytes, d.largest_free_block_bytes) == (
        150, 60, 90, 40, 50)
    assert d.top_frames[0].frame == "train.py:9 step"


def _fragmented_snapshot(path, request: int, at_failure: bool = True) -> None:
    """A snapshot in PyTorch's _dump_snapshot layout: 8 segments of 1 GiB, each half live, half free."""
    import pickle

    half = 512 * 2**20
    free_block = half if at_failure else 4 * request
    segments = [{"device": 0, "address": i * 2**30, "total_size": 2**30 if at_failure else 2**30 + free_block,
                 "allocated_size": half, "stream": 0, "segment_type": "large",
                 "blocks": [{"size": half, "state": "active_allocated",
                             "frames": [{"filename": "train.py", "line": 40, "name": "forward"}]},
                            {"size": half if at_failure else free_block, "state": "inactive"}]}
                for i in range(8)]
    trace = [{"action": "alloc", "addr": 0, "size": half, "stream": 0},
             {"action": "oom", "addr": 0, "size": request, "stream": 0, "device_free": 20 * 2**20}]
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [trace]}, protocol=4))


def test_diagnose_reads_a_snapshot_and_measures_fragmentation(tmp_path):
    from oomdoctor.api import diagnose_path

    snap = tmp_path / "memory_snapshot.pickle"
    _fragmented_snapshot(snap, request=2**30)
    report = diagnose_path(snap)
    (event,) = report.events
    assert (event.requested_bytes, event.free_bytes, event.reserved_bytes, event.allocated_bytes) == (
        2**30, 20 * 2**20, 8 * 2**30, 4 * 2**30)
    assert event.detail["largest_free_block_bytes"] == 512 * 2**20 and event.detail["stranded_bytes"] == 4 * 2**30
    first = report.diagnoses[0]
    assert (first.rule, first.category, first.role) == ("snapshot-free-blocks-too-small", "fragmentation", "primary")


def test_a_snapshot_dumped_after_the_failure_lends_no_figures(tmp_path):
    from oomdoctor.api import diagnose_path

    snap = tmp_path / "later.pickle"
    _fragmented_snapshot(snap, request=2**30, at_failure=False)
    report = diagnose_path(snap)
    (event,) = report.events
    assert event.reserved_bytes is None and event.detail["snapshot_at_failure"] is False
    assert "dumped later" in event.message
    assert all(d.rule != "snapshot-free-blocks-too-small" for d in report.diagnoses)


def test_diagnose_refuses_a_hostile_snapshot_with_exit_2(tmp_path):
    import datetime
    import pickle
    import subprocess
    import sys

    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps({"segments": [], "when": datetime.date(2024, 1, 1)}, protocol=4))
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(bad)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr


def test_memory_summary_tables_of_both_unit_eras_are_read():
    from oomdoctor.parse.normalize import Line
    from oomdoctor.parse.summary import tables

    rows = ["|                  PyTorch CUDA memory summary, device ID 1                 |",
            "|            CUDA OOMs: 2            |        cudaMalloc retries: 9         |",
            "| Allocated memory      |   15046 MB |   15114 MB |   14505 GB |   14490 GB |",
            "| GPU reserved memory   |   20480 MB |   20480 MB |   14505 GB |   14490 GB |",
            "| Non-releasable memory |    3277 MB |    3300 MB |    1000 GB |    1000 GB |"]
    (table,) = tables([Line(n, None, t) for n, t in enumerate(rows, 1)], "x.log")
    assert (table["device"], table["ooms"], table["retries"]) == (1, 2, 9)
    assert table["allocated_bytes"] == 15046 * 2**20 and table["reserved_bytes"] == 20480 * 2**20
    assert table["non_releasable_bytes"] == 3277 * 2**20 and table["evidence"].line == 5


def _frames(*pairs):
    return [{"filename": f, "line": 1, "name": n} for f, n in pairs]


SITE = "/env/lib/python3.11/site-packages"
CATEGORY_STACKS = {  # innermost first, as PyTorch records them (C++ frames first, then Python)
    "parameters": _frames(("??", "c10::cuda::malloc"), (f"{SITE}/torch/nn/modules/module.py", "convert"),
                          (f"{SITE}/torch/nn/modules/module.py", "_apply"), ("train.py", "main")),
    "gradients": _frames((f"{SITE}/torch/autograd/graph.py", "_engine_run_backward"),
                         (f"{SITE}/torch/_tensor.py", "backward"), ("train.py", "train_step")),
    "optimizer_state": _frames((f"{SITE}/torch/optim/adamw.py", "_init_group"), (f"{SITE}/torch/optim/adamw.py", "step"),
                               ("train.py", "train_step")),
    "activations": _frames((f"{SITE}/torch/nn/modules/linear.py", "forward"),
                           (f"{SITE}/torch/nn/modules/module.py", "_call_impl"), ("train.py", "train_step")),
    "kv_cache": _frames((f"{SITE}/vllm/worker/cache_engine.py", "_allocate_kv_cache"),
                        (f"{SITE}/vllm/worker/cache_engine.py", "__init__")),
    "other": _frames(("train.py", "make_buffers"), ("train.py", "main")),
}


def test_live_allocations_are_grouped_by_what_made_them(tmp_path):
    from oomdoctor.facts import derive
    from oomdoctor.parse import parse_files
    from oomdoctor.report.text import live_memory_lines

    mib = 2**20
    sizes = {"parameters": 400, "gradients": 400, "optimizer_state": 800, "activations": 300, "kv_cache": 60, "other": 40}
    blocks = [{"size": sizes[c] * mib, "state": "active_allocated", "frames": f} for c, f in CATEGORY_STACKS.items()]
    blocks.append({"size": 100 * mib, "state": "active_allocated"})  # no stack recorded: not counted
    blocks.append({"size": 10 * mib, "state": "inactive"})
    seg = {"device": 0, "address": 0, "total_size": sum(b["size"] for b in blocks), "stream": 0, "blocks": blocks}
    trace = [{"action": "oom", "addr": 0, "size": 64 * mib, "stream": 0, "device_free": 0}]
    (dev,) = summarize({"segments": [seg], "device_traces": [trace]}).devices
    assert {c.category: c.bytes // mib for c in dev.categories} == sizes
    snap = tmp_path / "oom.pickle"
    snap.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace]}, protocol=4))
    parsed = parse_files([str(snap)])
    (event,) = parsed.events
    facts = derive(parsed, 0).values
    assert facts["snapshot_optimizer_state_fraction"] == pytest.approx(800 / 2000)
    assert facts["snapshot_kv_cache_fraction"] == pytest.approx(60 / 2000)
    lines = live_memory_lines(event)
    assert lines[0].startswith("live by what made it (recorded stacks): optimizer state 800.00 MiB (40%)")
