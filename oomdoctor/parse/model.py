"""Frozen facts extracted from logs: every figure in bytes, every value with the line it came from."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EventKind = Literal[
    "cuda_oom", "cuda_error", "cublas", "nccl", "hip_oom", "mps_oom", "xpu_oom",
    "xla_oom", "tf_oom", "host_oom", "kv_cache",
]
Phase = Literal["train", "eval", "generate", "save", "init", "unknown"]

FIGURES = (
    "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_bytes",
    "reserved_unallocated_bytes", "process_in_use_bytes",
)


class Frozen(BaseModel):
    """Base for all facts: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Evidence(Frozen):
    """A log line that supports a value: file, 1-based line number, and the line as normalised."""

    source: str
    line: int
    text: str


class Value(Frozen):
    """One context value (a config key, a step, a phase) with the line it was read from."""

    value: Any
    evidence: Evidence


Operation = Literal["optimizer", "backward", "kv_cache", "attention", "pin_memory", "zero_bucket"]


class OtherProcess(Frozen):
    """A `Process N has X memory in use` clause for a process other than the failing one."""

    pid: int
    bytes: int


class OOMEvent(Frozen):
    """One out-of-memory failure as the log shows it. Field names follow shared/CONTRACT.md."""

    kind: EventKind
    source: str
    line: int
    end_line: int
    rank: int | None = None
    gpu_index: int | None = None
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    process_in_use_bytes: int | None = None
    allowed_bytes: int | None = None
    private_pools_bytes: int | None = None
    other_processes: tuple[OtherProcess, ...] = ()
    step: int | None = None
    phase: Phase = "unknown"
    message: str
    # what the traceback shows running: optimizer (step or state set-up), backward, kv_cache, attention (scores)
    operation: Operation | None = None
    # Beyond the contract's minimum:
    era: str | None = None  # message-format era, e.g. "2.2-2.8"
    torch_version: str | None = None  # printed in the log, else None (the era says what the form implies)
    fatal: bool = True  # NCCL's "Cuda failure 'out of memory'" warnings are not fatal when training goes on
    implausible: tuple[str, ...] = ()  # figures kept as printed but not to be trusted (NVML 2**64 placeholder …)
    root_cause: bool = False  # torchelastic's "Root Cause" names this rank as the first failure
    run: int = 0  # index of the run inside the source, when several runs were pasted into one file
    detail: dict[str, Any] = Field(default_factory=dict)  # kind-specific extras (tensor shape, dtype, pool …)
    evidence: dict[str, Evidence] = Field(default_factory=dict)  # where step, phase, rank … were read


class MemorySample(Frozen):
    """A per-step memory line (DeepSpeed MA/CA, Megatron memory report, torchtitan, HF *_mem_gpu_*)."""

    step: int | None
    allocated_bytes: int | None = None
    max_allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    max_reserved_bytes: int | None = None
    evidence: Evidence


class RunContext(Frozen):
    """What the log says about the run around the events: configuration, memory over steps, evaluations."""

    source: str
    config: dict[str, Value] = Field(default_factory=dict)  # canonical key -> value (see context.CONFIG_KEYS)
    memory: tuple[MemorySample, ...] = ()
    eval_lines: tuple[Evidence, ...] = ()  # evaluation banners / eval progress starts
    torch_version: Value | None = None
    alloc_conf: Value | None = None  # PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF as printed
    root_cause_rank: Value | None = None


class ParseResult(Frozen):
    """Everything the parser found in the inputs, in input order."""

    events: tuple[OOMEvent, ...] = ()
    runs: tuple[RunContext, ...] = ()
