"""Reconstructed fixtures carry facts, not people: no usernames in home paths, no e-mail addresses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PERSONAL = re.compile(
    r"/home/(?!user\b)[A-Za-z0-9_.-]+|/Users/(?!user\b)[A-Za-z0-9_.-]+|C:\\Users\\(?!user\b)[A-Za-z0-9_.-]+"
    r"|[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+\.[A-Za-z0-9.-]*[a-z]{2,}"
)
RECONSTRUCTED = sorted(
    p for group in ("reconstructed", "benign") for p in (FIXTURES / group).glob("*.log")
    if p.with_suffix(".yaml").exists() and (yaml.safe_load(p.with_suffix(".yaml").read_text()) or {}).get("reconstructed")
)


# every fixture taken from a public report (synthetic/ and generated/ are written by us, their names invented)
EVERY = sorted(p for group in ("reconstructed", "benign") for p in (FIXTURES / group).glob("*")
               if p.suffix in (".log", ".yaml"))


@pytest.mark.parametrize("path", EVERY, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_fixture_names_a_person(path):
    """Every fixture from a public report, rewritten or not yet: no usernames in home paths, no e-mail addresses."""
    found = PERSONAL.findall(path.read_text(encoding="utf-8", errors="replace"))
    assert not found, f"{path.name}: {sorted(set(found))[:3]}"


@pytest.mark.parametrize("log", RECONSTRUCTED, ids=lambda p: p.name)
def test_no_personal_details(log):
    for path in (log, log.with_suffix(".yaml")):
        found = PERSONAL.findall(path.read_text(encoding="utf-8", errors="replace"))
        assert not found, f"{path.name}: {sorted(set(found))[:3]}"


def test_every_reconstructed_fixture_names_its_source():
    for log in RECONSTRUCTED:
        meta = yaml.safe_load(log.with_suffix(".yaml").read_text())
        if log.parent.name == "reconstructed":
            assert "#" in meta.get("source", ""), log.name


def test_every_fixture_a_rule_names_ships_in_the_wheel():
    """`oomdoctor rules test` runs from a wheel install: each fixture a rule's tests name must match the package data
    of oomdoctor.fixtures in pyproject.toml (a rule naming fixtures/generated/ once failed CI's wheel run)."""
    from fnmatch import fnmatch

    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["oomdoctor.fixtures"]
    named = {p for rule in (root / "rules").rglob("*.yaml")
             for key in ("fires", "silent", "todo")
             for p in ((yaml.safe_load(rule.read_text()).get("tests") or {}).get(key) or [])
             if p.startswith("fixtures/")}
    assert named
    unshipped = sorted(p for p in named if not any(fnmatch(p.removeprefix("fixtures/"), g) for g in globs))
    assert not unshipped, f"add these to the package data of oomdoctor.fixtures: {unshipped}"
