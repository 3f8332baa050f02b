"""verify's simulated GPU against a real CUDA GPU: the same traces and steps, measured on both.

Two parts, each a ratio of simulated to measured in the same units:
- allocator: the same allocation traces (seeded synthetic ones, and the storage traces the simulator recorded for
  real workloads) go through PyTorch's caching allocator on the GPU (torch.empty per event) and through
  `oomdoctor.verify.allocator`, under each PYTORCH_CUDA_ALLOC_CONF setting, unlimited and under a memory fraction
  near the peak: peak reserved, segments cudaMalloc'd, alloc retries, and the event where the OOM comes;
- workloads: the `bench/fidelity.py` configurations run as real steps (`trial.run_cuda`) and as simulated ones
  (`trial.run_sim`): peak allocated and reserved, and the fit/OOM verdict at the card the source measured on.

  python bench/cuda_fidelity.py traces DIR              # record the simulator's workload traces (any CPU)
  python bench/cuda_fidelity.py measure DIR --out R.json  # on a CUDA GPU: replay traces, run the workloads
  python bench/cuda_fidelity.py compare R.json [--traces DIR]  # anywhere: the model's side, and the table

`bench/fidelity/cuda-*.json` holds what `measure` recorded on a real GPU; tests/test_allocator_cuda.py checks the
allocator model against its synthetic-trace rows without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MIB = 1 << 20
GIB = 1 << 30

# PYTORCH_CUDA_ALLOC_CONF settings measured; each runs in its own process (the allocator reads it once).
CONFS = ["", "max_split_size_mb:128", "expandable_segments:True", "roundup_power2_divisions:4",
         "garbage_collection_threshold:0.6", "max_split_size_mb:256,garbage_collection_threshold:0.8"]
# Limited runs: the memory fraction is this many times the unlimited run's real peak reserved, rounded to a MiB.
LIMIT_FACTORS = (0.8, 0.9, 0.97)

# Workload traces recorded from the simulator (name, trial spec without device); small enough to replay quickly.
WORKLOAD_TRACES: list[tuple[str, dict[str, Any]]] = [
    ("gpt2-124m-train-b8", {"phase": "train", "steps": 2, "workload": {"kind": "transformer", "params": {
        "layers": 12, "width": 768, "heads": 12, "vocab": 50257, "seq_len": 1024, "batch": 8}}}),
    ("phi-1.5-lora-b2", {"phase": "train", "steps": 2, "workload": {"kind": "transformer", "params": {
        "layers": 24, "width": 2048, "heads": 32, "ffn": 8192, "mlp": "gelu", "vocab": 51200, "seq_len": 1044,
        "batch": 2, "dtype": "bfloat16", "master_weights": False, "optimizer": "adamw", "lora_rank": 8}}}),
    ("llama-1b-eval-b8", {"phase": "eval", "steps": 1, "workload": {"kind": "transformer", "params": {
        "layers": 16, "width": 2048, "heads": 32, "ffn": 8192, "mlp": "swiglu", "vocab": 128256, "seq_len": 2048,
        "batch": 2, "eval_batch": 8, "dtype": "bfloat16"}}}),
    # ZeRO-3 / FSDP over 8 ranks: the gathered weights are allocated on the all-gather stream and freed with
    # record_stream on the compute stream (zero3.py), so these traces carry stream events ('s', 'r', 'e')
    ("gpt2-355m-fsdp8-b4", {"phase": "train", "steps": 2, "workload": {"kind": "transformer", "params": {
        "layers": 24, "width": 1024, "heads": 16, "vocab": 50257, "seq_len": 1024, "batch": 4, "dtype": "bfloat16",
        "zero_stage": 3, "world_size": 8, "zero3_gather_unit": "layer", "zero3_forward_prefetch_units": 1}}}),
    ("gpt2-355m-zero3-ds8-b4", {"phase": "train", "steps": 2, "workload": {"kind": "transformer", "params": {
        "layers": 24, "width": 1024, "heads": 16, "vocab": 50257, "seq_len": 1024, "batch": 4, "dtype": "bfloat16",
        "zero_stage": 3, "world_size": 8, "zero3_gather_unit": "module",
        "zero3_prefetch_bucket_elements": 20_000_000}}}),
]


def synthetic_traces() -> dict[str, list[tuple[str, int, int]]]:
    """Seeded allocation patterns that stress different allocator paths (same on every machine)."""
    out = {}
    rng = random.Random(12)
    # variable-length batches: activations whose size follows a sequence length drawn per step
    trace, sid = [], 0
    for _step in range(40):
        seq = rng.choice([256, 512, 700, 1024, 1500, 2048])
        live = []
        for _layer in range(12):
            for nbytes in (seq * 8 * 1024 * 2, seq * 8 * 4096 * 2, seq * 8 * 1024 * 2 + 4096):
                sid += 1
                trace.append(("a", sid, nbytes))
                live.append(sid)
        for s in reversed(live):
            trace.append(("f", s, 0))
    out["varlen-activations"] = trace
    # a random live set of mixed sizes: small (< 1 MiB), medium and large, freed in random order
    trace, live, sid = [], [], 0
    for _ in range(6000):
        if live and (len(live) > 300 or rng.random() < 0.45):
            trace.append(("f", live.pop(rng.randrange(len(live))), 0))
            continue
        r = rng.random()
        nbytes = rng.randint(1, MIB) if r < 0.5 else rng.randint(MIB, 40 * MIB) if r < 0.9 else \
            rng.randint(40 * MIB, 700 * MIB)
        sid += 1
        trace.append(("a", sid, nbytes))
        live.append(sid)
    out["random-mixed"] = trace
    # growing requests (a KV cache or concatenated logits): each step allocates a larger block and frees the old one
    trace, sid, prev = [], 0, None
    keep = []
    for i in range(1, 120):
        sid += 1
        trace.append(("a", sid, i * 37 * MIB + 12345))
        if prev is not None:
            trace.append(("f", prev, 0))
        prev = sid
        if i % 10 == 0:  # a long-lived tensor pinned between them
            sid += 1
            trace.append(("a", sid, 3 * MIB))
            keep.append(sid)
    out["growing-blocks"] = trace
    return out


def read_traces(folder: Path | None) -> dict[str, list[tuple[str, int, int]]]:
    from oomdoctor.verify.trial import read_trace

    traces = synthetic_traces()
    if folder:
        for path in sorted(folder.glob("*.trace")):
            t = read_trace(path, 1 << 31)
            if t is not None:
                traces[path.stem] = t
    return traces


# -- traces: record the simulator's storage traces --------------------------------------------------------------
def cmd_traces(folder: Path) -> int:
    from oomdoctor.verify.trial import run_sim

    folder.mkdir(parents=True, exist_ok=True)
    for name, spec in WORKLOAD_TRACES:
        start = time.perf_counter()
        r = run_sim({**spec, "device": "sim", "capacity_bytes": 1 << 40, "non_pytorch_bytes": 0, "alloc_conf": "",
                     "trace_path": str(folder / f"{name}.trace")})
        print(f"{name}: {r['events']} events, peak allocated {r['peak_allocated_bytes'] / GIB:.2f} GiB, "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    return 0


# -- measure: on the GPU ---------------------------------------------------------------------------------------
def _cuda_replay(torch: Any, trace: list[tuple[str, int, int]], fraction: float | None) -> dict[str, Any]:
    """The trace through the real caching allocator (one torch.empty per allocation; a trace's other streams on
    CUDA streams of their own, record_stream as recorded, and its syncs as torch.cuda.synchronize())."""
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    live: dict[int, Any] = {}
    out: dict[str, Any] = {"oom_event": None}
    streams = {0: torch.cuda.current_stream()}
    stream = 0

    def cuda_stream(i: int) -> Any:
        if i not in streams:
            streams[i] = torch.cuda.Stream()
        return streams[i]

    for n, (kind, sid, nbytes) in enumerate(trace, 1):
        if kind == "a":
            try:
                if stream:
                    with torch.cuda.stream(cuda_stream(stream)):
                        live[sid] = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                else:
                    live[sid] = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:
                out["oom_event"] = n
                out["reserved_at_oom_bytes"] = torch.cuda.memory_reserved()
                break
        elif kind == "w":  # a workspace that takes what fits (allocator.malloc_at_most)
            while nbytes >= 512 and sid not in live:
                try:
                    with torch.cuda.stream(cuda_stream(stream)):
                        live[sid] = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                except torch.OutOfMemoryError:
                    nbytes //= 2
        elif kind == "f":
            live.pop(sid, None)
        elif kind == "s":
            stream = sid
        elif kind == "r" and sid in live:
            live[sid].record_stream(cuda_stream(nbytes))
        elif kind == "e":
            torch.cuda.synchronize()  # every recorded event completes; the next allocation's process_events frees
    stats = torch.cuda.memory_stats()
    out.update(peak_allocated_bytes=stats["allocated_bytes.all.peak"], peak_reserved_bytes=stats["reserved_bytes.all.peak"],
               segments=stats["segment.all.allocated"], alloc_retries=stats["num_alloc_retries"])
    live.clear()
    torch.cuda.empty_cache()
    return out


def _measure_allocator(conf: str, folder: str | None, names: list[str] | None = None) -> list[dict[str, Any]]:
    """One process per setting: every trace unlimited first (no memory fraction set), then limited."""
    import torch

    traces = {k: v for k, v in read_traces(Path(folder) if folder else None).items() if not names or k in names}
    free, total = torch.cuda.mem_get_info()  # creates the context: what the card holds outside the allocator
    rows = []
    for name, trace in traces.items():
        rows.append({"conf": conf, "trace": name, "limit_bytes": None, "non_pytorch_bytes": total - free,
                     **_cuda_replay(torch, trace, None)})
    for row in list(rows):
        for factor in LIMIT_FACTORS:
            limit = int(row["peak_reserved_bytes"] * factor) // MIB * MIB
            r = _cuda_replay(torch, traces[row["trace"]], limit / total)
            rows.append({"conf": conf, "trace": row["trace"], "limit_bytes": limit, "fraction": limit / total,
                         "non_pytorch_bytes": row["non_pytorch_bytes"], **r})
    return rows


def _context_bytes() -> dict[str, Any]:
    """Memory outside PyTorch's allocator: the CUDA context, then cuBLAS/cuDNN handles after a matmul and a conv."""
    import torch

    free0, total = torch.cuda.mem_get_info()
    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    (x @ x).sum().item()
    after_blas = total - torch.cuda.mem_get_info()[0] - torch.cuda.memory_reserved()
    c = torch.nn.functional.conv2d(torch.randn(8, 64, 56, 56, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda"))
    c.sum().item()
    after_conv = total - torch.cuda.mem_get_info()[0] - torch.cuda.memory_reserved()
    return {"total_bytes": total, "context_bytes": total - free0, "after_matmul_bytes": after_blas,
            "after_conv_bytes": after_conv, "device": torch.cuda.get_device_name(0), "torch": torch.__version__}


def _measure_workloads(only: list[str] | None) -> list[dict[str, Any]]:
    """Each selected row (a name containing one of `only`) unlimited, then under its source's card."""
    import gc

    import torch

    from bench.fidelity import BASE_DIR, CARDS, ROWS, workload
    from oomdoctor.verify.trial import run_cuda

    total = torch.cuda.get_device_properties(0).total_memory
    rows = []
    for name, params, published, source in ROWS:
        if only and not any(o in name for o in only):
            continue
        row: dict[str, Any] = {"name": name, "published": published, "card_bytes": CARDS[source]}
        for label, capacity in (("unlimited", total), ("at_card", CARDS[source])):
            spec = {"device": "cuda", "phase": "train", "steps": 2, "capacity_bytes": capacity, "non_pytorch_bytes": 0,
                    "alloc_conf": "", "base_dir": BASE_DIR, "workload": workload(params)}
            try:
                r = run_cuda(spec)
                row[label] = {k: r[k] for k in ("oom", "peak_allocated_bytes", "peak_reserved_bytes", "seconds")}
            except Exception as exc:  # a row that cannot run here is reported, not fatal
                row[label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            gc.collect()
            torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def cmd_measure(folder: str | None, out: Path, only: list[str] | None, skip_workloads: bool,
                traces: list[str] | None = None, skip_allocator: bool = False) -> int:
    result: dict[str, Any] = {"measured": time.strftime("%Y-%m-%d"), "allocator": [], "workloads": []}
    if os.environ.get("OOMDOCTOR_CUDA_CHILD"):
        names = json.loads(os.environ.get("OOMDOCTOR_CUDA_CHILD_TRACES") or "null")
        print(json.dumps(_measure_allocator(os.environ["OOMDOCTOR_CUDA_CHILD_CONF"], folder, names)))
        return 0
    for conf in [] if skip_allocator else CONFS:
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf, "OOMDOCTOR_CUDA_CHILD": "1",
               "OOMDOCTOR_CUDA_CHILD_CONF": conf, "OOMDOCTOR_CUDA_CHILD_TRACES": json.dumps(traces)}
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "measure", *([folder] if folder else []), "--out", "-"],
                              env=env, capture_output=True, text=True)
        if proc.returncode:
            print(f"allocator {conf!r}: failed\n{proc.stderr[-2000:]}", flush=True)
            continue
        result["allocator"].extend(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"allocator {conf!r}: {time.perf_counter() - start:.0f} s", flush=True)
        out.write_text(json.dumps(result, indent=1))
    result["context"] = _context_bytes()
    out.write_text(json.dumps(result, indent=1))
    if not skip_workloads:
        result["workloads"] = _measure_workloads(only)
    out.write_text(json.dumps(result, indent=1))
    return 0


