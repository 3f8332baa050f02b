"""The machine-readable report of shared/CONTRACT.md: sizes in bytes, absent figures null."""

from __future__ import annotations

import json

from oomdoctor.diagnosis import Report


def render(report: Report) -> str:
    """JSON for scripts: `oomdoctor diagnose LOG --format json | jq`."""
    return json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
