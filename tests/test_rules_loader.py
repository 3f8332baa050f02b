"""Rule loading: every error collected with file:line and a tip; user packs override by id."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.engine.loader import DEFAULT_RULES_DIR, RuleLoadError, load_dir, load_rules

GOOD = """\
id: {id}
category: capacity
title: t
condition:
  all:
    - {{fact: requested_bytes, op: gt, fact2: free_bytes}}
confidence: 0.5
message: {{seen: "asked {{{{ requested_bytes | bytes }}}}", why: w, do: d}}
fixes: [halve-batch]
"""


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


def test_builtin_rules_load_and_cover_every_category() -> None:
    from oomdoctor.diagnosis import CATEGORIES

    registry = load_rules(check_fixtures=True)
    assert {r.rule.category for r in registry.values()} == set(CATEGORIES)
    assert all(p.rule.id == p.path.stem for p in registry.values())


def test_errors_are_collected_across_files_with_lines(tmp_path: Path) -> None:
    write(tmp_path, "a", GOOD.format(id="a").replace("requested_bytes, op: gt", "requestd_bytes, op: gt"))
    write(tmp_path, "b", GOOD.format(id="b") + "colour: red\n")
    write(tmp_path, "c", GOOD.format(id="c").replace("halve-batch", "halve-the-batch"))
    _, errors = load_dir(tmp_path)
    text = "\n".join(str(e) for e in errors)
    assert "a.yaml:6: condition.all.0.fact: unknown fact 'requestd_bytes' (did you mean 'requested_bytes'?)" in text
    assert "b.yaml:10: colour: Extra inputs are not permitted" in text
    assert "c.yaml:9: fixes: unknown fix id 'halve-the-batch'" in text
    assert all(e.tip for e in errors)


def test_template_names_and_file_name_checked(tmp_path: Path) -> None:
    write(tmp_path, "wrong-name", GOOD.format(id="x").replace("requested_bytes | bytes", "requested | bytes"))
    _, errors = load_dir(tmp_path)
    messages = [e.message for e in errors]
    assert any("message.seen names unknown fact 'requested'" in m for m in messages)
    assert any("differs from id 'x'" in m for m in messages)


@pytest.mark.parametrize(("cond", "needle"), [
    ("{fact: kind, op: gt, value: 3}", "needs a number"),
    ("{fact: step, op: gt}", "needs exactly one of value or fact2"),
    ("{fact: step, op: present, value: 3}", "takes no value"),
    ("{fact: step, op: in, value: 3}", "needs value: a list"),
    ("{fact: gradient_checkpointing, op: eq, value: 1}", "is bool"),
])
def test_bad_comparisons(tmp_path: Path, cond: str, needle: str) -> None:
    write(tmp_path, "r", GOOD.format(id="r").replace("{fact: requested_bytes, op: gt, fact2: free_bytes}", cond))
    _, errors = load_dir(tmp_path)
    assert any(needle in e.message for e in errors), [str(e) for e in errors]


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    write(tmp_path, "s", "id: s\ncondition: [\n")
    _, errors = load_dir(tmp_path)
    assert errors and errors[0].line >= 2 and "YAML syntax" in errors[0].message


def test_user_pack_overrides_by_id(tmp_path: Path) -> None:
    write(tmp_path, "eval-spike", GOOD.format(id="eval-spike"))
    registry = load_rules([tmp_path])
    assert registry["eval-spike"].path.parent == tmp_path
    assert len(registry) == len(load_rules())


def test_load_rules_raises_all_errors(tmp_path: Path) -> None:
    write(tmp_path, "a", "id: a\n")
    write(tmp_path, "b", "id: b\n")
    with pytest.raises(RuleLoadError) as exc:
        load_rules([tmp_path], include_default=False)
    assert {e.path.name for e in exc.value.errors} == {"a.yaml", "b.yaml"}


def test_no_rule_can_execute_code(tmp_path: Path) -> None:
    from oomdoctor.engine import templates

    with pytest.raises(Exception):  # noqa: B017 - the sandbox's own SecurityError, whatever jinja2 names it
        templates.render("{{ ''.__class__.__mro__[1].__subclasses__() }}", {})
    assert DEFAULT_RULES_DIR.is_dir()


@pytest.mark.parametrize(("construct", "what"), [
    ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "a macro"),
    ("{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}", "a for loop"),
    ("{{ cycler(1, 2) }}", "a call"),
    ("{% set x = 1 %}", "an assignment"),
])
def test_messages_that_could_hang_or_recurse_are_refused_at_load(tmp_path: Path, construct: str, what: str) -> None:
    write(tmp_path, "r", GOOD.format(id="r").replace("why: w", f"why: '{construct}'"))
    _, errors = load_dir(tmp_path)
    assert [e.message for e in errors] == [f"message.why: {what} is not allowed in a message"]
    assert errors[0].line == 8


def test_yaml_alias_bombs_are_refused_before_they_expand(tmp_path: Path) -> None:
    levels = ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefg", "bcdefgh"):
        levels.append(f"&{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    write(tmp_path, "bomb", GOOD.format(id="bomb").replace(
        "{fact: requested_bytes, op: gt, fact2: free_bytes}", "{fact: kind, op: in, value: [" + ", ".join(levels) + "]}"))
    _, errors = load_dir(tmp_path)
    assert [e.message for e in errors] == ["YAML aliases expand to more than 100,000 nodes"]


def test_the_rules_shipped_use_only_plain_messages() -> None:
    from oomdoctor.engine import templates

    for loaded in load_rules().values():
        for part in ("seen", "why", "do"):
            assert templates.forbidden_in(getattr(loaded.rule.message, part)) is None, loaded.rule.id


def test_message_text_without_template_syntax_renders_as_jinja2_renders_it():
    from oomdoctor.engine import templates
    from oomdoctor.engine.loader import load_rules

    parts = [getattr(r.rule.message, p) for r in load_rules().values() for p in ("seen", "why", "do")]
    plain = [p for p in parts if "{" not in p] + ["  two\r\nlines\n\n", "a % b # c }} %} #}", ""]
    assert len(plain) > 100
    for text in plain:
        assert templates.render(text, {}) == " ".join(templates._compiled(text).render().split())
