"""Run trials — the baseline and one per fix — each in a sandboxed subprocess with a timeout; bisect --max-batch.

The sandbox: every trial runs in its own session, so a timeout, the end of the trial or Ctrl-C ends its whole
process group (helpers the step started included); a sim trial runs under an address-space limit; only the last
OUTPUT_TAIL_BYTES of its stdout and stderr are kept; and its result comes back in a file the parent named, never
on stdout, where the user's step prints freely.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import oomdoctor
from oomdoctor.units import GIB, KIB, MIB, format_bytes, parse_size
from oomdoctor.verify import fixes as fixmod
from oomdoctor.verify.config import Resolved
from oomdoctor.verify.libraries import workspaces
from oomdoctor.verify.params import HFParams, TransformerParams
from oomdoctor.verify.reduce import gpu_figures
from oomdoctor.verify.trial import HOST_MEMORY_TEXT, read_trace, replay_result

try:
    import resource
except ImportError:  # not POSIX: trials run without a memory limit
    resource = None  # type: ignore[assignment]

PACKAGE_ROOT = Path(oomdoctor.__file__).resolve().parent.parent
TRIAL_MODULE = "oomdoctor.verify.trial"  # what each trial process runs (`python -m`); tests point it at a stand-in
OUTPUT_TAIL_BYTES = 64 * KIB  # kept per stream for error messages: a step printing 250 MB must not grow the parent
READ_CHUNK_BYTES = 64 * KIB  # one pipe buffer per read
RESULT_MAX_BYTES = 4 * MIB  # a result is a few KiB; a bigger file is not one
KILL_GRACE_S = 1.0  # SIGTERM, then SIGKILL: a step gets a moment to exit, Ctrl-C still feels immediate
READER_JOIN_S = 2.0  # pipes close once the group is gone; a helper that escaped it (setsid) must not hang verify
MAX_RSS_ENV = "OOMDOCTOR_TRIAL_MAX_RSS"  # overrides the trial memory limit: a size (8GiB), or 0/off for none
# The default limit on a sim trial's address space (RLIMIT_AS). A fake-tensor replay of a 1B-parameter step peaks
# near 0.75 GiB of address space (torch itself maps about 0.5 GiB), so half the host's RAM, kept between 4 and
# 16 GiB, never stops a real replay but stops a runaway step (real CPU tensors, a leak) before it takes the host.
# CUDA reserves tens of GiB (or TiB) of virtual address space at initialisation, which an RLIMIT_AS would refuse:
# cuda trials get a limit only when OOMDOCTOR_TRIAL_MAX_RSS asks for one.
TRIAL_MAX_BYTES_FLOOR, TRIAL_MAX_BYTES_CAP = 4 * GIB, 16 * GIB
MEMORY_HINTS = ("MemoryError", *HOST_MEMORY_TEXT)  # in the stderr of a trial that died without a result


def detect_device(requested: str) -> str:
    """auto → cuda when a GPU answers, else sim. Probes in a subprocess so this process never imports torch."""
    if requested != "auto":
        return requested
    if not (Path("/dev/nvidiactl").exists() or os.environ.get("CUDA_VISIBLE_DEVICES")):
        return "sim"
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "sim"
    return "cuda" if out.stdout.strip().endswith("True") else "sim"


def base_variant(res: Resolved) -> fixmod.Variant:
    """The failing step as configured; built-in params are completed with their defaults so fixes see every key."""
    wl = res.config.workload
    params = dict(wl.params)
    if wl.model == "transformer":
        params = TransformerParams.model_validate(params).model_dump()
    elif wl.model == "hf":
        params = HFParams.model_validate(params).model_dump()
    return fixmod.Variant(params=params, alloc_conf=res.config.alloc_conf)


def spec_for(res: Resolved, device: str, variant: fixmod.Variant) -> dict[str, Any]:
    wl = res.config.workload
    return {
        "device": device,
        "phase": res.config.phase,
        "steps": res.config.steps,
        "workload": {"kind": wl.model or "entry", "entry": wl.entry, "params": variant.params},
        "capacity_bytes": res.capacity_bytes,
        "total_bytes": res.total_bytes,
        "non_pytorch_bytes": res.non_pytorch_bytes,
        "alloc_conf": variant.alloc_conf,
        "workspace_bytes": workspaces(res.config.memory.gpu, res.config.cublas_workspace_config),
        "conv_workspace_bytes": res.config.memory.cudnn_workspace,
        "gpu_figures": gpu_figures(res.config.memory.gpu),
        "base_dir": str(res.path.parent.resolve()),
    }


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP: `reason`) during run_all: the running trials were ended, the queued ones never
    started."""

    def __init__(self, finished: int, total: int, reason: str = "") -> None:
        super().__init__(reason)
        self.finished, self.total, self.reason = finished, total, reason


