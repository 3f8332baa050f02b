"""Score diagnose over the labelled fixtures, dev and held-out side by side (the held-out third is never tuned on).

Metrics per set: detect (every expected event found), figures (each printed figure within 1%), context (phase,
step and rank of every event as the sidecar expects), top-1 / top-3 (the established cause among the first
distinct categories), fix@3 (a fix that worked among the first three fixes printed), and false alarms on the
benign logs. The split is by project: a fixture is held out when sha256 of its source repository (owner/name,
lower case) is 0 mod 3, so every report of one project sits on the same side.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from oomdoctor.diagnosis import fixes_to_try  # noqa: E402
from oomdoctor.engine.engine import diagnose_with  # noqa: E402
from oomdoctor.engine.loader import load_rules  # noqa: E402
from oomdoctor.facts import derive  # noqa: E402
from oomdoctor.parse import ParseResult, parse_files  # noqa: E402
from oomdoctor.parse.model import FIGURES  # noqa: E402

FIGURE_TOLERANCE = 0.01  # printed figures carry two decimals: 1% covers rounding
HELD_OUT_MODULUS = 3
CONTEXT_FIELDS = ("phase", "step", "rank")


def project_of(source: str | None) -> str | None:
    """`owner/repo` of a sidecar's `source: owner/repo#N`, lower case."""
    return source.split("#")[0].strip().lower() if source and "/" in source else None


def held_out(project: str | None) -> bool:
    """True for the held-out third of projects (stable across runs and machines)."""
    if project is None:
        return False
    return int(hashlib.sha256(project.encode()).hexdigest(), 16) % HELD_OUT_MODULUS == 0


@dataclass
class Row:
    """One fixture's outcome."""

    name: str
    group: str
    project: str | None
    established: bool
    events_expected: int
    events_found: int = 0
    figures_right: int = 0
    figures_total: int = 0
    context_right: int = 0
    context_total: int = 0
    expected_category: str | None = None
    fix_ids: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    fired: int = 0  # diagnoses (benign logs must have none)
    message_only: bool = False  # the log shows nothing but the message: no step, phase, operation, config or memory
    error: str | None = None

    @property
    def held_out(self) -> bool:
        return held_out(self.project)

    @property
    def top1(self) -> bool:
        return bool(self.categories) and self.categories[0] == self.expected_category

    @property
    def top3(self) -> bool:
        return self.expected_category in self.categories[:3]

    @property
    def fix3(self) -> bool:
        return bool(set(self.fix_ids) & set(self.fixes[:3]))


def _close(a: int | None, b: int | None) -> bool:
    if a is None or b is None:
        return a == b
    return abs(a - b) <= max(1024, FIGURE_TOLERANCE * max(abs(a), abs(b)))


def _compare(expected: list[dict], facts: ParseResult, row: Row) -> None:
    for exp, got in zip(expected, facts.events):
        for name in FIGURES:
            if name in exp:
                row.figures_total += 1
                row.figures_right += _close(exp[name], getattr(got, name))
        for name in CONTEXT_FIELDS:
            if name in exp:
                row.context_total += 1
                row.context_right += exp[name] == getattr(got, name)
    for exp in expected[len(facts.events):]:
        row.figures_total += sum(1 for n in FIGURES if n in exp)
        row.context_total += sum(1 for n in CONTEXT_FIELDS if n in exp)


def _distinct(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def score(sidecar: Path, registry: dict) -> Row | None:
    """Diagnose the log beside `sidecar` and compare with what the sidecar expects."""
    meta = yaml.safe_load(sidecar.read_text(encoding="utf-8")) or {}
    log = next((sidecar.with_suffix(s) for s in (".log", ".txt") if sidecar.with_suffix(s).exists()), None)
    if log is None:
        return None
    cause = meta.get("cause") or {}
    expected = (meta.get("expect") or {}).get("events") or []
    row = Row(sidecar.stem, sidecar.parent.name, project_of(meta.get("source")),
              bool(cause.get("established")) and bool(meta.get("captured")), len(expected),
              expected_category=cause.get("category"), fix_ids=list(cause.get("fix_ids") or []))
    try:
        facts = parse_files([str(log)])
        row.events_found = len(facts.events)
        _compare(expected, facts, row)
        diagnoses = diagnose_with(facts, registry)
        row.message_only = bool(facts.events) and derive(facts, 0).values["context_shown"] is False
        row.fired = len(diagnoses)
        row.categories = _distinct([g.category for g in diagnoses])
        # the order the report prints them: the fixes to try first, then every diagnosis's own
        row.fixes = _distinct([*fixes_to_try(diagnoses), *(f.id for g in diagnoses for f in g.fixes)])
    except Exception as exc:  # one bad fixture must not stop the bench
        row.error = f"{type(exc).__name__}: {exc}"
    return row


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} {100 * n / d:3.0f}%" if d else "-"


