"""The `oomdoctor` command line: thin glue from arguments to the pipeline and back to the terminal."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import TextIO

import typer

from oomdoctor import __version__
from oomdoctor.errors import EXIT_BAD_INPUT, EXIT_NO_OOM, EXIT_OK, OomdoctorError, UsageError
from oomdoctor.outfile import check_output, stream_atomic, write_atomic

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, context_settings=HELP,
                  help="A post-mortem doctor for GPU out-of-memory failures in training logs.")


class Color(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


def use_color(choice: Color, output: Path | None) -> bool:
    """Colour for the text report: `always`, `never`, or (auto) a terminal with NO_COLOR unset."""
    if choice is Color.always:
        return True
    if choice is Color.never or output is not None or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def text_width(output: Path | None) -> int:
    """Columns for the text report: the terminal's, else $COLUMNS, else 80."""
    if output is None and sys.stdout.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and 20 <= int(cols) <= 1000 else 80


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


def _write(text: str, output: Path | None) -> None:
    _emit(lambda out: out.write(text), output)


def _emit(write: Callable[[TextIO], object], output: Path | None) -> None:
    """Let `write` write the report to standard output, or whole or not at all to `output`."""
    if output is None:
        try:
            write(sys.stdout)
            sys.stdout.flush()
        except BrokenPipeError:  # the reader stopped reading (`| head`): the exit code stays the command's own
            _stdout_to_devnull()
        except OSError as exc:  # a full disk behind a redirect: say so, never exit 0 with half a report
            fail(OomdoctorError(f"cannot write the report to standard output: {exc.strerror or exc}",
                                tip="free some space, or write it with -o FILE"))
        return
    try:
        stream_atomic(output, write)
    except OomdoctorError as err:
        fail(err)
    typer.echo(f"report written to {output}", err=True)


def _stdout_to_devnull() -> None:
    """Send what is left of standard output nowhere, so that flushing it at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


PROGRESS_AFTER_SECONDS = 0.5  # a log read faster than this shows no progress line at all
PROGRESS_EVERY_SECONDS = 0.2


class _ProgressLine:
    """A one-line reading progress on stderr for long logs (terminal only): bytes read, failure lines found."""

    def __init__(self) -> None:
        from oomdoctor.report.text import clean

        self.clean = clean  # a file name may hold escape sequences
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, name: str, read_bytes: int, total: int | None, failures: int) -> None:
        now = time.monotonic()
        if now - self.start < PROGRESS_AFTER_SECONDS or now - self.last < PROGRESS_EVERY_SECONDS:
            return
        self.last, self.shown = now, True
        done = f"{read_bytes / 2**20:,.0f}" + (f"/{total / 2**20:,.0f} MiB" if total else " MiB")
        line = f"reading {self.clean(name)[-40:]}: {done}, {failures} failure line{'s' * (failures != 1)}"
        sys.stderr.write("\r" + line[: shutil.get_terminal_size((80, 24)).columns - 1] + "\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


@app.command()
def diagnose(
    logs: list[str] = typer.Argument(..., metavar="LOG...", help="training logs (.gz ok); - reads standard input"),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="text, markdown, json or html"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the report to this file"),
    rules: list[Path] = typer.Option([], "--rules", help="a directory of extra rules (same id overrides)"),
    no_rules: bool = typer.Option(False, "--no-rules", help="only extract the events; skip the diagnosis"),
    color: Color = typer.Option(Color.auto, "--color", help="colour the text report: auto, always or never"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="text: print only the one-line verdict"),
) -> None:
    """Find every OOM in the logs, explain why it happened and what to change."""
    from oomdoctor.diagnosis import Report
    from oomdoctor.parse import parse_files
    from oomdoctor.report import write

    try:
        check_output(output, logs)
        registry = None if no_rules else _load_rules(rules)
        progress = _ProgressLine() if sys.stderr.isatty() else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                facts = parse_files(logs, progress)
            finally:
                if progress is not None:
                    progress.close()
        for w in caught:  # undecodable bytes and the like: said once per file, the work goes on
            typer.echo(f"oomdoctor: warning: {w.message}", err=True)
        diagnoses: tuple = ()
        if registry is not None and facts.events:
            from oomdoctor.engine.engine import diagnose_with

            diagnoses = diagnose_with(facts, registry)
    except OomdoctorError as err:
        fail(err)
    report = Report(events=facts.events, diagnoses=tuple(diagnoses), runs=facts.runs)
    colored, width = use_color(color, output) and fmt is Format.text, text_width(output)
    _emit(lambda out: write(report, fmt.value, out, color=colored, width=width, quiet=quiet), output)
    raise typer.Exit(EXIT_OK if report.events else EXIT_NO_OOM)


def _load_rules(rules: list[Path]) -> dict:
    """The rule registry; a bad pack is a user error (exit 2) naming its first problem with file:line."""
    from oomdoctor.engine.loader import RuleLoadError, load_rules

    try:
        return load_rules(rules)
    except RuleLoadError as exc:
        first = exc.errors[0]
        more = f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""
        where = f"{first.path}:{first.line}" if first.line else str(first.path)  # a folder has no line
        raise OomdoctorError(f"{first.message}{more}", where=where,
                             tip=first.tip or "run `oomdoctor rules check DIR` to see every problem") from None


class VerifyFormat(str, Enum):
    text = "text"
    json = "json"


@app.command()
def verify(
    config: Path | None = typer.Option(None, "--config", "-c", help="the replay configuration (YAML)"),
    from_log: str | None = typer.Option(None, "--from", help="build the replay from a failed run's log instead"),
    write_config: Path | None = typer.Option(None, "--write-config",
                                             help="with --from: write the built config here and stop"),
    fmt: VerifyFormat = typer.Option(VerifyFormat.text, "--format", "-f", help="text or json"),
    output: Path | None = typer.Option(None, "--output", "-o", help="also write the JSON result to this file"),
    max_batch: bool = typer.Option(False, "--max-batch", help="search the largest per-device batch that fits"),
    device: str | None = typer.Option(None, "--device", help="override the config: auto, cuda or sim"),
    snapshot: Path | None = typer.Option(None, "--snapshot",
                                         help="replay a memory snapshot's recorded trace under other allocator settings"),
    gpu: int | None = typer.Option(None, "--gpu", help="with --snapshot: the device whose trace to replay"),
) -> None:
    """Replay the failing step under the failing GPU's memory limit and show which fixes fit."""
    import importlib.util

    try:
        if sum(x is not None for x in (config, from_log, snapshot)) != 1:
            raise UsageError("give exactly one of --config cfg.yaml, --from train.log or --snapshot snap.pickle",
                             tip="oomdoctor verify --from train.log builds the replay from the log")
        if snapshot is not None:
            _verify_snapshot(snapshot, gpu, fmt, output)
        check_output(output, [p for p in (config, from_log) if p is not None])
        if from_log is not None:
            config = _config_from_log(from_log, write_config)
            if config is None:
                raise typer.Exit(EXIT_OK)
        if importlib.util.find_spec("torch") is None:
            raise OomdoctorError("verify replays a training step and needs PyTorch, which is not installed",
                                 tip="pip install torch --index-url https://download.pytorch.org/whl/cpu "
                                     "(CPU build; any 2.4+), or pip install 'oomdoctor[verify]'")
        from oomdoctor.verify.command import run

        assert config is not None  # given, or built from the log above
        code = run(config, fmt=fmt.value, output=output, max_batch=max_batch, device=device,
                   width=text_width(None))
    except OomdoctorError as err:
        fail(err)
    raise typer.Exit(code)