class TrialCancelled(Exception):
    """A trial that was about to start after Ctrl-C."""


class _Live:
    """The trial processes now running, so that Ctrl-C in the parent can end them all and start no more."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen[bytes]] = set()
        self.stopping = False


_LIVE = _Live()


@dataclass
class Finished:
    """How a sandboxed process ended: its exit status, whether it ran out of time, the tails of its output."""

    returncode: int | None
    timed_out: bool
    stdout: bytes
    stderr: bytes


class _Tail:
    """The last `limit` bytes of a pipe, read as they come in a thread, so a chatty step never grows the parent."""

    def __init__(self, stream: IO[bytes], limit: int = OUTPUT_TAIL_BYTES) -> None:
        self.data = bytearray()
        self.limit = limit
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        """Read to end of file, dropping all but the tail."""
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, READ_CHUNK_BYTES):
                self.data += chunk
                if len(self.data) > self.limit:
                    del self.data[: len(self.data) - self.limit]
        except OSError:
            pass
        finally:
            stream.close()

    def result(self) -> bytes:
        """What was kept, once the writers are gone (or after READER_JOIN_S, if one escaped the group)."""
        self.thread.join(READER_JOIN_S)
        return bytes(self.data)


def trial_memory_limit(device: str) -> int | None:
    """The address-space limit for one trial in bytes, or None: OOMDOCTOR_TRIAL_MAX_RSS, else the sim default."""
    text = os.environ.get(MAX_RSS_ENV, "").strip()
    if text:
        return _parse_limit(text)
    if device == "cuda":
        return None
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return TRIAL_MAX_BYTES_CAP
    return max(TRIAL_MAX_BYTES_FLOOR, min(TRIAL_MAX_BYTES_CAP, ram // 2))


def _parse_limit(text: str) -> int | None:
    """OOMDOCTOR_TRIAL_MAX_RSS: a size with a binary unit, or 0/off/none/unlimited for no limit."""
    if text.lower() in ("0", "off", "none", "unlimited"):
        return None
    try:
        size = parse_size(text) if text[-1:].isalpha() else None
    except ValueError:
        size = None
    if not size or size < 0:
        raise ValueError(f"{MAX_RSS_ENV}={text!r} is not a size such as 8GiB (or 0 for no limit)")
    return size


def _limiter(limit: int | None) -> Callable[[], None] | None:
    """The preexec function that caps the trial's address space (RLIMIT_AS), where the OS has rlimits."""
    if limit is None or resource is None:
        return None
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    return functools.partial(_set_limit, limit)


