"""From log regions to facts: find every OOM message, read its figures, attach its context. No opinions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import regex

from oomdoctor.parse import context as ctx
from oomdoctor.parse import formats as P
from oomdoctor.parse.model import (
    EventKind,
    Evidence,
    OOMEvent,
    Operation,
    OtherProcess,
    ParseResult,
    Phase,
    RunContext,
    Value,
)
from oomdoctor.parse.normalize import Line, normalize_region
from oomdoctor.parse.reader import Region, check_path, scan
from oomdoctor.units import GIB, IMPLAUSIBLE_BYTES, parse_size, to_bytes

MAX_MESSAGE_LINES = 14
DUPLICATE_WINDOW_LINES = 500
# torchelastic's "failed (exitcode: -9)" line and its ChildFailedError block: one kill, not several
HOST_KILL_BLOCK_LINES = 60
_TRIGGERS = (
    "out of memory", "Out of memory", "OOM", "ALLOC_FAILED", "Killed", "killed", "SIGKILL", "exitcode", "KV cache",
    "cache blocks", "Out Of Memory", "oom", "RESOURCE_EXHAUSTED", "DefaultCPUAllocator", "ran out of memory",
    "esource exhausted", "memory limit", "return code",
)
_COMPLETE = regex.compile(
    r"cached\)|reserved in total by PyTorch\)|reserved by PyTorch but unallocated\.|MPS backend out of memory \(.*pool"
)
_NEW_RECORD = regex.compile(
    r"^\s*(?:Traceback|File \"|During handling|The above exception|\[?\d{4}-\d\d-\d\d|\w+Error:|\w+Exception:|at |frame #)"
)
_TF_DTYPES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
              "int32": 4, "int64": 8, "int8": 1, "uint8": 1, "int16": 2, "bool": 1, "complex64": 8, "qint8": 1}
_DEVICE_KIND = {"CUDA": "cuda_oom", "HIP": "hip_oom", "XPU": "xpu_oom", "NPU": "cuda_oom", "MLU": "cuda_oom", "GCU": "cuda_oom"}
_GPU_INDEX = regex.compile(r"device:GPU:(?P<i>\d{1,20})|\bGPU[_ ](?P<j>\d{1,20})_bfc|\[(?P<k>\d{1,20})\] \S+ NCCL WARN")
_RUN_START = regex.compile(
    r"\*{5} Running training \*{5}|Loading checkpoint shards:\s+0%|torch\.distributed\.run|Setting ds_accelerator"
)
_PROCESS_SELF_MARGIN = 4 * GIB


@dataclass
class _Hit:
    kind: str
    idx: int  # index of the first line in the source's Line list
    end: int  # index of the last line consumed
    text: str  # the message text (wrapped lines rejoined)
    match: regex.Match[str] | None
    pattern: str


def _assemble(lines: Sequence[Line], i: int, mode: str) -> tuple[str, int, list[int]]:
    """The message starting at lines[i] with its wrapped or continued lines rejoined.

    mode "auto" joins a line that fills the terminal's width (or ends in a space) to the next without a
    space (a hard wrap may split a word), "space" always joins with a space, "tight" never adds one.
    Returns the text, the index of the last line used, and the text offset where each line starts.
    """
    first = lines[i]
    text, offsets = first.text, [0]
    width = len(first.raw)
    j = i
    while j + 1 < len(lines) and j - i < MAX_MESSAGE_LINES and not _COMPLETE.search(text):
        nxt = lines[j + 1]
        if nxt.number != lines[j].number + 1 or not nxt.text.strip():
            break
        prev_raw = lines[j].raw
        wrapped = prev_raw.endswith(" ") or (len(prev_raw) == width >= 60 and (j > i or len(nxt.raw) <= width))
        if mode == "tight" or (mode == "auto" and wrapped):
            offsets.append(len(text))
            text += nxt.raw
        elif nxt.rank == first.rank and not _NEW_RECORD.match(nxt.text):
            text += " "
            offsets.append(len(text))
            text += nxt.text.strip()
        else:
            break
        j += 1
    return text, j, offsets


def _full(c: tuple[str, regex.Match[str] | None, str] | None) -> bool:
    return c is not None and c[1] is not None and c[2] != "CACHING_ANY"


def _classify(text: str) -> tuple[str, regex.Match[str] | None, str] | None:
    """(kind, match, pattern name) for a candidate line's message, or None when it is not an OOM."""
    text = text[:16384]
    if "out of memory" in text or "Tried to allocate" in text:
        for name in ("CACHING_2_1", "CACHING_1_4", "CACHING_1_0"):
            m = getattr(P, name).search(text)
            if m:
                return _DEVICE_KIND[m["device"] or "CUDA"], m, name
        m = P.CACHING_ANY.search(text)
        if m:
            return _DEVICE_KIND[m["device"]], m, "CACHING_ANY"
        m = P.MPS.search(text)
        if m:
            return "mps_oom", m, "MPS"
        if "MPS backend out of memory" in text:
            return "mps_oom", None, "MPS"
        if P.THC_PRE_1_0.search(text):
            return "cuda_oom", None, "THC_PRE_1_0"
        m = P.STREAM_EXECUTOR_OOM.search(text)
        if m:
            return ("tf_oom" if "tensorflow" in text else "xla_oom"), m, "STREAM_EXECUTOR_OOM"
        if P.NCCL.search(text):
            return "nccl", None, "NCCL"
        if "THCudaCheck FAIL" in text and "out of memory" in text:
            return "cuda_oom", None, "THC_PRE_1_0"
        if P.CUDA_ERROR_STRICT.search(text):
            return "cuda_error", None, "CUDA_ERROR"
    if "Out of memory error on GPU" in text:
        m = P.PADDLE.search(text)
        if m:
            return "cuda_oom", m, "PADDLE"
    if "ALLOC_FAILED" in text:
        m = P.CUBLAS.search(text)
        if m:
            return "cublas", m, "CUBLAS"
    if P.TF_NOT_A_FAILURE.search(text):
        return None
    if "RESOURCE_EXHAUSTED" in text or "esource exhausted" in text or "ran out of memory" in text or "Ran out of memory" in text:
        for name in ("XLA_BYTES", "XLA_HBM", "BFC_RAN_OUT"):
            m = getattr(P, name).search(text)
            if m:
                return ("tf_oom" if name == "BFC_RAN_OUT" and "tensorflow" in text else "xla_oom"), m, name
        if P.XLA_ANY.search(text) or "Resource exhausted: Out of memory" in text:
            return "xla_oom", None, "XLA_ANY"
    if "OOM when allocating" in text:
        return "tf_oom", P.TF_OOM.search(text), "TF_OOM"
    if "KV cache" in text or "cache blocks" in text:
        m = P.KV_CACHE.search(text)
        if m:
            return "kv_cache", m, "KV_CACHE"
    if "DefaultCPUAllocator" in text:
        m = P.CPU_ALLOC.search(text)
        if m:
            return "host_oom", m, "CPU_ALLOC"
    if not P.HOST_KILL_NOT.search(text):
        m = P.HOST_KILL.search(text)
        if m:
            return "host_oom", m, "HOST_KILL"
    return None


