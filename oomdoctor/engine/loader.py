"""Load rule packs: every YAML file validated, every error collected with its file:line and a tip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from oomdoctor.diagnosis import CATEGORIES
from oomdoctor.engine import cache, templates
from oomdoctor.engine.cache import rule_files
from oomdoctor.engine.schema import Rule, rule_from_dump, suggest
from oomdoctor.facts import FACTS


def _data_root() -> Path:
    """Where `rules/` and the fixtures its tests name live: inside the installed wheel, else the source checkout."""
    installed = Path(str(resources.files("oomdoctor")))
    return installed if (installed / "rules").is_dir() else Path(__file__).resolve().parents[2]


DATA_ROOT = _data_root()
DEFAULT_RULES_DIR = DATA_ROOT / "rules"


@dataclass(frozen=True)
class RuleError:
    """One problem in one rule file, with the line it is on and what to do about it."""

    path: Path
    line: int
    message: str
    tip: str = ""

    def __str__(self) -> str:
        tip = f"\n  tip: {self.tip}" if self.tip else ""
        return f"{self.path}:{self.line}: {self.message}{tip}"


class RuleLoadError(Exception):
    """Raised with every error found across all rule files."""

    def __init__(self, errors: Sequence[RuleError]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(str(e) for e in errors))


@dataclass(frozen=True)
class LoadedRule:
    """A validated rule and the file it came from."""

    rule: Rule
    path: Path


def _node_at(node: yaml.Node, loc: Sequence[Any]) -> yaml.Node:
    """The deepest YAML node along a pydantic error location (for its line number)."""
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == key]
            if not match:
                return node
            node = match[0][0] if key == loc[-1] and isinstance(match[0][1], yaml.MappingNode) else match[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            return node
    return node


def _tip_for(err: dict[str, Any]) -> str:
    if err["type"] == "extra_forbidden":
        from oomdoctor.engine.schema import Rule as R  # local: field names for the suggestion

        return f"remove the key{suggest(str(err['loc'][-1]), R.model_fields)}; allowed keys are in oomdoctor/engine/schema.py"
    if "unknown fact" in err["msg"]:
        return "run `oomdoctor rules list --facts` to see every fact name"
    if "unknown fix id" in err["msg"]:
        return "use an id from oomdoctor/fixids.py FIX_IDS"
    return "see an existing rule under rules/ for the expected shape"


MAX_YAML_NODES = 100_000  # a rule file has a few hundred; aliases nested nine deep ("billion laughs") have 9**9


def _expanded_size(node: yaml.Node, budget: int) -> int:
    """How many nodes the document has with every alias written out, counting no further than `budget` + 1."""
    count, stack = 0, [node]
    while stack and count <= budget:
        current = stack.pop()
        count += 1
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.extend((key, value))
    return count


def _parse(path: Path) -> tuple[Any, yaml.Node | None, list[RuleError]]:
    try:
        text = path.read_text(encoding="utf-8")
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # libyaml when present: ~5x faster
        try:
            node = loader.get_single_node()
            if node is not None and _expanded_size(node, MAX_YAML_NODES) > MAX_YAML_NODES:
                return None, None, [RuleError(path, 1, f"YAML aliases expand to more than {MAX_YAML_NODES:,} nodes",
                                              "a rule needs no aliases: write the values out")]
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        return None, None, [RuleError(path, line, f"YAML syntax: {exc.problem}", "fix the YAML syntax")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, None, [RuleError(path, 1, f"cannot read: {exc}", "check the file exists and is UTF-8")]
    if not isinstance(data, dict):
        return None, None, [RuleError(path, 1, "a rule file must be a YAML mapping", "start from an existing rule")]
    return data, node, []


def _template_errors(rule: Rule, path: Path, node: yaml.Node) -> list[RuleError]:
    errors = []
    for part in ("seen", "why", "do"):
        line = _node_at(node, ("message", part)).start_mark.line + 1
        try:
            unknown = templates.names_in(getattr(rule.message, part)) - set(FACTS)
        except templates.TemplateSyntaxError as exc:
            errors.append(RuleError(path, line + (exc.lineno or 1) - 1, f"message.{part}: template syntax: {exc.message}",
                                    "templates use jinja2 syntax: {{ fact | bytes }}"))
            continue
        bad = templates.forbidden_in(getattr(rule.message, part))
        if bad is not None:
            errors.append(RuleError(path, line + bad[1] - 1, f"message.{part}: {bad[0]} is not allowed in a message",
                                    "use only {{ fact | filter }} and {% if %}…{% endif %}"))
        for name in sorted(unknown):
            errors.append(RuleError(path, line, f"message.{part} names unknown fact {name!r}{suggest(name, FACTS)}",
                                    "templates may only read facts listed in oomdoctor/derive.py FACTS"))
    return errors


def fixture_path(rel: str, rule_path: Path) -> Path:
    """A test fixture path: relative to the repository root, else to the rule's own folder."""
    repo = DATA_ROOT / rel
    return repo if repo.exists() else rule_path.parent / rel


