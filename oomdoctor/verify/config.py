"""The verify config: YAML read with line marks, validated by pydantic; every error names file:line and a tip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from oomdoctor.fixids import FIX_IDS, VERIFIABLE
from oomdoctor.units import MIB, UnitError, format_bytes, parse_size
from oomdoctor.verify.allocator import AllocConf, AllocConfError
from oomdoctor.verify.architectures import UnknownArchitecture, hf_replays
from oomdoctor.verify.architectures import resolve as resolve_architecture
from oomdoctor.verify.libraries import cublas_workspace_bytes
from oomdoctor.verify.params import HFParams, TransformerParams

DEFAULT_FIXES: dict[str, tuple[str, ...]] = {
    "train": ("halve-batch", "gradient-checkpointing", "bf16-autocast", "fused-cross-entropy",
              "expandable-segments", "lighter-optimizer", "raise-zero-stage", "cpu-offload"),
    "eval": ("eval-no-grad", "smaller-eval-batch", "fused-cross-entropy", "bf16-autocast", "expandable-segments"),
    "generate": ("smaller-eval-batch", "shorter-max-seq", "bf16-autocast", "expandable-segments"),
}
DEFAULT_NON_PYTORCH = 512 * MIB  # CUDA context + library handles when the log does not say


class ConfigError(Exception):
    """A bad verify config: one line with file:line, and a tip."""

    def __init__(self, path: Path | str, line: int | None, message: str, tip: str) -> None:
        self.path, self.line, self.message, self.tip = str(path), line, message, tip
        super().__init__(self.render())

    def render(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}\ntip: {self.tip}"


DECIMAL_UNITS = ("kb", "mb", "gb", "tb")  # ambiguous: PyTorch prints binary units, vendors decimal ones


def _size(value: Any) -> int:
    """A memory size as the config gives it: a number with a binary unit ("79.15GiB", "512MiB"), never bare."""
    if isinstance(value, bool):
        raise ValueError("a size, e.g. 79.15GiB, not a boolean")
    text = str(value).strip()
    if text in ("0", "0.0"):
        return 0  # nothing needs no unit
    unit = text.lstrip("+-0123456789.eE ").lower()
    if isinstance(value, (int, float)) or not unit:
        raise ValueError(f"{text} has no unit: did you mean {text}GiB? (sizes need a unit: GiB, MiB, KiB or bytes)")
    if unit in DECIMAL_UNITS:
        raise ValueError(f"{text!r} is ambiguous: PyTorch prints binary units, so write {text[: -len(unit)].strip()}GiB"
                         f" (a card sold as 80 GB reports about 79.2 GiB)")
    try:
        size = parse_size(text)
    except UnitError as exc:
        raise ValueError(f"not a size: {text!r} ({exc}); use GiB, MiB, KiB or bytes") from exc
    if size < 0:
        raise ValueError(f"{text!r}: a memory size cannot be negative")
    return size


def _fix_id(value: str) -> str:
    if value not in FIX_IDS:
        raise ValueError(f"unknown fix id {value!r}")
    return value


class Workload(BaseModel):
    """The step to replay: the built-in transformer or a user entry point, with its parameters."""

    model_config = ConfigDict(extra="forbid")

    model: Literal["transformer", "hf"] | None = None
    entry: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one(self) -> Workload:
        if (self.model is None) == (self.entry is None):
            raise ValueError("give exactly one of `model: transformer`, `model: hf` or `entry: module:function`")
        if self.entry is not None and ":" not in self.entry:
            raise ValueError(f"entry {self.entry!r} needs the form package.module:function or file.py:function")
        return self


class Memory(BaseModel):
    """How much memory the failing GPU really had."""

    model_config = ConfigDict(extra="forbid")

    limit: int | None = None
    diagnosis: Path | None = None
    event: int = Field(0, ge=0)
    total: int | None = None
    non_pytorch: int | None = None
    gpu: str | None = Field(None, description="the GPU's name (H100, A100-SXM4-80GB): Hopper's cuBLAS workspaces "
                                              "are 32 MiB, other GPUs' 8 MiB; its multiprocessors size the "
                                              "reductions' staging buffers (an A100's when unnamed)")
    cudnn_workspace: int = Field(0, description="the workspace each cuDNN convolution kernel asks for (the plan's, "
                                                "which cuDNN picks at run time; 0: none), less when memory is short")

    _sizes = field_validator("limit", "total", "non_pytorch", "cudnn_workspace", mode="before")(lambda cls, v: None if v is None
                                                                              else _size(v))

    @model_validator(mode="after")
    def _one(self) -> Memory:
        if (self.limit is None) == (self.diagnosis is None):
            raise ValueError("give exactly one of `limit: 79.15GiB` or `diagnosis: diagnosis.json`")
        if self.limit == 0 or self.total == 0:
            raise ValueError("a GPU of 0 bytes: give the failing GPU's total, e.g. limit: 79.15GiB")
        return self


class VerifyConfig(BaseModel):
    """The whole config file."""

    model_config = ConfigDict(extra="forbid")

    workload: Workload
    phase: Literal["train", "eval", "generate"] = "train"
    device: Literal["auto", "cuda", "sim"] = "auto"
    memory: Memory
    alloc_conf: str = ""
    cublas_workspace_config: str = Field("", description="CUBLAS_WORKSPACE_CONFIG as the run set it (:4096:8)")
    fixes: list[Annotated[str, AfterValidator(_fix_id)]] | None = None
    steps: int = Field(2, ge=1, description="steps to replay; 2 includes the optimizer's first step")
    timeout: float = Field(300.0, gt=0, le=86400, allow_inf_nan=False, description="seconds per trial (at most a day)")
    margin: float = Field(0.05, ge=0, lt=1, description="--max-batch: headroom kept, fraction of capacity")

    @field_validator("alloc_conf")
    @classmethod
    def _conf(cls, v: str) -> str:
        try:
            AllocConf.parse(v)
        except (AllocConfError, ValueError) as exc:
            raise ValueError(str(exc)) from exc
        return v

    @field_validator("cublas_workspace_config")
    @classmethod
    def _workspace(cls, v: str) -> str:
        cublas_workspace_bytes(None, v)  # a WorkspaceConfigError is a ValueError: pydantic reports it with its line
        return v



class Resolved(BaseModel):
    """The config plus what was derived from it: capacity, overhead and the fix list."""

    config: VerifyConfig
    path: Path
    capacity_bytes: int
    total_bytes: int | None
    non_pytorch_bytes: int
    fixes: list[str]
    fixes_from: str
    lines: dict[str, int] = Field(default_factory=dict)

    def line_of(self, key: str) -> int | None:
        """The config line of a top-level key, for messages."""
        return self.lines.get(key)


# --- YAML with line numbers ------------------------------------------------------------------------------------

def _marks(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, key.value)
            out[sub] = key.start_mark.line + 1
            _marks(value, sub, out)
            out[sub] = key.start_mark.line + 1 if not isinstance(value, yaml.ScalarNode) else \
                value.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _marks(item, (*path, i), out)
    return out


def _line_for(marks: dict[tuple, int], loc: tuple) -> int | None:
    loc = tuple(x for x in loc if not (isinstance(x, str) and x.startswith(("function-", "literal["))))
    for n in range(len(loc), -1, -1):
        if loc[:n] in marks:
            return marks[loc[:n]]
    return None


_TIPS = {
    "extra_forbidden": "remove the key or check its spelling; docs/verify.md lists every key",
    "literal_error": "use one of the values the message lists",
    "missing": "add the key; see examples/*.yaml for complete configs",
}


def _tip(err: dict[str, Any]) -> str:
    msg = str(err.get("msg", ""))
    if "fix id" in msg:
        return "fix ids are listed in oomdoctor/fixids.py (e.g. halve-batch, gradient-checkpointing)"
    if "size" in msg:
        return "write sizes as PyTorch prints them: 79.15GiB, 24GiB, 512MiB"
    if "CachingAllocator" in msg or "allocator" in msg:
        return "alloc_conf takes a PYTORCH_CUDA_ALLOC_CONF string, e.g. expandable_segments:True,max_split_size_mb:128"
    return _TIPS.get(err.get("type", ""), "see docs/verify.md for the config format")


def load(path: Path) -> Resolved:
    """Read, validate and resolve a config file; raise ConfigError on any problem."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read config: {exc.strerror or exc}",
                          "pass an existing YAML file with --config") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(path, mark.line + 1 if mark else None, f"not valid YAML: {getattr(exc, 'problem', exc)}",
                          "check indentation and quoting near that line") from exc
    if not isinstance(data, dict) or node is None:
        raise ConfigError(path, 1, "the config must be a YAML mapping", "start from examples/*.yaml")
    marks = _marks(node)
    try:
        cfg = VerifyConfig.model_validate(data)
        prefix: tuple = ("workload", "params")
        if cfg.workload.model == "transformer":
            TransformerParams.model_validate(cfg.workload.params)
        elif cfg.workload.model == "hf":
            _check_hf(HFParams.model_validate(cfg.workload.params), cfg.phase, path, marks)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        if exc.title in (TransformerParams.__name__, HFParams.__name__):
            loc = prefix + loc
        where = ".".join(str(x) for x in loc if not str(x).startswith(("function-", "literal[")))
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(path, _line_for(marks, loc), f"{where}: {msg}" if where else msg, _tip(dict(err))) from None
    return _resolve(cfg, path, marks)


