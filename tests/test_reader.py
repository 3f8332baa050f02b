"""The streaming reader: regions with true line numbers across chunk boundaries, bounded windows."""

from __future__ import annotations

import pytest

import oomdoctor.parse.reader as reader
from oomdoctor.parse import parse_files

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.78 GiB"


def test_events_straddling_chunk_boundaries_keep_their_line_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(reader, "HEAD_BYTES", 512)
    monkeypatch.setattr(reader, "BACK_BYTES", 1024)
    monkeypatch.setattr(reader, "FORWARD_BYTES", 512)
    lines, expected = [], []
    for i in range(3000):
        if i % 700 == 699:
            lines.append(f"[rank{i % 8}]: {OOM} #{i}")
            expected.append(i + 1)
        else:
            lines.append(f"[rank{i % 8}]: {{'loss': {i}, 'epoch': 0.{i}}}")
    p = tmp_path / "t.log"
    p.write_text("\n".join(lines) + "\n")
    facts = parse_files([str(p)])
    assert [e.line for e in facts.events] == expected
    assert [e.rank for e in facts.events] == [(n - 1) % 8 for n in expected]


def test_only_windows_are_decoded(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    p = tmp_path / "big.log"
    with open(p, "w") as f:
        for i in range(200_000):
            f.write(f"step {i} loss 1.0\n")
        f.write(OOM + "\n")
    regions = list(reader.scan(str(p)))
    decoded = sum(len(r.lines) for r in regions)
    assert decoded < 20_000  # the head and the window before the OOM, not 200k lines
    assert regions[-1].lines[-1].startswith("torch.OutOfMemoryError")
    assert regions[-1].first_line + len(regions[-1].lines) - 1 == 200_001


def test_a_shell_kill_notice_at_the_end_of_a_long_log_is_read(tmp_path):
    log = tmp_path / "train.log"
    filler = "".join(f"{{'loss': 0.{i % 97:02d}, 'epoch': {i / 1000:.2f}}}\n" for i in range(20000))  # > 256 KiB
    log.write_text("$ python train.py\n" + filler + "[1]    16261 killed     python train.py\n")
    events = parse_files([str(log)]).events
    assert [(e.kind, e.line) for e in events] == [("host_oom", 20002)]


def test_dense_memory_lines_are_thinned_over_the_whole_run_and_the_failure_keeps_its_context(tmp_path):
    # a memory line every step for 80,000 steps (~4 MiB): the first ones are all read, later ones one per stride
    # growing with the offset, and the last ones before the OOM come with the failure's own back window
    steps = 80_000
    body = "".join(f"step {s} torch.cuda.memory_allocated()={40 + s / 10_000:.2f}GB\n" for s in range(1, steps + 1))
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 79.12 GiB memory in "
           "use. Of the allocated memory 77.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch "
           "but unallocated.\n")
    log = tmp_path / "dense.log"
    log.write_text(body + oom)
    kept = sum(len(r.text) for r in reader.scan(str(log)))
    assert log.stat().st_size > 8 * reader.SAMPLE_DENSE_BYTES
    assert kept < 3 * reader.SAMPLE_DENSE_BYTES
    result = parse_files([str(log)])
    (event,) = result.events
    assert event.line == steps + 1 and event.step == steps
    seen = [s.step for s in result.runs[0].memory]
    assert seen[0] == 1 and seen[-1] == steps
    middle = [s for s in seen if steps // 4 < s < 3 * steps // 4]
    assert 10 <= len(middle) < 2_000  # the middle of the run is sampled, not dropped and not kept whole


def test_progress_is_told_bytes_read_and_failure_lines_after_every_chunk(tmp_path):
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 9.00 GiB\n"
    log = tmp_path / "long.log"
    log.write_text(("loss 0.5\n" * 300_000 + oom) * 3)
    calls = []
    parse_files([str(log)], progress=lambda name, done, total, fails: calls.append((name, done, total, fails)))
    assert len(calls) >= 3 and all(c[2] == log.stat().st_size for c in calls)
    assert [c[1] for c in calls] == sorted(c[1] for c in calls) and calls[-1][1] == log.stat().st_size
    assert calls[-1][3] == 3


def test_the_progress_line_shows_only_for_slow_reads_and_is_cleared(capsys, monkeypatch):
    from oomdoctor import cli

    line = cli._ProgressLine()
    line("train.log", 2**20, 2**30, 0)  # within the first half second: nothing
    line.close()
    assert capsys.readouterr().err == ""
    line = cli._ProgressLine()
    line.start -= 10
    line("train\x1b[31m.log", 300 * 2**20, 2**30, 1)
    line.close()
    err = capsys.readouterr().err
    assert "reading train.log: 300/1,024 MiB, 1 failure line" in err and "\x1b[31m" not in err
    assert err.endswith("\r\x1b[K")


def test_a_log_ending_in_a_multibyte_character_is_valid_utf8():
    # a small Caffe log whose last line is a Chinese-locale abort message: no character is cut, so no warning
    import warnings

    from oomdoctor.parse.reader import text_encoding

    for tail in ("已放弃 (核心已转储)\n", "已放弃", "…", "é"):
        head = ("F0228 17:38:20 syncedmem.cpp:64] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n"
                + tail).encode()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert text_encoding(head, "caffe.log") == "utf-8"
    with pytest.warns(UserWarning, match="not valid UTF-8"):
        text_encoding(b"caf\xe9 au lait\n", "latin1.log")


def test_every_line_the_event_scan_tries_is_kept_by_the_reader():
    # a line holding a trigger holds an anchor too, or the reader drops it in any log past the first chunk
    from oomdoctor.parse.formats import TRIGGERS

    anchors = reader.ANCHORS + reader.EXTRA_ANCHORS
    assert all(any(a in t.encode() for a in anchors) for t in TRIGGERS)
    # and a line holding a trigger no anchor covers gets a failure's wide window: such triggers are marks, while a shorter
    # literal that stands for several of them in the whole-file pass ("alloc") is not ("memory_allocated()=" lines)
    assert set(reader._UNANCHORED) <= set(reader._FAILURE_MARKS)
    assert not set(reader.COVERING_ANCHORS) & set(reader._FAILURE_MARKS)


def test_the_event_scan_finds_the_triggers_that_substring_tests_find(monkeypatch):
    from oomdoctor.parse import events
    from oomdoctor.parse.formats import TRIGGERS

    lines = [*TRIGGERS, *(f"[rank1]: before {t} after" for t in TRIGGERS), *(t[1:] for t in TRIGGERS),
             *(t[:-1] for t in TRIGGERS), "", "{'loss': 0.5, 'step': 49}", "OUT OF MEMORY", "Kill ed", "已杀"]
    want = [any(t in line for t in TRIGGERS) for line in lines]
    assert [events.has_trigger(line) for line in lines] == want
    from oomdoctor.parse import lazyregex

    monkeypatch.setattr(lazyregex, "ahocorasick_rs", None)  # the fallback without the wheel
    assert [events.has_trigger(line) for line in lines] == want


@pytest.mark.parametrize("line", [
    "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc",
    "Execution of replica 0 failed: RESOURCE_EXHAUSTED: Failed to allocate request for 256.00MiB (268435456B) on "
    "device ordinal 0",
    "ERROR: process exited with exit code 137",
    "failed to allocate 14.52G (15589441536 bytes) from device: hipError_t(1002)",
])
def test_a_failure_without_the_word_memory_deep_in_a_long_log_is_found(tmp_path, monkeypatch, line):
    monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    p = tmp_path / "long.log"
    with open(p, "w") as f:  # past the head the reader always keeps, and followed by more than its kept tail
        for i in range(50_000):
            f.write(f"step {i} loss 1.0\n")
        f.write(line + "\n")
        for i in range(50_000, 60_000):
            f.write(f"step {i} loss 1.0\n")
    (event,) = parse_files([str(p)]).events
    assert event.line == 50_001


def test_the_threaded_scan_gives_the_serial_scans_regions_and_true_line_numbers(tmp_path, monkeypatch):
    # small chunks, every one searched on the helper threads: OOMs, host failures and (soon dense) memory lines in many
    monkeypatch.setattr(reader, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.setattr(reader, "BACK_BYTES", 2048)
    monkeypatch.setattr(reader, "FORWARD_BYTES", 1024)
    monkeypatch.setattr(reader, "SAMPLE_DENSE_BYTES", 8 * 1024)
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(reader, "_POOL", None)
    lines = []
    for i in range(40_000):
        if i % 997 == 0:
            lines.append(f"[rank{i % 8}]: {OOM} #{i}")
        elif i % 613 == 0:
            lines.append(f"RuntimeError: [enforce fail at alloc_cpu.cpp:83] DefaultCPUAllocator: can't allocate memory #{i}")
        elif i % 7 == 0:
            lines.append(f"step {i} torch.cuda.memory_allocated()=41.{i % 100:02d}GB")
        else:
            lines.append(f"{{'loss': 0.{i % 97:02d}, 'epoch': {i / 1000:.2f}}}")
    content = "\n".join(lines) + "\n"
    p = tmp_path / "t.log"
    p.write_text(content)

    def regions(threads):
        monkeypatch.setattr(reader, "THREADS", threads)
        return [(r.first_line, r.text) for r in reader.scan(str(p))]

    threaded = regions(4)
    assert reader.ahocorasick_rs is None or reader._POOL is not None  # the helper threads were used
    assert threaded == regions(1)
    assert len(threaded) > 40
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    for first, text in threaded:  # a region starts on its first_line (mid-line after a cut forward window)
        assert starts[first - 1] <= content.find(text, starts[first - 1]) < starts[first]


def test_newlines_are_counted_alike_by_hops_and_by_count():
    import random

    rnd = random.Random(11)
    lines = [b"x" * rnd.choice([0, 3, 90, 1500, 70_000]) for _ in range(400)]
    data = bytearray(b"\n".join(lines) + b"\r\n")
    for _ in range(200):
        a = rnd.randrange(len(data))
        b = rnd.randrange(a, len(data) + 1)
        assert reader._count_lines(data, a, b) == data.count(b"\n", a, b)
    assert reader._count_lines(data, 0, len(data)) == len(lines)
