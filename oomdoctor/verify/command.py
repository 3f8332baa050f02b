"""`oomdoctor verify`: replay the failing step and each fix; report which fit. Never imports torch itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from oomdoctor.outfile import write_atomic
from oomdoctor.units import format_bytes
from oomdoctor.verify import config as cfgmod
from oomdoctor.verify import runner
from oomdoctor.verify.allocator import AllocConf

EXIT_FIXED, EXIT_NOT_FIXED, EXIT_BAD_CONFIG = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C (cli.main exits with the same)


ASYNC_NOT_SIMULATED = ("backend:cudaMallocAsync is not simulated: the replay models PyTorch's native caching "
                       "allocator, whose rounding and caching differ from CUDA's stream-ordered pool")


def report(res: cfgmod.Resolved, device: str, trials: list[dict[str, Any]],
           max_batch: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON document of shared/CONTRACT.md (plus extra fields)."""
    out: dict[str, Any] = {
        "device": device,
        "capacity_bytes": res.capacity_bytes,
        "non_pytorch_bytes": res.non_pytorch_bytes,
        "total_bytes": res.total_bytes,
        "phase": res.config.phase,
        "steps": res.config.steps,
        "fixes_from": res.fixes_from,
        "baseline_reproduced": bool(trials and trials[0].get("oom")),
        "trials": trials,
    }
    if max_batch is not None:
        out["max_batch"] = max_batch
    if device == "sim" and AllocConf.parse(res.config.alloc_conf).backend != "native":
        out["notes"] = [ASYNC_NOT_SIMULATED]
    return out


def exit_code(trials: list[dict[str, Any]]) -> int:
    """0 when the baseline reproduced the OOM and at least one fix fits; 1 otherwise."""
    if not trials or trials[0].get("oom") is not True:
        return EXIT_NOT_FIXED
    return EXIT_FIXED if any(t.get("fits") for t in trials[1:]) else EXIT_NOT_FIXED


def render_table(doc: dict[str, Any], stream: Any = None, width: int | None = None) -> None:
    """A compact table that fits 80 columns without cutting fix ids, then the notes, then the best fix."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream or sys.stdout, width=width or 80, highlight=False, markup=False)
    cap = doc["capacity_bytes"]
    console.print(f"verify on {doc['device']}: capacity {format_bytes(cap)} (non-PyTorch "
                  f"{format_bytes(doc['non_pytorch_bytes'])}), phase {doc['phase']}")
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("fix", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for col in ("peak resv", "headroom", "time"):
        table.add_column(col, justify="right", no_wrap=True)
    notes = []
    for t in doc["trials"]:
        if not t.get("verifiable", True):
            fits = Text("n/a", style="dim")
        elif t.get("error"):
            fits = Text("error", style="yellow")
        elif t["fix"] == "baseline":
            fits = Text("OOM (reproduced)", style="red") if t.get("oom") else Text("fits (not reproduced)", style="green")
        else:
            fits = (Text("fits", style="green") if t.get("fits")
                    else Text("marginal", style="yellow") if t.get("marginal") else Text("OOM", style="red"))
        rel = t.get("relative_time")
        table.add_row(t["fix"], fits, _b(t.get("peak_reserved_bytes")), _b(t.get("headroom_bytes")),
                      f"×{rel:.2f}" if rel else "")
        note = t.get("error") or _changes(t)
        if note:
            notes.append(f"  {t['fix']}: {note}")
    console.print(table)
    for note in notes:
        console.print(Text(note, style="dim"))
    for note in doc.get("notes") or ():
        console.print(Text(f"note: {note}", style="yellow"))
    best = best_fix(doc["trials"])
    if best is not None:
        console.print(f"best fix: {best['fix']} ({_b(best.get('headroom_bytes'))} headroom)")
    elif doc["trials"] and doc["trials"][0].get("oom"):
        console.print("no fix tried makes the step fit")
    mb = doc.get("max_batch")
    if mb:
        if mb.get("max_batch"):
            extra = (f", gradient accumulation {mb['grad_accum']} keeps the effective batch at "
                     f"{mb['effective_batch']}") if mb.get("grad_accum") else ""
            console.print(f"largest per-device {mb['key']} that fits with {mb['margin']:.0%} margin: "
                          f"{mb['max_batch']}{extra}")
        else:
            console.print(f"no per-device {mb.get('key', 'batch')} fits: {mb.get('error', 'even 1 runs out')}")


def best_fix(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fitting fix with the most headroom (ties: the faster one)."""
    fitting = [t for t in trials[1:] if t.get("fits")]
    if not fitting:
        return None
    return max(fitting, key=lambda t: (t.get("headroom_bytes") or 0, -(t.get("relative_time") or 1)))


