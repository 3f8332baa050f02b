"""Run the rules over each OOM event: three-valued conditions, confidence, roles, evidence and fixes."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

from oomdoctor.diagnosis import Diagnosis
from oomdoctor.engine import templates
from oomdoctor.engine.loader import LoadedRule, load_rules
from oomdoctor.engine.schema import Condition, Rule
from oomdoctor.facts import Derived, derive
from oomdoctor.fixcatalog import build_fixes
from oomdoctor.parse.model import Evidence, OOMEvent, ParseResult, RunContext

PRIMARY_MIN = 0.5  # below this nothing is called the cause
CONTRIBUTING_MIN = 0.35  # below this a diagnosis is a hypothesis
IMPLAUSIBLE_CAP = 0.3  # a rule citing an untrustworthy figure is at most a hypothesis
MAX_CONFIDENCE = 0.95

_ORDER = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le,
          "eq": operator.eq, "ne": operator.ne}


def _compare(c: Condition, d: Derived) -> bool | None:
    names = {c.fact, c.fact2} - {None}
    if names & d.implausible:
        return None  # an untrustworthy figure decides nothing
    if c.fact is None or c.op is None:
        return None
    left = d.values.get(c.fact)
    if c.op == "present":
        return left is not None
    if c.op == "absent":
        return left is None
    right = d.values.get(c.fact2) if c.fact2 else c.value
    if left is None or right is None:
        return None
    if c.fact2:
        right = right * c.times
    if c.op == "in":
        return left in right
    try:
        return bool(_ORDER[c.op](left, right))
    except TypeError:
        return None


def evaluate(c: Condition, d: Derived) -> bool | None:
    """Kleene three-valued logic: None is unknown, and a rule fires only on True."""
    if c.fact is not None:
        return _compare(c, d)
    if c.not_ is not None:
        inner = evaluate(c.not_, d)
        return None if inner is None else not inner
    results = [evaluate(child, d) for child in (c.all_ if c.all_ is not None else c.any_ or [])]
    if c.all_ is not None:
        return False if False in results else (None if None in results else True)
    return True if True in results else (None if None in results else False)


def _describe(c: Condition) -> str:
    right = c.fact2 if c.fact2 else ("" if c.op in ("present", "absent") else repr(c.value))
    times = f" x{c.times:g}" if c.fact2 and c.times != 1 else ""
    return f"{c.fact} {c.op} {right}{times}".strip()


def _value(name: str | None, d: Derived) -> str:
    from oomdoctor.units import format_bytes

    v = d.values.get(name) if name else None
    if isinstance(v, int) and not isinstance(v, bool) and name and name.endswith("_bytes"):
        return format_bytes(v)
    if isinstance(v, float):
        return f"{v:.3g}"
    return "not in the log" if v is None else repr(v)


def why_not(c: Condition, d: Derived) -> list[str]:
    """The comparisons that keep `c` from being true on these facts: false ones with the values seen, unknown
    ones with the fact the log did not give. Empty when `c` holds."""
    result = evaluate(c, d)
    if result is True:
        return []
    if c.fact is not None:
        state = "unknown" if result is None else "false"
        seen = _value(c.fact, d) + (f" vs {_value(c.fact2, d)}" if c.fact2 else "")
        return [f"{state}: {_describe(c)} ({c.fact} = {seen})"]
    if c.not_ is not None:
        return [f"{'unknown' if result is None else 'false'}: not ({_describe(c.not_) if c.not_.fact else '...'})"]
    children = c.all_ if c.all_ is not None else c.any_ or []
    out: list[str] = []
    for child in children:
        if c.all_ is not None or evaluate(child, d) is not True:
            out += why_not(child, d)
    return out


def confidence(rule: Rule, d: Derived) -> float:
    """Base confidence plus every boost whose condition holds, clamped; capped if it cites an implausible figure."""
    value = rule.confidence + sum(b.add for b in rule.boost if evaluate(b.when, d) is True)
    if set(rule.evidence) & d.implausible:
        value = min(value, IMPLAUSIBLE_CAP)
    return round(max(0.0, min(MAX_CONFIDENCE, value)), 2)


def _event_evidence(event: OOMEvent) -> Evidence:
    first = event.message.strip().splitlines()[0] if event.message.strip() else event.kind
    return Evidence(source=event.source, line=event.line, text=first[:400])


def evidence_for(rule: Rule, d: Derived) -> tuple[Evidence, ...]:
    """The OOM line plus the lines behind each fact the rule cites, in log order, without repeats."""
    names = rule.evidence or sorted(n for n in rule.condition.facts() if d.values.get(n) is not None)
    found: dict[tuple[str, int], Evidence] = {}
    if d.event is not None:
        first = _event_evidence(d.event)
        found[(first.source, first.line)] = first
    for name in names:
        for ev in d.evidence.get(name, ()):
            found.setdefault((ev.source, ev.line), ev)
    return tuple(sorted(found.values(), key=lambda e: (e.source, e.line)))


def _render(source: str, values: Mapping[str, Any]) -> str:
    try:
        return templates.render(source, dict(values))
    except (TemplateError, TypeError, ValueError, ZeroDivisionError, RecursionError, OverflowError) as exc:
        return f"{' '.join(source.split())} [render failed: {exc}]"


def _lower_first(title: str) -> str:
    """"The batch ..." -> "the batch ...", but a name stays as written (TensorFlow, JAX/XLA, vLLM)."""
    word = title.split(" ", 1)[0]
    return title[0].lower() + title[1:] if word[1:].islower() or len(word) == 1 else title


def fire(loaded: LoadedRule, d: Derived, index: int) -> Diagnosis | None:
    """The rule's diagnosis for event `index`, or None unless its condition is definitely true."""
    rule = loaded.rule
    if evaluate(rule.condition, d) is not True:
        return None
    conf = confidence(rule, d)
    if conf <= 0:
        return None  # its own boosts argue it away: listing it "at 0%" would only be noise
    hedge = rule.hypothesis or conf < CONTRIBUTING_MIN
    return Diagnosis(
        rule=rule.id, category=rule.category, confidence=conf,
        title=f"Possibly: {_lower_first(rule.title)}" if hedge else rule.title,
        seen=_render(rule.message.seen, d.values), why=_render(rule.message.why, d.values),
        action=_render(rule.message.do, d.values), role="hypothesis" if hedge else "contributing",
        event_index=index, evidence=evidence_for(rule, d),
        fixes=build_fixes(rule.fixes, d),
    )