def _size(m: regex.Match[str], group: str) -> int | None:
    v = m.group(group) if group in m.groupdict() else None
    return parse_size(v) if v else None


def _figures(kind: str, m: regex.Match[str] | None, pattern: str, text: str) -> dict:
    """The figures a matched message prints, in bytes, with the contract's derivations."""
    f: dict = {}
    if m is None:
        pass  # no figures printed; the GPU index may still be in the text (below)
    elif pattern in ("CACHING_1_0", "CACHING_1_4", "CACHING_2_1", "CACHING_ANY"):
        req = m["requested"]
        f["requested_bytes"] = None if req.startswith("more") else parse_size(req)
        gpu = m.groupdict().get("gpu")
        f["gpu_index"] = int(gpu) if gpu else None
        for key, group in (("total_bytes", "total"), ("free_bytes", "free"), ("allocated_bytes", "allocated"),
                           ("allowed_bytes", "allowed"), ("private_pools_bytes", "private")):
            f[key] = _size(m, group)
        if pattern == "CACHING_1_0":
            f["reserved_unallocated_bytes"] = _size(m, "cached")
            f["reserved_bytes"] = f["allocated_bytes"] + f["reserved_unallocated_bytes"]
        elif pattern == "CACHING_1_4":
            f["reserved_bytes"] = _size(m, "reserved")
            f["reserved_unallocated_bytes"] = f["reserved_bytes"] - f["allocated_bytes"]
        elif pattern == "CACHING_2_1":
            f["reserved_unallocated_bytes"] = _size(m, "unallocated")
            f["reserved_bytes"] = f["allocated_bytes"] + f["reserved_unallocated_bytes"]
            _processes(f, m["procs"])
    elif pattern == "PADDLE":
        f.update(requested_bytes=_size(m, "requested"), allocated_bytes=_size(m, "allocated"), free_bytes=_size(m, "free"),
                 gpu_index=int(m["gpu"]))
    elif pattern == "MPS":
        f.update(requested_bytes=_size(m, "requested"), allocated_bytes=_size(m, "allocated"),
                 total_bytes=_size(m, "total"), detail={"other_allocations_bytes": _size(m, "other"), "pool": m["pool"]})
    elif pattern == "XLA_BYTES":
        f["requested_bytes"] = parse_size(m["requested"])
    elif pattern == "XLA_HBM":
        f["total_bytes"] = parse_size(m["limit"] + "iB" if m["limit"][-1] in "KMGT" else m["limit"])
        f["detail"] = {"used_bytes": parse_size(m["used"] + "iB" if m["used"][-1] in "KMGT" else m["used"]),
                       "memory_space": m["space"]}
    elif pattern == "BFC_RAN_OUT":
        f["requested_bytes"] = int(m["rounded"]) if m["rounded"] else parse_size(m["requested"])
    elif pattern == "STREAM_EXECUTOR_OOM":
        f["requested_bytes"] = int(m["requested"])
    elif pattern == "TF_OOM" and m["shape"] is not None:
        dims = [int(d) for d in m["shape"].replace(" ", "").split(",") if d]
        size = _TF_DTYPES.get((m["dtype"] or "").lower())
        if size:
            n = 1
            for d in dims:
                n *= d
            f["requested_bytes"] = n * size
        f["detail"] = {"shape": dims, "dtype": m["dtype"], "device": m["device"], "allocator": m["allocator"]}
    elif pattern == "CPU_ALLOC":
        f["requested_bytes"] = int(m["requested"]) if m["requested"] else to_bytes(m["gb"], "GiB")
    elif pattern == "KV_CACHE":
        if m["need"]:
            f["requested_bytes"], f["free_bytes"] = parse_size(m["need"]), parse_size(m["avail"])
        if m["tokens"]:
            f["detail"] = {"kv_cache_tokens": int(m["tokens"])}
    elif pattern == "CUBLAS":
        f["detail"] = {"library": (m["lib"] or "CUDNN").upper()}
    if "gpu_index" not in f or f["gpu_index"] is None:
        g = _GPU_INDEX.search(text)
        if g:
            f["gpu_index"] = int(g["i"] or g["j"] or g["k"])
    return f


