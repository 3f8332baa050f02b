"""Time a sim replay of a ~1B-parameter training step (16 layers, width 2048, 16 heads, seq 2048, batch 4,
vocab 50304, AdamW) in a trial subprocess, and report wall seconds and the child's peak RSS.

Targets: ≤ 10 s wall on 2 cores, ≤ 1 GiB RSS. Run: `python bench/bench_verify.py [--steps 2] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oomdoctor.units import GIB, format_bytes
from oomdoctor.verify.params import TransformerParams
from oomdoctor.verify.runner import run_trial

PARAMS = {"layers": 16, "width": 2048, "heads": 16, "seq_len": 2048, "batch": 4, "vocab": 50304,
          "optimizer": "adamw"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--capacity", default="80GiB")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from oomdoctor.units import parse_size
    spec = {"device": "sim", "phase": "train", "steps": args.steps, "capacity_bytes": parse_size(args.capacity),
            "non_pytorch_bytes": 0, "alloc_conf": "",
            "workload": {"kind": "transformer", "params": PARAMS}}
    start = time.perf_counter()
    result = run_trial(spec, timeout=600)
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
    out = {
        "params": TransformerParams.model_validate(PARAMS).num_parameters(),
        "steps": args.steps,
        "wall_seconds": round(wall, 2),
        "replay_seconds": result.get("replay_seconds"),
        "child_max_rss_bytes": rss,
        "events": result.get("events"),
        "peak_allocated_bytes": result.get("peak_allocated_bytes"),
        "peak_reserved_bytes": result.get("peak_reserved_bytes"),
        "oom": result.get("oom"),
        "error": result.get("error"),
        "targets_met": wall <= 10 and rss <= GIB,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['params'] / 1e9:.3f} B params, {args.steps} steps, {out['events']} alloc/free events")
        print(f"wall {wall:.2f} s (replay {out['replay_seconds']} s), child peak RSS {format_bytes(rss)}")
        print(f"peak allocated {format_bytes(out['peak_allocated_bytes'])}, "
              f"peak reserved {format_bytes(out['peak_reserved_bytes'])}")
        print("targets (≤ 10 s, ≤ 1 GiB):", "met" if out["targets_met"] else "NOT met")
        if out["error"]:
            print("error:", out["error"])
    return 0 if not out["error"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
