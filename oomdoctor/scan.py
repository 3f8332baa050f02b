"""Diagnose many logs as separate jobs, in parallel processes, into one row per job and a summary."""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import stat
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from typing import Any

from oomdoctor.errors import OomdoctorError, UsageError

# A folder holds logs and other things; these never are logs.
SKIPPED_SUFFIXES = (".yaml", ".yml", ".json", ".md", ".py", ".html", ".png", ".jpg", ".pt", ".bin", ".safetensors")
MAX_ROW_ERROR_CHARS = 300  # an unreadable file's reason, as one short line
STATE_FORMAT = "oomdoctor-scan-state-1"


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


_RULES: Any = None  # the shipped rules, loaded once per process (50 YAML files: longer than most logs take)


def _rules() -> Any:
    global _RULES
    if _RULES is None:
        from oomdoctor.api import RuleSet

        _RULES = RuleSet.load()
    return _RULES


def _not_regular(path: str) -> str | None:
    """What a path is when it is not a regular file (a FIFO would block a reader forever); None for a file or a
    path that cannot be stat'ed (the reader says why)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return ("a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")


def scan_one(job: str | list[str]) -> dict[str, Any]:
    """One job's row (a file, or the files of one job grouped together): its status (oom, no_oom, error), the
    events, the first cause and fix, the GPU and stacks."""
    from oomdoctor.api import diagnose_paths

    files = [job] if isinstance(job, str) else list(job)
    row: dict[str, Any] = {"path": files[0] if len(files) == 1 else group_name(files)}
    if len(files) > 1:
        row["files"] = files
    for f in files:  # an unattended scan must not block on a named pipe, a socket or a device in the folder
        kind = _not_regular(f)
        if kind:
            which = f" {f}" if len(files) > 1 else ""
            return {**row, "status": "error", "error": f"not a regular file{which} ({kind}); scan reads only files"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = diagnose_paths(files, rules=_rules())
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


def group_name(files: list[str]) -> str:
    """A grouped job's name: the common path of its files and the parts that differ as a glob."""
    common = os.path.commonprefix(files)  # noqa: RUF071 - by character: "run-rank" + "*", not by folder
    return common + "*" if common != files[0] else files[0]


def group(paths: list[str], pattern: str | None) -> list[str | list[str]]:
    """Jobs from files: with `pattern` (a regex), files whose paths are equal once its match is blanked are one
    job (per-rank logs: `rank\\d+`); without, every file is its own job."""
    if not pattern:
        return list(paths)
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--group-by is not a valid regular expression: {exc}", tip="e.g. --group-by 'rank\\d+'") from None
    jobs: dict[str, list[str]] = {}
    for p in paths:
        jobs.setdefault(rx.sub("*", p), []).append(p)
    return [files[0] if len(files) == 1 else files for files in jobs.values()]


def select(paths: list[str], include: Iterable[str] = (), exclude: Iterable[str] = (),
           since: float | None = None) -> list[str]:
    """Files whose name or path matches an --include glob (when any), no --exclude glob, modified at `since` or later."""
    include, exclude = list(include), list(exclude)

    def hit(p: str, globs: list[str]) -> bool:
        return any(fnmatch.fnmatch(p, g) or fnmatch.fnmatch(os.path.basename(p), g) for g in globs)

    out = []
    for p in paths:
        if (include and not hit(p, include)) or hit(p, exclude):
            continue
        if since is not None:
            try:
                if os.stat(p).st_mtime < since:
                    continue
            except OSError:
                pass  # unreadable: kept, so it is reported
        out.append(p)
    return out


def parse_since(text: str, now: float) -> float:
    """--since: an age (30m, 12h, 7d, 2w) or a date (2026-11-20, 2026-11-20T08:00) as a POSIX time."""
    m = re.fullmatch(r"(\d{1,6})\s*([mhdw])", text.strip())
    if m:
        return now - int(m[1]) * {"m": 60, "h": 3600, "d": 86400, "w": 604800}[m[2]]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise UsageError(f"--since {text!r} is neither an age nor a date", tip="e.g. --since 7d, or --since 2026-11-20") from None


