"""Output files written whole or not at all, never over one of the inputs."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from oomdoctor.errors import OomdoctorError


def check_output(output: Path | None, inputs: Iterable[str | Path] = ()) -> None:
    """Fail before any work when the file could not be written, or would overwrite an input."""
    if output is None:
        return
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise OomdoctorError("the folder for the output does not exist", where=str(output),
                             tip=f"create it first: mkdir -p {parent}")
    if output.is_dir():
        raise OomdoctorError("is a directory", where=str(output), tip="name a file, e.g. report.html")
    if not os.access(parent, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise OomdoctorError("cannot write here: permission denied", where=str(output), tip="choose another path")
    for source in inputs:
        if str(source) != "-" and _same_file(output, Path(source)):
            raise OomdoctorError("is also an input; writing it would destroy the log", where=str(output),
                                 tip="name another file for the output")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename (see `stream_atomic`)."""
    stream_atomic(path, lambda handle: handle.write(text))


def stream_atomic(path: Path, write: Callable[[TextIO], object]) -> None:
    """Let `write` write to a temporary file in the same folder as `path`, then rename it to `path`.

    A full disk or an interruption leaves the old file (or none), never half a report.
    Raises OomdoctorError naming the path when the write fails.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise OomdoctorError(f"cannot write it: {exc.strerror or exc}", where=str(path),
                             tip="free some space or choose another path") from exc
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)
