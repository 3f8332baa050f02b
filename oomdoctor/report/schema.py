"""JSON Schemas of the JSON reports, generated from their output models, and the field tables of docs/json.md.

    python -m oomdoctor.report.schema           # rewrite docs/schema/*.schema.json, docs/json.md's tables and example
    python -m oomdoctor.report.schema --check   # exit 1 if a schema or field table differs (the tests run this)

FIELD_DOCS is the one place a field of the JSON output is described: every field of every output model must
have an entry (generation fails otherwise), so neither the schema nor the docs can leave a field out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
UPDATE_COMMAND = "python -m oomdoctor.report.schema"
SCHEMA_DIR = Path("docs/schema")
DOCS_FILE = Path("docs/json.md")
TABLE = re.compile(r"(<!-- fields:(?P<model>\w+) -->\n).*?(<!-- /fields -->)", re.DOTALL)
# The example is real output, refreshed on every write but not checked: rule wording may change without a docs edit.
EXAMPLE = re.compile(r"(<!-- example:diagnose (?P<path>\S+) -->\n).*?(<!-- /example -->)", re.DOTALL)

_SIZE = "Integer bytes."
FIELD_DOCS: dict[str, dict[str, str]] = {
    "DiagnoseDocument": {
        "schema_version": "Version of this JSON interface. Fields are only ever added under one version; it changes "
                          "only if a field is removed, renamed or repurposed.",
        "version": "The oomdoctor version that wrote the report.",
        "events": "Every out-of-memory event found, in input order (file by file, then line by line).",
        "diagnoses": "Causes, grouped by event (the launcher's root-cause rank first, then fatal events, then the "
                     "rest), each group best first by confidence; a rule is reported once per run.",
        "runs": "What each input shows around its events (one entry per source): configuration, memory over steps.",
        "fixes_to_try": "Fix ids for the first diagnosed event, in the order to try them: the primary cause's own "
                        "fixes first; when no cause is primary, the first fix of each candidate cause in rank "
                        "order, then each one's second, and so on.",
    },
    "OOMEvent": {
        "kind": "Which failure: the caching allocator's message, a CUDA error, a library (cuBLAS/cuDNN, NCCL), "
                "another backend (HIP, MPS, XPU, XLA, TensorFlow), the host's OOM killer, or a KV cache that does "
                "not fit.",
        "source": "The input the event is in: the path as given, `<stdin>`, or the API's `source`.",
        "line": "1-based line number of the message's first line in `source` (the line the CLI prints).",
        "end_line": "1-based line number of the message's last line (messages hard-wrapped by a log collector "
                    "span several lines).",
        "rank": "Distributed rank that failed, from the log prefix or the launcher's failure block; null if unknown.",
        "gpu_index": "Index of the GPU named in the message (`GPU 2`); null if not printed.",
        "requested_bytes": f"{_SIZE} The allocation that failed (`Tried to allocate`).",
        "total_bytes": f"{_SIZE} The device's total capacity as printed.",
        "free_bytes": f"{_SIZE} Free memory on the device when it failed.",
        "allocated_bytes": f"{_SIZE} Memory held by live PyTorch tensors.",
        "reserved_bytes": f"{_SIZE} Memory reserved by PyTorch's caching allocator: printed by 1.4-2.0 messages, "
                          "allocated + reserved-but-unallocated for 2.1+ and 1.0-1.3 messages.",
        "reserved_unallocated_bytes": f"{_SIZE} Reserved by PyTorch but not in use (cached); derived for 1.4-2.0 "
                                      "messages.",
        "process_in_use_bytes": f"{_SIZE} All the failing process uses on the device, PyTorch or not "
                                "(`this process has X memory in use`).",
        "allowed_bytes": f"{_SIZE} The cap set by `torch.cuda.set_per_process_memory_fraction`, when printed.",
        "private_pools_bytes": f"{_SIZE} Memory held in private pools (CUDA Graphs), when printed.",
        "other_processes": "The `Process N has X memory in use` clauses of processes other than the failing one.",
        "step": "Training step (optimizer step or iteration) at failure, as the log shows it; null if not shown.",
        "phase": "What the run was doing: from the traceback, else the last banner (evaluation, saving), else "
                 "training progress; `unknown` when the log does not say.",
        "message": "The OOM message as found: prefixes stripped, whitespace collapsed, at most 4000 characters.",
        "operation": "What the traceback shows running: `optimizer` (step or state set-up), `backward`, `kv_cache`, "
                     "`attention` (the scores), `pin_memory` (page-locking host memory: the host's failure), "
                     "`zero_bucket` (DeepSpeed ZeRO's gradient bucket); null if not shown.",
        "era": "PyTorch message-format era the message matches (`pre-1.0`, `1.0-1.3`, `1.4-2.0`, `1.10-2.0`, `2.1`, "
               "`2.2-2.8`, `2.9-2.10`, `2.11+`); null when the message's form does not tell.",
        "torch_version": "The PyTorch version printed in the log; null if not printed.",
        "fatal": "False for failures training survived (NCCL's `Cuda failure 'out of memory'` warnings).",
        "implausible": "Names of figures printed but not to be trusted (NVML's 2^64 placeholder, 0 bytes printed "
                       "inside containers); kept as printed, ignored by the diagnosis.",
        "root_cause": "True when the launcher's `Root Cause` block names this rank as the first failure.",
        "run": "0-based index of the run inside `source`, when several runs were pasted into one file.",
        "detail": "Kind-specific extras, e.g. `shape`/`dtype` (TensorFlow), `kv_cache_tokens`, `library`, "
                  "`pool`, `used_bytes`, `first_step`. Keys may be added.",
        "evidence": "Where each value was read: `message`, and when known `step`, `phase`, `operation`, "
                    "`first_step`; each a log line.",
    },
    "OtherProcess": {
        "pid": "Process id as printed.",
        "bytes": f"{_SIZE} Memory that process had in use on the device.",
    },
    "Evidence": {
        "source": "The input the line is in.",
        "line": "1-based line number in `source`.",
        "text": "The line as normalised (rank and logging prefixes stripped), at most 500 characters.",
    },
    "Diagnosis": {
        "rule": "Id of the rule that fired (`oomdoctor rules show ID`). Ids may be added or retired.",
        "category": "The cause, one of the 12 categories; many rules share one.",
        "confidence": "0 to 1 (at most 0.95): how strongly the facts support this cause.",
        "title": "One line naming the cause.",
        "seen": "What was seen in the log, with the actual figures.",
        "why": "Why it leads to an OOM.",
        "action": "What to do, in words.",
        "role": "`primary`: the event's best diagnosis, confidence at least 0.5; `contributing`: another "
                "confident one; `hypothesis`: below 0.35 or a possibility the log cannot confirm (title starts "
                "with `Possibly:`).",
        "event_index": "0-based index into `events` of the event this diagnosis explains.",
        "evidence": "The log lines that support it.",
        "fixes": "Concrete changes, best first.",
    },
    "Fix": {
        "id": "Fix id, shared with `oomdoctor verify` (`halve-batch`, `expandable-segments`, ...).",
        "title": "One line saying what to change.",
        "changes": "What to change, by place: `env`, `code`, or a stack's config (`training_args`, "
                   "`deepspeed_json`, `accelerate_config`, `axolotl_yaml`, `megatron_args`, ...), each an object of "
                   "key -> value or a snippet string. Sections for stacks not detected in the log are left out.",
        "effect": "The expected effect, when the facts allow an estimate; else null.",
        "verifiable": "True when `oomdoctor verify` can replay this fix.",
    },
    "RunContext": {
        "source": "The input this context belongs to.",
        "config": "Configuration values the log prints, by canonical key (`per_device_train_batch_size`, "
                  "`gradient_accumulation_steps`, `max_seq_length`, `zero_stage`, ...). Keys may be added.",
        "memory": "Per-step memory lines (DeepSpeed, Megatron, torchtitan, HF Trainer), in log order.",
        "eval_lines": "Lines where an evaluation starts.",
        "torch_version": "The PyTorch version printed in the log; null if not printed.",
        "alloc_conf": "`PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF` as printed; null if not printed.",
        "root_cause_rank": "The rank the launcher's `Root Cause` block names; null if none.",
    },
    "Value": {
        "value": "The value as read: a number, a boolean or a string.",
        "evidence": "The line it was read from.",
    },
    "MemorySample": {
        "step": "The step the sample belongs to; null if no step was printed before it.",
        "allocated_bytes": f"{_SIZE} Allocated at that step; null if not printed.",
        "max_allocated_bytes": f"{_SIZE} Peak allocated so far; null if not printed.",
        "reserved_bytes": f"{_SIZE} Reserved at that step; null if not printed.",
        "max_reserved_bytes": f"{_SIZE} Peak reserved so far; null if not printed.",
        "evidence": "The line of the sample.",
    },
    "VerifyDocument": {
        "schema_version": "Version of this JSON interface (see the diagnose document); absent from documents "
                          "written before verify added it.",
        "device": "Where the trials ran: `cuda` (a real GPU) or `sim` (the simulated GPU on the CPU).",
        "capacity_bytes": f"{_SIZE} Memory the failing GPU had for this process (the limit replayed under).",
        "non_pytorch_bytes": f"{_SIZE} Memory the process used outside PyTorch (CUDA context, libraries).",
        "total_bytes": f"{_SIZE} The failing GPU's total capacity, when known.",
        "phase": "The phase replayed: `train`, `eval` or `generate`.",
        "steps": "Steps replayed per trial.",
        "fixes_from": "Where the fix list came from: the `config`, the `diagnosis` JSON, or the phase's `default`.",
        "baseline_reproduced": "True when the baseline ran out of memory, as the failing run did.",
        "trials": "The baseline first, then one trial per fix, in config order.",
        "max_batch": "With `--max-batch`: the bisection's result.",
        "notes": "What the replay could not model for this configuration (e.g. `backend:cudaMallocAsync` on sim).",
    },
    "VerifyTrial": {
        "fix": "`baseline` or the fix id.",
        "verifiable": "False when the fix cannot be replayed for this workload (see `error`).",
        "oom": "True when the step ran out of memory; null when the trial did not run.",
        "peak_allocated_bytes": f"{_SIZE} Peak memory held by tensors; null when the trial did not run.",
        "peak_reserved_bytes": f"{_SIZE} Peak memory reserved by the allocator; null when the trial did not run.",
        "seconds": "Wall time of the trial in seconds; null when it did not run.",
        "fits": "True when the step ran without OOM within the capacity, counting non-PyTorch memory.",
        "error": "Why the trial failed or the fix does not apply (a crash, a timeout).",
        "headroom_bytes": f"{_SIZE} Capacity left at the peak; present when the step fit, null when it ran out.",
        "marginal": "True when the step ran without OOM but with less than 5% of the capacity left: not counted as "
                    "a fit (`fits` is false), since real runs vary by more than that.",
        "message": "The OOM message the replay raised; null when none.",
        "parsed": "That message as `diagnose` reads it (an event); null when none.",
        "replay_seconds": "sim: seconds spent replaying the steps.",
        "unlimited_peak_allocated_bytes": f"sim: {_SIZE} The peak the step needs with no memory limit.",
        "flops": "sim: matmul and attention FLOPs of one optimizer step.",
        "alloc_retries": "sim: times the allocator freed its cache and retried.",
        "from_baseline_trace": "sim: true when this allocator-only fix was measured by replaying the baseline's "
                               "recorded trace under its settings instead of running the model again.",
        "events": "sim: allocations and frees in the replayed trace.",
        "params": "The workload parameters this trial ran with (after the fix changed them).",
        "alloc_conf": "The `PYTORCH_CUDA_ALLOC_CONF` this trial ran with (empty string for none).",
        "changes": "What the fix changed: parameter -> [before, after].",
        "effective_batch": "Samples per optimizer step (batch x gradient accumulation x world size), when known.",
        "relative_time": "Step time relative to the baseline: measured on cuda, FLOPs ratio on sim.",
    },
    "MaxBatch": {
        "key": "The parameter searched: `batch` (train) or `eval_batch`.",
        "max_batch": "The largest per-device value that fits with `margin` headroom; null if none fits.",
        "margin": "Headroom kept, as a fraction of the capacity.",
        "trials": "Trials the bisection ran.",
        "grad_accum": "Gradient accumulation that keeps the effective batch at that size.",
        "effective_batch": "The effective batch with `max_batch` and `grad_accum`.",
        "error": "Why no search was possible.",
    },
}


class SchemaError(Exception):
    """An output model field without an entry in FIELD_DOCS (or an entry for no field)."""


def _walk(node: Any, fn: Callable[[dict[str, Any]], None]) -> None:
    if isinstance(node, dict):
        fn(node)
        for value in node.values():
            _walk(value, fn)
    elif isinstance(node, list):
        for value in node:
            _walk(value, fn)


def _models(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The object schemas by model name: the root and every $defs entry."""
    return {schema["title"]: schema, **schema.get("$defs", {})}