def _check_hf(params: HFParams, phase: str, path: Path, marks: dict[tuple, int]) -> None:
    """A `model: hf` workload names an architecture we can build, for a phase it replays."""
    line = marks.get(("workload", "params", "config")) or marks.get(("workload",))
    try:
        model_type = resolve_architecture(params.config, path.parent).get("model_type")
    except UnknownArchitecture as exc:
        raise ConfigError(path, line, f"workload.params.config: {exc}",
                          "name a catalog model, give a local config.json, or write its keys inline") from None
    if not hf_replays(model_type, phase):
        raise ConfigError(path, marks.get(("phase",)), f"phase: {phase} is not replayed for model: hf yet",
                          "use phase: train or eval (generate: a causal LM), or model: transformer")


def _resolve(cfg: VerifyConfig, path: Path, marks: dict[tuple, int]) -> Resolved:
    mem = cfg.memory
    diag_fixes: list[str] = []
    total, capacity = mem.total, mem.limit
    non_pytorch = mem.non_pytorch
    if mem.diagnosis is not None:
        dpath = mem.diagnosis if mem.diagnosis.is_absolute() else path.parent / mem.diagnosis
        line = marks.get(("memory", "diagnosis"))
        try:
            diag = json.loads(dpath.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(path, line, f"memory.diagnosis: cannot read {dpath}: {exc}",
                              "produce it with `oomdoctor diagnose LOG --format json > diagnosis.json`") from None
        events = diag.get("events") or [] if isinstance(diag, dict) else []
        if mem.event >= len(events):
            raise ConfigError(path, marks.get(("memory", "event"), line),
                              f"memory.event: {dpath.name} has {len(events)} event(s), no index {mem.event}",
                              "pick an event index from the diagnosis, or give memory.limit directly")
        ev = events[mem.event]
        if not ev.get("total_bytes"):
            raise ConfigError(path, line, f"memory.diagnosis: event {mem.event} has no total capacity",
                              "that OOM message did not print one; give memory.limit directly")
        total = total or int(ev["total_bytes"])
        others = sum(int(p.get("bytes") or 0) for p in ev.get("other_processes") or ())
        capacity = total - others
        if non_pytorch is None and ev.get("process_in_use_bytes") and ev.get("reserved_bytes"):
            non_pytorch = max(0, int(ev["process_in_use_bytes"]) - int(ev["reserved_bytes"]))
        for d in diag.get("diagnoses") or ():
            for f in d.get("fixes") or ():
                fid = f.get("id")
                if fid in VERIFIABLE and fid not in diag_fixes:
                    diag_fixes.append(fid)
    assert capacity is not None
    floor = DEFAULT_NON_PYTORCH if non_pytorch is None else non_pytorch
    if capacity <= floor:
        raise ConfigError(path, marks.get(("memory", "limit")) or marks.get(("memory",)),
                          f"memory: a limit of {format_bytes(capacity)} leaves nothing beyond the "
                          f"{format_bytes(floor)} the CUDA context and libraries take",
                          "give the failing GPU's total, e.g. limit: 79.15GiB (diagnose prints it)")
    entry = cfg.workload.entry
    if entry and ".py:" in entry:
        file = Path(entry.split(":", 1)[0])
        file = file if file.is_absolute() else path.parent / file
        if not file.is_file():
            raise ConfigError(path, marks.get(("workload", "entry")), f"workload.entry: no such file {file}",
                              "paths are relative to the config file; or use package.module:function")
    if cfg.fixes is not None:
        fixes, source = list(dict.fromkeys(cfg.fixes)), "config"
    elif diag_fixes:
        fixes, source = diag_fixes, "diagnosis"
    else:
        fixes, source = list(DEFAULT_FIXES[cfg.phase]), "default"
    return Resolved(config=cfg, path=path, capacity_bytes=capacity, total_bytes=total,
                    non_pytorch_bytes=DEFAULT_NON_PYTORCH if non_pytorch is None else non_pytorch,
                    fixes=fixes, fixes_from=source,
                    lines={str(k[0]): v for k, v in marks.items() if len(k) == 1})
