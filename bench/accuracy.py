"""Score diagnose over every fixture with a sidecar: events found, figures right, top-1/top-3 category."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from oomdoctor.parse.model import FIGURES, ParseResult  # noqa: E402
from oomdoctor.parse import parse_files  # noqa: E402
from oomdoctor.engine.engine import diagnose_with  # noqa: E402
from oomdoctor.engine.loader import load_rules  # noqa: E402

FIGURE_TOLERANCE = 0.01  # printed figures carry two decimals: 1% covers rounding


@dataclass
class Row:
    """One fixture's outcome."""

    name: str
    group: str
    established: bool
    events_expected: int
    events_found: int
    figures_right: int = 0
    figures_total: int = 0
    expected_category: str | None = None
    categories: list[str] = field(default_factory=list)
    context: bool = False  # the log shows more than the message: a step, a phase, frames or the run's config
    error: str | None = None

    @property
    def top1(self) -> bool:
        return bool(self.categories) and self.categories[0] == self.expected_category

    @property
    def top3(self) -> bool:
        return self.expected_category in self.categories[:3]


def _close(a: int | None, b: int | None) -> bool:
    if a is None or b is None:
        return a == b
    return abs(a - b) <= max(1024, FIGURE_TOLERANCE * max(abs(a), abs(b)))


def _figures(expected: list[dict], facts: ParseResult) -> tuple[int, int]:
    right = total = 0
    for exp, got in zip(expected, facts.events):
        for name in FIGURES:
            if name in exp:
                total += 1
                right += _close(exp[name], getattr(got, name))
    total += sum(sum(1 for n in FIGURES if n in e) for e in expected[len(facts.events):])
    return right, total


def _distinct(categories: list[str]) -> list[str]:
    return list(dict.fromkeys(categories))


def score(sidecar: Path, registry: dict) -> Row | None:
    """Diagnose the log beside `sidecar` and compare with what the sidecar expects."""
    meta = yaml.safe_load(sidecar.read_text(encoding="utf-8")) or {}
    log = next((sidecar.with_suffix(s) for s in (".log", ".txt") if sidecar.with_suffix(s).exists()), None)
    if log is None:
        return None
    cause = meta.get("cause") or {}
    expected = (meta.get("expect") or {}).get("events") or []
    row = Row(sidecar.stem, sidecar.parent.name, bool(cause.get("established")) and bool(meta.get("captured")),
              len(expected), 0, expected_category=cause.get("category"))
    try:
        facts = parse_files([str(log)])
        row.events_found = len(facts.events)
        row.figures_right, row.figures_total = _figures(expected, facts)
        row.categories = _distinct([g.category for g in diagnose_with(facts, registry)])
        row.context = any(e.step is not None or e.phase != "unknown" or e.operation for e in facts.events) or any(
            set(r.config) - {"stacks"} for r in facts.runs)
    except Exception as exc:  # one bad fixture must not stop the bench
        row.error = f"{type(exc).__name__}: {exc}"
    return row


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "-"


def summary(rows: list[Row], label: str) -> str:
    """One line of totals for a set of rows."""
    with_cause = [r for r in rows if r.expected_category]
    ev_ok = sum(r.events_found == r.events_expected for r in rows)
    fig = (sum(r.figures_right for r in rows), sum(r.figures_total for r in rows))
    return (f"{label:28} fixtures {len(rows):3}  events {_pct(ev_ok, len(rows)):14} figures {_pct(*fig):16} "
            f"top-1 {_pct(sum(r.top1 for r in with_cause), len(with_cause)):14} "
            f"top-3 {_pct(sum(r.top3 for r in with_cause), len(with_cause))}")


def main(argv: list[str] | None = None) -> int:
    """Print a per-fixture table (with --verbose) and the summary lines."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixtures", type=Path, default=REPO / "fixtures")
    ap.add_argument("--rules", type=Path, action="append", default=[])
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per fixture")
    args = ap.parse_args(argv)
    registry = load_rules(args.rules)
    rows = [r for p in sorted(args.fixtures.rglob("*.yaml")) if p.name != "README.yaml" and (r := score(p, registry))]
    if args.verbose:
        for r in rows:
            mark = "ok " if r.top1 else ("~3 " if r.top3 else ("-- " if not r.expected_category else "XX "))
            est = "E" if r.established else " "
            print(f"{mark}{est} {r.group[:4]} {r.name[:48]:48} ev {r.events_found}/{r.events_expected} "
                  f"fig {r.figures_right}/{r.figures_total} want {r.expected_category} got {r.categories[:3]}"
                  + (f" ERROR {r.error}" if r.error else ""))
    print(summary(rows, "all"))
    for group in sorted({r.group for r in rows}):
        print(summary([r for r in rows if r.group == group], group))
    established = [r for r in rows if r.established]
    print(summary(established, "captured, cause established"))
    print(summary([r for r in established if r.context], "  … log shows context"))
    print(summary([r for r in established if not r.context], "  … the message alone"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
