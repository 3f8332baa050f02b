"""`oomdoctor rules test` as a pytest: every rule fires on its fixtures, stays silent elsewhere and on benign logs."""

from __future__ import annotations

from typer.testing import CliRunner

from oomdoctor.engine.cli import rules_app
from oomdoctor.engine.harness import run_tests
from oomdoctor.engine.loader import load_rules


def test_every_rule_passes_its_fixtures_and_the_benign_corpus() -> None:
    scores = run_tests(load_rules(check_fixtures=True))
    failures = [f"{s.rule}: {line}" for s in scores for line in s.failures]
    assert not failures, "\n".join(failures)


def test_every_rule_has_a_firing_and_a_silent_fixture() -> None:
    missing = [s.rule for s in run_tests(load_rules()) if s.untested]
    assert not missing


def test_cli_test_and_check_and_show() -> None:
    runner = CliRunner()
    result = runner.invoke(rules_app, ["test"])
    assert result.exit_code == 0, result.output
    assert "eval-spike" in result.output and "TP" in result.output
    assert runner.invoke(rules_app, ["check"]).exit_code == 0
    shown = runner.invoke(rules_app, ["show", "fragmentation-reserved-unallocated"])
    for section in ("## What it detects", "## Why it matters", "## Known false positives", "## Example", "## Fixes",
                    "## References"):
        assert section in shown.output
    assert runner.invoke(rules_app, ["show", "eval-spik"]).exit_code == 2
    templated = runner.invoke(rules_app, ["show", "oom-in-optimizer-step"]).output
    assert "<requested_bytes>" in templated and "{%" not in templated and "{{" not in templated


def test_cli_test_fails_on_a_broken_rule(tmp_path) -> None:
    (tmp_path / "always.yaml").write_text(
        "id: always\ncategory: capacity\ntitle: t\ncondition: {fact: kind, op: present}\nconfidence: 0.5\n"
        "message: {seen: s, why: w, do: d}\ntests:\n  silent: [tests/rule_facts/leak.facts.yaml]\n")
    result = CliRunner().invoke(rules_app, ["test", str(tmp_path)])
    assert result.exit_code == 1 and "FAIL" in result.output


def test_a_silent_rule_says_which_comparison_was_false_or_unknown():
    from oomdoctor.engine.engine import why_not
    from oomdoctor.engine.schema import Condition
    from oomdoctor.facts import FACTS, Derived

    values = {name: None for name in FACTS}
    values.update(allocated_fraction_of_total=0.9, requested_bytes=2 * 2**30, free_bytes=2**30)
    d = Derived(values=values, evidence={})
    cond = Condition.model_validate({"all": [
        {"fact": "allocated_fraction_of_total", "op": "ge", "value": 0.99},
        {"fact": "requested_bytes", "op": "gt", "fact2": "free_bytes"},
        {"fact": "reserved_unallocated_bytes", "op": "lt", "fact2": "requested_bytes"}]})
    reasons = why_not(cond, d)
    assert reasons[0] == "false: allocated_fraction_of_total ge 0.99 (allocated_fraction_of_total = 0.9)"
    assert reasons[1].startswith("unknown: reserved_unallocated_bytes lt requested_bytes")
    assert "not in the log" in reasons[1] and len(reasons) == 2
