"""One line in a training script leaves a post-mortem record when it runs out of memory.

    import oomdoctor.capture
    oomdoctor.capture.install(out_dir="oom-reports")

On CUDA, PyTorch's OOM observer calls the hook at the failing allocation, while the allocator's segments are
still as they failed: the record gets the request, the device's free memory, the segment summary (largest free
block, split and stranded bytes), `memory_stats()` and, with `history=True`, the allocations that made the peak
with their Python frames. When the OutOfMemoryError then ends the program (or reaches a callback or `guard()`),
its message is added. Everywhere else (CPU, MPS, the simulated device) only the exception is recorded.
The Hugging Face and Lightning callbacks add the step, the phase and the run's arguments.
The hook never raises into the training loop: a failure to record is one warning.
Records are JSON (docs/record.md), one file per failure and rank, written atomically; read them with
`oomdoctor diagnose RECORD.json`, alone or beside the log of the same run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oomdoctor import __version__
from oomdoctor.outfile import write_atomic
from oomdoctor.parse.record import FORMAT, PHASES, VERSION

MAX_ARGS = 300  # keys of the run's arguments kept
MAX_STRING = 500  # characters of any one argument value kept
TOP_ALLOCATIONS = 20
STATS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
         "reserved_bytes.all.peak", "inactive_split_bytes.all.current", "active_bytes.all.current",
         "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "max_split_size")


def _json_safe(value: Any, depth: int = 0) -> Any:
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, str):
        return value[:MAX_STRING]
    if depth < 3 and isinstance(value, dict):
        return {str(k)[:100]: _json_safe(v, depth + 1) for k, v in list(value.items())[:MAX_ARGS]}
    if depth < 3 and isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in list(value)[:50]]
    return str(value)[:MAX_STRING]


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory error of any device PyTorch knows (the class, or the message of an older RuntimeError)."""
    torch = sys.modules.get("torch")
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)) if t)
    return isinstance(exc, oom_types) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def _message(exc: BaseException) -> str:
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return f"{name}: {exc}"


