"""The rule file format: pydantic models that refuse unknown keys, unknown facts and unknown fix ids."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from oomdoctor.diagnosis import Category
from oomdoctor.facts import FACTS
from oomdoctor.fixids import FIX_IDS

Op = Literal["gt", "ge", "lt", "le", "eq", "ne", "in", "present", "absent"]
ORDERING_OPS = frozenset({"gt", "ge", "lt", "le"})
NUMERIC_TYPES = frozenset({"bytes", "int", "float"})


def suggest(name: str, choices: Any) -> str:
    """' (did you mean X?)' when a close name exists, else ''."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_fact(name: str) -> str:
    """Return `name` if it is a fact derive documents, else raise with the closest one."""
    if name not in FACTS:
        raise ValueError(f"unknown fact {name!r}{suggest(name, FACTS)}; facts are listed in oomdoctor/derive.py FACTS")
    return name


class Strict(BaseModel):
    """Base for rule parts: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


class Condition(Strict):
    """A comparison `{fact, op, value | fact2 [times]}` or a combinator `all` / `any` / `not`."""

    fact: str | None = None
    op: Op | None = None
    value: Any = None
    fact2: str | None = None
    times: float = 1.0
    all_: list[Condition] | None = Field(default=None, alias="all")
    any_: list[Condition] | None = Field(default=None, alias="any")
    not_: Condition | None = Field(default=None, alias="not")

    @field_validator("fact", "fact2")
    @classmethod
    def _known_fact(cls, name: str | None) -> str | None:
        return None if name is None else check_fact(name)

    @model_validator(mode="after")
    def _one_form(self) -> Condition:
        forms = [f for f, v in (("fact", self.fact), ("all", self.all_), ("any", self.any_), ("not", self.not_)) if v is not None]
        if len(forms) != 1:
            raise ValueError(f"a condition is exactly one of fact/all/any/not, got {forms or 'none'}")
        if self.fact is not None:
            self._check_comparison()
        elif self.op is not None or self.fact2 is not None:
            raise ValueError("op/value/fact2 belong to a comparison, not to all/any/not")
        return self

    def _check_comparison(self) -> None:
        if self.op is None or self.fact is None:
            raise ValueError(f"comparison on {self.fact!r} needs op: gt|ge|lt|le|eq|ne|in|present|absent")
        ftype = FACTS[self.fact][0]
        if self.op in ("present", "absent"):
            if self.value is not None or self.fact2 is not None:
                raise ValueError(f"op {self.op} takes no value or fact2")
            return
        if (self.value is None) == (self.fact2 is None):
            raise ValueError(f"op {self.op} on {self.fact!r} needs exactly one of value or fact2")
        if self.op in ORDERING_OPS and ftype not in NUMERIC_TYPES:
            raise ValueError(f"op {self.op} needs a number, but {self.fact!r} is {ftype}; use eq/ne/in")
        if self.op == "in" and not isinstance(self.value, list):
            raise ValueError("op in needs value: a list")
        if self.fact2 is not None and FACTS[self.fact2][0] not in NUMERIC_TYPES | {ftype}:
            raise ValueError(f"cannot compare {self.fact!r} ({ftype}) with {self.fact2!r} ({FACTS[self.fact2][0]})")
        if self.value is not None and self.op != "in":
            _check_value_type(self.fact, ftype, self.value)

    def facts(self) -> set[str]:
        """Every fact name the condition reads."""
        names = {n for n in (self.fact, self.fact2) if n}
        for child in (self.all_ or []) + (self.any_ or []) + ([self.not_] if self.not_ else []):
            names |= child.facts()
        return names


def _check_value_type(fact: str, ftype: str, value: Any) -> None:
    ok = {
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }.get(ftype, isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        raise ValueError(f"{fact!r} is {ftype}, but value {value!r} is {type(value).__name__}")


class Boost(Strict):
    """Add `add` (may be negative) to the confidence when `when` is true."""

    when: Condition
    add: float = Field(ge=-1, le=1)


class Message(Strict):
    """Three-part message (Semgrep style): what was seen, why it matters, what to do. Jinja2 templates."""

    seen: str
    why: str
    do: str


class RuleTests(Strict):
    """Fixtures (paths relative to the repo) on which the rule must fire / stay silent; `todo` = known gaps."""

    fires: list[str] = Field(default_factory=list)
    silent: list[str] = Field(default_factory=list)
    todo: list[str] = Field(default_factory=list)


class Rule(Strict):
    """One diagnosis rule, loaded from `rules/<group>/<id>.yaml`."""

    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    category: Category
    title: str
    condition: Condition
    confidence: float = Field(ge=0, le=1)
    boost: list[Boost] = Field(default_factory=list)
    hypothesis: bool = False  # always reported as a weak signal, with hedged wording
    fallback: bool = False  # evaluated only for an event no other rule explained
    message: Message
    fixes: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    falsepositives: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    example: str = ""
    tests: RuleTests = Field(default_factory=RuleTests)

    @field_validator("fixes")
    @classmethod
    def _known_fixes(cls, ids: list[str]) -> list[str]:
        for fix in ids:
            if fix not in FIX_IDS:
                raise ValueError(f"unknown fix id {fix!r}{suggest(fix, FIX_IDS)}; ids live in oomdoctor/fixids.py")
        return ids

    @field_validator("evidence")
    @classmethod
    def _known_evidence(cls, names: list[str]) -> list[str]:
        return [check_fact(n) for n in names]

    def facts(self) -> set[str]:
        """Every fact the rule reads in its condition and boosts."""
        names = self.condition.facts()
        for b in self.boost:
            names |= b.when.facts()
        return names


def _exact(doc: Any, model: type[Strict]) -> dict[str, Any]:
    """`doc` when it holds exactly the model's fields (a dump by another version of this file does not)."""
    if not isinstance(doc, dict) or doc.keys() != model.model_fields.keys():
        raise ValueError(f"not a dumped {model.__name__}")
    return doc


def _condition(doc: Any) -> Condition:
    d = dict(_exact(doc, Condition))
    for name in ("fact", "fact2"):
        if d[name] is not None and d[name] not in FACTS:
            raise ValueError(f"unknown fact {d[name]!r}")
    for name in ("all_", "any_"):
        if d[name] is not None:
            d[name] = [_condition(c) for c in d[name]]
    if d["not_"] is not None:
        d["not_"] = _condition(d["not_"])
    return Condition.model_construct(**d)


def rule_from_dump(doc: Any) -> Rule:
    """A rule rebuilt from its own `model_dump(mode="json")` without validating it again: the rule cache holds only
    rules validated when it was written (start-up, issue 11). Fact names and fix ids are checked against this build;
    raises ValueError on a document of another shape."""
    d = dict(_exact(doc, Rule))
    d["condition"] = _condition(d["condition"])
    d["boost"] = [Boost.model_construct(**{**_exact(b, Boost), "when": _condition(b["when"])}) for b in d["boost"]]
    d["message"] = Message.model_construct(**_exact(d["message"], Message))
    d["tests"] = RuleTests.model_construct(**_exact(d["tests"], RuleTests))
    unknown = [f for f in d["fixes"] if f not in FIX_IDS] + [n for n in d["evidence"] if n not in FACTS]
    if unknown:
        raise ValueError(f"unknown fix ids or facts {unknown}")
    return Rule.model_construct(**d)
