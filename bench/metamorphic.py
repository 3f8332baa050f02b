"""Presentation invariance: parse each dev fixture as written and as users paste it, and compare what is read.

A log reaches oomdoctor quoted in a GitHub issue, inside a code fence, copied from a terminal that hard-wrapped
it, with Windows line ends, behind a collector's timestamp or a launcher's rank on every line, coloured, padded,
tab-indented or HTML-escaped from a scraped page. Each transform below is one such presentation; the facts read
(events: kind, figures, phase, step, rank) and the first three diagnosis categories and fixes must not change. For
the rank-prefix transforms the expected rank is the prefix's, and fixtures whose events already carry one are
skipped; for the terminal wraps the expected facts are those of the log as the screen showed it (a \r-redrawn line
keeps its last state: the copy holds no more). Held-out fixtures (bench.accuracy.held_out) are skipped before their log is opened.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import regex
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.accuracy import held_out, project_of  # noqa: E402
from oomdoctor.diagnosis import fixes_to_try  # noqa: E402
from oomdoctor.engine.engine import diagnose_with  # noqa: E402
from oomdoctor.engine.loader import load_rules  # noqa: E402
from oomdoctor.parse import parse_files  # noqa: E402
from oomdoctor.parse.model import FIGURES  # noqa: E402

GROUPS = ("reconstructed", "captured", "generated", "synthetic")
PREFIX_RANK = 1  # the rank the launcher-prefix transforms put on every line
TIMEOUT_S = 30  # per transformed copy: every fixture parses in well under a second
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_ANSI = regex.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _each_line(text: str, f: Callable[[int, str], str]) -> str:
    """f(index, line) over every line but the empty remainder after a final newline."""
    lines = _lines(text)
    last = len(lines) - 1 if text.endswith("\n") else len(lines)
    return "\n".join(f(i, ln) if i < last else ln for i, ln in enumerate(lines))


def _screen(line: str) -> str:
    """What a terminal shows of a physical line: colours dropped, each \\r redraw over the one before."""
    shown = ""
    for seg in _ANSI.sub("", line).split("\r"):
        shown = seg + shown[len(seg):]
    return shown


def _wrap(width: int) -> Callable[[str], str]:
    def wrap(text: str) -> str:
        def cut(_: int, ln: str) -> str:
            ln = _screen(ln)
            return "\n".join(ln[k:k + width] for k in range(0, len(ln), width)) if len(ln) > width else ln
        return _each_line(text, cut)
    return wrap


def _prefix(make: Callable[[int], str]) -> Callable[[str], str]:
    return lambda text: _each_line(text, lambda i, ln: make(i) + ln)


def _stamp(i: int, sep: str = "T", frac: int = 9) -> str:
    s = 1 + i // 50
    return f"2024-05-01{sep}12:{s // 60 % 60:02d}:{s % 60:02d}.{(i * 7919) % 10 ** frac:0{frac}d}"


def _hf_stamp(i: int) -> str:
    s = 1 + i // 50
    return f"05/01/2024 12:{s // 60 % 60:02d}:{s % 60:02d}"


_JOURNAL_UNITS = ("python[12345]", "vllm[2211]", "bash[987]")


def _console(width: int) -> Callable[[str], str]:
    """A Windows console's copy: each screen row padded with spaces to the width, longer lines cut into rows."""
    def copy(text: str) -> str:
        def rows(_: int, ln: str) -> str:
            ln = _screen(ln)
            cut = [ln[k:k + width] for k in range(0, len(ln), width)] or [""]
            return "\n".join(r.ljust(width) for r in cut)
        return _each_line(text, rows)
    return copy


