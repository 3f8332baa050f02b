"""The validated rule catalog cached on disk as JSON, keyed by the rule files' content: start-up skips YAML and checks."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oomdoctor import __version__

CACHE_ENV = "OOMDOCTOR_CACHE_DIR"  # a folder, or "off" to read and write no cache
CACHE_FORMAT = 2  # bump when the cached document changes shape (2: a header line with the payload's digest)
KEEP_CATALOGS = 16  # catalogs kept after a write, newest first: one per rule edit or upgrade would pile up


def rule_files(directory: Path) -> list[Path]:
    """Rule files under a directory, sorted."""
    return sorted(p for p in directory.rglob("*.yaml") if p.is_file())


def cache_dir() -> Path | None:
    """$OOMDOCTOR_CACHE_DIR, else $XDG_CACHE_HOME/oomdoctor, else ~/.cache/oomdoctor; None when switched off."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "no") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "oomdoctor"


def catalog_key(dirs: Sequence[Path]) -> str | None:
    """sha256 of the version, the Python and every rule file's path and bytes; None if a folder cannot be read."""
    h = hashlib.sha256(f"{CACHE_FORMAT}\0{__version__}\0{sys.version}".encode())
    try:
        for d in dirs:
            if not d.is_dir():
                return None
            # the folder as given (the cached paths are spelled from it) and where it is; each file by its place in it
            h.update(f"\0dir\0{d}\0{d.resolve()}".encode())
            for p in rule_files(d):
                data = p.read_bytes()
                h.update(f"\0{p.relative_to(d)}\0{len(data)}\0".encode() + data)
    except OSError:
        return None
    return h.hexdigest()


def _path(key: str) -> Path | None:
    folder = cache_dir()
    return folder / f"rules-{key[:32]}.json" if folder else None


def load(key: str | None) -> list[tuple[str, Any, str]] | None:
    """The cached (id, rule document, path) triples for this key, or None (missing, unreadable or damaged).

    The file is a header line, {"key", "sha256"}, then the rules as JSON: the rules are used without validating them
    again, so a payload whose digest is not the header's (a torn or damaged write) is not used."""
    path = _path(key) if key else None
    if path is None:
        return None
    try:
        head, _, payload = path.read_bytes().partition(b"\n")
        header = json.loads(head)
        if header.get("key") != key or header.get("sha256") != hashlib.sha256(payload).hexdigest():
            return None
        return [(str(i), rule, str(p)) for i, rule, p in json.loads(payload)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(key: str | None, rules: list[tuple[str, Any, str]]) -> None:
    """Write the catalog for this key atomically; a cache that cannot be written is skipped without a word."""
    path = _path(key) if key else None
    if path is None:
        return
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".rules-", suffix=".tmp")
        payload = json.dumps(rules).encode()
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps({"key": key, "sha256": hashlib.sha256(payload).hexdigest()}).encode() + b"\n" + payload)
        os.replace(tmp, path)
        tmp = None
        _prune(path.parent)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(folder: Path) -> None:
    """Remove all but the KEEP_CATALOGS most recently written catalogs (each edit of a rule writes a new one)."""
    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    for old in sorted(folder.glob("rules-*.json"), key=mtime, reverse=True)[KEEP_CATALOGS:]:
        with contextlib.suppress(OSError):
            old.unlink()
