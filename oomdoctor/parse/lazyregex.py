"""Patterns compiled on first use: a run pays only for the patterns its log needs (start-up, issue 11)."""

from __future__ import annotations

from typing import Any, cast

import regex

# Bound onto the instance at the first compile, so later calls cost a plain attribute lookup (hot on dense logs).
_METHODS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "groupindex", "groups")


class LazyPattern:
    """A `regex` pattern that compiles itself the first time one of its methods is used."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern, self.flags = pattern, flags
        self._compiled: regex.Pattern[str] | None = None

    @property
    def compiled(self) -> regex.Pattern[str]:
        if self._compiled is None:
            self._compiled = regex.compile(self.pattern, self.flags)
            for name in _METHODS:
                setattr(self, name, getattr(self._compiled, name))
        return self._compiled

    def __getattr__(self, name: str) -> Any:  # only reached before the first compile, or for a rarer attribute
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"lazy({self.pattern!r})"


def lazy(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """`regex.compile`, deferred until first use (typed as the pattern it stands for)."""
    return cast("regex.Pattern[str]", LazyPattern(pattern, flags))