def _processes(f: dict, procs: str) -> None:
    """Split the `Process N has X memory in use` clauses into this process and the others."""
    others: list[OtherProcess] = []
    for pm in P.PROCESS_CLAUSE.finditer(procs or ""):
        size = parse_size(pm["size"])
        if pm["self"]:
            f["process_in_use_bytes"] = size
        else:
            others.append(OtherProcess(pid=int(pm["pid"]), bytes=size))
    if "process_in_use_bytes" not in f and others and f.get("reserved_bytes") is not None:
        # Containers print the failing process under its own pid: it is the one just above PyTorch's reserve.
        candidates = [p for p in others if 0 <= p.bytes - f["reserved_bytes"] <= _PROCESS_SELF_MARGIN]
        if candidates:
            me = min(candidates, key=lambda p: p.bytes - f["reserved_bytes"])
            f["process_in_use_bytes"] = me.bytes
            others.remove(me)
    f["other_processes"] = tuple(others)


def _implausible(f: dict) -> tuple[str, ...]:
    bad = [k for k, v in f.items() if k.endswith("_bytes") and isinstance(v, int) and (v >= IMPLAUSIBLE_BYTES or v < 0)]
    if any(p.bytes >= IMPLAUSIBLE_BYTES for p in f.get("other_processes", ())):
        bad.append("other_processes")
    total = f.get("total_bytes")
    if total and f.get("allocated_bytes") is not None and f["allocated_bytes"] > total and "allocated_bytes" not in bad:
        bad.append("allocated_bytes")
    if total and f.get("requested_bytes") is not None and f["requested_bytes"] > 64 * total:
        bad.append("requested_bytes")
    proc, reserved = f.get("process_in_use_bytes"), f.get("reserved_bytes")
    if proc is not None and reserved and proc < reserved and "process_in_use_bytes" not in bad:
        bad.append("process_in_use_bytes")  # NVML could not see the process (containers print 0 bytes)
    return tuple(bad)