def _document(model: type[BaseModel], all_required: bool) -> dict[str, Any]:
    schema = model.model_json_schema(mode="serialization")
    for name, obj in _models(schema).items():
        docs = FIELD_DOCS.get(name, {})
        props = obj.get("properties", {})
        missing, stale = set(props) - set(docs), set(docs) - set(props)
        if missing or stale:
            raise SchemaError(f"FIELD_DOCS[{name!r}] out of date: undocumented {sorted(missing)}, "
                              f"no such field {sorted(stale)} (edit oomdoctor/report/schema.py)")
        for field, prop in props.items():
            prop.pop("title", None)
            prop["description"] = docs[field]
        if all_required:
            obj["required"] = list(props)

    def open_objects(node: dict[str, Any]) -> None:
        if node.get("additionalProperties") is False:  # readers must accept fields added later
            del node["additionalProperties"]

    _walk(schema, open_objects)
    props = schema["properties"]
    schema["properties"] = {"schema_version": props.pop("schema_version"), **props}  # first, as in the output
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def diagnose_schema() -> dict[str, Any]:
    """The schema of `diagnose --format json`: every key is always present (null when unknown)."""
    from oomdoctor.report.json_report import DiagnoseDocument

    return _document(DiagnoseDocument, all_required=True)


def verify_schema() -> dict[str, Any]:
    """The schema of `verify --format json`: keys that apply only to some trials are optional."""
    from oomdoctor.report.verify_json import VerifyDocument

    return _document(VerifyDocument, all_required=False)


