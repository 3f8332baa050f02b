"""Ranked diagnoses and the report they make with the events (the shape of shared/CONTRACT.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

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


class Report(Frozen):
    """What `diagnose` prints: every event in log order and the diagnoses, best first."""

    version: str = __version__
    events: tuple[OOMEvent, ...] = ()
    diagnoses: tuple[Diagnosis, ...] = ()
    runs: tuple[RunContext, ...] = ()

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