def _era(pattern: str, m: regex.Match[str] | None, text: str) -> str | None:
    if pattern == "THC_PRE_1_0":
        return "pre-1.0"
    if pattern == "CACHING_1_0":
        return "1.0-1.3"
    if pattern == "CACHING_1_4":
        return "1.10-2.0" if "max_split_size_mb" in text else "1.4-2.0"
    if pattern == "CACHING_2_1" and m is not None:
        if m["capword"] == "capacty" or "max_split_size_mb" in text:
            return "2.1"
        if "PYTORCH_ALLOC_CONF" in text:
            return "2.9-2.10"
        if "docs.pytorch.org" in text:
            return "2.11+"
        return "2.2-2.8"
    return None


_SQUEEZE = regex.compile(r"[ \t]{2,}|[*`]+|(?<=\s)> ")  # whitespace runs, markdown emphasis, quote markers


def _squeeze(text: str, offsets: list[int]) -> tuple[str, list[int]]:
    """The text with whitespace runs, markdown emphasis and quote markers removed, and line offsets moved along."""
    out: list[str] = []
    kept_before: list[tuple[int, int]] = []  # (original offset, squeezed offset) at each cut
    pos = 0
    squeezed = 0
    for m in _SQUEEZE.finditer(text):
        out.append(text[pos:m.start()])
        squeezed += m.start() - pos
        repl = " " if m.group().startswith((" ", "\t")) else ""
        out.append(repl)
        squeezed += len(repl)
        pos = m.end()
        kept_before.append((pos, squeezed))
    out.append(text[pos:])

    def moved(o: int) -> int:
        prior = [(orig, sq) for orig, sq in kept_before if orig <= o]
        return o if not prior else prior[-1][1] + (o - prior[-1][0])

    return "".join(out), [moved(o) for o in offsets]


def _key(kind: str, text: str, m: regex.Match[str] | None) -> str:
    core = m.group(0) if m is not None else text
    return kind + "|" + regex.sub(r"\s+", " ", core).strip()[:400]


MEMO_ENTRIES = 256  # distinct one-line messages remembered while scanning one source


