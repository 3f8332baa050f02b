"""The command line as a user meets it: exit codes, one-line errors, the JSON contract, no torch."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 320.00 MiB. GPU 3 has a total capacity of "
       "79.15 GiB of which 15.31 MiB is free. Including non-PyTorch memory, this process has 79.12 GiB memory in use. "
       "Of the allocated memory 77.85 GiB is allocated by PyTorch, and 683.86 MiB is reserved by PyTorch but "
       "unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """The CLI in this process (through `main`, as the console script calls it): exit code, stdout, stderr."""
    from oomdoctor.cli import main

    out, err = io.BytesIO(), io.BytesIO()
    streams = {name: io.TextIOWrapper(buf, encoding="utf-8", write_through=True) for name, buf in
               (("stdout", out), ("stderr", err))}
    stdin_stream = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, os.getcwd())
    sys.argv, sys.stdin, sys.stdout, sys.stderr = ["oomdoctor", *args], stdin_stream, streams["stdout"], streams["stderr"]
    os.chdir(ROOT)
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved[:4]
        os.chdir(saved[4])
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def test_json_follows_the_contract(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("[rank3]:  5%|▌         | 50/1000 [01:02<19:40,  1.24s/it]\n[rank3]: " + OOM)
    r = run("diagnose", str(log), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["version"] == "0.1.0"
    e = doc["events"][0]
    for key in ("kind", "source", "line", "rank", "gpu_index", "requested_bytes", "total_bytes", "free_bytes",
                "allocated_bytes", "reserved_bytes", "reserved_unallocated_bytes", "process_in_use_bytes",
                "other_processes", "step", "phase", "message"):
        assert key in e, key
    assert (e["kind"], e["line"], e["rank"], e["gpu_index"], e["step"]) == ("cuda_oom", 2, 3, 3, 50)
    assert e["requested_bytes"] == 320 * 1024**2
    assert e["reserved_bytes"] == e["allocated_bytes"] + e["reserved_unallocated_bytes"]
    assert e["message"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert isinstance(doc["diagnoses"], list)


def test_no_oom_exits_1(tmp_path):
    log = tmp_path / "ok.log"
    log.write_text("{'loss': 1.2, 'epoch': 0.1}\n" * 100)
    r = run("diagnose", str(log))
    assert r.returncode == 1
    assert b"No out-of-memory failure found" in r.stdout


def test_stdin_and_gzip_and_many_files(tmp_path):
    gz = tmp_path / "a.log.gz"
    gz.write_bytes(gzip.compress(OOM.encode()))
    plain = tmp_path / "b.log"
    plain.write_text("hello\n" + OOM)
    r = run("diagnose", str(gz), str(plain), "-", "--format", "json", stdin=OOM.encode())
    assert r.returncode == 0, r.stderr
    events = json.loads(r.stdout)["events"]
    assert [(Path(e["source"]).name, e["line"]) for e in events] == [("a.log.gz", 1), ("b.log", 2), ("<stdin>", 1)]


def put(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD = {
    "missing": (lambda p: p / "nope.log", "no such file"),
    "directory": (lambda p: p, "is a directory"),
    "empty": (lambda p: put(p / "e.log", b""), "empty file"),
    "binary": (lambda p: put(p / "x.bin", bytes(range(256)) * 64), "binary data"),
    "elf": (lambda p: put(p / "a.out", b"\x7fELF\x02\x01\x01" + bytes(200)), "binary data"),
    "nul_only": (lambda p: put(p / "z.log", bytes(4096)), "binary data"),
    "truncated_gzip": (lambda p: put(p / "t.log.gz", gzip.compress(OOM.encode() * 2000)[:300]), "damaged gzip"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    make, words = BAD[case]
    path = make(tmp_path)
    r = run("diagnose", str(path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.decode().strip().splitlines()
    assert lines[0].startswith("oomdoctor: error: ") and words in lines[0], lines
    assert "Traceback" not in r.stderr.decode()


def test_undecodable_bytes_utf16_and_nul_padding_are_read_not_refused(tmp_path):
    latin1 = put(tmp_path / "l.log", b"caf\xe9 au lait\n" + OOM.encode())
    r = run("diagnose", str(latin1), "--format", "json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["events"]) == 1
    assert "warning: " in r.stderr.decode() and "not valid UTF-8 (byte 0xe9)" in r.stderr.decode()
    for name, data in (("u16.log", ("x" * 100 + "\n" + OOM).encode("utf-16")),
                       ("u16le.log", ("x" * 100 + "\n" + OOM).encode("utf-16-le")),
                       ("padded.log", OOM.encode() + bytes(8192))):
        r = run("diagnose", str(put(tmp_path / name, data)), "--format", "json")
        assert r.returncode == 0, (name, r.stderr)
        assert json.loads(r.stdout)["events"][0]["requested_bytes"] > 0, name


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_permission_denied(tmp_path):
    p = tmp_path / "secret.log"
    p.write_text(OOM)
    p.chmod(0)
    r = run("diagnose", str(p))
    assert r.returncode == 2 and b"permission denied" in r.stderr


def test_a_100_mib_single_line_is_refused_quickly(tmp_path):
    p = tmp_path / "one.log"
    with open(p, "wb") as f:
        for _ in range(100):
            f.write(b"x" * (1024 * 1024))
    r = run("diagnose", str(p))
    assert r.returncode == 2 and b"no line break" in r.stderr


def test_usage_error_exits_2():
    r = run("diagnose", "--format", "yaml", "x.log")
    assert r.returncode == 2


def test_diagnose_path_never_imports_torch(tmp_path):
    log = tmp_path / "t.log"
    log.write_text(OOM)
    code = ("import sys; from oomdoctor.cli import app\n"
            "from typer.testing import CliRunner\n"
            f"r = CliRunner().invoke(app, ['diagnose', {str(log)!r}, '--format', 'json'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("False"), out.stdout + out.stderr


def test_output_file_and_formats(tmp_path):
    log = tmp_path / "t.log"
    log.write_text(OOM)
    for fmt in ("text", "markdown", "json", "html"):
        out = tmp_path / f"r.{fmt}"
        r = run("diagnose", str(log), "--format", fmt, "--output", str(out))
        assert r.returncode == 0, r.stderr
        assert out.stat().st_size > 100


PLUGIN_PROBE = """
import importlib.metadata as m, os, sys
groups = []
real = m.entry_points
m.entry_points = lambda **kw: (groups.append(kw.get("group")), real(**kw))[1]
from oomdoctor.cli import main
sys.argv = ["oomdoctor", "diagnose", sys.argv[1], "--format", "json"]
try:
    main()
except SystemExit as exc:
    print(exc.code, "pydantic" in groups, repr(os.environ.get("PYDANTIC_DISABLE_PLUGINS")), file=sys.stderr)
"""


@pytest.mark.parametrize(("given", "looked_up"), [(None, False), ("", True)])
def test_pydantic_plugins_are_not_looked_up_unless_the_user_says(tmp_path, given, looked_up):
    log = tmp_path / "t.log"
    log.write_text(OOM)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = given  # set by the user (empty: plugins on): kept as it is
    out = subprocess.run([sys.executable, "-c", PLUGIN_PROBE, str(log)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.stderr.split() == ["0", str(looked_up), repr(given)], out.stderr  # and the variable as it was