def progress_line(fix: str, result: dict[str, Any]) -> str:
    """One line per finished trial, for stderr."""
    if result.get("error"):
        state = f"error: {result['error']}"
    else:
        state = "OOM" if result.get("oom") else "fits"
        if result.get("peak_reserved_bytes") is not None:
            state += f", peak reserved {format_bytes(result['peak_reserved_bytes'])}"
    secs = f" ({result['seconds']:.1f} s)" if result.get("seconds") is not None else ""
    return f"  {fix}: {state}{secs}"


def interrupted_line(exc: KeyboardInterrupt) -> str:
    """The one line verify prints on Ctrl-C (or SIGTERM, SIGHUP): how far it got; every trial process is gone."""
    if isinstance(exc, runner.Interrupted):
        done = f"{exc.finished} of {exc.total} trial(s) finished, the rest stopped or cancelled"
    else:
        done = "the running trial was stopped"
    why = f" ({exc})" if str(exc) else ""
    return f"verify: interrupted{why}: {done}; no report written"


def _b(n: int | None) -> str:
    return "" if n is None else format_bytes(n)


def _changes(t: dict[str, Any]) -> str:
    parts = [f"{k} {a}→{b}" for k, (a, b) in (t.get("changes") or {}).items()]
    if t.get("fix") == "halve-batch" and t.get("effective_batch"):
        parts.append(f"effective batch {t['effective_batch']}")
    if t.get("oom") and t.get("unlimited_peak_allocated_bytes"):
        parts.append(f"needs {format_bytes(t['unlimited_peak_allocated_bytes'])} allocated")
    return ", ".join(parts)


def run(config: Path, fmt: str = "text", output: Path | None = None, max_batch: bool = False,
        device: str | None = None, width: int | None = None) -> int:
    """The verify command; returns the exit code (0 fixed, 1 not, 2 bad config, 130 interrupted)."""
    try:
        res = cfgmod.load(Path(config))
        if device is not None and device not in ("auto", "cuda", "sim"):
            raise cfgmod.ConfigError(config, None, f"--device {device!r} is not auto, cuda or sim",
                                     "pass --device sim to replay on the simulated GPU")
        if fmt not in ("text", "json"):
            raise cfgmod.ConfigError(config, None, f"--format {fmt!r} is not text or json", "use --format json")
    except cfgmod.ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_BAD_CONFIG
    dev = runner.detect_device(device or res.config.device)
    if dev == "cuda" and runner.detect_device("auto") != "cuda":
        where = f"{res.path}:{res.line_of('device')}" if device is None and res.line_of("device") else str(res.path)
        print(f"{where}: device cuda requested but no CUDA GPU is available to torch\n"
              "tip: use --device sim to replay on the simulated GPU", file=sys.stderr)
        return EXIT_BAD_CONFIG
    try:
        runner.trial_memory_limit(dev)
    except ValueError as exc:
        print(f"{exc}\ntip: unset it, or give a size such as {runner.MAX_RSS_ENV}=8GiB", file=sys.stderr)
        return EXIT_BAD_CONFIG
    print(f"verify: {len(res.fixes) + 1} trial(s) on {dev} (fixes from {res.fixes_from})", file=sys.stderr)
    try:
        with runner.signals_interrupt():
            trials = runner.run_all(res, dev, progress=lambda fix, r: print(progress_line(fix, r), file=sys.stderr,
                                                                            flush=True))
            mb = runner.max_batch(res, dev) if max_batch else None
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
    doc = report(res, dev, trials, mb)
    from oomdoctor.report.verify_json import render_verify

    try:
        text = render_verify(doc)
    except ValueError:  # a field the output model does not know yet: never lose finished trials over it
        text = json.dumps(doc, indent=2)
    if fmt == "json":
        print(text)
    else:
        render_table(doc, width=width)
    if output is not None:  # after the results are shown: a failed write never loses finished trials
        write_atomic(Path(output), text + "\n")
    return exit_code(trials)
