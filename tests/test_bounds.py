"""Bounds by design: a redraw flood, an OOM-dense log and a flood of events cost bounded memory and say so."""

from __future__ import annotations

import gzip
import warnings

from oomdoctor.parse import events as E
from oomdoctor.parse import parse_files
from oomdoctor.parse.reader import LONG_LINE_REACH_BYTES, LimitWarning, scan

MSG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {i}.00 MiB. GPU 0 has a total capacity of "
       "23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. "
       "Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but "
       "unallocated.\n")


def test_a_redraw_flood_without_newlines_keeps_only_windows(tmp_path):
    bar = "\r 45%|####      | 4500/10000 [01:23<01:42, 53.21it/s]"
    log = tmp_path / "redraw.log"
    log.write_text("start\n" + bar * 200_000 + "\r" + MSG.format(i=20) + "\n" + bar * 200_000 + "\n")
    kept = sum(len(line) for region in scan(str(log)) for line in region.lines)
    assert log.stat().st_size > 20 * 2**20
    assert kept < 8 * LONG_LINE_REACH_BYTES  # the head, the message's window and the tail: not the 20 MiB line
    (event,) = parse_files([str(log)]).events
    assert event.requested_bytes == 20 * 2**20 and event.line == 2


def test_an_oom_dense_gzip_keeps_head_and_tail_and_says_what_it_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(E, "KEPT_HEAD_CHARS", 200_000)
    monkeypatch.setattr(E, "KEPT_TAIL_CHARS", 100_000)
    monkeypatch.setattr(E, "KEPT_PIECE_CHARS", 20_000)
    monkeypatch.setattr(E, "MAX_EVENTS_PER_SOURCE", 300)
    log = tmp_path / "bomb.log.gz"
    with gzip.open(log, "wt") as f:
        for i in range(8000):
            f.write(MSG.format(i=i % 4000 + 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = parse_files([str(log)])
    said = [str(w.message) for w in caught if issubclass(w.category, LimitWarning)]
    assert len(result.events) == 300
    assert result.events[0].line == 1
    assert any("lines of" in s and "not read" in s for s in said), said
    assert any("more OOM messages after the first 300" in s for s in said), said


def test_a_gpu_index_of_thousands_of_digits_is_not_an_index(tmp_path):
    # found by bench/fuzz.py: a 5,001-digit "GPU" number hit Python's int-string limit (exit 3)
    for era in ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU {g}; 10.76 GiB total capacity; 9.00 GiB "
                "already allocated; 5.56 MiB free; 9.90 GiB reserved in total by PyTorch)\n",
                MSG.format(i=20).replace("GPU 0", "GPU {g}")):
        log = tmp_path / "digits.log"
        log.write_text(era.format(g="7" * 5001))
        events = parse_files([str(log)]).events
        assert all(e.gpu_index is None for e in events)


def test_a_size_with_a_unit_no_allocator_prints_is_not_a_crash(tmp_path):
    # found by bench/fuzz.py: "ran out of memory trying to allocate 12Mi" reached the unit table (exit 3)
    for text in ("W bfc_allocator.cc:275] Ran out of memory trying to allocate 12Mi of it\n",
                 "W bfc_allocator.cc:275] Ran out of memory trying to allocate 12i\n"):
        log = tmp_path / "unit.log"
        log.write_text(text)
        parse_files([str(log)])  # no exception: the message, read with what it says


def _parser_patterns():
    """Every compiled pattern the parser holds: module attributes and those inside its message formats."""
    import dataclasses
    import importlib
    import pkgutil

    import regex

    import oomdoctor.parse as parse_pkg
    from oomdoctor.parse.lazyregex import LazyPattern
    kinds = (regex.Pattern, LazyPattern)
    for info in pkgutil.iter_modules(parse_pkg.__path__):
        module = importlib.import_module(f"oomdoctor.parse.{info.name}")
        for name, value in vars(module).items():
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                if isinstance(item, kinds):
                    yield f"{info.name}.{name}", item
                elif dataclasses.is_dataclass(item) and not isinstance(item, type):
                    for f in dataclasses.fields(item):
                        if isinstance(getattr(item, f.name), kinds):
                            yield f"{info.name}.{name}.{f.name}", getattr(item, f.name)


def test_no_parser_pattern_has_an_unbounded_wildcard_in_its_middle():
    # `X.*Y` searched over a line holding X many times costs (occurrences x line length): a line of 3,500
    # repeated "MPS backend out of memory (" took 6 s. A wildcard is bounded ({0,400}) unless it runs to the end.
    import re
    unbounded = re.compile(r"(?<!\\)\.[*+]\??(?!\)*\$)")
    found = [(name, p.pattern) for name, p in _parser_patterns() if unbounded.search(p.pattern)]
    assert len(list(_parser_patterns())) > 40
    assert found == []


def test_the_parser_compiles_its_patterns_on_first_use_only():
    # Start-up (issue 11): a small log needs about a third of the ~110 patterns; none is compiled at import.
    from oomdoctor.parse.lazyregex import LazyPattern
    patterns = list(_parser_patterns())
    assert all(isinstance(p, LazyPattern) for _, p in patterns), [n for n, p in patterns if not isinstance(p, LazyPattern)]
    probe = LazyPattern(r"Tried to allocate (?P<n>\d+)")
    assert probe._compiled is None
    assert probe.search("Tried to allocate 20")["n"] == "20" and probe._compiled is not None
