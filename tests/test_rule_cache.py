"""The rule catalog cache: the same registry as loading the files, keyed by their content, never trusted blindly."""

from __future__ import annotations

import shutil

import pytest

from oomdoctor.engine import cache
from oomdoctor.engine.loader import DEFAULT_RULES_DIR, load_rules


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(cache.CACHE_ENV, str(folder))
    return folder


def _same(a, b):
    assert list(a) == list(b)
    for k in a:
        assert a[k].rule == b[k].rule and a[k].path == b[k].path


def test_a_second_load_comes_from_the_cache_and_equals_the_files(cache_dir, monkeypatch):
    first = load_rules()
    (written,) = cache_dir.glob("rules-*.json")
    monkeypatch.setattr("oomdoctor.engine.loader.load_dir", lambda *a, **k: pytest.fail("read the YAML files"))
    _same(load_rules(), first)
    assert written.exists()


def test_editing_a_rule_file_changes_the_key(cache_dir, tmp_path):
    pack = tmp_path / "pack"
    shutil.copytree(DEFAULT_RULES_DIR / "capacity", pack)
    rule_file = pack / "capacity-exhausted.yaml"
    before = load_rules([pack])["capacity-exhausted"].rule.confidence
    text = rule_file.read_text()
    assert before != 0.11 and f"\nconfidence: {before} " in text  # the value, then its comment
    rule_file.write_text(text.replace(f"\nconfidence: {before} ", "\nconfidence: 0.11 "))
    assert load_rules([pack])["capacity-exhausted"].rule.confidence == 0.11
    assert len(list(cache_dir.glob("rules-*.json"))) == 2  # the pack before and after the edit


def test_a_damaged_or_foreign_cache_file_is_ignored(cache_dir):
    good = load_rules()
    (written,) = cache_dir.glob("rules-*.json")
    for junk in ("{", '{"key": "other", "rules": []}', '{"key": null}', "[]"):
        written.write_text(junk)
        _same(load_rules(), good)


def test_an_unwritable_cache_or_off_still_loads(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocker / "sub"))  # a folder that cannot be created
    assert load_rules()
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    assert cache.cache_dir() is None and load_rules()


def test_errors_are_never_cached(cache_dir, tmp_path):
    from oomdoctor.engine.loader import RuleLoadError

    pack = tmp_path / "bad"
    pack.mkdir()
    (pack / "x.yaml").write_text("id: [\n")
    for _ in range(2):
        with pytest.raises(RuleLoadError):
            load_rules([pack])


def test_the_cached_paths_are_spelled_as_the_folder_was_given(cache_dir, tmp_path, monkeypatch):
    from pathlib import Path

    pack = tmp_path / "pack"
    shutil.copytree(DEFAULT_RULES_DIR / "capacity", pack)
    monkeypatch.chdir(tmp_path)
    relative = load_rules([Path("pack")], include_default=False)
    absolute = load_rules([pack], include_default=False)
    assert relative and all(not r.path.is_absolute() for r in relative.values())
    assert all(r.path.is_absolute() and r.path.parent == pack for r in absolute.values())


def test_old_catalogs_are_pruned_so_rule_edits_do_not_pile_up(cache_dir, monkeypatch):
    import os

    monkeypatch.setattr(cache, "KEEP_CATALOGS", 3)
    for n in range(6):  # six edits of a rule pack: six keys
        cache.store(f"{n:032x}" * 2, [])
        os.utime(cache_dir / f"rules-{n:032x}.json", (1000 + n, 1000 + n))
    cache.store("f" * 64, [])  # the newest write prunes the rest
    kept = sorted(p.name for p in cache_dir.glob("rules-*.json"))
    assert kept == sorted(["rules-" + "f" * 32 + ".json", f"rules-{5:032x}.json", f"rules-{4:032x}.json"])
    assert cache.load("f" * 64) == []


def _rewrite_payload(path, edit, fix_digest):
    """Change the cached rules with `edit`; with `fix_digest` the header is made to match (a write by another build)."""
    import hashlib
    import json

    head, _, payload = path.read_bytes().partition(b"\n")
    rules = json.loads(payload)
    edit(rules)
    payload = json.dumps(rules).encode()
    header = json.loads(head)
    if fix_digest:
        header["sha256"] = hashlib.sha256(payload).hexdigest()
    path.write_bytes(json.dumps(header).encode() + b"\n" + payload)


def _set_confidence(rules):
    rules[0][1]["confidence"] = 0.01


def test_a_cache_whose_rules_do_not_match_its_digest_is_not_used(cache_dir):
    good = load_rules()
    (written,) = cache_dir.glob("rules-*.json")
    _rewrite_payload(written, _set_confidence, fix_digest=False)
    assert load_rules()[next(iter(good))].rule.confidence == good[next(iter(good))].rule.confidence != 0.01
    _same(load_rules(), good)


def test_cached_rules_are_used_as_written_without_validating_them_again(cache_dir):
    good = load_rules()
    (written,) = cache_dir.glob("rules-*.json")
    _rewrite_payload(written, _set_confidence, fix_digest=True)
    assert load_rules()[next(iter(good))].rule.confidence == 0.01  # the digest matched: the cache was read


@pytest.mark.parametrize("edit", [
    lambda rules: rules[0][1].update(severity="high"),  # a field this build's schema does not have
    lambda rules: rules[0][1].pop("boost"),  # a field it has, missing
    lambda rules: rules[0][1]["condition"].update(fact="no_such_fact"),  # a fact this build does not derive
    lambda rules: rules[0][1].update(fixes=["no-such-fix"]),
    lambda rules: rules[0][1].update(message="text"),
    lambda rules: rules.__setitem__(0, ["x", 1, "p"]),
])
def test_a_cache_of_another_shape_loads_from_the_files(cache_dir, edit):
    good = load_rules()
    (written,) = cache_dir.glob("rules-*.json")
    _rewrite_payload(written, edit, fix_digest=True)
    _same(load_rules(), good)


def test_a_read_only_cache_folder_is_read_and_never_fails(cache_dir, monkeypatch):
    import errno

    good = load_rules()
    (written,) = cache_dir.glob("rules-*.json")

    def read_only(*args, **kwargs):  # what a read-only file system answers (chmod would not stop root)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(cache.tempfile, "mkstemp", read_only)
    _same(load_rules(), good)  # read from it
    written.unlink()
    _same(load_rules(), good)  # and from the files when nothing can be written
    assert not list(cache_dir.iterdir())


def test_the_cached_rules_equal_the_validated_ones(cache_dir):
    from oomdoctor.engine.schema import Rule, rule_from_dump

    for loaded in load_rules().values():
        doc = loaded.rule.model_dump(mode="json")
        assert rule_from_dump(doc) == Rule.model_validate(doc) == loaded.rule
        assert rule_from_dump(doc).facts() == loaded.rule.facts()
