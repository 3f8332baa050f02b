"""A short fuzz run of the whole diagnose path in CI (the long run: `python bench/fuzz.py --examples 100000`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import fuzz  # noqa: E402

LOGS = fuzz.fixtures()
OPS = st.builds(fuzz.Op, kind=st.sampled_from(fuzz.OPS), where=st.floats(0, 1),
                piece=st.integers(0, len(fuzz.PIECES) - 1), count=st.sampled_from((1, 2, 7, 64, 500, 5000)))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(base=st.integers(0, len(LOGS)), ops=st.lists(OPS, min_size=1, max_size=6))
def test_mutated_logs_end_in_a_report_or_our_own_error(tmp_path_factory, base, ops):
    data = fuzz.apply(LOGS[base].read_bytes() if base < len(LOGS) else b"", ops)
    seconds = fuzz.run_one(data, tmp_path_factory.mktemp("fuzz"))
    assert seconds <= fuzz.budget(data), f"{seconds:.2f} s for {len(data)} bytes"


def test_every_mutation_is_deterministic_and_changes_something():
    base = LOGS[0].read_bytes()
    for i, kind in enumerate(fuzz.OPS):
        op = fuzz.Op(kind, 0.5, i, 7)
        assert fuzz.apply(base, [op]) == fuzz.apply(base, [op])
        assert fuzz.apply(base, [op]) != base, kind
