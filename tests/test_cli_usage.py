"""Help, version and usage errors as a shell meets them (`python -m oomdoctor`): what they list and their exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from oomdoctor import __version__
from oomdoctor.cli import app

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}  # wide: no option name is wrapped


def shell(*args: str) -> subprocess.CompletedProcess:
    """The command as a new process (the rules sub-app is mounted from its own argv, as the console script's)."""
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, text=True, cwd=ROOT,
                          env=ENV, stdin=subprocess.DEVNULL, timeout=120)


def _options(command: str) -> list[str]:
    """The long option names a command declares, read from the click command typer builds."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return [o for p in group.commands[command].params for o in p.opts if o.startswith("--")]


COMMANDS = ("diagnose", "verify", "scan", "rules")


@pytest.mark.parametrize("args", [("--help",), ("-h",), ()])
def test_the_app_help_lists_every_command(args):
    r = shell(*args)
    assert r.returncode == (0 if args else 2), r.stderr  # no arguments: the help, as a usage error
    assert "Usage:" in r.stdout and "--version" in r.stdout
    for name in COMMANDS:
        assert f" {name} " in r.stdout, name


@pytest.mark.parametrize("command", ["diagnose", "verify"])
def test_a_command_help_lists_its_options(command):
    r = shell(command, "--help")
    assert r.returncode == 0, r.stderr
    assert f"{command} [OPTIONS]" in r.stdout
    for option in _options(command):
        assert option in r.stdout, option


def test_version():
    r = shell("--version")
    assert (r.returncode, r.stdout) == (0, f"oomdoctor {__version__}\n")


@pytest.mark.parametrize(("args", "said"), [
    (("diagnose", "--bogus", "x.log"), "No such option: --bogus"),
    (("diagnose", "--version"), "No such option: --version"),
    (("diagnose",), "Missing argument"),
    (("diagnose", "x.log", "--format", "yaml"), "Invalid value"),
    (("bogus",), "No such command 'bogus'"),
    (("--bogus",), "No such option: --bogus"),
    (("rules", "bogus"), "No such command 'bogus'"),
])
def test_usage_errors_exit_2_with_the_usage_line(args, said):
    r = shell(*args)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith("Usage: ") and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_missing_log_is_one_error_line_and_a_tip():
    r = shell("diagnose", "no/such/train.log")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["oomdoctor: error: no/such/train.log: no such file",
                                     "tip: check the path; use - to read standard input"]


def test_rules_help_lists_its_commands():
    r = shell("rules", "--help")
    assert r.returncode == 0, r.stderr
    for name in ("list", "show", "check", "test"):
        assert f" {name} " in r.stdout, name