def rank(found: Sequence[Diagnosis]) -> list[Diagnosis]:
    """Best first; the best confident one is primary, other confident ones contributing, the rest hypotheses."""
    ordered = sorted(found, key=lambda g: (-g.confidence, g.role == "hypothesis", g.rule))
    out: list[Diagnosis] = []
    for g in ordered:
        role = g.role
        if role != "hypothesis":
            role = "primary" if not out and g.confidence >= PRIMARY_MIN else "contributing"
        out.append(g.model_copy(update={"role": role}))
    return out


def diagnose_event(facts: ParseResult, index: int, registry: Mapping[str, LoadedRule],
                   report_index: int | None = None) -> list[Diagnosis]:
    """Every rule over one event, ranked (`report_index`: the event's index in the report, when `facts` is a part)."""
    d = derive(facts, index)
    at = index if report_index is None else report_index
    found = [g for loaded in registry.values() if not loaded.rule.fallback and (g := fire(loaded, d, at))]
    if all(g.role == "hypothesis" for g in found):  # never leave an OOM unexplained: the catch-alls speak now
        found += [g for loaded in registry.values() if loaded.rule.fallback and (g := fire(loaded, d, at))]
    return rank(found)


def _event_order(facts: ParseResult) -> list[int]:
    """The root-cause rank's event first, then fatal events, then the rest, each in log order."""
    return sorted(range(len(facts.events)),
                  key=lambda i: (not facts.events[i].root_cause, not facts.events[i].fatal, i))


def _by_source(facts: ParseResult) -> dict[int, tuple[ParseResult, int]]:
    """For each event, the facts of its own source (its events and runs) and its index there. derive reads nothing
    beyond an event's source; looking through every run and event of 10,000 logs for each event was quadratic."""
    indices: dict[str, list[int]] = {}
    for i, e in enumerate(facts.events):
        indices.setdefault(e.source, []).append(i)
    runs: dict[str, list[RunContext]] = {}
    for r in facts.runs:
        if r.source in indices:
            runs.setdefault(r.source, []).append(r)
    out: dict[int, tuple[ParseResult, int]] = {}
    for source, mine in indices.items():
        part = ParseResult(events=tuple(facts.events[i] for i in mine), runs=tuple(runs.get(source, ())))
        out.update((i, (part, k)) for k, i in enumerate(mine))
    return out


class _Shared:
    """One instance of each equal sentence, evidence line and fix across a report's diagnoses. They are frozen, so
    sharing them is safe; 1,000 OOMs of one kind in 10,000 logs repeat the same few (40 MiB of copies before)."""

    def __init__(self) -> None:
        self.parts: dict[Any, Any] = {}

    def one(self, part: Any) -> Any:
        """The instance kept for parts equal to `part` (a model is keyed by its repr: every field's value)."""
        return self.parts.setdefault(part if isinstance(part, str) else (type(part), repr(part)), part)

    def diagnosis(self, g: Diagnosis) -> Diagnosis:
        return g.model_copy(update={
            "title": self.one(g.title), "seen": self.one(g.seen), "why": self.one(g.why), "action": self.one(g.action),
            "evidence": tuple(self.one(e) for e in g.evidence), "fixes": tuple(self.one(f) for f in g.fixes)})


def diagnose_with(facts: ParseResult, registry: Mapping[str, LoadedRule]) -> tuple[Diagnosis, ...]:
    """Diagnoses for all events; a rule repeated for another event of the same run is reported once."""
    seen: set[tuple[str, str, int]] = set()
    out: list[Diagnosis] = []
    parts = _by_source(facts)
    shared = _Shared()
    for index in _event_order(facts):
        event = facts.events[index]
        part, local = parts[index]
        for g in diagnose_event(part, local, registry, report_index=index):
            key = (g.rule, event.source, event.run)
            if key not in seen:
                seen.add(key)
                out.append(shared.diagnosis(g))
    return tuple(out)


def diagnose(facts: ParseResult, rule_dirs: Sequence[Path] = ()) -> tuple[Diagnosis, ...]:
    """Ranked diagnoses for every event, using the repo's rules/ plus user packs (overriding by id)."""
    return diagnose_with(facts, load_rules(rule_dirs))
