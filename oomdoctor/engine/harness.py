"""Rule tests like `semgrep --test`: each rule over its fires/silent fixtures and over every benign log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from oomdoctor.engine.engine import diagnose_with
from oomdoctor.engine.loader import DATA_ROOT, LoadedRule, fixture_path
from oomdoctor.parse.model import ParseResult

BENIGN_DIR = DATA_ROOT / "fixtures" / "benign"
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


@dataclass
class RuleScore:
    """Per-rule outcome: true/false positives/negatives, known gaps, and what went wrong."""

    rule: str
    tp: int = 0
    tn: int = 0
    fp: int = 0
    fn: int = 0
    todo: int = 0
    failures: list[str] = field(default_factory=list)
    untested: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


@lru_cache(maxsize=512)
def load_facts(path: Path) -> ParseResult:
    """The parse result of a fixture: parsed from a log, or read from a hand-written `*.facts.yaml` / `*.facts.json`."""
    if path.name.endswith((".facts.yaml", ".facts.json")):
        return ParseResult.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    from oomdoctor.parse import parse_files  # the parser is only needed for log fixtures

    return parse_files([str(path)])


class Firing:
    """Which rules fire on each fixture, computed once per fixture."""

    def __init__(self, registry: Mapping[str, LoadedRule]) -> None:
        self.registry = registry
        self._cache: dict[Path, frozenset[str]] = {}

    def __call__(self, path: Path) -> frozenset[str]:
        if path not in self._cache:
            self._cache[path] = frozenset(g.rule for g in diagnose_with(load_facts(path), self.registry))
        return self._cache[path]


def benign_logs(directory: Path = BENIGN_DIR) -> list[Path]:
    """Every healthy log on which no rule may fire."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES) if directory.is_dir() else []


def _check(score: RuleScore, rule_id: str, path: Path, expect: str, fired: Firing) -> None:
    rel = path.relative_to(DATA_ROOT) if path.is_relative_to(DATA_ROOT) else path
    try:
        hit = rule_id in fired(path)
    except Exception as exc:  # a fixture that cannot be read fails the rule, with the reason
        score.failures.append(f"{rel}: cannot diagnose: {type(exc).__name__}: {exc}")
        return
    if expect == "fires":
        score.tp += hit
        score.fn += not hit
        if not hit:
            score.failures.append(f"{rel}: expected to fire, stayed silent" + _reasons(rule_id, path, fired))
    elif expect == "todo":
        score.todo += 1
        if hit:
            score.untested.append(f"{rel}: todo fixture now fires; move it to tests.fires")
    else:
        score.tn += not hit
        score.fp += hit
        if hit:
            score.failures.append(f"{rel}: expected silence ({expect}), fired")


def _reasons(rule_id: str, path: Path, fired: Firing) -> str:
    """Why the rule stayed silent on the fixture: its false or unknown comparisons, for the closest event."""
    from oomdoctor.engine.engine import why_not
    from oomdoctor.facts import derive

    facts = load_facts(path)
    condition = fired.registry[rule_id].rule.condition
    per_event = [why_not(condition, derive(facts, i)) for i in range(len(facts.events))]
    if not per_event:
        return " (no OOM event in it)"
    closest = min(per_event, key=len)
    return "".join(f"\n        {reason}" for reason in closest[:4]) if closest else " (ranked out: check fallback)"


def run_tests(registry: Mapping[str, LoadedRule], benign_dir: Path = BENIGN_DIR) -> list[RuleScore]:
    """Score every rule in the registry over its own fixtures and the benign corpus."""
    benign = benign_logs(benign_dir)
    fired = Firing(registry)
    scores = []
    for rule_id, loaded in sorted(registry.items()):
        score = RuleScore(rule_id)
        tests = loaded.rule.tests
        for kind in ("fires", "silent", "todo"):
            for rel in getattr(tests, kind):
                _check(score, rule_id, fixture_path(rel, loaded.path), kind, fired)
        for path in benign:
            _check(score, rule_id, path, "benign", fired)
        if not tests.fires:
            score.untested.append("no fixture in tests.fires")
        if not tests.silent:
            score.untested.append("no fixture in tests.silent")
        scores.append(score)
    return scores
