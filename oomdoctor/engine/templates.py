"""Sandboxed jinja2 rendering of rule messages: strict about unknown names, no code execution."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from oomdoctor.units import format_bytes


def _pct(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{100 * x:.1f}%" if abs(x) < 0.1 else f"{100 * x:.0f}%"


def _num(x: float | int | None, digits: int = 2) -> str:
    if x is None:
        return "?"
    return f"{x:,}" if isinstance(x, int) else f"{x:.{digits}f}"


ENV = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
ENV.filters.update({"bytes": format_bytes, "pct": _pct, "num": _num})


def names_in(source: str) -> set[str]:
    """Variables a template reads (raises jinja2.TemplateSyntaxError on bad syntax)."""
    return meta.find_undeclared_variables(ENV.parse(source))


# A message is text with facts, filters and if/else: loops, calls, macros, imports and assignments are refused
# at load time (a recursive macro or nested loops would hang or crash every diagnosis that fires the rule).
FORBIDDEN = {nodes.For: "a for loop", nodes.Macro: "a macro", nodes.CallBlock: "a call block", nodes.Call: "a call",
             nodes.Import: "an import", nodes.FromImport: "an import", nodes.Include: "an include",
             nodes.Extends: "extends", nodes.Block: "a block", nodes.FilterBlock: "a filter block",
             nodes.Assign: "an assignment", nodes.AssignBlock: "an assignment", nodes.With: "a with block"}


def forbidden_in(source: str) -> tuple[str, int] | None:
    """The first construct a message may not use, with its line in the template; None when it is plain."""
    for node in ENV.parse(source).find_all(tuple(FORBIDDEN)):
        return FORBIDDEN[type(node)], node.lineno
    return None


TEMPLATE_CACHE = 1024  # compiled message templates kept (a rule pack has a few hundred)


@lru_cache(maxsize=TEMPLATE_CACHE)
def _compiled(source: str) -> Any:
    return ENV.from_string(source)


def render(source: str, values: dict[str, Any]) -> str:
    """Render a rule message with the event's facts; the result is plain text, one paragraph. Text without a `{`
    has no jinja2 syntax and renders as itself: it is not compiled (two message parts in three; start-up)."""
    if "{" not in source:
        return " ".join(source.split())
    return " ".join(_compiled(source).render(**values).split())


__all__ = ["ENV", "TemplateSyntaxError", "names_in", "render"]