class Capture:
    """The installed hook: the run's context (step, phase, arguments) and the records written so far."""

    def __init__(self, out_dir: str | Path, history: bool = False, max_entries: int = 100_000) -> None:
        self.out_dir = Path(out_dir)
        self.history = history
        self.max_entries = max_entries
        self.step: int | None = None
        self.phase: str | None = None
        self.args: dict[str, Any] = {}
        self.records: list[Path] = []
        self._pending: tuple[Path, dict[str, Any]] | None = None  # the observer's record, awaiting the message
        self._last_exc: BaseException | None = None
        self._lock = threading.Lock()
        self._warned = False

    def set(self, *, step: int | None = None, phase: str | None = None, args: dict[str, Any] | None = None) -> None:
        """Tell the hook where the run is: the step being run, its phase (train/eval/generate/save/init), its args."""
        if step is not None:
            self.step = int(step)
        if phase is not None:
            if phase not in PHASES:
                raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
            self.phase = phase
        if args is not None:
            self.args = _json_safe(dict(args))

    # --- triggers ---------------------------------------------------------------------------------------------

    def observe(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        """PyTorch's CUDA OOM observer: the allocator's state at the failing allocation."""
        try:
            doc = self._base()
            doc["oom"] = {"device": int(device), "requested_bytes": int(alloc),
                          "device_allocated_bytes": int(device_allocated), "device_free_bytes": int(device_free)}
            doc.update(_cuda_state(int(device), self.history))
            with self._lock:
                path = self._write(doc, None)
                self._pending = (path, doc)
        except Exception as exc:  # never into the training loop
            self._warn(exc)

    def observe_simulated(self, alloc: int, device_allocated: int, device_free: int, snapshot: dict[str, Any],
                          total_bytes: int) -> None:
        """The same, from `oomdoctor.verify.simgpu.simulate`: the allocator model's state in snapshot form."""
        try:
            doc = self._base()
            doc["oom"] = {"device": 0, "requested_bytes": int(alloc), "device_allocated_bytes": int(device_allocated),
                          "device_free_bytes": int(device_free)}
            doc["gpu"] = {"name": "simulated (oomdoctor simgpu)", "total_bytes": int(total_bytes)}
            doc.update(_segment_state(snapshot, 0, self.history))
            with self._lock:
                path = self._write(doc, None)
                self._pending = (path, doc)
        except Exception as exc:  # never into the training loop
            self._warn(exc)

    def record(self, exc: BaseException) -> Path | None:
        """Record an out-of-memory exception (others are ignored); the observer's record, if any, gets its message."""
        try:
            if not is_oom(exc) or exc is self._last_exc:
                return None
            with self._lock:
                self._last_exc = exc
                path, doc = self._pending or (None, self._base())
                self._pending = None
                doc["message"] = _message(exc)
                doc["step"], doc["phase"] = self.step, self.phase  # the callbacks may know more by now
                if doc.get("oom") is None:
                    doc.update(_device_of(exc))
                return self._write(doc, path)
        except Exception as err:
            self._warn(err)
            return None

    @contextlib.contextmanager
    def guard(self) -> Iterator[Capture]:
        """`with capture.guard(): train()` records an OOM that would otherwise be caught before the interpreter exits."""
        try:
            yield self
        except BaseException as exc:
            self.record(exc)
            raise

    # --- the record -------------------------------------------------------------------------------------------

    def _base(self) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        return {
            "format": FORMAT, "version": VERSION,
            "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "rank": _env_int("RANK"), "local_rank": _env_int("LOCAL_RANK"), "world_size": _env_int("WORLD_SIZE"),
            "pid": os.getpid(), "message": None, "oom": None,
            "step": self.step, "phase": self.phase, "args": self.args,
            "allocator_settings": {k: v for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                                                  "PYTORCH_HIP_ALLOC_CONF") if (v := os.environ.get(k))},
            "versions": {"oomdoctor": __version__, "python": platform.python_version(),
                         "torch": getattr(torch, "__version__", None),
                         "cuda": getattr(getattr(torch, "version", None), "cuda", None)},
        }

    def _write(self, doc: dict[str, Any], path: Path | None) -> Path:
        if path is None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            rank = doc.get("rank")
            who = f"rank{rank}-" if rank is not None else ""
            path = self.out_dir / f"oom-{who}pid{os.getpid()}-{len(self.records) + 1}.json"
            self.records.append(path)
        write_atomic(path, json.dumps(doc, indent=1, default=str) + "\n")
        return path

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"oomdoctor.capture: could not record the OOM ({type(exc).__name__}: {exc})",
                          RuntimeWarning, stacklevel=2)


def _device_of(exc: BaseException) -> dict[str, Any]:
    """GPU name and size when CUDA is up (the exception path has no observer figures)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and "CUDA" in str(exc):
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            return {"gpu": {"name": props.name, "total_bytes": int(props.total_memory)}}
    except Exception:
        pass
    return {}


def _cuda_state(device: int, history: bool) -> dict[str, Any]:
    """The allocator's state of one CUDA device: segment summary, top allocations, memory_stats, the GPU, others."""
    import torch

    props = torch.cuda.get_device_properties(device)
    out: dict[str, Any] = {"gpu": {"name": props.name, "total_bytes": int(props.total_memory)}}
    stats = torch.cuda.memory_stats(device)
    out["memory_stats"] = {k: int(stats[k]) for k in STATS if k in stats}
    out.update(_segment_state(torch.cuda.memory._snapshot(), device, history))
    out["other_processes"] = _nvml_processes(device)
    return out


def _segment_state(snapshot: dict[str, Any], device: int, history: bool) -> dict[str, Any]:
    """A record's segment summary (and, with history, top allocations and categories) from a snapshot dict."""
    from oomdoctor.parse.snapshot import summarize

    out: dict[str, Any] = {}
    summary = summarize(snapshot, source="<live>")
    dev = next((d for d in summary.devices if d.device == device), None)
    if dev is not None:
        out["segments"] = {"count": dev.segments, "reserved_bytes": dev.reserved_bytes,
                           "allocated_bytes": dev.allocated_bytes, "inactive_bytes": dev.inactive_bytes,
                           "largest_free_block_bytes": dev.largest_free_block_bytes,
                           "stranded_bytes": dev.stranded_bytes, "expandable_segments": dev.expandable_segments}
        if history:
            out["top_allocations"] = [{"frame": g.frame, "bytes": g.bytes, "count": g.count}
                                      for g in dev.top_frames[:TOP_ALLOCATIONS]]
            out["live_by_category"] = {c.category: c.bytes for c in dev.categories}
    return out


