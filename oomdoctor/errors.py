"""The errors oomdoctor reports to users: one line with a location, plus a tip on what to do next."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NO_OOM = 1
EXIT_BAD_INPUT = 2


class OomdoctorError(Exception):
    """A user-facing error: `where` is "file" or "file:line", `tip` says what to do next."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, where: str | None = None, tip: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.tip = tip

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class InputError(OomdoctorError):
    """A log that cannot be read: missing, a directory, binary, not UTF-8, truncated."""


class UsageError(OomdoctorError):
    """Command-line arguments that do not fit together."""