def _set_limit(limit: int) -> None:
    """In the child, between fork and exec: cap the address space (soft and hard, so the step cannot raise it).
    It takes no lock, so it is safe beside the parent's other threads; an OS that refuses it runs the trial
    uncapped rather than not at all."""
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _spawn(argv: list[str], env: dict[str, str], limit: int | None) -> subprocess.Popen[bytes]:
    """Start one process in its own session (so its whole group can be ended), unless Ctrl-C stopped the run."""
    with _LIVE.lock:
        if _LIVE.stopping:
            raise TrialCancelled
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=os.name == "posix", preexec_fn=_limiter(limit))
        _LIVE.procs.add(proc)
    return proc


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send `sig` to the process group the trial leads (on POSIX), and to the trial process itself."""
    if os.name == "posix":
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already empty
            os.killpg(proc.pid, sig)
    with contextlib.suppress(OSError):  # a no-op once the trial process has been reaped
        proc.send_signal(sig)


def end_groups(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each trial's whole process group, SIGKILL what is left after KILL_GRACE_S, reap the leaders."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
    for proc in procs:
        proc.wait()


def _feed(proc: subprocess.Popen[bytes], text: str) -> None:
    """Write the spec to the trial's stdin and close it, so a step reading stdin sees end of file."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):  # it died before reading: its exit status says why
        proc.stdin.write(text.encode())
    with contextlib.suppress(OSError):
        proc.stdin.close()


def run_sandboxed(argv: list[str], stdin: str, timeout: float, limit: int | None,
                  env: dict[str, str] | None = None) -> Finished:
    """Run `argv` in its own session under `limit`, keeping only the tails of its output; when it ends, times
    out or the parent is interrupted, its whole process group goes with it."""
    proc = _spawn(argv, dict(os.environ) if env is None else env, limit)
    assert proc.stdout is not None and proc.stderr is not None
    timed_out = False
    try:
        out, err = _Tail(proc.stdout), _Tail(proc.stderr)
        _feed(proc, stdin)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # also on KeyboardInterrupt: no helper the step started outlives the trial
        end_groups([proc])
        with _LIVE.lock:
            _LIVE.procs.discard(proc)
    return Finished(proc.returncode, timed_out, out.result(), err.result())


def stop_all(pool: ThreadPoolExecutor) -> None:
    """Ctrl-C: cancel the queued trials, end every running trial's process group, wait for the workers."""
    with _LIVE.lock:
        _LIVE.stopping = True
        procs = list(_LIVE.procs)
    try:
        pool.shutdown(wait=False, cancel_futures=True)
        end_groups(procs)
        pool.shutdown(wait=True)
    finally:
        _LIVE.stopping = False


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """While trials run, SIGTERM and SIGHUP end verify the way Ctrl-C does (KeyboardInterrupt): each trial has its
    own session, so a closed terminal or a `kill` would otherwise leave them running with no parent to time them."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; it is the one that ends the trials anyway
        return
    sigs = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]  # no SIGHUP on Windows
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum: int, frame: Any) -> None:
    """A signal handler: end the run the way Ctrl-C does."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _trial_env(spec: dict[str, Any]) -> dict[str, str]:
    """The parent's environment, with this package importable and the trial's allocator settings."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env["PYTORCH_CUDA_ALLOC_CONF"] = spec.get("alloc_conf") or ""
    env.pop("PYTORCH_ALLOC_CONF", None)  # it would take precedence over the trial's settings
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_trial(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One sandboxed subprocess; a crash, a timeout or the memory limit becomes the trial's error, never an
    exception here (except KeyboardInterrupt, after the trial's process group is gone)."""
    start = time.perf_counter()
    try:
        limit = trial_memory_limit(spec.get("device", "sim"))
        with tempfile.TemporaryDirectory(prefix="oomdoctor-trial-") as tmp:
            path = Path(tmp) / "result.json"  # in a fresh private folder: the step cannot guess it
            extra = {"result_path": str(path)}
            if spec.pop("want_trace", False):
                extra["trace_path"] = str(Path(tmp) / "trace.bin")
            run = run_sandboxed([sys.executable, "-m", TRIAL_MODULE], json.dumps({**spec, **extra}),
                                timeout, limit, _trial_env(spec))
            result = _read_result(path)
            if "trace_path" in extra and isinstance(result, dict) and not result.get("error"):
                trace = read_trace(extra["trace_path"], TRACE_MAX_BYTES)
                if trace is not None:
                    result["_trace"] = trace
    except TrialCancelled:
        return {"error": "cancelled (interrupted)"}
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return {"error": f"cannot start the trial process: {exc}"}
    return _outcome(run, result, limit, timeout, round(time.perf_counter() - start, 3))