def _find_hits(lines: Sequence[Line]) -> list[_Hit]:
    """Every OOM message in the lines: where it starts and ends, its kind, its match."""
    hits: list[_Hit] = []
    memo: dict[str, tuple[str, regex.Match[str] | None, str] | None] = {}
    i = 0
    while i < len(lines):
        t = lines[i].text
        if not any(tr in t for tr in _TRIGGERS) and "Tried to allocate" not in t:
            i += 1
            continue
        if ctx.FRAME.match(t):
            i += 1
            continue
        # A source line quoting the phrase is not an OOM, unless a whole message with figures follows it
        # (a pasted traceback line and the error run together on one line).
        code_like = t.lstrip().startswith(("#", "except ", "raise ", "if ", "elif ", "return ", ">>>"))
        best = None
        if t in memo:  # the same one-line message again (a flood of identical lines): classify it once
            best = (memo[t], t, i, [0])
        for mode in ("auto", "space", "tight") if best is None else ():
            text, end, offsets = _assemble(lines, i, mode)
            c = _classify(text)
            if best is None or (_full(c) and not _full(best[0])):
                best = (c, text, end, offsets)
            if _full(c):
                break
        assert best is not None  # the mode loop ran, or the memo answered
        c, text, end, offsets = best
        if end == i and _full(c) and text == t:
            if len(memo) >= MEMO_ENTRIES:
                memo.clear()
            memo[t] = c
        if not _full(c) and _SQUEEZE.search(text[:16384]):  # spaced-out or markdown-decorated message
            sq, sq_offsets = _squeeze(text[:16384], offsets)
            c2 = _classify(sq)
            if _full(c2) or (c is None and c2 is not None):
                c, text, offsets = c2, sq, sq_offsets
        if c is None and end > i:
            c = _classify(t)
            text, end, offsets = (t, i, [0]) if c else (text, end, offsets)
        if not c or (code_like and not _full(c)):
            i += 1
            continue
        start = i
        if c[1] is not None:  # the message may begin on a later line than the trigger
            start = i + max(k for k, off in enumerate(offsets) if off <= c[1].start())
        hits.append(_Hit(c[0], start, end, text, c[1], c[2]))
        rest = text[c[1].end():] if c[1] is not None and c[2].startswith("CACHING") else ""
        while "out of memory. Tried to allocate" in rest:  # interleaved writers: two messages on one line
            c2 = _classify(rest)
            if not c2 or c2[1] is None:
                break
            hits.append(_Hit(c2[0], start, end, rest, c2[1], c2[2]))
            rest = rest[c2[1].end():]
        i = end + 1 if c[0] != "host_oom" else i + 1
    return hits