class State:
    """Incremental scans: each file's size and mtime with the row it gave, so an unchanged file is not read again."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        if path and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError) as exc:
                raise UsageError(f"cannot read the scan state: {exc}", where=path,
                                 tip="delete it to start afresh") from None
            if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
                raise UsageError("not an oomdoctor scan state file", where=path, tip="name another --state file")
            self.entries = doc.get("files") or {}

    @staticmethod
    def _stamp(files: list[str]) -> list[list[int]] | None:
        try:
            return [[os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files]
        except OSError:
            return None

    def cached(self, job: str | list[str]) -> dict[str, Any] | None:
        files = [job] if isinstance(job, str) else job
        key = "\n".join(files)
        entry = self.entries.get(key)
        stamp = self._stamp(files)
        if entry and stamp is not None and entry.get("stamp") == stamp:
            return {**entry["row"], "cached": True}
        return None

    def remember(self, job: str | list[str], row: dict[str, Any]) -> None:
        files = [job] if isinstance(job, str) else job
        stamp = self._stamp(files)
        if stamp is not None and row.get("status") != "error":
            self.entries["\n".join(files)] = {"stamp": stamp, "row": {k: v for k, v in row.items() if k != "cached"}}

    def save(self) -> None:
        if self.path:
            from pathlib import Path

            from oomdoctor.outfile import write_atomic

            write_atomic(Path(self.path), json.dumps({"format": STATE_FORMAT, "files": self.entries}) + "\n")


def run(paths: list[str | list[str]], jobs: int) -> Iterator[dict[str, Any]]:
    """Rows in the order of the jobs, streamed as they finish; with several processes the jobs go out in chunks
    (a few milliseconds each: one inter-process round trip per job would cost as much as the job)."""
    if jobs <= 1 or len(paths) <= 1:
        for p in paths:
            yield scan_one(p)
        return
    chunk = max(1, min(64, len(paths) // (jobs * 8)))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(scan_one, paths, chunksize=chunk)


RAY_BATCH = 32  # jobs per Ray task: each is a few milliseconds, a task costs more


def run_ray(paths: list[str | list[str]], address: str | None) -> Iterator[dict[str, Any]]:
    """The same rows computed on a Ray cluster (Ray Data `map_batches` over the job list; the workers read the
    files, so they must see the same paths: a shared filesystem). `address`: "auto", ray://…, or None (local)."""
    import logging

    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray", tip="pip install 'oomdoctor[ray]'") from None
    os.environ.setdefault("RAY_DATA_LOG_LEVEL", "ERROR")  # Ray Data sets its loggers up on first use: rows only
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot start or reach the Ray cluster: {exc}", where=address or "local",
                         tip="--address auto joins a running cluster; without --address a local one starts") from None
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    items = [{"job": p if isinstance(p, str) else "\n".join(p)} for p in paths]
    if not items:
        return
    rows = ray.data.from_items(items).map_batches(_ray_batch, batch_size=RAY_BATCH)
    try:
        for record in rows.iter_rows():
            yield json.loads(record["row"])
    finally:
        if address is None:
            ray.shutdown()  # the local cluster this scan started


def _ray_batch(batch: dict[str, Any]) -> dict[str, list[str]]:
    jobs = [str(j) for j in batch["job"]]
    return {"row": [json.dumps(scan_one(j.split("\n") if "\n" in j else j)) for j in jobs]}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the rows: jobs, OOM jobs, unreadable, causes and first fixes by count, GPU sizes, stacks."""
    ooms = [r for r in rows if r["status"] == "oom"]
    return {
        "jobs": len(rows), "oom_jobs": len(ooms), "cached": sum(bool(r.get("cached")) for r in rows),
        "no_oom_jobs": sum(r["status"] == "no_oom" for r in rows),
        "unreadable": [r["path"] for r in rows if r["status"] == "error"],
        "causes": Counter(r["first_cause"] or "undiagnosed" for r in ooms).most_common(),
        "first_fixes": Counter(r["first_fix"] for r in ooms if r["first_fix"]).most_common(),
        "gpu_totals_gib": Counter(round(r["gpu_total_bytes"] / 2**30) for r in ooms if r["gpu_total_bytes"]).most_common(),
        "stacks": Counter(s for r in ooms for s in r["stacks"]).most_common(),
    }


def _headline(s: dict[str, Any]) -> str:
    cached = f", {s['cached']} unchanged (from the state file)" if s.get("cached") else ""
    return (f"{s['jobs']} job(s): {s['oom_jobs']} OOM, {s['no_oom_jobs']} without OOM, "
            f"{len(s['unreadable'])} unreadable{cached}")


def render_summary(s: dict[str, Any]) -> str:
    """The summary as plain text lines (at most 80 columns for the fixed parts)."""
    out = [_headline(s)]
    oom = max(s["oom_jobs"], 1)
    for title, key in (("first cause", "causes"), ("first fix", "first_fixes"), ("GPU (GiB)", "gpu_totals_gib"),
                       ("stack", "stacks")):
        if s[key]:
            out.append(f"{title}:")
            out += [f"  {name!s:28} {n:6}  {100 * n / oom:5.1f}%" for name, n in s[key]]
    for path in s["unreadable"]:
        out.append(f"unreadable: {path}")
    return "\n".join(out) + "\n"


def render_markdown(s: dict[str, Any]) -> str:
    """The summary as Markdown tables (for a wiki page or a CI comment)."""
    out = [f"**{_headline(s)}**", ""]
    oom = max(s["oom_jobs"], 1)
    for title, key in (("first cause", "causes"), ("first fix", "first_fixes"), ("GPU (GiB)", "gpu_totals_gib"),
                       ("stack", "stacks")):
        if s[key]:
            out += [f"| {title} | jobs | share |", "|---|---:|---:|"]
            out += [f"| {_md(str(name))} | {n} | {100 * n / oom:.1f}% |" for name, n in s[key]]
            out.append("")
    out += [f"- unreadable: `{_md(p)}`" for p in s["unreadable"]]
    return "\n".join(out).rstrip() + "\n"


def _md(text: str) -> str:
    return "".join(ch for ch in text if ch.isprintable()).replace("|", "\\|").replace("`", "'")


def write_row(row: dict[str, Any], stream: Any) -> None:
    """One JSON line, flushed: rows stream out as jobs finish."""
    stream.write(json.dumps(row, sort_keys=False) + "\n")
    stream.flush()