def _read_result(path: Path) -> dict[str, Any] | str | None:
    """The result the trial wrote: a dict, "unreadable", or None when it wrote none."""
    try:
        with path.open("rb") as f:
            data = f.read(RESULT_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    try:
        result = json.loads(data) if len(data) <= RESULT_MAX_BYTES else None
    except ValueError:
        result = None
    return result if isinstance(result, dict) else "unreadable"


def _outcome(run: Finished, result: dict[str, Any] | str | None, limit: int | None, timeout: float,
             seconds: float) -> dict[str, Any]:
    """The trial's result, or its error: the timeout, the memory limit, or the exit status and last stderr line."""
    if run.timed_out:
        return {"error": f"timed out after {timeout:g} s", "seconds": seconds}
    if isinstance(result, dict):
        if result.pop("host_memory", False):
            result["error"] = f"{_memory_note(limit)}: {result.get('error')}"
        return result
    if result == "unreadable":
        return {"error": "the trial wrote an unreadable result", "seconds": seconds}
    stderr = run.stderr.decode("utf-8", "replace")
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    error = f"trial process exited with status {run.returncode}: {tail}"
    if limit is not None and any(hint in stderr for hint in MEMORY_HINTS):
        error += f" ({_memory_note(limit)}?)"
    return {"error": error, "seconds": seconds}


def _memory_note(limit: int | None) -> str:
    """Names the trial memory limit and how to change it."""
    if limit is None:
        return "the trial ran out of host memory"
    return f"the trial hit its memory limit of {format_bytes(limit)} ({MAX_RSS_ENV} changes it)"


MARGINAL_FRACTION = 0.05  # a fit with less headroom than this share of the card is called marginal, not a fit


def fits(trial: dict[str, Any], res: Resolved, margin: float = 0.0) -> bool:
    """The step fit, with `margin` × capacity left over."""
    if trial.get("error") or trial.get("oom") is not False:
        return False
    used = int(trial.get("peak_reserved_bytes") or 0) + res.non_pytorch_bytes
    return used <= res.capacity_bytes * (1 - margin)


def _row(fix: str, variant: fixmod.Variant | None, result: dict[str, Any], verifiable: bool = True,
         error: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"fix": fix, "verifiable": verifiable, "oom": None, "peak_allocated_bytes": None,
                           "peak_reserved_bytes": None, "seconds": None}
    row.update({k: v for k, v in result.items() if k != "traceback"})
    if error:
        row["error"] = error
    if variant is not None:
        row["params"] = variant.params
        row["alloc_conf"] = variant.alloc_conf
        row["changes"] = variant.changes
        row["effective_batch"] = fixmod.effective_batch(variant.params)
    return row


def _run_pool(runnable: list[tuple[int, dict[str, Any]]], workers: int, timeout: float,
              done: Callable[[int, dict[str, Any]], None]) -> dict[int, dict[str, Any]]:
    """Run the trials on `workers` threads, `done(i, result)` as each finishes; Ctrl-C ends them all (Interrupted)."""
    results: dict[int, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_trial, spec, timeout): i for i, spec in runnable}
        try:
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                done(i, results[i])
        except KeyboardInterrupt as exc:
            stop_all(pool)
            raise Interrupted(len(results), len(runnable), str(exc)) from None
    return results


TRACE_MAX_BYTES = 512 * MIB  # a baseline's storage trace the parent reads back (24 bytes per event)


def allocator_only(variant: fixmod.Variant | None, base: fixmod.Variant) -> bool:
    """The fix changes only the allocator settings: the model runs the same, only the allocator model differs."""
    return variant is not None and variant.params == base.params and variant.alloc_conf != base.alloc_conf


