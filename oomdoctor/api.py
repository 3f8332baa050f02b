"""The Python API: diagnose logs from code and get the same report `oomdoctor diagnose` prints.

    import oomdoctor
    report = oomdoctor.diagnose_path("train.log")       # or diagnose_paths([...]), diagnose_text(text)
    report.diagnoses[0].category, report.to_dict()       # to_dict()/to_json() == `--format json`

Pure functions: no global mutable state, results are frozen and picklable, calls are safe from many threads or
processes. Errors a user can cause raise `oomdoctor.OomdoctorError` (an unreadable log) or
`RuleLoadError` (a bad rule pack). torch is never imported.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from oomdoctor.diagnosis import Diagnosis, Report
from oomdoctor.engine.engine import diagnose_with
from oomdoctor.engine.loader import LoadedRule, load_rules
from oomdoctor.parse.events import parse_files, parse_regions
from oomdoctor.parse.model import ParseResult
from oomdoctor.parse.reader import _scan_stream

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["RuleSet", "diagnose_path", "diagnose_paths", "diagnose_text"]


@dataclass(frozen=True)
class RuleSet:
    """Validated rules, loaded once and passed to many calls (immutable, picklable).

    `RuleSet.load()` is the built-in rules; `RuleSet.load(["my_rules/"])` adds a pack (same id overrides).
    """

    rules: tuple[LoadedRule, ...]

    @classmethod
    def load(cls, dirs: Sequence[PathLike] = (), *, include_default: bool = True) -> RuleSet:
        """Load and validate the rules; raises RuleLoadError listing every problem."""
        registry = load_rules([Path(d) for d in _as_list(dirs)], include_default=include_default)
        return cls(tuple(registry.values()))

    def registry(self) -> dict[str, LoadedRule]:
        """A fresh id -> rule mapping, in load order."""
        return {r.rule.id: r for r in self.rules}


Rules = Union[RuleSet, PathLike, Sequence[PathLike]]  # noqa: UP007 - as above


def _as_list(paths: PathLike | Sequence[PathLike]) -> list[str]:
    """One path or several, as the strings the CLI would have been given."""
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def _diagnose(facts: ParseResult, rules: Rules) -> Report:
    """The CLI's report: rules run only when there is an event to explain."""
    diagnoses: tuple[Diagnosis, ...] = ()
    if facts.events:
        registry = rules.registry() if isinstance(rules, RuleSet) else RuleSet.load(_as_list(rules)).registry()
        diagnoses = diagnose_with(facts, registry)
    return Report(events=facts.events, diagnoses=tuple(diagnoses), runs=facts.runs)


def diagnose_text(text: str | bytes, source: str = "<text>", rules: Rules = ()) -> Report:
    """Diagnose a log already in memory, read exactly as `oomdoctor diagnose` reads a file named `source`.

    `rules`: extra rule directories (or a preloaded RuleSet). Raises InputError for an empty or binary text.
    Read files with `open(path, newline="")` or pass bytes: universal newlines turn progress-bar `\r` redraws
    into lines of their own, and the line numbers would no longer be the file's.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", errors="replace")
    facts = parse_regions(_scan_stream(io.BytesIO(data), source))
    return _diagnose(facts, rules)


def diagnose_paths(paths: PathLike | Sequence[PathLike], rules: Rules = ()) -> Report:
    """Diagnose log files (`.gz` read compressed) as one report, like `oomdoctor diagnose PATH...`.

    Sources are named by the paths as given. Raises InputError for a missing, unreadable or binary file.
    """
    facts = parse_files(_as_list(paths))
    return _diagnose(facts, rules)


def diagnose_path(path: PathLike, rules: Rules = ()) -> Report:
    """Diagnose one log file: `diagnose_paths([path])`."""
    return diagnose_paths([path], rules)
