"""`oomdoctor rules`: list, show, check and test the rule catalog (thin glue over loader and harness)."""

from __future__ import annotations

from pathlib import Path

import typer

from oomdoctor.engine.harness import run_tests
from oomdoctor.engine.loader import DATA_ROOT, DEFAULT_RULES_DIR, LoadedRule, RuleLoadError, load_rules
from oomdoctor.facts import FACTS
from oomdoctor.fixids import FIX_IDS

rules_app = typer.Typer(help="List, show, validate and test diagnosis rules.", no_args_is_help=True)

RulesOpt = typer.Option(None, "--rules", help="extra rule pack folder; its rules override the built-in ones by id")


def _registry(dirs: list[Path] | None, *, only: bool = False, check_fixtures: bool = False) -> dict[str, LoadedRule]:
    try:
        return load_rules(dirs or [], include_default=not only, check_fixtures=check_fixtures)
    except RuleLoadError as exc:
        for err in exc.errors:
            typer.echo(str(err), err=True)
        typer.echo(f"error: {len(exc.errors)} problem(s) in rule files", err=True)
        typer.echo("tip: fix the files above, then run `oomdoctor rules check`", err=True)
        raise typer.Exit(2) from None


def _rel(path: Path) -> str:
    return str(path.relative_to(DATA_ROOT)) if path.is_relative_to(DATA_ROOT) else str(path)


@rules_app.command("list")
def list_rules(rules: list[Path] | None = RulesOpt,
               facts: bool = typer.Option(False, "--facts", help="list the facts rules may read instead")) -> None:
    """List rules (id, category, base confidence, file) or, with --facts, the fact names."""
    if facts:
        for name, (ftype, doc) in FACTS.items():
            typer.echo(f"{name:40} {ftype:6} {doc}")
        return
    for rule_id, loaded in sorted(_registry(rules).items(), key=lambda kv: (kv[1].rule.category, kv[0])):
        r = loaded.rule
        hedge = " (hypothesis)" if r.hypothesis else ""
        typer.echo(f"{rule_id:40} {r.category:17} {r.confidence:.2f}{hedge}  {_rel(loaded.path)}")


def _section(title: str, body: str | list[str]) -> None:
    typer.echo(f"## {title}")
    lines = body if isinstance(body, list) else [body]
    for line in lines or ["(none)"]:
        typer.echo(line)
    typer.echo("")


def _readable(template: str) -> str:
    """A message template as documentation: {{ fact | filter }} becomes <fact>, {% tags %} disappear."""
    import re

    text = re.sub(r"\{%-?.*?-?%\}", " ", template)
    text = re.sub(r"\{\{-?\s*([\w.]+)[^}]*\}\}", r"<\1>", text)
    return re.sub(r"\s+([,.;)])", r"\1", " ".join(text.split()))


@rules_app.command("show")
def show(rule_id: str = typer.Argument(..., help="rule id, e.g. eval-spike"), rules: list[Path] | None = RulesOpt) -> None:
    """Show one rule the way ruff documents its rules."""
    registry = _registry(rules)
    if rule_id not in registry:
        from oomdoctor.engine.schema import suggest

        typer.echo(f"error: no rule {rule_id!r}{suggest(rule_id, registry)}", err=True)
        typer.echo("tip: `oomdoctor rules list` shows every id", err=True)
        raise typer.Exit(2)
    r = registry[rule_id].rule
    typer.echo(f"# {r.id} ({r.category})\n\n{r.title}\n\nfile: {_rel(registry[rule_id].path)}; "
               f"base confidence {r.confidence:.2f}{'; reported as a hypothesis' if r.hypothesis else ''}\n")
    _section("What it detects", _readable(r.message.seen))
    _section("Why it matters", _readable(r.message.why))
    _section("What to do", _readable(r.message.do))
    _section("Known false positives", [f"- {x}" for x in r.falsepositives])
    _section("Example", r.example.strip() or [f"- fires on {x}" for x in r.tests.fires])
    _section("Fixes", [f"- {f}: {FIX_IDS[f]}" for f in r.fixes])
    _section("References", [f"- {x}" for x in r.references])


@rules_app.command("check")
def check(directory: Path | None = typer.Argument(None, help="rule pack to validate (default: built-in rules)")) -> None:
    """Validate rule files only: schema, fact names, templates, file names, fixture paths."""
    registry = _registry([directory] if directory else [DEFAULT_RULES_DIR], only=True, check_fixtures=True)
    typer.echo(f"ok: {len(registry)} rules valid", err=True)


@rules_app.command("test")
def test(directory: Path | None = typer.Argument(None, help="rule pack to test (default: built-in rules)"),
         require_tests: bool = typer.Option(False, "--require-tests",
                                            help="fail rules lacking a fires or silent fixture")) -> None:
    """Run every rule over its fixtures and the benign corpus; print TP/TN/FP/FN per rule."""
    registry = _registry([directory] if directory else [DEFAULT_RULES_DIR], only=True, check_fixtures=True)
    scores = run_tests(registry)
    failed = 0
    typer.echo(f"{'rule':40} {'TP':>3} {'TN':>4} {'FP':>3} {'FN':>3} {'todo':>4}  status")
    for s in scores:
        bad = not s.ok or (require_tests and any(u.startswith("no fixture") for u in s.untested))
        failed += bad
        typer.echo(f"{s.rule:40} {s.tp:3} {s.tn:4} {s.fp:3} {s.fn:3} {s.todo:4}  {'FAIL' if bad else 'ok'}")
        for line in s.failures:
            typer.echo(f"    ✖ {line}")
        for line in s.untested:
            typer.echo(f"    · {line}")
    totals = [sum(getattr(s, k) for s in scores) for k in ("tp", "tn", "fp", "fn", "todo")]
    typer.echo(f"{len(scores)} rules: TP {totals[0]}, TN {totals[1]}, FP {totals[2]}, FN {totals[3]}, todo {totals[4]}; "
               f"{failed} failing", err=True)
    if failed:
        typer.echo("tip: `oomdoctor rules show ID` explains a rule; adjust its condition or its tests", err=True)
        raise typer.Exit(1)
