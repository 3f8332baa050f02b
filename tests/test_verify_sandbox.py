"""The trial sandbox: whole process groups end, results cannot be printed, output is bounded, memory is capped.

None of these needs torch: trials run a stand-in for oomdoctor.verify.trial that keeps its real main() (result
file, error handling) and only replaces the torch replay with a direct call of the entry point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from oomdoctor.verify import command, runner

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and rlimits are POSIX")

REPO = Path(__file__).resolve().parent.parent
FAKE_TRIAL = '''
"""Stand-in for oomdoctor.verify.trial: its real main(), the step called directly instead of under torch."""
from pathlib import Path

from oomdoctor.verify import trial


def run_without_torch(spec):
    wl = spec["workload"]
    trial.load_entry(wl["entry"], Path(spec["base_dir"]))(wl["params"], "cpu")()
    return {"oom": False, "peak_allocated_bytes": 1, "peak_reserved_bytes": 1, "seconds": 0.0}


trial.run_sim = run_without_torch
raise SystemExit(trial.main())
'''
# What the stand-in returns for a step that ran; a forged line on stdout claims the same.
FITS = {"oom": False, "peak_allocated_bytes": 1, "peak_reserved_bytes": 1, "seconds": 0.0}


@pytest.fixture
def fake_trial(tmp_path, monkeypatch):
    """Trials run the stand-in from tmp_path."""
    (tmp_path / "fake_trial.py").write_text(FAKE_TRIAL)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(runner, "TRIAL_MODULE", "fake_trial")
    return tmp_path


def config(tmp_path: Path, step: str, params: str = "{batch: 2}", fixes: str = "[]", timeout: float = 30) -> Path:
    """A verify config whose entry point is `step` (the body of make(params, device), which returns the step)."""
    body = textwrap.indent(textwrap.dedent(step).strip(), "    ")
    (tmp_path / "step.py").write_text(f"import os, subprocess, sys, time\n\n\ndef make(params, device):\n{body}\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"workload: {{entry: step.py:make, params: {params}}}\ndevice: sim\nmemory: {{limit: 1GiB}}\n"
                   f"fixes: {fixes}\ntimeout: {timeout}\n")
    return cfg


SPAWN_AND_SLEEP = """
def step():
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.path.join(params["pids"], f"pids-{os.getpid()}"), "w") as f:
        f.write(f"{os.getpid()} {helper.pid}")
    time.sleep(params.get("sleep", 0))