def parse_lines(lines: Sequence[Line], source: str) -> tuple[list[OOMEvent], RunContext]:
    """Every OOM event in one source's normalised lines, in order, plus the run's context."""
    root_rank = _root_cause_rank(lines, source)
    events: list[OOMEvent] = []
    seen: dict[str, int] = {}  # dedupe key -> index in events
    run = 0
    last_line_idx = -1
    run_starts = [k for k, ln in enumerate(lines) if _RUN_START.search(ln.text)]
    hits = _find_hits(lines)
    figures_of: dict[str, dict] = {}
    markers = ctx.Markers(lines if hits else ())
    for hit in hits:
        first = lines[hit.idx]
        if any(last_line_idx < k < hit.idx for k in run_starts) and events:
            run += 1
        last_line_idx = hit.idx
        rank = first.rank
        rank_ev = None
        if rank is None and hit.kind != "host_oom" and (named := ctx.rank_near(lines, hit.idx)):
            rank, rank_ev = named[0], ctx._ev(source, named[1])
        if hit.text not in figures_of:  # a repeated message is read once
            if len(figures_of) >= MEMO_ENTRIES:
                figures_of.clear()
            figures_of[hit.text] = _figures(hit.kind, hit.match, hit.pattern, hit.text)
        f = dict(figures_of[hit.text])
        figures = tuple((k, v) for k, v in sorted(f.items()) if k.endswith("_bytes") and v is not None)
        key = f"{run}|{rank}|{f.get('gpu_index')}|" + ("THC" if hit.pattern == "THC_PRE_1_0"
                                  else f"{hit.kind}|{figures}" if figures else _key(hit.kind, hit.text, hit.match))
        if hit.kind == "host_oom":
            prev = events[-1] if events else None
            block_rank = rank if rank is not None else _block_rank(lines, hit.idx)
            if prev and prev.kind == "host_oom" and (prev.rank is None or block_rank is None or prev.rank == block_rank) \
                    and first.number - prev.end_line <= HOST_KILL_BLOCK_LINES:
                if prev.rank is None and block_rank is not None:  # the Root Cause block names the rank
                    events[-1] = prev.model_copy(update={"rank": block_rank})
                continue  # one kill, reported by several lines of the same block
        if key in seen and first.number - events[seen[key]].end_line <= DUPLICATE_WINDOW_LINES:
            continue  # the same message again: logged, then raised; or re-raised "during handling"
        detail = dict(f.pop("detail", {}) or {})  # the cached figures are shared: never mutate their detail
        evidence: dict[str, Evidence] = {"message": ctx._ev(source, first)}
        step, banner_phase, banner_ev, started = ctx.step_and_banner(markers, hit.idx, rank, source)
        phase, phase_ev = "unknown", None
        frames = ctx.frames_before(lines, hit.idx, rank)
        if not frames:  # logged first, raised after: read the traceback printed after it
            frames = ctx.frames_after(lines, hit.end, rank)
        pf = ctx.phase_from_frames(frames)
        op = ctx.operation_from_frames(frames, ctx.failing_statement(lines, hit.idx, rank))
        if op:
            evidence["operation"] = ctx._ev(source, op[1])
        jit_phase = ctx.phase_from_jit(hit.text) if "jit(" in hit.text or "pmap(" in hit.text else None
        if ctx.phase_from_message(first.text):
            phase, phase_ev = "save", evidence["message"]
        elif jit_phase and not pf:
            phase, phase_ev = jit_phase, evidence["message"]
        elif pf and (pf[0] != "train" or not banner_phase):
            phase, phase_ev = pf[0], ctx._ev(source, pf[1])
        elif banner_phase:
            phase, phase_ev = banner_phase, banner_ev
        elif pf:
            phase, phase_ev = pf[0], ctx._ev(source, pf[1])
        elif hit.kind == "kv_cache":  # vLLM sizes its KV cache while the engine starts
            phase, phase_ev = "init", evidence["message"]
        elif step:  # no traceback, no banner: the last thing the log shows is training progress
            phase, phase_ev = "train", step.evidence
        elif started:  # training started and failed before its first logged step
            phase, phase_ev = "train", started
        if started and step is None and phase == "train":
            detail["first_step"] = True
            evidence["first_step"] = started
        if step:
            evidence["step"] = step.evidence
        if phase_ev:
            evidence["phase"] = phase_ev
        if rank_ev:
            evidence["rank"] = rank_ev
        if hit.kind == "host_oom" and rank is None:
            rank = _block_rank(lines, hit.idx)
        if hit.kind == "nccl":
            detail["fatal"] = _nccl_fatal(lines, hit.end)
            for ln in lines[hit.end + 1 : hit.end + 5]:
                cm = P.NCCL_CALLOC.search(ln.text)
                if cm:
                    f["requested_bytes"] = int(cm["requested"])
                    break
        if frames and (later := ctx.progress_after(markers, hit.end, rank, step.value if step else None)):
            detail["progress_after"] = True  # raised, yet a training counter went on: another run writes here
            evidence["progress_after"] = ctx._ev(source, later)
        if hit.kind in ("tf_oom", "xla_oom") and f.get("total_bytes") is None:
            _bfc_stats(lines, hit.idx, f)
        fatal = detail.pop("fatal", True)
        ev = OOMEvent(
            kind=cast(EventKind, hit.kind), source=source, line=first.number, end_line=lines[hit.end].number,
            rank=rank, step=step.value if step else None, phase=cast(Phase, phase),
            operation=cast(Operation, op[0]) if op else None, message=regex.sub(r"\s+", " ", hit.text).strip()[:4000],
            era=_era(hit.pattern, hit.match, hit.text), fatal=fatal, implausible=_implausible(f),
            root_cause=root_rank is not None and rank == root_rank.value, run=run, detail=detail,
            evidence=evidence, **{k: v for k, v in f.items() if v is not None or k == "gpu_index"},
        )
        seen[key] = len(events)
        events.append(ev)
    if root_rank is not None:
        unranked = [k for k, e in enumerate(events) if e.rank is None and e.kind != "host_oom"]
        if len(unranked) == 1 and not any(e.rank is not None for e in events if e.kind != "host_oom"):
            k = unranked[0]  # torchelastic names the failing rank; the message itself carried no prefix
            events[k] = events[k].model_copy(update={
                "rank": root_rank.value, "root_cause": True,
                "evidence": {**events[k].evidence, "rank": root_rank.evidence}})
    run_ctx = RunContext(
        source=source, config=ctx.config_from(lines, source), memory=tuple(ctx.memory_samples(lines, source)),
        eval_lines=tuple(ctx._ev(source, ln) for ln in lines if ctx.EVAL_BANNER.search(ln.text)),
        torch_version=_first_value(lines, source, P.TORCH_VERSION, "version"),
        alloc_conf=_alloc_conf(lines, source), root_cause_rank=root_rank,
    )
    if run_ctx.torch_version:
        events = [e.model_copy(update={"torch_version": run_ctx.torch_version.value}) for e in events]
    return events, run_ctx