def metrics(rows: list[Row]) -> dict[str, str]:
    """The issue's metrics over the established-cause rows of a set (detect/figures/context over all OOM rows)."""
    oom = [r for r in rows if r.events_expected]
    est = [r for r in rows if r.established and r.expected_category]
    with_fix = [r for r in est if r.fix_ids]
    bare = [r for r in est if r.message_only]
    shown = [r for r in est if not r.message_only]
    return {
        "logs": str(len(oom)),
        "detect": _pct(sum(r.events_found == r.events_expected for r in oom), len(oom)),
        "figures": _pct(sum(r.figures_right for r in oom), sum(r.figures_total for r in oom)),
        "phase/step/rank": _pct(sum(r.context_right for r in oom), sum(r.context_total for r in oom)),
        "established": str(len(est)),
        "top-1": _pct(sum(r.top1 for r in est), len(est)),
        "top-3": _pct(sum(r.top3 for r in est), len(est)),
        "fix@3": _pct(sum(r.fix3 for r in with_fix), len(with_fix)),
        # The ceiling: a log that is the message alone cannot tell a batch too large from a model too large.
        "top-1 w/ context": _pct(sum(r.top1 for r in shown), len(shown)),
        "top-1 msg only": _pct(sum(r.top1 for r in bare), len(bare)),
    }


def table(columns: dict[str, list[Row]]) -> str:
    """Metrics as rows, one column per set."""
    cols = {name: metrics(rows) for name, rows in columns.items()}
    keys = list(next(iter(cols.values())))
    out = [f"{'':16}" + "".join(f"{name:>16}" for name in cols)]
    for k in keys:
        out.append(f"{k:16}" + "".join(f"{cols[name][k]:>16}" for name in cols))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print dev and held-out metrics side by side (per-fixture lines for dev with --verbose)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=REPO / "fixtures")
    ap.add_argument("--rules", type=Path, action="append", default=[])
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per dev fixture")
    ap.add_argument("--final", action="store_true",
                    help="also score the held-out third (for the final report only, never while tuning)")
    ap.add_argument("--show-held-out", action="store_true",
                    help="with --final: list held-out fixtures one by one")
    args = ap.parse_args(argv)
    registry = load_rules(args.rules)
    rows = [r for p in sorted(args.fixtures.rglob("*.yaml")) if p.name != "README.yaml" and (r := score(p, registry))]
    real = [r for r in rows if r.group == "reconstructed"]
    dev = [r for r in real if not r.held_out]
    held = [r for r in real if r.held_out]
    shown = dev + (held if args.final and args.show_held_out else [])
    if args.verbose or args.show_held_out:
        for r in shown:
            if not r.events_expected:
                continue
            mark = "ok " if r.top1 else ("~3 " if r.top3 else ("-- " if not r.expected_category else "XX "))
            print(f"{mark}{'E' if r.established else ' '}{'H' if r.held_out else ' '} {r.name[:46]:46} "
                  f"ev {r.events_found}/{r.events_expected} ctx {r.context_right}/{r.context_total} "
                  f"want {r.expected_category} got {r.categories[:3]} fix {'Y' if r.fix3 else 'n'}"
                  + (f" ERROR {r.error}" if r.error else ""))
    columns = {"dev": dev, "held-out": held} if args.final else {"dev": dev}
    columns["synthetic"] = [r for r in rows if r.group == "synthetic"]
    columns["generated"] = [r for r in rows if r.group == "generated"]
    print(table(columns))
    benign = [r for r in rows if r.group == "benign"]
    alarms = [r.name for r in benign if r.events_found or r.fired]
    print(f"{'benign':16}{len(benign)} logs, false alarms {len(alarms)}" + (f": {alarms}" if alarms else ""))
    projects = {r.project for r in real if r.expected_category}
    print(f"{'corpus':16}{sum(1 for r in real if r.expected_category)} labelled real failures from {len(projects)} "
          f"projects; {sum(1 for r in real if r.established)} established; held-out projects "
          f"{len({r.project for r in held})} of {len({r.project for r in real})}")
    errors = [r for r in rows if r.error]
    for r in errors:
        print(f"ERROR {r.group}/{r.name}: {r.error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
