"""One trial in its own process: `python -m oomdoctor.verify.trial` reads a JSON spec on stdin, writes JSON out.

Spec keys: device ("sim" | "cuda"), phase, steps, workload {"kind": "transformer" | "hf" | "entry", "entry", "params"},
capacity_bytes, total_bytes, non_pytorch_bytes, alloc_conf, result_path, trace_path (sim: where to write the
storage trace for the parent to replay allocator-only fixes). The result goes to `result_path`, a file
in a private folder the parent made, never to stdout: the step prints there freely and cannot forge a result by
printing. Without `result_path` (a trial run by hand) the result is printed as the last line of stdout.
For cuda the parent sets PYTORCH_CUDA_ALLOC_CONF in the environment before this process imports torch.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# How a failed host allocation reads: Python's MemoryError, torch's CPU allocator, errno 12 (ENOMEM). Under the
# trial's address-space limit (runner.trial_memory_limit) that is the limit, not the step.
HOST_MEMORY_TEXT = ("can't allocate memory", "Cannot allocate memory", "std::bad_alloc")


def load_entry(entry: str, base: Path | None = None) -> Callable[..., Any]:
    """Resolve `package.module:function` or `path/to/file.py:function` (relative to `base`)."""
    target, _, name = entry.rpartition(":")
    if not target or not name:
        raise ValueError(f"entry {entry!r} is not `module:function` or `file.py:function`")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_absolute() and base is not None:
            path = base / path
        spec = importlib.util.spec_from_file_location(f"oomdoctor_entry_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise AttributeError(f"{target} has no function {name!r}")
    return fn


def _factory(spec: dict[str, Any]) -> Callable[[Any], Callable[[], Any]]:
    wl = spec["workload"]
    phase = spec["phase"]
    if wl["kind"] == "transformer":
        from oomdoctor.verify.workload import transformer
        return lambda device: transformer(wl["params"], device, phase)
    if wl["kind"] == "hf":
        from oomdoctor.verify.hfmodel import hf
        return lambda device: hf(wl["params"], device, phase, Path(spec.get("base_dir") or "."))
    fn = load_entry(wl["entry"], Path(spec.get("base_dir") or "."))
    return lambda device: fn(dict(wl["params"], phase=phase), device)


def run_sim(spec: dict[str, Any]) -> dict[str, Any]:
    """Replay under fake tensors on simgpu, then through the allocator model."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.verify import simgpu

    device = simgpu.setup()
    _no_device_moves(torch)
    _tensors_via_host(torch)
    factory = _factory(spec)
    figures = spec.get("gpu_figures")
    tracker = simgpu.StorageTracker(workspaces=tuple(spec.get("workspace_bytes") or (0, 0)),
                                    conv_workspace=spec.get("conv_workspace_bytes") or 0,
                                    gpu_figures=tuple(figures) if figures else None)
    start = time.perf_counter()
    with FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
        step = factory(device)
        for _ in range(spec["steps"]):
            step()
        del step
    run_s = time.perf_counter() - start
    if spec.get("trace_path"):  # the parent replays allocator-only fixes from it instead of re-running the model
        write_trace(spec["trace_path"], tracker.trace)
    return replay_result(tracker.trace, spec, start, run_s, tracker.peak, tracker.flops)


def replay_result(trace: list[tuple[str, int, int]], spec: dict[str, Any], start: float, run_s: float,
                  unlimited_peak: int, flops: int) -> dict[str, Any]:
    """A sim trial's result: the storage trace replayed through the allocator model under the spec's limit and
    settings (also what the parent does for a fix that changes only the allocator settings)."""
    from oomdoctor.verify.allocator import AllocConf, replay

    result = replay(trace, spec["capacity_bytes"], AllocConf.parse(spec.get("alloc_conf")),
                    spec.get("non_pytorch_bytes", 0), spec.get("total_bytes"))
    return {
        "oom": result.oom,
        "peak_allocated_bytes": result.peak_allocated_bytes,
        "peak_reserved_bytes": result.peak_reserved_bytes,
        "headroom_bytes": None if result.oom else result.headroom_bytes,
        "seconds": round(time.perf_counter() - start, 3),
        "replay_seconds": round(run_s, 3),
        "message": result.message,
        "unlimited_peak_allocated_bytes": unlimited_peak,
        "flops": flops,
        "alloc_retries": result.num_alloc_retries,
        "events": len(trace),
        "parsed": _parse_message(result.message) if result.message else None,
    }


TRACE_KINDS = {"a": 0, "f": 1, "s": 2, "r": 3, "e": 4, "w": 5}  # alloc, free; stream: switch, record, events
# done; a workspace that takes what fits


def write_trace(path: str, trace: list[tuple[str, int, int]]) -> None:
    """The storage trace as int64 triples (kind as TRACE_KINDS numbers it, id, bytes), written whole or not at
    all."""
    from array import array

    flat = array("q")
    for kind, sid, nbytes in trace:
        flat.extend((TRACE_KINDS[kind], sid, nbytes))
    part = path + ".part"
    with open(part, "wb") as f:
        flat.tofile(f)
    os.replace(part, path)


