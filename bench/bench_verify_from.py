"""Time `oomdoctor verify --from` on issue 12's seed logs on the simulated device: wall seconds for the baseline
plus six fixes, with the verdicts, measured in one run beside the machine's CPU count.

Target (issue 12): a 7B LoRA run with six fixes in <= 60 s on 2 CPUs. The config is the one `--from` builds; when
the diagnosis proposed fewer than six fixes the replay can apply, the list is topped up from TOP_UP (verifiable
fixes in the order diagnose most often proposes them), so every seed is timed on six trials besides its baseline.
Run: `python bench/bench_verify_from.py [--seed NAME ...] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from oomdoctor.verify.fixes import NotApplicable, Variant, apply  # noqa: E402
from oomdoctor.verify.fromlog import build  # noqa: E402

SEEDS = {  # name -> log: the 7B LoRA seeds (evaluation on Llama-2-7B, training on LLaVA-1.5-7B)
    "lora-eval-7b": "fixtures/synthetic/syn-lora-eval-spike-8xa100.log",
    "llava-7b-lora": "fixtures/synthetic/syn-llava7b-lora-40g-batch16.log",
}
TOP_UP = ("halve-batch", "gradient-checkpointing", "shorter-max-seq", "expandable-segments", "max-split-size",
          "gc-threshold", "lighter-optimizer", "fused-cross-entropy", "smaller-eval-batch", "eval-accumulation-steps")
FIXES = 6
TARGET_S = 60.0


def _applies(fix: str, base: Variant, phase: str) -> bool:
    try:
        apply(fix, base, phase)
    except NotApplicable:
        return False
    return True


def time_seed(log: str, folder: str) -> dict:
    """Build the seed's config as --from does, top its fixes up to six, and time verify on sim."""
    config, _ = build(str(REPO / log))
    base = Variant(params=config["workload"]["params"], alloc_conf=str(config.get("alloc_conf") or ""))
    fixes = [f for f in [*(config.get("fixes") or []), *TOP_UP] if _applies(f, base, config["phase"])]
    config = {**config, "device": "sim", "fixes": list(dict.fromkeys(fixes))[:FIXES]}
    cfg, out = os.path.join(folder, "cfg.yaml"), os.path.join(folder, "result.json")
    Path(cfg).write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "oomdoctor", "verify", "--config", cfg, "-o", out],
                       capture_output=True, text=True)
    wall = time.perf_counter() - start
    result = json.loads(Path(out).read_text()) if r.returncode in (0, 1) else {}
    trials = result.get("trials", [])
    return {"log": log, "fixes": config["fixes"], "wall_s": round(wall, 1),
            "ran": sum(1 for t in trials if t.get("verifiable") and t.get("oom") is not None),
            "reproduced": result.get("baseline_reproduced"),
            "fits": [t["fix"] for t in trials if t.get("fits")], "exit": r.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", action="append", choices=sorted(SEEDS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.seed or sorted(SEEDS):
            rows.append({"seed": name, **time_seed(SEEDS[name], folder)})
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))
    else:
        print(f"{os.cpu_count()} CPUs; target <= {TARGET_S:g} s for the baseline and {FIXES} fixes")
        for r in rows:
            print(f"{r['seed']:14} {r['wall_s']:6.1f} s  trials run {r['ran']}  reproduced {r['reproduced']}  "
                  f"fits: {', '.join(r['fits']) or '-'}")
    return 0 if all(r["wall_s"] <= TARGET_S and r["exit"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
