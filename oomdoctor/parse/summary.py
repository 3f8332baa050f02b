"""`torch.cuda.memory_summary()` tables printed in a log: read, and given to the OOM event they stand beside.

The table is the allocator's own account (torch/cuda/memory.py): current and peak allocated, reserved and
non-releasable memory (free space inside segments that also hold live blocks: fragmentation, measured), the
number of OOMs and cudaMalloc retries. Sizes are printed floored to their unit ("  1234 MiB"; "  1234 MB" before
1.8, the same powers of 1024).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oomdoctor.parse.lazyregex import lazy
from oomdoctor.parse.model import Evidence, OOMEvent
from oomdoctor.parse.normalize import Line
from oomdoctor.units import to_bytes

HEAD = lazy(r"PyTorch CUDA memory summary, device ID (?P<device>\d{1,3})")
HEAD_NEEDS = "memory summary"  # in every line HEAD matches
COUNTS = lazy(r"CUDA OOMs: (?P<ooms>\d{1,9})\s*\|\s*cudaMalloc retries: (?P<retries>\d{1,9})")
_SIZE = r"(?P<{0}>\d{{1,12}}) (?P<{0}_unit>B|KiB|MiB|GiB|TiB|PiB|KB|MB|GB|TB|PB)"  # 1.x printed KB/MB/GB, base 1024
ROW = lazy(r"\|\s?(?P<metric>Allocated memory|Active memory|Requested memory|GPU reserved memory|"
                    r"Non-releasable memory)\s*\|\s*" + _SIZE.format("cur") + r"\s*\|\s*" + _SIZE.format("peak"))
TABLE_LINES = 60  # a whole table, sub-pools included, is 40 lines
REACH_LINES = 300  # a table this far from an OOM message is not about it
FIELDS = {"Allocated memory": "allocated_bytes", "Active memory": "active_bytes",
          "Requested memory": "requested_bytes", "GPU reserved memory": "reserved_bytes",
          "Non-releasable memory": "non_releasable_bytes"}


def tables(lines: Sequence[Line], source: str) -> list[dict[str, Any]]:
    """Every summary table: its device, line, current sizes (and peak allocated/reserved), OOMs and retries."""
    out: list[dict[str, Any]] = []
    k = 0
    while k < len(lines):
        head = HEAD.search(lines[k].text) if HEAD_NEEDS in lines[k].text else None
        if head is None:
            k += 1
            continue
        table: dict[str, Any] = {"device": int(head["device"]), "line": lines[k].number,
                                 "evidence": Evidence(source=source, line=lines[k].number, text=lines[k].text.strip())}
        end = min(len(lines), k + TABLE_LINES)
        j = k + 1
        while j < end and not HEAD.search(lines[j].text):
            text = lines[j].text
            if (c := COUNTS.search(text)) is not None:
                table["ooms"], table["retries"] = int(c["ooms"]), int(c["retries"])
            elif (r := ROW.search(text)) is not None and FIELDS[r["metric"]] not in table:
                name = FIELDS[r["metric"]]
                if name == "non_releasable_bytes":  # the row that measures fragmentation is the evidence
                    row = " ".join(text.replace("|", " ").split())
                    table["evidence"] = Evidence(source=source, line=lines[j].number, text=row)
                table[name] = to_bytes(r["cur"], r["cur_unit"].strip())
                if name in ("allocated_bytes", "reserved_bytes"):
                    table[f"peak_{name}"] = to_bytes(r["peak"], r["peak_unit"].strip())
            j += 1
        if "reserved_bytes" in table:
            out.append(table)
        k = j
    return out


def attach(events: list[OOMEvent], found: list[dict[str, Any]]) -> list[OOMEvent]:
    """Each table goes to the nearest device OOM of its GPU (or of unknown GPU) within REACH_LINES."""
    out = list(events)
    for table in found:
        near = [(abs(e.line - table["line"]), i) for i, e in enumerate(out)
                if e.kind in ("cuda_oom", "cuda_error", "hip_oom") and e.gpu_index in (None, table["device"])
                and abs(e.line - table["line"]) <= REACH_LINES and "memory_summary" not in e.detail]
        if not near:
            continue
        i = min(near)[1]
        ev = out[i]
        summary = {k: v for k, v in table.items() if k != "evidence"}
        out[i] = ev.model_copy(update={"detail": {**ev.detail, "memory_summary": summary},
                                       "evidence": {**ev.evidence, "memory_summary": table["evidence"]}})
    return out
