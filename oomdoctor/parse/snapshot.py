"""PyTorch CUDA memory snapshots (`torch.cuda.memory._dump_snapshot` pickles), read safely and summarised.

A pickle can run code when it is loaded, so snapshots are read with an unpickler that refuses every global:
the format needs only dicts, lists, strings and numbers. The summary is what the allocator knew at the time:
per device the segments, reserved and allocated bytes, the largest free block, the bytes stranded in
partly-used segments, and the `oom` trace entries (request size and the device's free memory).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field

from oomdoctor.errors import InputError
from oomdoctor.parse.model import Evidence, Frozen, OOMEvent
from oomdoctor.units import format_bytes

PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")  # protocols 2-5 start with PROTO n
TOP_FRAMES = 5  # allocations grouped by their innermost Python frame: how many groups a summary keeps


class SnapshotError(InputError):
    """A snapshot that cannot be read safely: not a pickle, a hostile pickle, or not a memory snapshot."""


class _Refusing(pickle.Unpickler):
    """An unpickler for plain data only: any global (class, function) is refused before it can run."""

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotError(f"the pickle names {module}.{name}; a memory snapshot never does",
                            tip="only load snapshots written by torch.cuda.memory._dump_snapshot")


class OomEntry(Frozen):
    """An `oom` trace entry: the allocator's failure as it recorded it."""

    device: int
    requested_bytes: int
    device_free_bytes: int | None = None


class FrameGroup(Frozen):
    """Live allocations grouped by the innermost Python frame that made them."""

    frame: str
    bytes: int
    count: int


# What made each live allocation, from its recorded stack (innermost Python frame that tells first):
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "kv_cache", "other")
_PARAM_CALLS = frozenset({"_apply", "convert", "to", "cuda", "load_state_dict", "_load_from_state_dict",
                          "register_parameter", "reset_parameters", "from_pretrained", "_load_pretrained_model",
                          "load_checkpoint", "to_empty", "_materialize_meta_module", "create_weights",
                          "load_weights", "_allocate_buffers_for_parameters"})
_FORWARD_CALLS = frozenset({"forward", "_call_impl", "_wrapped_call_impl", "__call__"})


def _recorded_frames(block: dict) -> list[dict]:
    """A block's recorded stack, innermost first: its own, else its last history entry's."""
    frames = block.get("frames") or []
    if not frames and block.get("history"):
        frames = (block["history"][-1] or {}).get("frames") or []
    return frames


def _python_frames(block: dict) -> list[tuple[str, str]]:
    frames = _recorded_frames(block)
    return [(str(fr.get("filename", "")).replace("\\", "/"), str(fr.get("name", ""))) for fr in frames
            if str(fr.get("filename", "")).endswith(".py")]


def category_of(block: dict) -> str | None:
    """parameters / gradients / optimizer_state / activations / kv_cache / other, from the block's recorded Python
    stack (None when none was recorded): a serving engine's cache, the optimizer's files, autograd's backward, module
    moves and weight loading, forward calls."""
    frames = _python_frames(block)
    if not frames:
        return None
    for filename, name in frames:  # innermost first
        if "kv_cache" in name.lower() or filename.endswith("/cache_engine.py"):
            return "kv_cache"
        if any(part in filename for part in ("/torch/optim/", "/optimizer/", "/optimizers/")) \
                or (name == "step" and "optim" in filename):
            return "optimizer_state"
        if filename.endswith("/param_and_grad_buffer.py"):  # Megatron's flat parameter and gradient buffers
            return "parameters"
        if "/torch/autograd/" in filename or (filename.endswith("/torch/_tensor.py") and name == "backward"):
            return "gradients"
        if name in _PARAM_CALLS and ("/torch/nn/" in filename or name not in ("to", "cuda", "convert", "_apply")):
            return "parameters"
        if name == "__init__" and "/torch/nn/modules/" in filename:
            return "parameters"
        if name in _FORWARD_CALLS and ("/torch/nn/" in filename or name == "forward"):
            return "activations"
    return "other"


class CategoryBytes(Frozen):
    """Live allocations of one category."""

    category: str
    bytes: int
    count: int


class DeviceSummary(Frozen):
    """One device's allocator state in the snapshot."""

    device: int
    segments: int
    reserved_bytes: int
    allocated_bytes: int
    inactive_bytes: int  # free blocks inside reserved segments
    largest_free_block_bytes: int
    stranded_bytes: int  # free blocks inside segments that also hold live blocks (cannot be released)
    expandable_segments: bool | None = None
    top_frames: tuple[FrameGroup, ...] = ()
    categories: tuple[CategoryBytes, ...] = ()  # live bytes by what made them, when stacks were recorded
    # From the recorded alloc/free trace: the lowest live level in each of TREND_WINDOWS equal parts, when the
    # trace holds many steps (each part swings more than the floor moves between parts); else empty.
    live_floors: tuple[int, ...] = ()