# -- compare: the model's side ----------------------------------------------------------------------------------
def model_replay(row: dict[str, Any], trace: list[tuple[str, int, int]], total: int) -> dict[str, Any]:
    """The same replay through the allocator model (a memory fraction mirrors set_per_process_memory_fraction)."""
    from oomdoctor.verify.allocator import AllocConf, replay

    conf = AllocConf.parse(row["conf"])
    if row.get("fraction") is not None:
        conf = dataclasses.replace(conf, per_process_memory_fraction=row["fraction"])
    r = replay(trace, total, conf, row.get("non_pytorch_bytes", 0), total)
    return {"oom_event": r.oom_event, "peak_allocated_bytes": r.peak_allocated_bytes,
            "peak_reserved_bytes": r.peak_reserved_bytes, "segments": r.segments_allocated, "alloc_retries": r.num_alloc_retries}


def cmd_compare(path: Path, folder: Path | None) -> int:
    data = json.loads(path.read_text())
    total = data["context"]["total_bytes"]
    traces = read_traces(folder)
    ctx = data["context"]
    print(f"measured on {ctx['device']} (torch {ctx['torch']}), {data['measured']}; non-PyTorch memory: context "
          f"{ctx['context_bytes'] / MIB:.0f} MiB, after a matmul {ctx['after_matmul_bytes'] / MIB:.0f} MiB, "
          f"after a conv {ctx['after_conv_bytes'] / MIB:.0f} MiB\n")
    print(f"{'trace':20} {'setting':34} {'limit':>9} {'reserved sim/real':>17} {'segs':>9} {'retries':>7} "
          f"{'OOM at event (real/sim)':>24}")
    same_oom = exact = n = 0
    for row in data["allocator"]:
        if row["trace"] not in traces:
            continue
        m = model_replay(row, traces[row["trace"]], total)
        n += 1
        exact += m["peak_reserved_bytes"] == row["peak_reserved_bytes"]
        same_oom += m["oom_event"] == row["oom_event"]
        limit = "-" if row["limit_bytes"] is None else f"{row['limit_bytes'] / GIB:.2f}G"
        ratio = m["peak_reserved_bytes"] / row["peak_reserved_bytes"] if row["peak_reserved_bytes"] else 1.0
        print(f"{row['trace']:20} {row['conf'] or '(default)':34} {limit:>9} {ratio:>17.3f} "
              f"{m['segments']:>4}/{row['segments']:<4} {m['alloc_retries']:>3}/{row['alloc_retries']:<3} "
              f"{row['oom_event'] or '-'!s:>11} / {m['oom_event'] or '-'!s:<11}")
    print(f"\nallocator: peak reserved identical in {exact}/{n} replays; OOM at the same event (or none) in {same_oom}/{n}")
    if data["workloads"]:
        compare_workloads(data["workloads"])
    return 0


