"""On a CUDA GPU: the allocation history of bench/fidelity.py rows' steps, to set beside the simulator's trace.

Each selected row runs its two steps (as `cuda_fidelity.py measure` does, no memory fraction) under
`torch.cuda.memory._record_memory_history`, and the device trace is written as gzipped JSON lines: action, address,
size, stream and the innermost frames from transformers/peft/oomdoctor/the bench (the rest of PyTorch's stack is
dropped to keep the file small). `python bench/cuda_snapshot.py --only NAME --out DIR`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KEEP = ("transformers", "peft", "oomdoctor", "bench", "torch/autograd", "torch/optim", "torch/nn/functional")


def record(name: str, params: dict, out: Path) -> dict:
    """Run the row's steps with memory history on; write its trace; return the peak figures."""
    import torch

    from bench.fidelity import BASE_DIR, workload
    from oomdoctor.verify.trial import _factory

    spec = {"phase": "train", "steps": 2, "base_dir": BASE_DIR, "workload": workload(params)}
    device = torch.device("cuda", 0)
    torch.cuda.init()  # the peak-stat reset below needs the device's context
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    step = _factory(spec)(device)
    for _ in range(spec["steps"]):
        step()
    torch.cuda.synchronize(device)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    del step
    path = out / (name.replace(" ", "_").replace("+", "p") + ".jsonl.gz")
    n = 0
    with gzip.open(path, "wt") as f:
        for ev in snap["device_traces"][0]:
            frames = [f"{Path(fr['filename']).name}:{fr['line']}:{fr['name']}" for fr in ev.get("frames", [])
                      if any(k in fr["filename"] for k in KEEP)][:4]
            f.write(json.dumps([ev["action"], ev["addr"], ev["size"], ev.get("stream", 0), frames]) + "\n")
            n += 1
    result = {"name": name, "events": n, "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
              "peak_reserved_bytes": torch.cuda.max_memory_reserved(device), "file": path.name}
    torch.cuda.empty_cache()
    return result


def main() -> int:
    from bench.fidelity import ROWS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, params, _published, _source in ROWS:
        if any(o == name for o in args.only):
            print(json.dumps(record(name, params, args.out)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