def _verify_snapshot(path: Path, gpu: int | None, fmt: VerifyFormat, output: Path | None) -> None:
    """verify --snapshot: the recorded trace replayed as recorded and under each allocator fix (no torch needed)."""
    import json

    from oomdoctor.parse.reader import check_path
    from oomdoctor.parse.snapshot import is_snapshot_file, load
    from oomdoctor.verify import whatif

    check_path(str(path))
    if not is_snapshot_file(str(path)):
        raise OomdoctorError("not a memory snapshot (a pickle from torch.cuda.memory._dump_snapshot)", where=str(path),
                             tip="diagnose reads logs; verify --snapshot needs the pickle")
    check_output(output, [path])
    try:
        report = whatif.what_if(load(path), gpu)
    except whatif.NoTrace as exc:
        raise OomdoctorError(str(exc), where=str(path), tip="dump the snapshot from an OOM observer with history on "
                                                             "(oomdoctor.capture.install(history=True))") from None
    doc = json.dumps(whatif.to_dict(report, str(path)), indent=2) + "\n"
    _write(doc if fmt is VerifyFormat.json else whatif.render_text(report, str(path)), None)
    if output is not None:
        write_atomic(output, doc)
    raise typer.Exit(whatif.exit_code(report))


def _config_from_log(log: str, keep: Path | None) -> Path | None:
    """The config `verify --from` replays: written to `keep` (and None: stop there) or to a temporary file."""
    import tempfile

    from oomdoctor.parse.reader import check_path
    from oomdoctor.verify.fromlog import write

    check_path(log)
    if keep is not None:
        check_output(keep, [log])
    target = keep or Path(tempfile.mkdtemp(prefix="oomdoctor-verify-")) / "from-log.yaml"
    for note in write(log, target):
        typer.echo(f"verify: {note}", err=True)
    if keep is not None:
        typer.echo(f"config written to {keep}; edit it, then: oomdoctor verify --config {keep}", err=True)
        return None
    return target


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


