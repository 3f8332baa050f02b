"""Hand-built ParseResult for rule tests: one event, its run context, figures in GiB/MiB."""

from __future__ import annotations

from typing import Any

from oomdoctor.parse.model import Evidence, MemorySample, OOMEvent, OtherProcess, ParseResult, RunContext, Value
from oomdoctor.units import GIB, MIB

SRC = "train.log"


def ev(line: int, text: str = "line") -> Evidence:
    """Evidence on a line of the fake log."""
    return Evidence(source=SRC, line=line, text=text)


def facts(config: dict[str, Any] | None = None, memory: list[tuple[int, float]] | None = None,
          eval_lines: list[int] | None = None, alloc_conf: str | None = None,
          others: list[float] | None = None, line: int = 500, **event: Any) -> ParseResult:
    """ParseResult with one event; sizes given as `*_gib` / `*_mib` keyword arguments."""
    fields: dict[str, Any] = {"kind": "cuda_oom", "source": SRC, "line": line, "end_line": line,
                              "message": "torch.OutOfMemoryError: CUDA out of memory."}
    for key, value in event.items():
        if key.endswith("_gib"):
            fields[key[:-4] + "_bytes"] = int(value * GIB)
        elif key.endswith("_mib"):
            fields[key[:-4] + "_bytes"] = int(value * MIB)
        else:
            fields[key] = value
    if others:
        fields["other_processes"] = tuple(OtherProcess(pid=100 + i, bytes=int(g * GIB)) for i, g in enumerate(others))
    if "step" in fields:
        fields.setdefault("evidence", {})["step"] = ev(line - 1, f"step {fields['step']}")
    run = RunContext(
        source=SRC,
        config={k: Value(value=v, evidence=ev(10 + i, f"{k}={v}")) for i, (k, v) in enumerate((config or {}).items())},
        memory=tuple(MemorySample(step=s, allocated_bytes=int(g * GIB), evidence=ev(100 + i, f"step {s} MA {g} GB"))
                     for i, (s, g) in enumerate(memory or [])),
        eval_lines=tuple(ev(n, "***** Running Evaluation *****") for n in (eval_lines or [])),
        alloc_conf=Value(value=alloc_conf, evidence=ev(5, f"PYTORCH_CUDA_ALLOC_CONF={alloc_conf}")) if alloc_conf else None,
    )
    return ParseResult(events=(OOMEvent(**fields),), runs=(run,))
