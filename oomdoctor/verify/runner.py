"""Run trials — the baseline and one per fix — each in a fresh subprocess with a timeout; bisect --max-batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import oomdoctor
from oomdoctor.verify import fixes as fixmod
from oomdoctor.verify.config import Resolved
from oomdoctor.verify.params import TransformerParams
from oomdoctor.verify.trial import RESULT_MARK

PACKAGE_ROOT = Path(oomdoctor.__file__).resolve().parent.parent


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
    return fixmod.Variant(params=params, alloc_conf=res.config.alloc_conf)


def spec_for(res: Resolved, device: str, variant: fixmod.Variant) -> dict[str, Any]:
    wl = res.config.workload
    return {
        "device": device,
        "phase": res.config.phase,
        "steps": res.config.steps,
        "workload": {"kind": "transformer" if wl.model else "entry", "entry": wl.entry, "params": variant.params},
        "capacity_bytes": res.capacity_bytes,
        "total_bytes": res.total_bytes,
        "non_pytorch_bytes": res.non_pytorch_bytes,
        "alloc_conf": variant.alloc_conf,
        "base_dir": str(res.path.parent.resolve()),
    }


def run_trial(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One subprocess; a crash or a timeout becomes the trial's error, never an exception here."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env["PYTORCH_CUDA_ALLOC_CONF"] = spec.get("alloc_conf") or ""
    env.pop("PYTORCH_ALLOC_CONF", None)  # it would take precedence over the trial's settings
    env.setdefault("OMP_NUM_THREADS", "1")
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "oomdoctor.verify.trial"], input=json.dumps(spec),
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s", "seconds": round(time.perf_counter() - start, 3)}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                result = json.loads(line[len(RESULT_MARK):])
            except ValueError:
                result = None
            if isinstance(result, dict):
                return result
            return {"error": "the trial printed an unreadable result line",
                    "seconds": round(time.perf_counter() - start, 3)}
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"trial process exited with status {proc.returncode}: {tail}",
            "seconds": round(time.perf_counter() - start, 3)}


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
    runnable = [(i, spec_for(res, device, v)) for i, (_, v, _) in enumerate(planned) if v is not None]
    workers = 1 if device == "cuda" else (jobs or max(1, min(4, os.cpu_count() or 1)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_trial, spec, res.config.timeout): i for i, spec in runnable}
        results = {}
        for done in as_completed(futures):
            i = futures[done]
            results[i] = done.result()
            if progress is not None:
                progress(planned[i][0], results[i])
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
        # Relative step time: measured on a GPU; on the simulator, matmul+attention FLOPs per optimizer step.
        if device == "sim" and base_flops and row.get("flops"):
            row["relative_time"] = round(row["flops"] / base_flops, 3)
        elif device == "cuda" and base_s and row.get("seconds"):
            row["relative_time"] = round(row["seconds"] / base_s, 3)
    return rows


def max_batch(res: Resolved, device: str) -> dict[str, Any]:
    """Bisect the largest per-device batch that fits with the config's margin; keep the effective batch."""
    base = base_variant(res)
    key = "batch" if res.config.phase == "train" else "eval_batch"
    if "batch" not in base.params:
        return {"error": "the workload's params have no 'batch' key"}
    start = int(base.params.get(key) or base.params["batch"])
    tried: dict[int, bool] = {}

    def ok(batch: int) -> bool:
        if batch not in tried:
            v = fixmod.Variant(params={**base.params, key: batch}, alloc_conf=base.alloc_conf)
            tried[batch] = fits(run_trial(spec_for(res, device, v), res.config.timeout), res, res.config.margin)
        return tried[batch]

    lo, hi = 0, None  # lo fits (0 = nothing yet), hi does not
    if ok(start):
        lo, probe = start, start * 2
        while probe <= 1 << 16 and ok(probe):
            lo, probe = probe, probe * 2
        hi = probe
    else:
        hi = start
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
