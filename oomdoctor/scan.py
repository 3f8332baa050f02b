"""Diagnose many logs as separate jobs, in parallel processes, into one row per job and a summary."""

from __future__ import annotations

import glob
import json
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from oomdoctor.errors import OomdoctorError, UsageError

# A folder holds logs and other things; these never are logs.
SKIPPED_SUFFIXES = (".yaml", ".yml", ".json", ".md", ".py", ".html", ".png", ".jpg", ".pt", ".bin", ".safetensors")
MAX_ROW_ERROR_CHARS = 300  # an unreadable file's reason, as one short line


def expand(targets: Iterable[str]) -> list[str]:
    """The job files named by paths, folders (walked, hidden entries skipped) and quoted globs, sorted, unique."""
    found: list[str] = []
    for target in targets:
        matches = sorted(glob.glob(target, recursive=True)) if glob.has_magic(target) else [target]
        if not matches:
            raise UsageError("no file matches this pattern", where=target, tip="check the pattern, or quote it")
        for m in matches:
            if os.path.isdir(m):
                found.extend(_walk(m))
            else:
                found.append(m)
    return list(dict.fromkeys(found))


def _walk(folder: str) -> Iterator[str]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and not name.endswith(SKIPPED_SUFFIXES):
                yield os.path.join(root, name)


def scan_one(path: str) -> dict[str, Any]:
    """One job's row: its status (oom, no_oom, error), the events, the first cause and fix, the GPU and stacks."""
    from oomdoctor.api import diagnose_paths

    row: dict[str, Any] = {"path": path}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = diagnose_paths([path])
    except OomdoctorError as exc:
        return {**row, "status": "error", "error": str(exc.message)[:MAX_ROW_ERROR_CHARS]}
    first = report.diagnoses[0] if report.diagnoses else None
    event = report.events[0] if report.events else None
    stacks: set[str] = set()
    for run in report.runs:
        value = run.config.get("stacks")
        stacks.update(value.value if value is not None else ())
    return {
        **row, "status": "oom" if report.events else "no_oom", "events": len(report.events),
        "kind": event.kind if event else None,
        "first_cause": first.category if first else None,
        "rule": first.rule if first else None,
        "confidence": first.confidence if first else None,
        "first_fix": first.fixes[0].id if first and first.fixes else None,
        "gpu_total_bytes": event.total_bytes if event else None,
        "phase": event.phase if event else None,
        "stacks": sorted(stacks),
    }


def run(paths: list[str], jobs: int) -> Iterator[dict[str, Any]]:
    """Rows as jobs finish (in order of the paths with one job, in order of completion with several)."""
    if jobs <= 1 or len(paths) <= 1:
        for p in paths:
            yield scan_one(p)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(scan_one, p) for p in paths]
        for fut in as_completed(futures):
            yield fut.result()


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the rows: jobs, OOM jobs, unreadable, causes and first fixes by count, GPU sizes, stacks."""
    ooms = [r for r in rows if r["status"] == "oom"]
    return {
        "jobs": len(rows), "oom_jobs": len(ooms),
        "no_oom_jobs": sum(r["status"] == "no_oom" for r in rows),
        "unreadable": [r["path"] for r in rows if r["status"] == "error"],
        "causes": Counter(r["first_cause"] or "undiagnosed" for r in ooms).most_common(),
        "first_fixes": Counter(r["first_fix"] for r in ooms if r["first_fix"]).most_common(),
        "gpu_totals_gib": Counter(round(r["gpu_total_bytes"] / 2**30) for r in ooms if r["gpu_total_bytes"]).most_common(),
        "stacks": Counter(s for r in ooms for s in r["stacks"]).most_common(),
    }


def render_summary(s: dict[str, Any]) -> str:
    """The summary as plain text lines (at most 80 columns for the fixed parts)."""
    out = [f"{s['jobs']} job(s): {s['oom_jobs']} OOM, {s['no_oom_jobs']} without OOM, "
           f"{len(s['unreadable'])} unreadable"]
    oom = max(s["oom_jobs"], 1)
    for title, key in (("first cause", "causes"), ("first fix", "first_fixes"), ("GPU (GiB)", "gpu_totals_gib"),
                       ("stack", "stacks")):
        if s[key]:
            out.append(f"{title}:")
            out += [f"  {name!s:28} {n:6}  {100 * n / oom:5.1f}%" for name, n in s[key]]
    for path in s["unreadable"]:
        out.append(f"unreadable: {path}")
    return "\n".join(out) + "\n"


def write_row(row: dict[str, Any], stream: Any) -> None:
    """One JSON line, flushed: rows stream out as jobs finish."""
    stream.write(json.dumps(row, sort_keys=False) + "\n")
    stream.flush()


