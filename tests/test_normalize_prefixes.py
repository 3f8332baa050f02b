"""Prefix stripping in one match takes exactly what taking one prefix at a time (rank first, then logging) took."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import regex

from oomdoctor.parse.normalize import LOG_PREFIX_RE, PREFIX_DEPTH, RANK_PREFIX_RE, strip_prefixes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_RANK = regex.compile("^" + RANK_PREFIX_RE, regex.VERBOSE)
_LOG = regex.compile("^" + LOG_PREFIX_RE, regex.VERBOSE)
PREFIXES = ["[rank3]: ", "[rank12]:", "rank4: ", "[1,3]<stderr>: ", "3: ", "2024-01-01 12:00:00,123 ", "[INFO] ",
            "INFO - ", "ERROR:root:", "[logging.py:96:log_dist] ", "vllm-1  | ", "worker-1: ", "[default2]:", "1:",
            "E0101 12:00:00.123456 1234 f.cc:12] ", "Nov 28 12:00:01 gpu-node-3 python[12345]: ", "12:00:01.123 ",
            "[12:00:00] ", "- ERROR - mod - ", "2024-05-01T12:00:01.1234567Z ", "05/01/2024 12:00:01 - INFO - __main__ - ",
            "ERROR 07-30 18:15:55 [core.py:1142] ", "INFO 07-30 18:15:55 engine.py:400] ", "0.01.047.215 E ",
            "INFO [llamacpp-router stdout] [45979] ", "[10,436ms] [Error] [carb.cudainterop.plugin] "]


def one_at_a_time(text: str) -> tuple[int | None, str]:
    """The reference: a rank prefix, else a logging prefix, taken off the front, up to PREFIX_DEPTH times."""
    rank = None
    for _ in range(PREFIX_DEPTH):
        m = _RANK.match(text) or _LOG.match(text)
        if not m or not m.end():
            break
        if rank is None and m.re is _RANK:
            rank = int(m["rank"])
        text = text[m.end():]
    return rank, text


def _texts() -> list[str]:
    texts = {seg.rstrip() for p in sorted(FIXTURES.rglob("*.log"))
             for raw in p.read_text(errors="replace").split("\n") for seg in raw.split("\r")}
    rnd = random.Random(0)
    base = sorted(texts)
    for _ in range(20000):  # prefixes stacked in every order and depth, before real lines and their cut ends
        head = "".join(rnd.choice(PREFIXES) for _ in range(rnd.randint(0, 9)))
        texts.add((head + rnd.choice(base)[: rnd.randint(0, 80)]).rstrip())
    return sorted(texts)


def test_stacked_prefixes_are_all_taken_and_the_first_rank_kept():
    assert strip_prefixes("[rank3]: [2026-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 3] step=12") == (
        3, "[Rank 3] step=12")
    assert strip_prefixes("2024-01-01 12:00:00 rank5: [rank7]: loss 1.0") == (5, "loss 1.0")
    assert strip_prefixes("{'loss': 0.5}") == (None, "{'loss': 0.5}")
    assert strip_prefixes("1: 2: 3: 4: 5: 6: 7: x") == (1, "7: x")  # PREFIX_DEPTH deep at most
    # vLLM's logger, bracketed since 0.7: a traceback under it keeps its indentation, so its frames read
    assert strip_prefixes('ERROR 07-30 18:15:55 [engine.py:400]   File "cache_engine.py", line 69, in __init__') == (
        None, '  File "cache_engine.py", line 69, in __init__')
    # llama.cpp's own timestamp and level, relayed by a supervisor that names the child's stream (Jan)
    assert strip_prefixes("INFO [llamacpp-router stdout] [45979] 0.00.116.142 I srv  load_model: loading model") == (
        None, "srv  load_model: loading model")
    # NVIDIA Omniverse Kit (Isaac Sim) after its date: elapsed milliseconds, level, the plugin that logged
    assert strip_prefixes("2025-02-13 12:01:23 [10,436ms] [Error] [carb.cudainterop.plugin] CUDA error 2: "
                          "cudaErrorMemoryAllocation - out of memory)") == (
        None, "CUDA error 2: cudaErrorMemoryAllocation - out of memory)")


@pytest.mark.parametrize("chunk", range(4))
def test_one_match_takes_what_one_prefix_at_a_time_took(chunk):
    texts = _texts()[chunk::4]
    assert [t for t in texts if strip_prefixes(t) != one_at_a_time(t)] == []


@pytest.mark.parametrize(
    "row",
    [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 12, in <module>',
        "During handling of the above exception, another exception occurred:",
        "2026-01-01 10:00:00,123 INFO step 4",
        "[rank3]: RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA out of memory.",
        "\tat org.apache.spark.api.python.PythonRunner.compute(PythonRunner.scala:203)",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x42",
        "Segmentation fault (core dumped)",
        "```",
        "E tensorflow/stream_executor/cuda/cuda_blas.cc:510] failed to create cublas handle",
        "F0614 11:50:14.027064  4321 syncedmem.cpp:71] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
    ],
)
def test_one_pattern_says_a_row_starts_a_record_for_unwrapping_and_for_messages(row: str) -> None:
    from oomdoctor.parse.normalize import RECORD_START

    assert RECORD_START.match(row)


@pytest.mark.parametrize("row", ["of 14.74 GiB of which 8.54 GiB is free.", "CUDA out of memory. Tried to allocate 2.00 GiB"])
def test_the_rest_of_a_cut_row_starts_no_record(row: str) -> None:
    """A terminal may cut a logger's row right before the message's head: unwrapping joins it (a cut message is not
    continued by another message's head; events.py says so on its own)."""
    from oomdoctor.parse.normalize import RECORD_START

    assert not RECORD_START.match(row)