def _html(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&#39;"))


def _tabs(text: str) -> str:
    def retab(_: int, ln: str) -> str:
        body = ln.lstrip(" ")
        n = len(ln) - len(body)
        return "\t" * (n // 4) + " " * (n % 4) + body
    return _each_line(text, retab)


# name -> (transform, where that presentation comes from)
TRANSFORMS: dict[str, tuple[Callable[[str], str], str]] = {
    "md-quote": (_prefix(lambda i: "> "), "pasted into a GitHub issue or forum post as a markdown quote"),
    "code-fence": (lambda t: "```text\n" + t + ("" if t.endswith("\n") else "\n") + "```\n",
                   "pasted into a GitHub issue inside a fenced code block"),
    "wrap-80": (_wrap(80), "copied from an 80-column terminal: every long line hard-wrapped, mid-word"),
    "wrap-120": (_wrap(120), "copied from a 120-column terminal"),
    "crlf": (lambda t: t.replace("\n", "\r\n"), "saved on Windows (or by a tool writing CRLF)"),
    "py-logging": (_prefix(lambda i: f"{_stamp(i, ' ', 3).replace('.', ',')} - train - INFO - "),
                   "stderr captured through Python logging's '%(asctime)s - %(name)s - %(levelname)s - ' format"),
    "k8s": (_prefix(lambda i: f"{_stamp(i)}Z stdout F "),
            "kubernetes/cloud logging (CRI container log: RFC 3339 nanoseconds, stream, full-line tag)"),
    "docker-compose": (_prefix(lambda i: "trainer-1  | "), "docker compose up: the service's name and a bar"),
    "ansi": (_prefix(lambda i: "\x1b[0m\x1b[31m" if i % 2 else "\x1b[1;33m"),
             "a coloured terminal or CI log (GitHub Actions keeps the escape codes)"),
    "trailing-spaces": (lambda t: _each_line(t, lambda i, ln: ln + "  "),
                        "lines padded with spaces (a markdown hard break, an editor or a console copy)"),
    "tabs": (_tabs, "re-indented with tabs by an editor (four columns a tab)"),
    "html-escape": (_html, "scraped from a web page: &amp; &lt; &gt; &quot; &#39; left escaped"),
    "rank-torchrun": (_prefix(lambda i: f"[rank{PREFIX_RANK}]: "), "torchrun (PyTorch 2.2+) labels each rank's lines"),
    "rank-tee": (_prefix(lambda i: f"[default{PREFIX_RANK}]: "), "torchrun --tee 3 labels each local rank's lines"),
    "rank-srun": (_prefix(lambda i: f"{PREFIX_RANK}: "), "slurm's srun -l labels each task's lines"),
    "hf-logging": (_prefix(lambda i: f"{_hf_stamp(i)} - INFO - __main__ - "),
                   "Hugging Face example scripts: logging.basicConfig('%(asctime)s - %(levelname)s - %(name)s - ', "
                   "datefmt='%m/%d/%Y %H:%M:%S')"),
    "gh-actions": (_prefix(lambda i: f"{_stamp(i, frac=7)}Z "),
                   "a GitHub Actions raw log (Download log archive): a 7-digit UTC timestamp and a space on every line"),
    "journald": (_prefix(lambda i: f"Nov 28 {_stamp(i, ' ', 1)[11:19]} gpu-node-3 {_JOURNAL_UNITS[i // 200 % 3]}: "),
                 "systemd's journal (journalctl -u vllm): syslog time, host, process[pid]"),
    "win-console-120": (_console(120), "copied from a Windows console 120 wide: every row padded to the width, "
                                       "long lines cut at it"),
}
RANK_TRANSFORMS = ("rank-torchrun", "rank-tee", "rank-srun")
# Copied from a terminal's screen: compared with the log as the screen showed it (each \r redraw over the one before).
SCREENED = ("wrap-80", "wrap-120", "win-console-120")
# Where a transform cannot be invariant, and why (printed under the table).
LIMITS = {
    "wrap-80": "a line printed exactly as wide as the terminal cannot be told from one it cut (one such row in a log "
               "tells no width); a wrapped OOM message's rows are left to the message reader (it tries each way of "
               "rejoining them, as word wraps need); a figure read on a message's cut row is dated by that row, not "
               "the message's first line (a sample glued to the message counts as memory shown only when on it); a "
               "record the log glued onto a line's trailing blanks shows on a row of its own, and reads better so; a "
               "string's escaped lines (a JSON error body's backslash-n) are split only where one row still holds two "
               "of them; a configuration on a message's cut head row (a model id) is read as configuration; a "
               "progress bar cut across rows whose label or opening fell on an earlier row is read from its counts "
               "alone, as an unlabelled bar (p625, p1202)",
    "wrap-120": "as wrap-80",
    "win-console-120": "as wrap-120 and trailing-spaces (its padding tells the width, not which full rows were cut: "
                       "only a bar's own shape, '%|' open then '| n/total', tells a row cut in its blanks)",
    "trailing-spaces": "a line a terminal wrapped at a space and an editor then padded cannot be told from a padded one "
                       "(a prefixed line's rest, unprefixed, is still read as its rest)",
}
# A log that was already pasted as a markdown quote ("> " on every line) and is then given a collector's or a
# launcher's prefix keeps its quote marks after the prefix, where they are text: a traceback under them is not read.
_QUOTED_THEN_PREFIXED = "a log already quoted with '> ' keeps its quote marks after the prefix (the frames under them are text)"
LIMITS.update({name: _QUOTED_THEN_PREFIXED for name in (
    "py-logging", "k8s", "docker-compose", "hf-logging", "gh-actions", "journald", "rank-torchrun", "rank-tee")})
LIMITS["rank-srun"] = (_QUOTED_THEN_PREFIXED + "; a message a terminal wrapped at a space over three rows, each then "
                       "labelled '0: ', loses the figures on its later rows")


@dataclass(frozen=True)
class Fixture:
    """One dev fixture: its group and its log."""

    group: str
    log: Path


def fixtures(root: Path = REPO / "fixtures") -> list[Fixture]:
    """Every fixture log that is not held out (the sidecar's source decides; held-out logs are never opened)."""
    out = []
    for group in GROUPS:
        for sidecar in sorted((root / group).glob("*.yaml")):
            if sidecar.name == "README.yaml":
                continue
            meta = yaml.load(sidecar.read_text(encoding="utf-8"), Loader=_LOADER) or {}
            if held_out(project_of(meta.get("source"))):
                continue
            log = next((sidecar.with_suffix(s) for s in (".log", ".txt") if sidecar.with_suffix(s).exists()), None)
            if log is not None:
                out.append(Fixture(group, log))
    return out


def _distinct(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def signature(path: str, registry: dict) -> dict:
    """What must not change: events (kind, figures, phase, step, rank), first three categories and fixes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        facts = parse_files([path])
        diagnoses = diagnose_with(facts, registry)
    events = [{"kind": e.kind, **{f: getattr(e, f) for f in FIGURES}, "phase": e.phase, "step": e.step, "rank": e.rank}
              for e in facts.events]
    return {"events": events, "categories": _distinct([g.category for g in diagnoses])[:3],
            "fixes": _distinct([*fixes_to_try(diagnoses), *(f.id for g in diagnoses for f in g.fixes)])[:3]}


def differences(want: dict, got: dict) -> list[str]:
    """What differs between two signatures, one short phrase each."""
    out = []
    if len(want["events"]) != len(got["events"]):
        out.append(f"events {len(want['events'])} -> {len(got['events'])}")
    for k, (a, b) in enumerate(zip(want["events"], got["events"]), 1):
        out += [f"event {k} {name} {a[name]} -> {b[name]}" for name in a if a[name] != b[name]]
    out += [f"{name} {want[name]} -> {got[name]}" for name in ("categories", "fixes") if want[name] != got[name]]
    return out


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return str(path)


def check(fx: Fixture, names: list[str], registry: dict, tmp: Path, want: dict | None = None) -> dict[str, list[str] | None]:
    """Transform name -> differences (empty: invariant; None: skipped) for one fixture (`want`: its signature)."""
    want = want or signature(str(fx.log), registry)
    text = _read(fx.log)
    out: dict[str, list[str] | None] = {}
    for name in names:
        expected = want
        if name in RANK_TRANSFORMS:
            if any(e["rank"] is not None for e in want["events"]):
                out[name] = None
                continue
            expected = {**want, "events": [{**e, "rank": PREFIX_RANK} for e in want["events"]]}
        signal.alarm(TIMEOUT_S)  # a parse that never ends (a loop the presentation set off) is a difference too
        try:
            if name in SCREENED and "\r" in text:  # a terminal shows a redrawn line's last state: the copy holds no more
                expected = signature(_write(tmp / "screen" / fx.log.name, _each_line(text, lambda i, ln: _screen(ln))),
                                     registry)
            out[name] = differences(expected, signature(_write(tmp / name / fx.log.name, TRANSFORMS[name][0](text)),
                                                        registry))
        except Exception as exc:  # one crash is a difference, not the end of the bench
            out[name] = [f"{type(exc).__name__}: {exc}"]
        finally:
            signal.alarm(0)
    return out


_STATE: dict = {}


def _timeout(*_: object) -> None:
    raise TimeoutError(f"no result in {TIMEOUT_S} s")


def _init(names: list[str]) -> None:
    signal.signal(signal.SIGALRM, _timeout)
    _STATE["registry"] = load_rules([])
    _STATE["names"] = names
    _STATE["tmp"] = Path(tempfile.mkdtemp(prefix="oomdoctor-meta-"))


def _work(fx: Fixture) -> tuple[Fixture, dict[str, list[str] | None]]:
    return fx, check(fx, _STATE["names"], _STATE["registry"], _STATE["tmp"])


def run(fxs: list[Fixture], names: list[str], jobs: int) -> Iterator[tuple[Fixture, dict[str, list[str] | None]]]:
    """(fixture, transform -> differences) for every fixture, over `jobs` processes."""
    if jobs <= 1:
        _init(names)
        yield from map(_work, fxs)
        return
    with get_context("fork").Pool(jobs, _init, (names,)) as pool:
        yield from pool.imap_unordered(_work, fxs, chunksize=4)


def main(argv: list[str] | None = None) -> int:
    """Print transform x fixtures invariant (with -v the first differences of each transform)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="list the first differences per transform")
    ap.add_argument("--show", type=int, default=8, help="with -v: differences listed per transform")
    ap.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("-t", "--transform", action="append", choices=list(TRANSFORMS), help="only these transforms")
    ap.add_argument("-k", "--match", default="", help="only fixtures whose name holds this")
    args = ap.parse_args(argv)
    names = args.transform or list(TRANSFORMS)
    fxs = [fx for fx in fixtures() if args.match in fx.log.name]
    results = sorted(run(fxs, names, args.jobs), key=lambda r: (r[0].group, r[0].log.name))
    print(f"{'transform':16}{'invariant':>16}   where it comes from ({len(fxs)} dev fixtures)")
    for name in names:
        seen = [d[name] for _, d in results if d[name] is not None]
        same = sum(1 for d in seen if not d)
        print(f"{name:16}{f'{same}/{len(seen)}':>12}{100 * same / max(1, len(seen)):4.0f}%   {TRANSFORMS[name][1]}")
    for name, why in LIMITS.items():
        if name in names:
            print(f"  {name}: not always invariant: {why}")
    if args.verbose:
        for name in names:
            diffs = [(fx, d[name]) for fx, d in results if d[name]]
            if diffs:
                print(f"\n{name}: {len(diffs)} fixtures differ")
            for fx, d in diffs[:args.show]:
                print(f"  {fx.group}/{fx.log.name}: " + "; ".join(d or [])[:300])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
