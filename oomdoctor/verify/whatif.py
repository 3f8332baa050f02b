"""Would another allocator setting have avoided a recorded OOM? A snapshot's alloc/free trace, replayed.

A memory snapshot dumped with history (`torch.cuda.memory._record_memory_history`) holds, per device, the
alloc/free trace up to and past the `oom` entry. The trace is replayed through verify's allocator model
(allocator.py: the native caching allocator, or expandable segments) under the capacity PyTorch had at the
failure (reserved then + the device's free memory the `oom` entry records), first as recorded, then under
each setting. A setting is credited only when the as-recorded replay reproduces the failure at the same request.
Pure Python: no torch.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.fixids import GC_THRESHOLD, max_split_size_mb
from oomdoctor.units import MIB, format_bytes
from oomdoctor.verify.allocator import AllocConf, AllocConfError, ReplayResult, allocation_size, replay

SEGMENT_GROW = ("segment_alloc", "segment_map")
SEGMENT_SHRINK = ("segment_free", "segment_unmap")
WIDTH = 80  # the text report's columns
DRIVER_SLACK = 2 * MIB  # free memory the driver may fail to hand out (page granularity) before a cap is inferred


class NoTrace(ValueError):
    """The snapshot cannot be replayed (the reason is the message)."""


@dataclass
class Trial:
    """One replay of the trace: the setting, and whether the failing request fit."""

    setting: str
    alloc_conf: str
    result: ReplayResult

    @property
    def reproduced(self) -> bool:
        return self.result.oom


@dataclass
class WhatIf:
    """The replay of one device's trace under each setting."""

    device: int
    requested_bytes: int
    capacity_bytes: int
    entries: int
    preexisting_blocks: int
    trials: list[Trial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        """The as-recorded replay failed, and at the recorded request (the last event of the trace)."""
        base = self.trials[0].result
        return base.oom and base.oom_event == base.events


def _recorded_conf(data: dict[str, Any], device: int) -> AllocConf:
    settings = data.get("allocator_settings") or {}
    segs = [s for s in data.get("segments") or () if isinstance(s, dict) and int(s.get("device", 0)) == device]
    expandable = bool(settings.get("expandable_segments")) or any(s.get("is_expandable") for s in segs)
    try:
        split = int(settings.get("max_split_size") or 0)
    except (TypeError, ValueError):
        split = 0
    base = AllocConf(expandable_segments=expandable)
    if 0 < split < 2**62:
        base = AllocConf(expandable_segments=expandable, max_split_size=split)
    return base


def _events(data: dict[str, Any], device: int) -> tuple[list[tuple[str, int, int]], int, int, int, int, int | None]:
    """(replay events ending with the failing request, requested bytes, capacity, trace entries, pre-existing,
    the device's free bytes when a cap below the device failed the request, else None)."""
    traces = data.get("device_traces") or []
    if device >= len(traces) or not traces[device]:
        raise NoTrace(f"no alloc/free trace for device {device}: record with "
                      "torch.cuda.memory._record_memory_history() before the failure")
    trace = [e for e in traces[device] if isinstance(e, dict)]
    k = next((i for i, e in enumerate(trace) if e.get("action") == "oom"), None)
    if k is None:
        raise NoTrace(f"the trace of device {device} has no oom entry: nothing failed while it recorded")
    oom = trace[k]
    if oom.get("device_free") is None:
        raise NoTrace("the oom entry does not record the device's free memory: the capacity is unknown")
    requested = int(oom.get("size") or 0)
    frees = "free_completed" if any(e.get("action") == "free_completed" for e in trace) else "free_requested"
    allocated_in_trace = {e.get("addr") for e in trace if e.get("action") == "alloc"}
    live: dict[int, int] = {}  # addr -> replay id
    pre: dict[int, int] = {}  # addr -> size of blocks that were live before the trace began
    events: list[tuple[str, Any, int]] = []  # frees of pre-existing blocks name their address until ids are known
    next_id = 0
    for e in trace[:k]:
        action, raw_addr, size = e.get("action"), e.get("addr"), int(e.get("size") or 0)
        if raw_addr is None:
            continue
        addr = int(raw_addr)
        if action == "alloc":
            live[addr] = next_id
            events.append(("a", next_id, size))
            next_id += 1
        elif action == frees:
            if addr in live:
                events.append(("f", live.pop(addr), 0))
            elif addr not in pre:
                pre[addr] = size
                events.append(("f", ("pre", addr), 0))
    # blocks alive at the dump that the trace never allocated were alive before it began, and through the oom
    for seg in data.get("segments") or ():
        if not isinstance(seg, dict) or int(seg.get("device", 0)) != device:
            continue
        addr = int(seg.get("address", 0))
        for b in seg.get("blocks") or ():
            baddr = b.get("address", addr)
            if str(b.get("state", "")).startswith("active") and baddr not in allocated_in_trace and baddr not in pre:
                pre[baddr] = int(b.get("size", 0))
            addr += int(b.get("size", 0))
    ids = {a: -1 - i for i, a in enumerate(sorted(pre))}  # pre-existing blocks, placed first in address order
    head = [("a", ids[a], pre[a]) for a in sorted(pre)]
    replayed = head + [(kind, ids[i[1]] if isinstance(i, tuple) else i, n) for kind, i, n in events]
    replayed.append(("a", next_id, requested))
    reserved_dump = sum(int(s.get("total_size", 0)) for s in data.get("segments") or ()
                        if isinstance(s, dict) and int(s.get("device", 0)) == device)
    after = trace[k + 1:]
    grown = sum(int(e.get("size") or 0) for e in after if e.get("action") in SEGMENT_GROW)
    shrunk = sum(int(e.get("size") or 0) for e in after if e.get("action") in SEGMENT_SHRINK)
    reserved_at_oom = reserved_dump - grown + shrunk
    device_free = int(oom["device_free"])
    # the driver had room for the segment: a cap below the device (a memory fraction) refused it. The smallest cap
    # the trace is consistent with is the most PyTorch held before the failure; replay under that.
    capped = device_free >= allocation_size(requested) + DRIVER_SLACK
    capacity = _peak_reserved(trace[:k], reserved_at_oom) if capped else reserved_at_oom + device_free
    return replayed, requested, capacity, k, len(pre), device_free if capped else None


def _peak_reserved(before: list[dict[str, Any]], reserved_at_oom: int) -> int:
    """The most PyTorch had reserved at any point of the trace before the failure, walking back from the failure."""
    reserved = peak = reserved_at_oom
    for e in reversed(before):
        size = int(e.get("size") or 0)
        if e.get("action") in SEGMENT_GROW:
            reserved -= size
        elif e.get("action") in SEGMENT_SHRINK:
            reserved += size
        peak = max(peak, reserved)
    return peak


def settings_to_try(recorded: AllocConf, requested: int) -> list[tuple[str, AllocConf]]:
    """The recorded settings first, then each allocator fix the recorded run did not already have."""
    out = [("as recorded", recorded)]
    if not recorded.expandable_segments:
        out.append(("expandable-segments", AllocConf(expandable_segments=True)))
        out.append(("max-split-size", AllocConf(max_split_size=max_split_size_mb(requested) * 2**20)))
        out.append(("gc-threshold", AllocConf(garbage_collection_threshold=GC_THRESHOLD)))
    return out


def what_if(data: Any, device: int | None = None) -> WhatIf:
    """Replay the device's trace (the device of the first oom entry when not given) under each setting."""
    if not isinstance(data, dict) or "segments" not in data:
        raise NoTrace("a bare segment list has no trace to replay")
    if device is None:
        device = next((d for d, tr in enumerate(data.get("device_traces") or [])
                       if any(isinstance(e, dict) and e.get("action") == "oom" for e in tr or ())), 0)
    events, requested, capacity, entries, pre, device_free = _events(data, device)
    report = WhatIf(device=device, requested_bytes=requested, capacity_bytes=capacity, entries=entries,
                    preexisting_blocks=pre)
    if device_free is not None:
        report.notes.append(f"the device still had {format_bytes(device_free)} free when the request failed, so a cap "
                            "below the device (a memory fraction) refused it; the replay caps PyTorch at the most it "
                            f"held before the failure, {format_bytes(capacity)}, the smallest cap the trace allows")
    try:
        recorded = _recorded_conf(data, device)
    except AllocConfError:
        recorded = AllocConf()
    for name, conf in settings_to_try(recorded, requested):
        report.trials.append(Trial(name, conf.render(), replay(events, capacity, conf)))
    if pre:
        report.notes.append(f"{pre} block(s) were alive before the trace began; they are placed first, in address "
                            "order, which the real allocator may not have done")
    if not report.reproduced:
        report.notes.append("the as-recorded replay does not fail at the recorded request, so the settings cannot "
                            "be credited (other streams, CUDA graphs or blocks from before the trace differ)")
    return report


def to_dict(report: WhatIf, source: str) -> dict[str, Any]:
    """The JSON form (`verify --snapshot … --format json`)."""
    return {
        "snapshot": source, "device": report.device, "requested_bytes": report.requested_bytes,
        "capacity_bytes": report.capacity_bytes, "trace_entries": report.entries,
        "preexisting_blocks": report.preexisting_blocks, "reproduced": report.reproduced,
        "trials": [{"setting": t.setting, "alloc_conf": t.alloc_conf, "oom": t.result.oom,
                    "fits": report.reproduced and i > 0 and not t.result.oom,
                    "peak_allocated_bytes": t.result.peak_allocated_bytes,
                    "peak_reserved_bytes": t.result.peak_reserved_bytes} for i, t in enumerate(report.trials)],
        "notes": report.notes,
    }


def render_text(report: WhatIf, source: str) -> str:
    """A short table: each setting, whether the recorded request fit, the peak it reserved."""
    lines = [f"what-if: {source}",
             f"device {report.device}: {format_bytes(report.requested_bytes)} requested, "
             f"{format_bytes(report.capacity_bytes)} for PyTorch, {report.entries} trace entries replayed",
             f" {'setting':21} {'result':18} {'peak reserved':>13}"]
    for i, t in enumerate(report.trials):
        if i == 0:
            state = "OOM (reproduced)" if report.reproduced else ("OOM (elsewhere)" if t.result.oom else "fits (not reproduced)")
        else:
            state = "OOM" if t.result.oom else ("fits" if report.reproduced else "fits (not credited)")
        lines.append(f" {t.setting:21} {state:18} {format_bytes(t.result.peak_reserved_bytes):>13}")
        if t.alloc_conf and i > 0:
            lines.append(f"   PYTORCH_CUDA_ALLOC_CONF={t.alloc_conf}")
    lines += [textwrap.fill(f"note: {n}", WIDTH, subsequent_indent="      ") for n in report.notes]
    fitting = [t.setting for t in report.trials[1:] if report.reproduced and not t.result.oom]
    if report.reproduced and len(report.trials) == 1:
        lines.append("the run already had expandable segments: no allocator setting is left to try; cut the peak")
    elif report.reproduced:
        lines.append(f"would have fit: {', '.join(fitting)}" if fitting else
                     "no allocator setting fits: the request does not fit the memory left; cut the peak instead")
    # every line over WIDTH wraps under a two-space indent (the notes above already wrapped under their label)
    return "\n".join(textwrap.fill(ln, WIDTH, subsequent_indent="  ") if len(ln) > WIDTH and "\n" not in ln else ln
                     for ln in lines) + "\n"


def exit_code(report: WhatIf) -> int:
    """0 when the replay reproduced the failure and a setting fits; 1 otherwise."""
    return 0 if report.reproduced and any(not t.result.oom for t in report.trials[1:]) else 1