def _type(prop: dict[str, Any]) -> str:
    """A property's type in words, for the docs tables."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "anyOf" in prop:
        return " \\| ".join(_type(p) for p in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        if "prefixItems" in prop:
            return "[" + ", ".join(_type(p) for p in prop["prefixItems"]) + "]"
        return f"array of {_type(prop.get('items', {}))}"
    if kind == "object":
        extra = prop.get("additionalProperties")
        return f"object of {_type(extra)}" if isinstance(extra, dict) and extra else "object"
    return kind or "any"


def field_table(schema: dict[str, Any], model: str) -> str:
    """The markdown table of one model's fields: name, type, always present or not, description."""
    obj = _models(schema)[model]
    required = set(obj.get("required", ()))
    rows = ["| field | type | present | description |", "| --- | --- | --- | --- |"]
    for field, prop in obj["properties"].items():
        present = "always" if field in required else "optional"
        rows.append(f"| `{field}` | {_type(prop)} | {present} | {prop['description']} |")
    return "\n".join(rows) + "\n"


def example(root: Path, path: str) -> str:
    """`oomdoctor diagnose PATH --format json` run in the checkout `root`, as a fenced block."""
    from oomdoctor.api import diagnose_text

    report = diagnose_text((root / path).read_bytes(), source=path)
    return f"```json\n{report.to_json()}```\n"