class SnapshotSummary(Frozen):
    """What a snapshot says, per device, plus its `oom` entries."""

    source: str
    format: str  # "dict" (segments + device_traces) or "segment-list" (a bare list of segments)
    devices: tuple[DeviceSummary, ...] = ()
    ooms: tuple[OomEntry, ...] = ()
    trace_entries: int = 0
    allocator_settings: dict[str, Any] = Field(default_factory=dict)


def looks_like_pickle(head: bytes) -> bool:
    """True when the bytes start like a pickle of protocol 2 or later."""
    return head[:2] in PICKLE_MAGIC


def load(path: str | Path) -> Any:
    """The snapshot's plain data; SnapshotError for anything that is not plain data."""
    try:
        with open(path, "rb") as f:
            return _Refusing(f).load()
    except SnapshotError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, MemoryError) as exc:
        raise SnapshotError(f"not a readable pickle ({type(exc).__name__}: {exc})", where=str(path),
                            tip="pass the file torch.cuda.memory._dump_snapshot wrote") from exc


def loads(data: bytes) -> Any:
    """As `load`, from bytes."""
    return load_stream(io.BytesIO(data))


def load_stream(stream: io.BufferedIOBase) -> Any:
    try:
        return _Refusing(stream).load()
    except SnapshotError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, MemoryError) as exc:
        raise SnapshotError(f"not a readable pickle ({type(exc).__name__}: {exc})") from exc


def _frame_of(block: dict) -> str:
    for fr in _recorded_frames(block):  # innermost first; skip the allocator's own C++ and torch internals
        name = str(fr.get("filename", ""))
        if name and not name.startswith("??") and "/torch/" not in name and not name.endswith((".cpp", ".h")):
            return f"{name}:{fr.get('line', '?')} {fr.get('name', '')}".strip()
    return "<no python frame recorded>"


def _device_summary(device: int, segments: Iterable[dict]) -> DeviceSummary:
    segs = list(segments)
    reserved = allocated = inactive = largest = stranded = 0
    expandable: bool | None = None
    by_frame: dict[str, list[int]] = {}
    by_category: dict[str, list[int]] = {}
    for seg in segs:
        reserved += int(seg.get("total_size", 0))
        if "is_expandable" in seg:
            expandable = bool(expandable) or bool(seg["is_expandable"])
        blocks = seg.get("blocks") or []
        live = any(str(b.get("state", "")).startswith("active") for b in blocks)
        for b in blocks:
            size = int(b.get("size", 0))
            state = str(b.get("state", ""))
            if state == "active_allocated":
                allocated += size
                group = by_frame.setdefault(_frame_of(b), [0, 0])
                group[0] += size
                group[1] += 1
                cat = category_of(b)
                if cat is not None:
                    tally = by_category.setdefault(cat, [0, 0])
                    tally[0] += size
                    tally[1] += 1
            elif state == "inactive":
                inactive += size
                largest = max(largest, size)
                if live:
                    stranded += size
    top = sorted(by_frame.items(), key=lambda kv: -kv[1][0])[:TOP_FRAMES]
    return DeviceSummary(device=device, segments=len(segs), reserved_bytes=reserved, allocated_bytes=allocated,
                         inactive_bytes=inactive, largest_free_block_bytes=largest, stranded_bytes=stranded,
                         expandable_segments=expandable,
                         top_frames=tuple(FrameGroup(frame=f, bytes=b, count=c) for f, (b, c) in top),
                         categories=tuple(CategoryBytes(category=k, bytes=by_category[k][0], count=by_category[k][1])
                                          for k in CATEGORIES if k in by_category))


TREND_WINDOWS = 8
TREND_MIN_EVENTS_PER_WINDOW = 50