def _nvml_processes(device: int) -> list[dict[str, int]] | None:
    """Every process on the device with its memory (NVML, when pynvml is installed), else None."""
    try:
        import importlib

        pynvml = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        return [{"pid": int(p.pid), "used_bytes": int(p.usedGpuMemory or 0)}
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    except Exception:
        return None


# --- installing -----------------------------------------------------------------------------------------------

_active: Capture | None = None


def active() -> Capture | None:
    """The hook `install` put in place in this process, if any (the simulated GPU reports to it)."""
    return _active


def install(out_dir: str | Path = "oom-reports", *, history: bool = False, max_entries: int = 100_000) -> Capture:
    """Install the hook once per process (a second call returns the first); see the module's docstring."""
    global _active
    if _active is not None:
        return _active
    import torch

    cap = Capture(out_dir, history=history, max_entries=max_entries)
    if torch.cuda.is_available():
        if history:
            torch.cuda.memory._record_memory_history(max_entries=max_entries)
        torch._C._cuda_attach_out_of_memory_observer(cap.observe)  # type: ignore[attr-defined]
    else:
        warnings.warn("oomdoctor.capture: no CUDA device; an OOM error that ends the program is still recorded, "
                      "without the allocator's state (which a run under oomdoctor.verify.simgpu.simulate has)",
                      RuntimeWarning, stacklevel=2)
    _chain_excepthooks(cap)
    _active = cap
    return cap


def _chain_excepthooks(cap: Capture) -> None:
    previous: Callable[..., Any] = sys.excepthook
    previous_thread: Callable[..., Any] = threading.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        cap.record(exc)
        previous(kind, exc, tb)

    def thread_hook(args: Any) -> None:
        if args.exc_value is not None:
            cap.record(args.exc_value)
        previous_thread(args)

    sys.excepthook = hook
    threading.excepthook = thread_hook


# --- trainer callbacks ----------------------------------------------------------------------------------------

def hf_callback(capture: Capture | None = None) -> Any:
    """A transformers TrainerCallback that tells the hook the step, the phase and the TrainingArguments.

    `Trainer(..., callbacks=[oomdoctor.capture.hf_callback()])`. The step is the one being run (global_step + 1);
    evaluation and saving are marked when the Trainer's flow says they come next.
    """
    from transformers import TrainerCallback

    cap = capture or install()

    class OomdoctorCallback(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            cap.set(args=args.to_dict(), step=state.global_step + 1, phase="train")

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            cap.set(step=state.global_step + 1, phase="train")

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            cap.set(step=state.global_step)
            if control.should_evaluate:
                cap.set(phase="eval")
            elif control.should_save:
                cap.set(phase="save")

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            cap.set(phase="eval")

        def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            cap.set(phase="save" if control.should_save else "train")

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            cap.set(phase="train")

    return OomdoctorCallback()


def lightning_callback(capture: Capture | None = None) -> Any:
    """A Lightning Callback that tells the hook the step, the phase and the hyperparameters, and records the
    OOM Lightning catches (`on_exception`). `Trainer(callbacks=[oomdoctor.capture.lightning_callback()])`."""
    import importlib

    try:
        callback_base: Any = importlib.import_module("lightning.pytorch").Callback
    except ImportError:
        callback_base = importlib.import_module("pytorch_lightning").Callback

    cap = capture or install()

    class OomdoctorLightningCallback(callback_base):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            cap.set(args=dict(getattr(pl_module, "hparams", {}) or {}), phase="init")

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            cap.set(step=trainer.global_step + 1, phase="train")

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            cap.set(phase="eval")

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            cap.set(phase="train")

        def on_test_start(self, trainer: Any, pl_module: Any) -> None:
            cap.set(phase="eval")

        def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
            cap.set(phase="eval")

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            cap.set(phase="save")

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            cap.record(exception)

    return OomdoctorLightningCallback()
