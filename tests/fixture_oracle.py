"""Load fixture sidecars and compare what the parser extracts with what they expect."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
COMPARED = (
    "kind", "line", "rank", "gpu_index", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
    "reserved_bytes", "reserved_unallocated_bytes", "process_in_use_bytes", "step", "phase",
)


def sidecars(*groups: str) -> list[Path]:
    """Every fixture log that has a sidecar, in the given groups (captured, synthetic, benign)."""
    out = []
    for g in groups:
        out += sorted(p for p in (FIXTURES / g).glob("*.log") if p.with_suffix(".yaml").exists())
    return out


def load(log: Path) -> dict:
    return yaml.safe_load(log.with_suffix(".yaml").read_text()) or {}


def compare(log: Path, events: list) -> list[str]:
    """Differences between expected and extracted events, as readable strings (empty when all agree)."""
    expected = (load(log).get("expect") or {}).get("events") or []
    problems: list[str] = []
    if len(events) != len(expected):
        problems.append(f"{len(expected)} events expected, {len(events)} found at lines {[e.line for e in events]}")
    for i, (want, got) in enumerate(zip(expected, events)):
        for field in COMPARED:
            if field in want:
                value = getattr(got, field)
                if value != want[field]:
                    problems.append(f"event {i}: {field} expected {want[field]!r}, got {value!r}")
        if "other_processes" in want:
            got_p = [p.model_dump() for p in got.other_processes]
            if got_p != list(want["other_processes"] or []):
                problems.append(f"event {i}: other_processes expected {want['other_processes']}, got {got_p}")
    return problems
