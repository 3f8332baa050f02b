"""The machine-readable reports (docs/json.md): pydantic output models, so output and JSON Schema cannot drift.

`diagnose --format json` is `DiagnoseDocument` dumped; `verify --format json` is described by `VerifyDocument`
(`verify_json.py`). Sizes are integers in bytes (field names end in `_bytes`); absent figures are null. Fields may
be added, never renamed or repurposed; `schema_version` changes only if that promise is ever broken.
"""

from __future__ import annotations

import io
import json
from typing import Any, Final, Literal, TextIO

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from oomdoctor.diagnosis import Report

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
