"""The streaming reader: regions with true line numbers across chunk boundaries, bounded windows."""

from __future__ import annotations

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
