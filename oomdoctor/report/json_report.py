"""The machine-readable reports (docs/json.md): pydantic output models, so output and JSON Schema cannot drift.

`diagnose --format json` is `DiagnoseDocument` dumped; `verify --format json` is described by `VerifyDocument`.
Sizes are integers in bytes (field names end in `_bytes`); absent figures are null. Fields may be added, never
renamed or repurposed; `schema_version` changes only if that promise is ever broken.
"""

from __future__ import annotations

import io
import json
from typing import Any, Final, Literal, TextIO

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from oomdoctor.diagnosis import Report
from oomdoctor.parse.model import OOMEvent

SCHEMA_VERSION: Final = 1


class DiagnoseDocument(Report):
    """The `oomdoctor diagnose --format json` document: every OOM event in log order, the diagnoses best first,
    and what the log says about each run. Sizes are integer bytes; absent figures are null."""

    schema_version: Literal[1] = SCHEMA_VERSION


def to_dict(report: Report) -> dict[str, Any]:
    """The diagnose document as plain JSON-ready data, `schema_version` first."""
    fields = {name: getattr(report, name) for name in type(report).model_fields}
    data = DiagnoseDocument(**fields).model_dump(mode="json")
    return {"schema_version": data.pop("schema_version"), **data}


def render(report: Report) -> str:
    """JSON for scripts: `oomdoctor diagnose LOG --format json | jq`."""
    out = io.StringIO()
    write(report, out)
    return out.getvalue()


def write(report: Report, out: TextIO) -> None:
    """The document `render` returns, written one event, diagnosis or run at a time: `json.dumps(to_dict(report),
    indent=2)` byte for byte, without holding the whole document as one dict and one string (10,000 logs make
    ~20 MB of JSON, and the dict and the encoder's pieces took ~100 MiB more)."""
    out.write(f'{{\n  "schema_version": {SCHEMA_VERSION}')
    for name in DiagnoseDocument.model_fields:
        if name == "schema_version":
            continue
        value = getattr(report, name)
        out.write(f",\n  {_dumps(name)}: ")
        if not (isinstance(value, tuple) and value):
            out.write(_indent(_dumps(to_jsonable_python(value)), 1))
            continue
        out.write("[")
        for k, item in enumerate(value):
            data = item.model_dump(mode="json") if isinstance(item, BaseModel) else to_jsonable_python(item)
            out.write(("," if k else "") + "\n    " + _indent(_dumps(data), 2))
        out.write("\n  ]")
    out.write("\n}\n")


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def _indent(text: str, level: int) -> str:
    """JSON dumped alone, indented as if nested `level` deep (a JSON string never holds a raw newline)."""
    return text.replace("\n", "\n" + "  " * level)


# --- verify ------------------------------------------------------------------------------------------------------


class _Out(BaseModel):
    """Base of the verify output models: unknown keys are an error, so an undocumented field fails the tests."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built by verify only, not by every JSON report


class VerifyTrial(_Out):
    """One replay: the baseline (the failing step as configured) or one fix. Keys marked optional are present
    only where they apply: sim-only measurements, fixes that could be applied, trials that failed."""

    fix: str
    verifiable: bool
    oom: bool | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    seconds: float | None
    fits: bool
    marginal: bool | None = None
    error: str | None = None
    headroom_bytes: int | None = None
    message: str | None = None
    parsed: OOMEvent | None = None
    replay_seconds: float | None = None
    unlimited_peak_allocated_bytes: int | None = None
    flops: int | None = None
    alloc_retries: int | None = None
    events: int | None = None
    from_baseline_trace: bool | None = None
    params: dict[str, Any] | None = None
    alloc_conf: str | None = None
    changes: dict[str, tuple[Any, Any]] | None = None
    effective_batch: int | None = None
    relative_time: float | None = None


class MaxBatch(_Out):
    """`--max-batch`: the largest per-device batch that fits with the config's margin."""

    key: Literal["batch", "eval_batch"] | None = None
    max_batch: int | None = None
    margin: float | None = None
    trials: int | None = None
    grad_accum: int | None = None
    effective_batch: int | None = None
    error: str | None = None


class VerifyDocument(_Out):
    """The `oomdoctor verify --format json` document: the baseline trial first, then one trial per fix."""

    schema_version: Literal[1] = SCHEMA_VERSION
    device: Literal["cuda", "sim"]
    capacity_bytes: int
    non_pytorch_bytes: int
    total_bytes: int | None
    phase: Literal["train", "eval", "generate"]
    steps: int
    fixes_from: Literal["config", "diagnosis", "default"]
    baseline_reproduced: bool
    trials: tuple[VerifyTrial, ...]
    max_batch: MaxBatch | None = None
    notes: tuple[str, ...] | None = None


def render_verify(doc: dict[str, Any]) -> str:
    """The verify document checked against `VerifyDocument` (raises on an undocumented key), with
    `schema_version`, keys otherwise exactly as given."""
    model = VerifyDocument.model_validate({"schema_version": SCHEMA_VERSION, **doc})
    return json.dumps(model.model_dump(mode="json", exclude_unset=True), indent=2, ensure_ascii=False)