return step
"""


def pids_in(folder: Path) -> list[int]:
    return [int(p) for f in folder.glob("pids-*") for p in f.read_text().split()]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a reaper."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def all_gone(pids: list[int], within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def kill_leftovers(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def verify_json(cfg: Path, capsys) -> tuple[int, dict]:
    code = command.run(cfg, fmt="json")
    return code, json.loads(capsys.readouterr().out)


def test_timeout_ends_the_whole_process_group(fake_trial, capsys):
    (fake_trial / "pids").mkdir()
    cfg = config(fake_trial, SPAWN_AND_SLEEP, params=f"{{pids: {fake_trial / 'pids'}, sleep: 60}}", timeout=2)
    code, doc = verify_json(cfg, capsys)
    pids = pids_in(fake_trial / "pids")
    try:
        assert code == 1 and doc["trials"][0]["error"] == "timed out after 2 s"
        assert len(pids) == 2 and all_gone(pids)
    finally:
        kill_leftovers(pids)


def test_helpers_left_by_a_finished_trial_are_ended(fake_trial, capsys):
    (fake_trial / "pids").mkdir()
    cfg = config(fake_trial, SPAWN_AND_SLEEP, params=f"{{pids: {fake_trial / 'pids'}}}")
    code, doc = verify_json(cfg, capsys)
    pids = pids_in(fake_trial / "pids")
    try:
        assert code == 1 and doc["trials"][0]["oom"] is False and "error" not in doc["trials"][0]
        assert len(pids) == 2 and all_gone(pids)
    finally:
        kill_leftovers(pids)


@pytest.mark.parametrize("ending", ["raise RuntimeError('the real failure')", "os._exit(3)"])
def test_a_printed_result_line_is_not_a_result(fake_trial, capsys, ending):
    forged = json.dumps(FITS)  # claims the step fit
    cfg = config(fake_trial, f"""
        def step():
            print("OOMDOCTOR-TRIAL-RESULT " + {forged!r}, flush=True)
            print({forged!r}, flush=True)
            {ending}
        return step
        """, fixes="[expandable-segments]")
    code, doc = verify_json(cfg, capsys)
    assert code == 1
    for trial in doc["trials"]:
        assert not trial["fits"] and trial["oom"] is None
        assert ("the real failure" in trial["error"]) if "raise" in ending else ("exited with status 3" in trial["error"])


def test_only_a_bounded_tail_of_the_output_is_kept():
    code = ("import sys\nfor out in (sys.stdout, sys.stderr):\n"
            "    for _ in range(25):\n        out.buffer.write(b'x' * (1 << 20) + b'\\n')\n"
            "    out.buffer.write(b'last words\\n')\n")
    run = runner.run_sandboxed([sys.executable, "-c", code], "", timeout=60, limit=None)  # 50 MB in all
    assert run.returncode == 0 and not run.timed_out
    for kept in (run.stdout, run.stderr):
        assert len(kept) <= runner.OUTPUT_TAIL_BYTES and kept.endswith(b"x\nlast words\n")


def test_a_chatty_step_still_gives_its_result(fake_trial):
    (fake_trial / "chatty.py").write_text(
        "def make(params, device):\n    return lambda: print('y' * (1 << 20) * 20)\n")
    spec = {"device": "sim", "phase": "train", "steps": 1, "capacity_bytes": 1 << 30, "base_dir": str(fake_trial),
            "workload": {"kind": "entry", "entry": "chatty.py:make", "params": {}}}
    assert runner.run_trial(spec, timeout=60) == FITS  # the stand-in's own result, read from its file


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux")
def test_the_memory_limit_turns_a_huge_allocation_into_a_trial_error(fake_trial, capsys, monkeypatch):
    monkeypatch.setenv(runner.MAX_RSS_ENV, "1GiB")
    cfg = config(fake_trial, """
        def step():
            return bytearray(8 << 30)
        return step
        """)
    code, doc = verify_json(cfg, capsys)
    error = doc["trials"][0]["error"]
    assert code == 1
    assert error == "the trial hit its memory limit of 1024.00 MiB (OOMDOCTOR_TRIAL_MAX_RSS changes it): MemoryError"


@pytest.mark.parametrize("value,limit", [("8GiB", 8 << 30), ("512 MiB", 512 << 20), ("0", None), ("off", None)])
def test_memory_limit_from_the_environment(monkeypatch, value, limit):
    monkeypatch.setenv(runner.MAX_RSS_ENV, value)
    assert runner.trial_memory_limit("sim") == limit == runner.trial_memory_limit("cuda")


def test_default_memory_limit_is_for_sim_only(monkeypatch):
    monkeypatch.delenv(runner.MAX_RSS_ENV, raising=False)
    assert runner.TRIAL_MAX_BYTES_FLOOR <= (runner.trial_memory_limit("sim") or 0) <= runner.TRIAL_MAX_BYTES_CAP
    assert runner.trial_memory_limit("cuda") is None


@pytest.mark.parametrize("value", ["16", "lots", "-1GiB"])
def test_a_bad_memory_limit_is_a_usage_error(fake_trial, capsys, monkeypatch, value):
    monkeypatch.setenv(runner.MAX_RSS_ENV, value)
    assert command.run(config(fake_trial, "return lambda: None")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{runner.MAX_RSS_ENV}={value!r} is not a size") and err[1].startswith("tip: ")


def test_ctrl_c_during_a_trial_in_this_thread_ends_its_group(tmp_path):
    code = ("import os, subprocess, sys, time\n"
            "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
            f"open({str(tmp_path / 'pids-x')!r}, 'w').write(f'{{os.getpid()}} {{helper.pid}}')\n"
            "time.sleep(300)\n")

    def interrupt_once_started():
        deadline = time.monotonic() + 30
        while not pids_in(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # --max-batch runs trials in this thread
    try:
        threading.Thread(target=interrupt_once_started, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            runner.run_sandboxed([sys.executable, "-c", code], "", timeout=60, limit=None)
        assert len(pids_in(tmp_path)) == 2 and all_gone(pids_in(tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous)
        kill_leftovers(pids_in(tmp_path))


def test_the_interrupted_line_says_how_far_verify_got():
    assert command.interrupted_line(runner.Interrupted(2, 9)) == (
        "verify: interrupted: 2 of 9 trial(s) finished, the rest stopped or cancelled; no report written")
    assert command.interrupted_line(KeyboardInterrupt("SIGHUP")) == (
        "verify: interrupted (SIGHUP): the running trial was stopped; no report written")


DRIVER = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
os.cpu_count = lambda: 1  # one worker: the other trials wait in the queue
from oomdoctor.verify import command, runner
runner.TRIAL_MODULE = "fake_trial"
sys.exit(command.run(sys.argv[1]))
"""


@pytest.mark.parametrize("sig,why", [(signal.SIGINT, ""), (signal.SIGTERM, " (SIGTERM)")])
def test_ctrl_c_ends_the_running_trial_and_cancels_the_queue(fake_trial, sig, why):
    (fake_trial / "pids").mkdir()
    cfg = config(fake_trial, SPAWN_AND_SLEEP, params=f"{{pids: {fake_trial / 'pids'}, sleep: 60, batch: 2}}",
                 fixes="[expandable-segments, halve-batch]")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(fake_trial)])}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(cfg)], env=env, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not pids_in(fake_trial / "pids") and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        pids = pids_in(fake_trial / "pids")
        assert proc.returncode == command.EXIT_INTERRUPTED, err
        assert err.strip().splitlines()[-1] == (
            f"verify: interrupted{why}: 0 of 3 trial(s) finished, the rest stopped or cancelled; no report written")
        assert len(pids) == 2, "the queued trials never started"
        assert all_gone(pids)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_leftovers(pids_in(fake_trial / "pids"))