def live_floors(trace: list[Any], allocated_at_dump: int) -> tuple[int, ...]:
    """The floor of live memory in each of TREND_WINDOWS parts of a trace, or () when the trace is short or looks
    like a single step (the floor moving as much as the level swings within a part is one step's build-up, not a
    trend across steps). Levels are anchored on the bytes allocated when the snapshot was dumped."""
    net, series = 0, []
    for e in trace:
        if not isinstance(e, dict):
            continue
        action = e.get("action")
        if action == "alloc":
            net += int(e.get("size", 0))
        elif action == "free_completed":
            net -= int(e.get("size", 0))
        else:
            continue
        series.append(net)
    if len(series) < TREND_WINDOWS * TREND_MIN_EVENTS_PER_WINDOW:
        return ()
    start = max(0, allocated_at_dump - net)
    k = len(series) // TREND_WINDOWS
    parts = [series[i * k:(i + 1) * k] for i in range(TREND_WINDOWS)]
    floors = [start + min(p) for p in parts]
    swings = sorted(max(p) - min(p) for p in parts)
    moves = sorted(abs(b - a) for a, b in zip(floors, floors[1:]))
    if swings[len(swings) // 2] < 2 * moves[len(moves) // 2]:
        return ()
    return tuple(floors)


def summarize(data: Any, source: str = "<snapshot>") -> SnapshotSummary:
    """The summary of a loaded snapshot (either format); SnapshotError when it is not a memory snapshot."""
    traces: list[Any] = []
    settings: dict[str, Any] = {}
    if isinstance(data, list):
        fmt, segments = "segment-list", data
    elif isinstance(data, dict) and "segments" in data:
        fmt, segments = "dict", data.get("segments") or []
        traces, settings = data.get("device_traces") or [], data.get("allocator_settings") or {}
    else:
        raise SnapshotError("a pickle, but not a CUDA memory snapshot (no segments)", where=source,
                            tip="pass the file torch.cuda.memory._dump_snapshot wrote")
    if not all(isinstance(s, dict) for s in segments):
        raise SnapshotError("segments are not mappings", where=source, tip="the snapshot is damaged")
    per_device: dict[int, list[dict]] = {}
    for seg in segments:
        per_device.setdefault(int(seg.get("device", 0)), []).append(seg)
    ooms = []
    entries = 0
    for device, trace in enumerate(traces):
        entries += len(trace or [])
        for entry in trace or []:
            if isinstance(entry, dict) and entry.get("action") == "oom":
                free = entry.get("device_free")
                ooms.append(OomEntry(device=device, requested_bytes=int(entry.get("size", 0)),
                                     device_free_bytes=int(free) if free is not None else None))
    devices = []
    for d, segs in sorted(per_device.items()):
        dev = _device_summary(d, segs)
        trace = traces[d] if d < len(traces) and isinstance(traces[d], list) else []
        devices.append(dev.model_copy(update={"live_floors": live_floors(trace, dev.allocated_bytes)}))
    return SnapshotSummary(
        source=source, format=fmt, devices=tuple(devices),
        ooms=tuple(ooms), trace_entries=entries,
        allocator_settings={k: v for k, v in settings.items() if isinstance(v, (int, float, str, bool))},
    )


def read(path: str | Path) -> SnapshotSummary:
    """Load and summarise one snapshot file."""
    return summarize(load(path), source=str(path))


def is_snapshot_file(path: str) -> bool:
    """True when a path (not stdin) starts like a pickle: it is read as a memory snapshot, not as a log."""
    if path == "-":
        return False
    try:
        with open(path, "rb") as f:
            return looks_like_pickle(f.read(2))
    except OSError:
        return False


def to_events(summary: SnapshotSummary) -> list[OOMEvent]:
    """One event per `oom` entry of the snapshot's trace, with the allocator's state of that device.

    The segments are the state when the snapshot was dumped: at the failure when the OOM observer dumped
    it, later otherwise. `snapshot_at_failure` says whether the state can be the failing one (its largest
    free block could not hold the request); rules use the segment figures only then.
    """
    by_device = {d.device: d for d in summary.devices}
    events: list[OOMEvent] = []
    for oom in summary.ooms:
        dev = by_device.get(oom.device)
        text = (f"CUDA memory snapshot: oom on device {oom.device}: tried to allocate "
                f"{format_bytes(oom.requested_bytes)}"
                + (f" with {format_bytes(oom.device_free_bytes)} free on the device" if oom.device_free_bytes is not None
                   else ""))
        detail: dict[str, Any] = {"snapshot": True}
        figures: dict[str, Any] = {}
        if dev is not None:
            at_failure = dev.largest_free_block_bytes < oom.requested_bytes
            if at_failure:  # the segments can be the failing state: they are the event's figures
                figures = {"reserved_bytes": dev.reserved_bytes, "allocated_bytes": dev.allocated_bytes,
                           "reserved_unallocated_bytes": dev.reserved_bytes - dev.allocated_bytes}
            else:
                text += (f"; the segments were dumped later (a free block of "
                         f"{format_bytes(dev.largest_free_block_bytes)} would have held the request)")
            detail.update(largest_free_block_bytes=dev.largest_free_block_bytes, inactive_bytes=dev.inactive_bytes,
                          stranded_bytes=dev.stranded_bytes, segments=dev.segments,
                          snapshot_at_failure=at_failure,
                          top_frames=[[g.frame, g.bytes] for g in dev.top_frames],
                          live_by_category={c.category: c.bytes for c in dev.categories},
                          live_floors=list(dev.live_floors))
        events.append(OOMEvent(
            kind="cuda_oom", source=summary.source, line=1, end_line=1, gpu_index=oom.device,
            requested_bytes=oom.requested_bytes, free_bytes=oom.device_free_bytes, message=text, detail=detail,
            evidence={"message": Evidence(source=summary.source, line=1, text=text)}, **figures))
    return events

