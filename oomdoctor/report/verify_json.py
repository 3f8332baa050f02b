"""The `verify --format json` document's output models (docs/json.md): built by verify only, not by every report."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from oomdoctor.parse.model import OOMEvent
from oomdoctor.report.json_report import SCHEMA_VERSION


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
