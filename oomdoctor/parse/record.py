"""Post-mortem records written by `oomdoctor.capture`: recognised, checked, and turned into OOM events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oomdoctor.errors import InputError
from oomdoctor.parse.model import Evidence, OOMEvent
from oomdoctor.parse.snapshot import CATEGORIES

FORMAT = "oomdoctor-record"
VERSION = 1
MAX_RECORD_BYTES = 16 * 2**20  # capture writes a few MiB at most; anything larger is not ours
PHASES = ("train", "eval", "generate", "save", "init")


class RecordError(InputError):
    """A file that says it is a post-mortem record but cannot be one."""


def is_record_file(path: str) -> bool:
    """True when a path (not stdin) is a JSON object naming the record format in its first 4 KiB."""
    if path == "-":
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip()[:1] == b"{" and f'"format": "{FORMAT}"'.encode() in head


def read(path: str | Path) -> dict[str, Any]:
    """Load and check one record; RecordError (exit 2) names what is wrong."""
    p = Path(path)
    if p.stat().st_size > MAX_RECORD_BYTES:
        raise RecordError(f"larger than {MAX_RECORD_BYTES // 2**20} MiB: not a record oomdoctor.capture wrote",
                          where=str(p), tip="pass the training log instead")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"a damaged post-mortem record ({exc})", where=str(p),
                          tip="the training process may have died while writing it; use the log") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise RecordError("not a post-mortem record", where=str(p), tip="pass a file oomdoctor.capture wrote")
    if doc.get("version") != VERSION:
        raise RecordError(f"record version {doc.get('version')!r}; this oomdoctor reads version {VERSION}",
                          where=str(p), tip="diagnose it with the oomdoctor version that wrote it")
    return doc


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def to_event(doc: dict[str, Any], source: str, message_event: OOMEvent | None) -> OOMEvent | None:
    """The record's OOM as an event: the message's own figures (parsed like a log line) completed with the
    allocator state the OOM observer saw at the failure, and the step, phase and rank the hook knew."""
    oom: dict[str, Any] = doc["oom"] if isinstance(doc.get("oom"), dict) else {}
    if message_event is None and not oom:
        return None
    segments: dict[str, Any] = doc["segments"] if isinstance(doc.get("segments"), dict) else {}
    gpu: dict[str, Any] = doc["gpu"] if isinstance(doc.get("gpu"), dict) else {}
    text = doc.get("message") or (
        f"oomdoctor.capture: OOM on device {oom.get('device')}: tried to allocate {oom.get('requested_bytes')} bytes")
    update: dict[str, Any] = {}
    base = message_event or OOMEvent(kind="cuda_oom", source=source, line=1, end_line=1, message=text,
                                     evidence={"message": Evidence(source=source, line=1, text=text)})
    for field, value in (("requested_bytes", _int(oom.get("requested_bytes"))),
                         ("free_bytes", _int(oom.get("device_free_bytes"))),
                         ("gpu_index", _int(oom.get("device"))),
                         ("total_bytes", _int(gpu.get("total_bytes"))),
                         ("rank", _int(doc.get("rank"))),
                         ("step", _int(doc.get("step")))):
        if value is not None and getattr(base, field, None) is None:
            update[field] = value
    if doc.get("phase") in PHASES and base.phase in (None, "unknown"):
        update["phase"] = doc["phase"]
    reserved, allocated = _int(segments.get("reserved_bytes")), _int(segments.get("allocated_bytes"))
    if reserved is not None and allocated is not None and base.reserved_bytes is None:
        update.update(reserved_bytes=reserved, allocated_bytes=allocated, reserved_unallocated_bytes=reserved - allocated)
    detail = dict(base.detail)
    detail["record"] = True
    if segments and oom:  # the observer saw the segments at the failure: the snapshot facts apply
        detail.update(snapshot=True, snapshot_at_failure=True,
                      largest_free_block_bytes=_int(segments.get("largest_free_block_bytes")) or 0,
                      inactive_bytes=_int(segments.get("inactive_bytes")) or 0,
                      stranded_bytes=_int(segments.get("stranded_bytes")) or 0,
                      segments=_int(segments.get("count")) or 0,
                      top_frames=[[str(t.get("frame")), _int(t.get("bytes")) or 0]
                                  for t in doc.get("top_allocations") or [] if isinstance(t, dict)][:10],
                      live_by_category=_categories(doc.get("live_by_category")))
    update["detail"] = detail
    return base.model_copy(update=update)


def _categories(value: Any) -> dict[str, int]:
    """The record's live bytes by category: known categories with a non-negative whole number only."""
    out: dict[str, int] = {}
    for key, raw in (value or {}).items() if isinstance(value, dict) else ():
        n = _int(raw)
        if key in CATEGORIES and n is not None and n >= 0:
            out[key] = n
    return out
