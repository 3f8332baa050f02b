"""The `oomdoctor` command line: thin glue from arguments to the pipeline and back to the terminal."""

from __future__ import annotations

import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from oomdoctor import __version__
from oomdoctor.errors import EXIT_BAD_INPUT, EXIT_NO_OOM, EXIT_OK, OomdoctorError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="A post-mortem doctor for GPU out-of-memory failures in training logs.")


class Format(str, Enum):
    text = "text"
    markdown = "markdown"
    json = "json"
    html = "html"


def fail(err: OomdoctorError) -> None:
    """The single fatal-error path: one line, a tip, a distinct exit code."""
    typer.echo(f"oomdoctor: error: {err}", err=True)
    if err.tip:
        typer.echo(f"tip: {err.tip}", err=True)
    raise typer.Exit(err.exit_code)


def _write(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(OomdoctorError(f"cannot write the report: {exc.strerror}", where=str(output)))
    typer.echo(f"report written to {output}", err=True)


@app.command()
def diagnose(
    logs: list[str] = typer.Argument(..., metavar="LOG...", help="training logs (.gz ok); - reads standard input"),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="text, markdown, json or html"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the report to this file"),
    rules: list[Path] = typer.Option([], "--rules", help="a directory of extra rules (same id overrides)"),
    no_rules: bool = typer.Option(False, "--no-rules", help="only extract the events; skip the diagnosis"),
) -> None:
    """Find every OOM in the logs, explain why it happened and what to change."""
    from oomdoctor.diagnosis import Report
    from oomdoctor.parse import parse_files
    from oomdoctor.report import render

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            facts = parse_files(logs)
        for w in caught:  # undecodable bytes and the like: said once per file, the work goes on
            typer.echo(f"oomdoctor: warning: {w.message}", err=True)
        diagnoses = ()
        if not no_rules and facts.events:
            from oomdoctor.engine.engine import diagnose as run_rules

            diagnoses = run_rules(facts, rules)
    except OomdoctorError as err:
        fail(err)
    report = Report(events=facts.events, diagnoses=tuple(diagnoses), runs=facts.runs)
    color = fmt is Format.text and output is None and sys.stdout.isatty()
    _write(render(report, fmt.value, color=color), output)
    raise typer.Exit(EXIT_OK if facts.events else EXIT_NO_OOM)


@app.command()
def verify(
    config: Path = typer.Option(..., "--config", "-c", help="the replay configuration (YAML)"),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="text or json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the report to this file"),
    max_batch: bool = typer.Option(False, "--max-batch", help="search the largest per-device batch that fits"),
    device: Optional[str] = typer.Option(None, "--device", help="override the config: auto, cuda or sim"),
) -> None:
    """Replay the failing step under the failing GPU's memory limit and show which fixes fit."""
    from oomdoctor.verify.command import run

    if fmt not in (Format.text, Format.json):
        fail(OomdoctorError(f"verify prints text or json, not {fmt.value}", tip="use --format json"))
    try:
        code = run(config, fmt=fmt.value, output=output, max_batch=max_batch, device=device)
    except OomdoctorError as err:
        fail(err)
    raise typer.Exit(code)


def _mount_rules() -> None:
    # The rules sub-app (harness, docs rendering) is only imported when asked for, keeping `diagnose` lean.
    argv = [a for a in sys.argv[1:] if not a.startswith("-")]
    if argv and argv[0] != "rules":
        return
    try:
        from oomdoctor.engine.cli import rules_app
    except ImportError:  # pragma: no cover
        return
    app.add_typer(rules_app, name="rules", help="List, show, check and test the diagnosis rules.")


_mount_rules()


@app.callback(invoke_without_command=True)
def _root(version: bool = typer.Option(False, "--version", help="print the version and exit")) -> None:
    if version:
        typer.echo(f"oomdoctor {__version__}")
        raise typer.Exit(EXIT_OK)


def main() -> None:
    """Entry point: run the app; a bug prints one line, never a traceback."""
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("oomdoctor: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(EXIT_OK)
    except Exception as exc:  # noqa: BLE001 - the last line of defence
        typer.echo(f"oomdoctor: internal error: {type(exc).__name__}: {exc}", err=True)
        typer.echo("tip: please report this with the log that caused it; OOMDOCTOR_DEBUG=1 shows the traceback",
                   err=True)
        if __import__("os").environ.get("OOMDOCTOR_DEBUG"):
            raise
        sys.exit(3)


if __name__ == "__main__":
    main()