def read_trace(path: str | Path, max_bytes: int) -> list[tuple[str, int, int]] | None:
    """The trace write_trace wrote, or None when it is missing, too large or malformed."""
    from array import array

    try:
        size = os.path.getsize(path)
        if size > max_bytes or size % 24:
            return None
        flat = array("q")
        with open(path, "rb") as f:
            flat.fromfile(f, size // 8)
    except (OSError, EOFError):
        return None
    kinds = tuple(TRACE_KINDS)
    out = []
    for i in range(0, len(flat), 3):
        k = flat[i]
        if not 0 <= k < len(kinds) or flat[i + 2] < 0:
            return None
        out.append((kinds[k], flat[i + 1], flat[i + 2]))
    return out


@contextlib.contextmanager
def patched_for_sim(torch: Any) -> Iterator[None]:
    """While the block runs, torch as the simulator needs it (Module.to/.cuda as no-ops, torch.tensor made via the
    host, below); as it was afterwards (a caller's own process, not a trial subprocess)."""
    saved = (torch.nn.Module.to, torch.nn.Module.cuda, torch.tensor)
    _no_device_moves(torch)
    _tensors_via_host(torch)
    try:
        yield
    finally:
        torch.nn.Module.to, torch.nn.Module.cuda, torch.tensor = saved


def _tensors_via_host(torch: Any) -> None:
    """torch.tensor(data) on the simulator. Without a device it is a host tensor, as in the real run (the sim's
    `with torch.device(simgpu)` would otherwise move optimizer step counters that `.item()` must read); with
    device=simgpu it is made on the host and copied into an empty simgpu tensor (fake mode keeps a small literal
    as a real constant and would run the move on it for real, where simgpu has no kernels)."""
    if getattr(torch.tensor, "_oomdoctor", False):
        return
    original = torch.tensor

    def tensor(data: Any, *args: Any, device: Any = None, **kwargs: Any) -> Any:
        if device is None:
            return original(data, *args, device="cpu", **kwargs)
        target = torch.device(device)
        if target.type != simgpu_name():
            return original(data, *args, device=device, **kwargs)
        host = original(data, *args, device="cpu", **kwargs)
        out = torch.empty(host.shape, dtype=host.dtype, device=target, requires_grad=host.requires_grad)
        with torch.no_grad():
            out.copy_(host)
        return out

    tensor._oomdoctor = True  # type: ignore[attr-defined]
    torch.tensor = tensor


def simgpu_name() -> str:
    from oomdoctor.verify.simgpu import DEVICE

    return DEVICE


def _no_device_moves(torch: Any) -> None:
    """Module.to(device)/.cuda() are no-ops on the simulator: everything is already built on simgpu, and
    moving fake parameters would try to swap tensors, which fake mode refuses."""
    module = torch.nn.Module
    if getattr(module.to, "_oomdoctor", False):
        return
    original = module.to

    def to(self, *args, **kwargs):
        _device, dtype, _non_blocking, fmt = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is None and fmt is None:
            return self
        return original(self, dtype=dtype) if fmt is None else original(self, dtype=dtype, memory_format=fmt)

    to._oomdoctor = True  # type: ignore[attr-defined]
    module.to = to
    module.cuda = lambda self, device=None: self


def run_cuda(spec: dict[str, Any]) -> dict[str, Any]:
    """Replay on the real GPU under a memory fraction equal to the failing GPU's usable memory."""
    import torch

    device = torch.device("cuda", 0)
    total = torch.cuda.get_device_properties(device).total_memory
    capacity = spec["capacity_bytes"] - spec.get("non_pytorch_bytes", 0)
    torch.cuda.set_per_process_memory_fraction(max(0.0, min(1.0, capacity / total)), device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    factory = _factory(spec)
    oom, message = False, None
    start = time.perf_counter()
    try:
        step = factory(device)
        for _ in range(spec["steps"]):
            step()
        torch.cuda.synchronize(device)
        del step
    except torch.OutOfMemoryError as exc:
        oom, message = True, str(exc)
    seconds = time.perf_counter() - start
    peak_reserved = torch.cuda.max_memory_reserved(device)
    out = {
        "oom": oom,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "peak_reserved_bytes": peak_reserved,
        "headroom_bytes": None if oom else capacity - peak_reserved,
        "seconds": round(seconds, 3),
        "message": message,
    }
    if message:
        out["parsed"] = _parse_message(message)
    return out


def _parse_message(message: str) -> dict[str, Any] | None:
    """The OOM as the project's parser reads it (None until oomdoctor.parse exists)."""
    try:
        from oomdoctor.parse import parse_text
    except ImportError:
        return None
    try:
        facts = parse_text(message, source="<verify>")
    except Exception:
        return None
    return facts.events[0].model_dump(mode="json") if facts.events else None


def main() -> int:
    """Read the spec, run the trial, write its result; a failing step is a result too (`error`)."""
    warnings.filterwarnings("ignore")
    spec = json.loads(sys.stdin.read())
    try:
        result = run_cuda(spec) if spec["device"] == "cuda" else run_sim(spec)
    except Exception as exc:
        result = failure(exc)
    write_result(spec.get("result_path"), result)
    return 0


ERROR_CHARS = 300  # a trial's error as shown in the table (the traceback keeps the rest)


def failure(exc: Exception) -> dict[str, Any]:
    """A trial's error; `host_memory` marks a host allocation that failed, which the parent words as the limit."""
    text = " ".join(str(exc).split())
    if len(text) > ERROR_CHARS:  # PyTorch's dispatcher errors list every backend: keep their first sentence
        first = text.split(". ", 1)[0]
        text = (first if len(first) <= ERROR_CHARS else first[:ERROR_CHARS]) + " …"
    result: dict[str, Any] = {"error": f"{type(exc).__name__}: {text}" if text else type(exc).__name__,
                              "traceback": traceback.format_exc(limit=-3)}
    if isinstance(exc, MemoryError) or any(text in str(exc) for text in HOST_MEMORY_TEXT):
        result["host_memory"] = True
    return result


def write_result(path: str | None, result: dict[str, Any]) -> None:
    """Write the result to the parent's file (whole or not at all), or to stdout for a trial run by hand."""
    text = json.dumps(result)
    if not path:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    part = path + ".part"
    with open(part, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(part, path)


if __name__ == "__main__":
    raise SystemExit(main())
