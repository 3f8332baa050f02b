"""`oomdoctor verify`: replay the failing step and each fix; report which fit. Never imports torch itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from oomdoctor.units import format_bytes
from oomdoctor.verify import config as cfgmod
from oomdoctor.verify import runner

EXIT_FIXED, EXIT_NOT_FIXED, EXIT_BAD_CONFIG = 0, 1, 2


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
    return out


def exit_code(trials: list[dict[str, Any]]) -> int:
    """0 when the baseline reproduced the OOM and at least one fix fits; 1 otherwise."""
    if not trials or trials[0].get("oom") is not True:
        return EXIT_NOT_FIXED
    return EXIT_FIXED if any(t.get("fits") for t in trials[1:]) else EXIT_NOT_FIXED


def render_table(doc: dict[str, Any], stream: Any = None) -> None:
    """A rich table: fix, fits?, peak allocated, peak reserved, headroom, time vs baseline."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream or sys.stdout, width=130)
    cap = doc["capacity_bytes"]
    title = (f"oomdoctor verify — device {doc['device']}, capacity {format_bytes(cap)} "
             f"(non-PyTorch {format_bytes(doc['non_pytorch_bytes'])}), phase {doc['phase']}")
    table = Table(title=title, title_justify="left")
    for col in ("fix", "fits?", "peak allocated", "peak reserved", "headroom", "time vs baseline", "note"):
        table.add_column(col, justify="right" if col.startswith(("peak", "head", "time")) else "left")
    for t in doc["trials"]:
        if not t.get("verifiable", True):
            fits = "n/a"
        elif t.get("error"):
            fits = "[yellow]error[/]"
        elif t["fix"] == "baseline":
            fits = "[red]OOM (reproduced)[/]" if t.get("oom") else "[green]fits (not reproduced)[/]"
        else:
            fits = "[green]yes[/]" if t.get("fits") else "[red]no[/]"
        rel = t.get("relative_time")
        note = t.get("error") or _changes(t)
        table.add_row(t["fix"], fits, _b(t.get("peak_allocated_bytes")), _b(t.get("peak_reserved_bytes")),
                      _b(t.get("headroom_bytes")), f"×{rel:.2f}" if rel else "", note)
    console.print(table)
    mb = doc.get("max_batch")
    if mb:
        if mb.get("max_batch"):
            extra = (f", gradient accumulation {mb['grad_accum']} keeps the effective batch at "
                     f"{mb['effective_batch']}") if mb.get("grad_accum") else ""
            console.print(f"largest per-device {mb['key']} that fits with {mb['margin']:.0%} margin: "
                          f"{mb['max_batch']}{extra}")
        else:
            console.print(f"no per-device {mb.get('key', 'batch')} fits: {mb.get('error', 'even 1 runs out')}")


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
        device: str | None = None) -> int:
    """The verify command; returns the exit code (0 fixed, 1 not, 2 bad config)."""
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
    print(f"verify: {len(res.fixes) + 1} trial(s) on {dev} (fixes from {res.fixes_from})", file=sys.stderr)
    trials = runner.run_all(res, dev)
    mb = runner.max_batch(res, dev) if max_batch else None
    doc = report(res, dev, trials, mb)
    text = json.dumps(doc, indent=2)
    if output is not None:
        Path(output).write_text(text + "\n")
    if fmt == "json":
        print(text)
    else:
        render_table(doc)
    return exit_code(trials)