def _bfc_stats(lines: Sequence[Line], end: int, f: dict) -> None:
    """TensorFlow's BFC allocator prints its stats table after the failure: Limit is the device budget."""
    for ln in lines[end + 1 : end + 400]:
        m = P.BFC_STAT.match(ln.text)
        if m and m["key"] == "Limit":
            f["total_bytes"] = int(m["value"])
        elif m and m["key"] == "InUse" and f.get("allocated_bytes") is None:
            f["allocated_bytes"] = int(m["value"])
        if f.get("total_bytes") is not None and f.get("allocated_bytes") is not None:
            return


def _first_value(lines: Sequence[Line], source: str, pat: regex.Pattern[str], group: str) -> Value | None:
    for ln in lines:
        if "torch" in ln.text or "PyTorch" in ln.text:
            m = pat.search(ln.text)
            if m and not ctx.FRAME.match(ln.text):
                return Value(value=m[group], evidence=ctx._ev(source, ln))
    return None


def _alloc_conf(lines: Sequence[Line], source: str) -> Value | None:
    found = None
    for ln in lines:
        if "ALLOC_CONF" in ln.text and "try setting" not in ln.text and "out of memory" not in ln.text:
            m = P.ALLOC_CONF.search(ln.text)
            if m:
                found = Value(value=m["value"], evidence=ctx._ev(source, ln))
    return found


def _root_cause_rank(lines: Sequence[Line], source: str) -> Value | None:
    for k, ln in enumerate(lines):
        if P.ROOT_CAUSE.search(ln.text):
            for nxt in lines[k + 1 : k + 12]:
                m = P.ROOT_RANK.match(nxt.text)
                if m:
                    return Value(value=int(m["rank"]), evidence=ctx._ev(source, nxt))
    return None


def _block_rank(lines: Sequence[Line], idx: int) -> int | None:
    """The `rank : N` line of the torchelastic failure block around a kill."""
    for ln in lines[max(0, idx - 6) : idx + 6]:
        m = P.ROOT_RANK.match(ln.text)
        if m:
            return int(m["rank"])
    return None


def _nccl_fatal(lines: Sequence[Line], end: int) -> bool:
    """An NCCL allocation warning is fatal when an error follows it, not when training goes on."""
    for ln in lines[end + 1 : end + 200]:
        t = ln.text
        if "Error" in t or "error" in t or "Traceback" in t or "failed" in t:
            return True
        if ctx.step_of(ln):
            return False
    return True


def parse_regions(regions: Iterable[Region]) -> ParseResult:
    """The parse result from the regions of any number of sources (regions of one source arrive together, in order)."""
    events: list[OOMEvent] = []
    runs: list[RunContext] = []
    by_source: dict[str, list[Line]] = {}
    for region in regions:
        by_source.setdefault(region.source, []).extend(normalize_region(region.first_line, region.lines))
    for source, lines in by_source.items():
        evs, run = parse_lines(lines, source)
        events.extend(evs)
        runs.append(run)
    return ParseResult(events=tuple(events), runs=tuple(runs))


def parse_text(text: str, source: str = "<text>") -> ParseResult:
    """The parse result from a log already in memory (tests, verify's own replay messages)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return parse_regions([Region(source, 1, lines)])


def parse_files(paths: Sequence[str]) -> ParseResult:
    """The parse result from log files (`-` is standard input; .gz is read compressed), streamed with bounded memory."""
    for p in paths:
        check_path(p)
    regions: list[Region] = []
    for p in paths:
        regions.extend(scan(p))
    return parse_regions(regions)