def _file_errors(rule: Rule, path: Path, node: yaml.Node, check_fixtures: bool) -> list[RuleError]:
    errors = _template_errors(rule, path, node)
    if path.stem != rule.id:
        errors.append(RuleError(path, _node_at(node, ("id",)).start_mark.line + 1,
                                f"file name {path.stem!r} differs from id {rule.id!r}", f"rename the file to {rule.id}.yaml"))
    folder = path.parent.name
    if folder in CATEGORIES and folder != rule.category:
        errors.append(RuleError(path, _node_at(node, ("category",)).start_mark.line + 1,
                                f"a {rule.category!r} rule in the folder {folder!r}",
                                f"move the file to {rule.category}/ (a category folder holds that category's rules)"))
    for kind in ("fires", "silent", "todo") if check_fixtures else ():
        for i, rel in enumerate(getattr(rule.tests, kind)):
            if not fixture_path(rel, path).is_file():
                line = _node_at(node, ("tests", kind, i)).start_mark.line + 1
                errors.append(RuleError(path, line, f"tests.{kind}: no such fixture {rel!r}",
                                        "paths are relative to the repository root, e.g. fixtures/synthetic/x.log"))
    return errors


def load_file(path: Path, check_fixtures: bool = False) -> tuple[Rule | None, list[RuleError]]:
    """Validate one rule file; return the rule (or None) and every error in it."""
    data, node, errors = _parse(path)
    if errors or node is None:
        return None, errors
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            line = _node_at(node, loc).start_mark.line + 1
            where = ".".join(str(p) for p in loc) or "rule"
            msg = err["msg"].removeprefix("Value error, ")
            errors.append(RuleError(path, line, f"{where}: {msg}", _tip_for(dict(err))))
        return None, errors
    return rule, _file_errors(rule, path, node, check_fixtures)


def load_dir(directory: Path, check_fixtures: bool = False) -> tuple[dict[str, LoadedRule], list[RuleError]]:
    """Load every rule under `directory`; duplicate ids inside one pack are errors."""
    if not directory.is_dir():
        return {}, [RuleError(directory, 0, "not a directory", "pass a folder of rule YAML files")]
    rules: dict[str, LoadedRule] = {}
    errors: list[RuleError] = []
    for path in rule_files(directory):
        rule, errs = load_file(path, check_fixtures)
        errors += errs
        if rule is None:
            continue
        if rule.id in rules:
            errors.append(RuleError(path, 1, f"duplicate id {rule.id!r} (also {rules[rule.id].path})", "ids are unique"))
        rules[rule.id] = LoadedRule(rule, path)
    return rules, errors


def load_rules(rule_dirs: Sequence[Path] = (), *, include_default: bool = True,
               check_fixtures: bool = False) -> dict[str, LoadedRule]:
    """The registry id -> rule: the repo's rules, then each user pack overriding by id. Raises RuleLoadError."""
    dirs = ([DEFAULT_RULES_DIR] if include_default else []) + [Path(d) for d in rule_dirs]
    key = None if check_fixtures else cache.catalog_key(dirs)
    cached = cache.load(key)
    if cached is not None:
        try:
            return {i: LoadedRule(rule_from_dump(doc), Path(path)) for i, doc, path in cached}
        except (ValueError, TypeError, KeyError):
            pass  # written by another build of the same version: load from the files
    registry: dict[str, LoadedRule] = {}
    errors: list[RuleError] = []
    for directory in dirs:
        rules, errs = load_dir(directory, check_fixtures)
        errors += errs
        registry.update(rules)
    if errors:
        raise RuleLoadError(errors)
    cache.store(key, [(i, r.rule.model_dump(mode="json"), str(r.path)) for i, r in registry.items()])
    return registry
