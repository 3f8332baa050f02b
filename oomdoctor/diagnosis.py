"""Ranked diagnoses and the report they make with the events (the shape of shared/CONTRACT.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from oomdoctor import __version__
from oomdoctor.parse.model import Evidence, Frozen, OOMEvent, RunContext

Category = Literal[
    "fragmentation", "capacity", "eval_spike", "batch_too_large", "seq_len_spike", "leak",
    "other_process", "optimizer_states", "checkpoint_save", "generation", "host_oom", "kv_cache",
]
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]


class Fix(Frozen):
    """A concrete change for the user's stack; `id` is shared with verify's fix transforms."""

    id: str
    title: str
    changes: dict[str, Any] = Field(default_factory=dict)  # e.g. {"env": {...}, "training_args": {...}}
    effect: str | None = None  # expected effect, when the facts allow ("activations halve: ≈ 9 GiB back")
    verifiable: bool = False


class Diagnosis(Frozen):
    """One cause, with the confidence and evidence lines that support it, and what to change."""

    rule: str
    category: Category
    confidence: float
    title: str
    seen: str = ""  # what was seen (rendered with the actual figures)
    why: str = ""  # why it matters
    action: str = ""  # what to do
    role: Literal["primary", "contributing", "hypothesis"] = "primary"
    event_index: int = 0  # which event of the report it explains
    evidence: tuple[Evidence, ...] = ()
    fixes: tuple[Fix, ...] = ()


def first_event_diagnoses(diagnoses: Sequence[Diagnosis]) -> list[Diagnosis]:
    """The diagnoses of the event the report leads with (that of the first, best-ranked diagnosis), best first."""
    return [d for d in diagnoses if d.event_index == diagnoses[0].event_index] if diagnoses else []


def fixes_to_try(diagnoses: Sequence[Diagnosis]) -> tuple[str, ...]:
    """Fix ids for the first event, in the order to try them. When one cause is called primary, its fixes come
    first. When none is (several causes fit, as for a bare message), the first fix of each candidate cause comes
    first, in rank order, then each cause's second: three tries then test three causes, not one cause thrice."""
    if not diagnoses:
        return ()
    mine = first_event_diagnoses(diagnoses)
    if mine[0].role == "primary":
        return tuple(dict.fromkeys(f.id for d in mine for f in d.fixes))
    ordered: dict[str, None] = {}
    for k in range(max(len(d.fixes) for d in mine)):
        ordered.update((d.fixes[k].id, None) for d in mine if k < len(d.fixes))
    return tuple(ordered)


class Report(Frozen):
    """What `diagnose` prints: every event in log order and the diagnoses, best first."""

    version: str = __version__
    events: tuple[OOMEvent, ...] = ()
    diagnoses: tuple[Diagnosis, ...] = ()
    runs: tuple[RunContext, ...] = ()
    fixes_to_try: tuple[str, ...] = ()  # filled from the diagnoses when not given (see `fixes_to_try`)

    @model_validator(mode="before")
    @classmethod
    def _order_fixes(cls, data: Any) -> Any:
        if isinstance(data, dict) and "fixes_to_try" not in data:
            found = [d if isinstance(d, Diagnosis) else Diagnosis.model_validate(d) for d in data.get("diagnoses", ())]
            data = {**data, "fixes_to_try": fixes_to_try(found)}
        return data

    def to_dict(self) -> dict[str, Any]:
        """The `oomdoctor diagnose --format json` document as plain Python data (docs/json.md)."""
        from oomdoctor.report.json_report import to_dict

        return to_dict(self)

    def to_json(self) -> str:
        """Exactly what `oomdoctor diagnose --format json` prints."""
        from oomdoctor.report.json_report import render

        return render(self)

    def to_html(self) -> str:
        """The self-contained HTML page of `oomdoctor diagnose --format html`."""
        from oomdoctor.report.html import render

        return render(self)

    def _repr_html_(self) -> str:
        """Jupyter's display: a compact, self-contained summary (the verdict, each event, the other causes)."""
        from oomdoctor.report.html import summary

        return summary(self)