def render_docs(text: str, root: Path | None = None) -> str:
    """docs/json.md with every `<!-- fields:Model -->` table regenerated, and with `root` its examples too."""
    schemas = [diagnose_schema(), verify_schema()]

    def table(m: re.Match[str]) -> str:
        model = m["model"]
        schema = next((s for s in schemas if model in _models(s)), None)
        if schema is None:
            raise SchemaError(f"{DOCS_FILE}: no output model named {model!r}")
        return m.group(1) + field_table(schema, model) + m.group(3)

    text = TABLE.sub(table, text)
    if root is not None:
        text = EXAMPLE.sub(lambda m: m.group(1) + example(root, m["path"]) + m.group(3), text)
    return text


def outputs(root: Path, examples: bool = False) -> dict[Path, str]:
    """Every generated file under the checkout `root`, with its expected content (examples refreshed or kept)."""
    def dump(schema: dict[str, Any]) -> str:
        return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"

    out = {
        root / SCHEMA_DIR / "diagnose.schema.json": dump(diagnose_schema()),
        root / SCHEMA_DIR / "verify.schema.json": dump(verify_schema()),
    }
    docs = root / DOCS_FILE
    if docs.exists():
        out[docs] = render_docs(docs.read_text(encoding="utf-8"), root if examples else None)
    return out


def stale(root: Path) -> list[Path]:
    """The generated files that differ from what the models produce now."""
    return [p for p, text in outputs(root).items() if not p.exists() or p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=UPDATE_COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if a file is out of date")
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: current directory)")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale(args.root)
        for p in bad:
            print(f"{p}: out of date; run `{UPDATE_COMMAND}`", file=sys.stderr)
        return 1 if bad else 0
    for path, text in outputs(args.root, examples=True).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