class ScanEngine(str, Enum):
    local = "local"
    ray = "ray"


class ScanFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    jsonl = "jsonl"
    json = "json"


@app.command()
def scan(
    targets: list[str] = typer.Argument(..., metavar="PATH...", help="log files, folders (walked) or quoted globs"),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, max=256, help="parallel processes"),
    fmt: ScanFormat = typer.Option(ScanFormat.table, "--format", "-f",
                                   help="table or markdown (a summary), jsonl (one row per job, as jobs finish) or json"),
    include: list[str] = typer.Option([], "--include", help="only files whose name or path matches this glob"),
    exclude: list[str] = typer.Option([], "--exclude", help="skip files whose name or path matches this glob"),
    since: str | None = typer.Option(None, "--since", help="only files modified within an age (7d, 12h) or since a date"),
    group_by: str | None = typer.Option(None, "--group-by",
                                        help="a regex; files equal once it is blanked are one job (e.g. 'rank\\d+')"),
    state: str | None = typer.Option(None, "--state",
                                     help="a state file: unchanged files reuse their last row (incremental scans)"),
    engine: ScanEngine = typer.Option(ScanEngine.local, "--engine", help="local processes, or a Ray cluster"),
    address: str | None = typer.Option(None, "--address", help="with --engine ray: auto, ray://host:10001, or local"),
) -> None:
    """Diagnose every log as its own job and summarise: OOM jobs, causes, fixes, GPUs, stacks."""
    import time
    from itertools import chain

    from oomdoctor import scan as S

    try:
        cutoff = S.parse_since(since, time.time()) if since else None
        files = S.select(S.expand(targets), include, exclude, cutoff)
        job_list = S.group(files, group_by)
        memory = S.State(state)
    except OomdoctorError as err:
        fail(err)
    rows: list[dict] = []
    todo: list = []
    for job in job_list:
        row = memory.cached(job)
        if row is None:
            todo.append(job)
        else:
            rows.append(row)
            if fmt is ScanFormat.jsonl:
                S.write_row(row, sys.stdout)
    try:
        produced = S.run(todo, jobs) if engine is ScanEngine.local else S.run_ray(todo, address)
        first = next(produced, None)
    except OomdoctorError as err:
        fail(err)
    for i, row in enumerate(chain([first] if first is not None else [], produced), 1):
        rows.append(row)
        memory.remember(row.get("files") or row["path"], row)
        if fmt is ScanFormat.jsonl:
            S.write_row(row, sys.stdout)
        if row["status"] == "error":
            typer.echo(f"oomdoctor: {row['path']}: {row['error']} (skipped)", err=True)
        if sys.stderr.isatty():
            typer.echo(f"\r{i}/{len(todo)} jobs", err=True, nl=False)
    if sys.stderr.isatty() and todo:
        typer.echo("", err=True)
    try:
        memory.save()
    except OomdoctorError as err:
        fail(err)
    result = S.summary(rows)
    if fmt is ScanFormat.json:
        import json

        sys.stdout.write(json.dumps({"summary": result, "jobs": rows}, indent=2) + "\n")
    elif fmt is ScanFormat.table:
        sys.stdout.write(S.render_summary(result))
    elif fmt is ScanFormat.markdown:
        sys.stdout.write(S.render_markdown(result))
    raise typer.Exit(EXIT_BAD_INPUT if result["unreadable"] else EXIT_OK)


PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"


@contextlib.contextmanager
def _without_pydantic_plugins() -> Iterator[None]:
    """Run with pydantic's plugins off unless $PYDANTIC_DISABLE_PLUGINS says otherwise: oomdoctor's models are its
    own, and looking plugins up reads every installed distribution's entry points when the first model is built (~6 ms
    of a start-up); typer does the same around the adapters it builds."""
    if PLUGINS_ENV in os.environ:
        yield
        return
    os.environ[PLUGINS_ENV] = "__all__"
    try:
        yield
    finally:
        os.environ.pop(PLUGINS_ENV, None)


def main() -> None:
    """Entry point: run the app; a bug prints one line, never a traceback."""
    try:
        with _without_pydantic_plugins():
            app()
    except KeyboardInterrupt:
        typer.echo("oomdoctor: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(EXIT_OK)
    except Exception as exc:
        typer.echo(f"oomdoctor: internal error: {type(exc).__name__}: {exc}", err=True)
        typer.echo("tip: please report this with the log that caused it; OOMDOCTOR_DEBUG=1 shows the traceback",
                   err=True)
        if __import__("os").environ.get("OOMDOCTOR_DEBUG"):
            raise
        sys.exit(3)


if __name__ == "__main__":
    main()
