"""Calibrate rule confidences on the labelled dev corpus: per-rule precision/recall, a reliability table, a fit.

Only the dev side of the split in bench/accuracy.py is used (the held-out third is never fitted on). For each
rule: how often it fired on an established-cause log (n), how often its category was the established one
(precision), and how many logs of its category it caught (recall). The reliability table buckets the first
diagnosis of each log by its stated confidence and shows how often that first category was right.
`--fit` prints, and `--apply` writes, each rule's base `confidence:` moved so that the confidence it states where
it fires (base plus boosts) approaches its observed precision (a prior worth PRIOR_WEIGHT logs, so one log cannot
swing a rule).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import regex
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.accuracy import held_out, project_of  # noqa: E402
from oomdoctor.engine.engine import CONTRIBUTING_MIN, diagnose_with  # noqa: E402
from oomdoctor.engine.loader import load_rules  # noqa: E402
from oomdoctor.parse import parse_files  # noqa: E402

PRIOR_WEIGHT = 4  # logs' worth of trust in the hand-set confidence
BUCKETS = (0.0, 0.4, 0.5, 0.6, 0.7, 0.8, 1.01)
MIN_BUCKET = 5  # fewer logs than this in a bucket and one log moves its observed share by 20 points or more
CONFIDENCE_LINE = regex.compile(r"^confidence:\s*(?P<v>[0-9.]+)(?P<rest>\s*(?:#[^\n]*)?)$", regex.M)


@dataclass
class Case:
    """One established-cause dev log: its label and what the rules said."""

    name: str
    label: str
    fired: list[tuple[str, str, float]]  # (rule, category, confidence), best first


def cases(fixtures: Path, registry: dict, final: bool = False) -> list[Case]:
    """Established-cause logs of the dev side (or of the held-out side with `final`)."""
    out = []
    for sidecar in sorted((fixtures / "reconstructed").glob("*.yaml")):
        meta = yaml.safe_load(sidecar.read_text(encoding="utf-8")) or {}
        cause = meta.get("cause") or {}
        log = sidecar.with_suffix(".log")
        if not (cause.get("established") and cause.get("category") and log.exists()):
            continue
        if held_out(project_of(meta.get("source"))) != final:
            continue
        facts = parse_files([str(log)])
        fired = [(g.rule, g.category, g.confidence) for g in diagnose_with(facts, registry)]
        out.append(Case(sidecar.stem, cause["category"], fired))
    return out


def per_rule(all_cases: list[Case]) -> dict[str, tuple[int, int, int, float]]:
    """rule -> (fired, right, category total, sum of the confidence it stated where it fired)."""
    fired: dict[str, int] = defaultdict(int)
    right: dict[str, int] = defaultdict(int)
    stated: dict[str, float] = defaultdict(float)
    category_of: dict[str, str] = {}
    for c in all_cases:
        best: dict[tuple[str, str], float] = {}
        for rule, category, confidence in c.fired:  # a rule firing on several events of one log counts once
            best[(rule, category)] = max(confidence, best.get((rule, category), 0.0))
        for (rule, category), confidence in best.items():
            fired[rule] += 1
            right[rule] += category == c.label
            stated[rule] += confidence
            category_of[rule] = category
    totals: dict[str, int] = defaultdict(int)
    for c in all_cases:
        totals[c.label] += 1
    return {r: (fired[r], right[r], totals[category_of[r]], stated[r]) for r in fired}


def reliability(all_cases: list[Case]) -> list[tuple[str, int, float, float]]:
    """(bucket, logs, mean stated confidence, observed top-1 accuracy) per confidence bucket of the first diagnosis."""
    rows = []
    for lo, hi in zip(BUCKETS, BUCKETS[1:]):
        inside = [c for c in all_cases if c.fired and lo <= c.fired[0][2] < hi]
        if inside:
            stated = sum(c.fired[0][2] for c in inside) / len(inside)
            observed = sum(c.fired[0][1] == c.label for c in inside) / len(inside)
            rows.append((f"[{lo:.1f}, {min(hi, 1.0):.1f})", len(inside), stated, observed))
    return rows


FIT_RANGE = (0.05, 0.95)  # no base confidence of certainty either way


def listing_window(current: float, adds: Sequence[float], hedge_line: float | None = None) -> tuple[float, float]:
    """The bases that list the rule exactly where `current` does. The engine drops a rule whose base plus the boosts
    that apply is 0 or less, so each sum of boosts s puts a threshold at -s; a base between the same two thresholds
    as `current` keeps every log's listing. (Every subset counts, even one whose conditions exclude each other.)
    With `hedge_line` (the engine's CONTRIBUTING_MIN, for a rule not always hedged), each s also puts one at
    hedge_line - s: a rule crossing it changes from hypothesis to contributing, which silences the catch-alls."""
    sums = {round(sum(c), 6) for k in range(len(adds) + 1) for c in itertools.combinations(adds, k)}
    lines = (0.0,) if hedge_line is None else (0.0, hedge_line)
    thresholds = {round(line - s, 6) for s in sums for line in lines}
    below = max((t for t in thresholds if t < current), default=-1.0)
    above = min((t for t in thresholds if t >= current), default=1.0)
    return below, above


def fitted(current: float, n: int, right: int, stated_sum: float, adds: Sequence[float] = (),
           hedge_line: float | None = None) -> float:
    """The base confidence moved so that what the rule states where it fires (base plus boosts) approaches its
    observed precision; the boosts keep their relative weight. Without boosts this is the Beta-prior mean.
    The fit changes what a rule states, never where it is listed nor whether it is hedged: the base stays inside its
    `listing_window`."""
    moved = current + (right - stated_sum) / (n + PRIOR_WEIGHT)
    below, above = listing_window(current, adds, hedge_line)
    # on the 0.01 grid, strictly inside: a sum landing on 0 exactly would hang on float rounding
    low = max(FIT_RANGE[0], round(below + 0.01, 2))
    high = min(FIT_RANGE[1], current if above <= current else round(above - 0.01, 2))
    if low > high:  # a window narrower than the grid: stay
        return current
    return round(min(max(moved, low), high), 2)


def worth_rewriting(n: int, fit: float, current: float, min_logs: int = 1) -> bool:
    """True when `--apply` should write a rule's fit: it moved, on at least `min_logs` established logs (a rule seen on
    fewer keeps its hand-set value; repeated fits on one or two logs would otherwise walk it to whatever they say)."""
    return n >= max(min_logs, 1) and fit != current


def rewrite_confidence(text: str, value: float, right: int, n: int) -> str | None:
    """The rule file's top-level confidence line set to `value`, its comment saying where the number came from
    (an older comment, a hand value's reason, is replaced); None when the file has no such line."""
    line = f"confidence: {value}  # dev fit (bench/calibrate.py): its cause was right in {right} of {n} established logs"
    new, count = CONFIDENCE_LINE.subn(lambda m: line, text, count=1)
    return new if count else None


def main(argv: list[str] | None = None) -> int:
    """Print per-rule precision/recall and the reliability table; optionally fit and write base confidences."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=REPO / "fixtures")
    ap.add_argument("--fit", action="store_true", help="print the fitted base confidence of each rule")
    ap.add_argument("--apply", action="store_true", help="write the fitted confidences into the rule files")
    ap.add_argument("--final", action="store_true", help="the reliability table of the held-out side (report only)")
    ap.add_argument("--min-logs", type=int, default=1, metavar="N",
                    help="with --apply: rewrite only rules that fired on at least N established logs (fewer leave the "
                         "hand-set value, which one log should not move far)")
    args = ap.parse_args(argv)
    registry = load_rules()
    all_cases = cases(args.fixtures, registry, final=args.final)
    side = "held-out" if args.final else "dev"
    print(f"{len(all_cases)} established-cause logs ({side})\n")
    print(f"{'rule':40} {'fired':>5} {'right':>5} {'precision':>9} {'recall':>7} {'conf':>5} {'fit':>5}")
    stats = per_rule(all_cases)
    changes: dict[Path, tuple[float, int, int]] = {}
    for rule_id in sorted(registry):
        loaded = registry[rule_id]
        n, right, total, stated_sum = stats.get(rule_id, (0, 0, 0, 0.0))
        prec = f"{right / n:.2f}" if n else "-"
        rec = f"{right / total:.2f}" if total else "-"
        adds = [b.add for b in loaded.rule.boost]
        hedge_line = None if loaded.rule.hypothesis else CONTRIBUTING_MIN
        fit = fitted(loaded.rule.confidence, n, right, stated_sum, adds, hedge_line) if n else loaded.rule.confidence
        print(f"{rule_id:40} {n:5} {right:5} {prec:>9} {rec:>7} {loaded.rule.confidence:5.2f} {fit:5.2f}")
        if worth_rewriting(n, fit, loaded.rule.confidence, args.min_logs):
            changes[loaded.path] = (fit, right, n)
    print(f"\n{'first diagnosis confidence':28} {'logs':>5} {'stated':>7} {'observed':>9} {'gap':>6}")
    for bucket, n, stated, observed in reliability(all_cases):
        judged = "" if n >= MIN_BUCKET else "  (too few logs to judge)"
        print(f"{bucket:28} {n:5} {stated:7.2f} {observed:9.2f} {observed - stated:+6.2f}{judged}")
    if args.apply and not args.final:
        for path, (value, right, n) in changes.items():
            new = rewrite_confidence(path.read_text(encoding="utf-8"), value, right, n)
            if new is None:
                raise SystemExit(f"{path}: no top-level `confidence: N` line to rewrite")
            path.write_text(new, encoding="utf-8")
        print(f"\nwrote {len(changes)} rule files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