def compare_workloads(rows: list[dict[str, Any]]) -> None:
    from bench.fidelity import A100_40GB, ROWS, replay

    params = {name: p for name, p, _pub, _src in ROWS}
    print(f"\n{'configuration':24} {'real alloc':>10} {'sim/real':>8} {'real resv':>9} {'sim/real':>8} "
          f"{'published':>9} {'at card real/sim':>18}")
    for row in rows:
        real = row.get("unlimited", {})
        if "error" in real or row["name"] not in params:
            print(f"{row['name']:24} error: {real.get('error')}")
            continue
        sim = replay(params[row["name"]], 1 << 40)
        at = replay(params[row["name"]], row.get("card_bytes", A100_40GB))  # files before 2026-11-28: 40 GB
        real40 = row.get("at_card", row.get("at_40gb", {}))
        pub = row["published"] if row["published"] == "OOM" else f"{row['published'] / 1e9:.2f}G"
        verdict = f"{'OOM' if real40.get('oom') else 'fits'}/{'OOM' if at['oom'] else 'fits'}"
        print(f"{row['name']:24} {real['peak_allocated_bytes'] / 1e9:>8.2f}GB "
              f"{sim['unlimited_peak_allocated_bytes'] / real['peak_allocated_bytes']:>8.3f} "
              f"{real['peak_reserved_bytes'] / 1e9:>7.2f}GB {sim['peak_reserved_bytes'] / real['peak_reserved_bytes']:>8.3f} "
              f"{pub:>9} {verdict:>18}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("traces")
    t.add_argument("folder", type=Path)
    m = sub.add_parser("measure")
    m.add_argument("folder", nargs="?")
    m.add_argument("--out", required=True)
    m.add_argument("--only", action="append", help="workload rows whose name contains this (repeatable)")
    m.add_argument("--trace", action="append", help="replay only this trace (repeatable; default all)")
    m.add_argument("--skip-workloads", action="store_true")
    m.add_argument("--skip-allocator", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("results", type=Path)
    c.add_argument("--traces", type=Path)
    args = ap.parse_args()
    if args.cmd == "traces":
        return cmd_traces(args.folder)
    if args.cmd == "measure":
        return cmd_measure(args.folder, Path(args.out), args.only, args.skip_workloads, args.trace,
                           args.skip_allocator)
    return cmd_compare(args.results, args.traces)


if __name__ == "__main__":
    raise SystemExit(main())