def _from_trace(trace: list[tuple[str, int, int]], spec: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """An allocator-only fix's sim result: the baseline's storage trace replayed under the fix's allocator settings."""
    start = time.perf_counter()
    result = replay_result(trace, spec, start, 0.0, baseline.get("unlimited_peak_allocated_bytes") or 0,
                           baseline.get("flops") or 0)
    result["from_baseline_trace"] = True
    return result


def run_all(res: Resolved, device: str, jobs: int | None = None,
            progress: Callable[[str, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Baseline first, then one trial per fix, in config order; `progress(fix, result)` as each one finishes."""
    base = base_variant(res)
    planned: list[tuple[str, fixmod.Variant | None, str | None]] = [("baseline", base, None)]
    for fix in res.fixes:
        try:
            planned.append((fix, fixmod.apply(fix, base, res.config.phase), None))
        except fixmod.NotApplicable as exc:
            planned.append((fix, None, str(exc)))
    specs = {i: spec_for(res, device, v) for i, (_, v, _) in enumerate(planned) if v is not None}
    # On the simulator a fix that only changes allocator settings is the baseline's trace replayed: no model run.
    reuse = [i for i, (_, v, _) in enumerate(planned) if i and device == "sim" and allocator_only(v, base)]
    if reuse:
        specs[0]["want_trace"] = True
    workers = 1 if device == "cuda" else (jobs or max(1, min(4, os.cpu_count() or 1)))
    reused: dict[int, dict[str, Any]] = {}

    def done(i: int, result: dict[str, Any]) -> None:
        trace = result.pop("_trace", None) if i == 0 else None
        if progress is not None:
            progress(planned[i][0], result)
        if trace is None:
            return
        for j in reuse:
            reused[j] = _from_trace(trace, specs[j], result)
            if progress is not None:
                progress(planned[j][0], reused[j])

    runnable = [(i, spec) for i, spec in specs.items() if i not in reuse]
    results: dict[int, dict[str, Any]] = {}
    try:
        results.update(_run_pool(runnable, workers, res.config.timeout, done))
        results.update(reused)
        rerun = [(j, specs[j]) for j in reuse if j not in results]  # the baseline left no trace: run them after all
        if rerun:
            results.update(_run_pool(rerun, workers, res.config.timeout, done))
    except Interrupted as exc:  # counted over every trial, not only this pool's
        raise Interrupted(len(set(results) | set(reused)) + exc.finished, len(specs), exc.reason) from None
    rows = []
    for i, (fix, variant, reason) in enumerate(planned):
        if variant is None:
            rows.append(_row(fix, None, {}, verifiable=False, error=reason))
        else:
            rows.append(_row(fix, variant, results[i]))
    base_s = rows[0].get("seconds")
    base_flops = rows[0].get("flops")
    for row in rows:
        if row.get("peak_reserved_bytes") is not None and row.get("oom") is False:
            row["headroom_bytes"] = res.capacity_bytes - res.non_pytorch_bytes - row["peak_reserved_bytes"]
        row["fits"] = fits(row, res)
        if row["fits"] and row.get("headroom_bytes") is not None \
                and row["headroom_bytes"] < MARGINAL_FRACTION * res.capacity_bytes:
            row["fits"], row["marginal"] = False, True
        # Relative step time: measured on a GPU; on the simulator, matmul+attention FLOPs per optimizer step.
        if device == "sim" and base_flops and row.get("flops"):
            row["relative_time"] = round(row["flops"] / base_flops, 3)
        elif device == "cuda" and base_s and row.get("seconds"):
            row["relative_time"] = round(row["seconds"] / base_s, 3)
    return rows


def _line_guess(res: Resolved, needs: dict[int, tuple[int, float]], a: int, b: int) -> int | None:
    """The batch the line through two measured batches' needed peaks puts at the capacity (with margin)."""
    (na, _), (nb, _) = needs[a], needs[b]
    slope = (nb - na) / (b - a)
    if slope <= 0:
        return None
    ratios = [r for _, (_, r) in sorted(needs.items()) if r]
    ratio = ratios[-1] if ratios else 1.05  # reserved over allocated at the largest batch that fit; else 5%
    budget = (res.capacity_bytes * (1 - res.config.margin) - res.non_pytorch_bytes) / ratio
    return max(1, min(int(a + (budget - na) / slope), 1 << 16))


def _affine_guess(res: Resolved, start: int, ok: Callable[[int], bool],
                  needs: dict[int, tuple[int, float]]) -> int | None:
    """Two probes, a prediction, and up to two refits through the two largest measured batches (the line bends a
    little: fixed costs amortise), each run to measure it; None when the trials report no needed peak."""
    a = max(1, start // 2)
    b = start if start > a else a + 1
    ok(a)
    ok(b)
    if a not in needs or b not in needs:
        return None
    guess = _line_guess(res, needs, a, b)
    for _ in range(2):
        if guess is None:
            return None
        ok(guess)
        if guess not in needs:
            return guess
        near = max(x for x in needs if x != guess)  # the other measured batch nearest the answer
        refit = _line_guess(res, needs, min(near, guess), max(near, guess))
        if refit is None or abs(refit - guess) <= 1:
            return guess
        guess = refit
    return guess


def max_batch(res: Resolved, device: str) -> dict[str, Any]:
    """The largest per-device batch that fits with the config's margin; keep the effective batch.

    Memory is close to affine in the batch: two probes give the line (on the simulator each trial also reports
    the peak it needed with no limit, so a probe that runs out still counts), the prediction and the batch above
    it are run to confirm, and bisection takes over only where the prediction was wrong (or on a GPU, where a
    trial that runs out says nothing of what it needed)."""
    base = base_variant(res)
    key = "batch" if res.config.phase == "train" else "eval_batch"
    if "batch" not in base.params:
        return {"error": "the workload's params have no 'batch' key"}
    start = int(base.params.get(key) or base.params["batch"])
    tried: dict[int, bool] = {}
    needs: dict[int, tuple[int, float]] = {}  # batch -> (peak needed with no limit, reserved/allocated)

    def ok(batch: int) -> bool:
        if batch not in tried:
            v = fixmod.Variant(params={**base.params, key: batch}, alloc_conf=base.alloc_conf)
            result = run_trial(spec_for(res, device, v), res.config.timeout)
            tried[batch] = fits(result, res, res.config.margin)
            need = result.get("unlimited_peak_allocated_bytes")
            if need:
                alloc, resv = result.get("peak_allocated_bytes"), result.get("peak_reserved_bytes")
                ratio = resv / alloc if tried[batch] and alloc and resv else 0.0
                needs[batch] = (int(need), ratio)
        return tried[batch]

    lo, hi = 0, None  # lo fits (0 = nothing yet), hi does not
    guess = _affine_guess(res, start, ok, needs) if device == "sim" else None
    if guess is not None:  # gallop out from the prediction in steps of 1, 2, 4 … until the answer is bracketed
        step = 1
        if ok(guess):
            lo = guess
            while lo + step <= 1 << 16 and ok(lo + step):
                lo, step = lo + step, step * 2
            hi = lo + step
        else:
            hi = guess
            while hi - step >= 1 and not ok(hi - step):
                hi, step = hi - step, step * 2
            lo = max(0, hi - step)
    if hi is None:
        if lo or ok(start):
            lo = max(lo, start) if tried.get(start) else lo
            probe = lo * 2
            while probe <= 1 << 16 and ok(probe):
                lo, probe = probe, probe * 2
            hi = probe
        else:
            hi = start
    hi = min([b for b, f in tried.items() if not f and b > lo] + [hi])
    lo = max([b for b, f in tried.items() if f and b < hi] + [lo])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    out: dict[str, Any] = {"key": key, "max_batch": lo or None, "margin": res.config.margin,
                           "trials": len(tried)}
    if lo and key == "batch":
        effective = int(base.params["batch"]) * int(base.params.get("grad_accum", 1))
        out["grad_accum"] = -(-effective // lo)
        out["effective_batch"] = lo * out["grad_accum"] * int(base.params.get("world_size", 1))
    return out
