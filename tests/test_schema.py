"""The JSON interface: checked-in schemas and docs match the output models; real output validates against them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oomdoctor.cli import app
from oomdoctor.diagnosis import CATEGORIES
from oomdoctor.parse.model import EventKind, Phase
from oomdoctor.report import json_report, schema
from oomdoctor.report.verify_json import VerifyDocument, render_verify

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "docs" / "schema"
FIXTURES = [
    "fixtures/reconstructed/b-vadr1-rank2-frag-elastic.log",
    "fixtures/reconstructed/c-hip-codegen2-interleaved-ranks.log",
    "fixtures/reconstructed/c-nccl-multinode-p2p-calloc.log",
    "fixtures/reconstructed/d-host-elastic-cppo-grpo-sigkill.log",
    "fixtures/reconstructed/d-kv-vllm-compose-no-cache-blocks.log",
    "fixtures/reconstructed/d-tf-keras-fit-conv.log",
    "fixtures/reconstructed/d-xla-jax-multinerf-bufferassign.log",
    "fixtures/synthetic/syn-lora-eval-spike-8xa100.log",
    "fixtures/synthetic/syn-megatron-iteration.log",
    "fixtures/benign/syn-config-keys-healthy.log",
]
TINY = "{layers: 2, width: 256, heads: 4, vocab: 8192, seq_len: 256, batch: 8}"

# The JSON Schema keywords the generated schemas use; validate() below implements exactly these.
KEYWORDS = {"$schema", "$defs", "$ref", "title", "description", "default", "type", "properties", "required",
            "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "anyOf", "enum", "const"}
TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


def validate(value: Any, node: dict[str, Any], root: dict[str, Any], where: str = "$") -> list[str]:
    """Errors of `value` against a schema node (the subset of JSON Schema 2020-12 listed in KEYWORDS)."""
    if "$ref" in node:
        return validate(value, root["$defs"][node["$ref"].rsplit("/", 1)[-1]], root, where)
    if "anyOf" in node:
        tries = [validate(value, option, root, where) for option in node["anyOf"]]
        return [] if any(not t for t in tries) else [f"{where}: matches no option: {tries}"]
    if "const" in node and value != node["const"]:
        return [f"{where}: {value!r} is not {node['const']!r}"]
    if "enum" in node and value not in node["enum"]:
        return [f"{where}: {value!r} not in {node['enum']}"]
    kind = node.get("type")
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = kind is None or isinstance(value, TYPES[kind])
    if not ok:
        return [f"{where}: {value!r} is not {kind}"]
    errors: list[str] = []
    if isinstance(value, dict):
        errors += [f"{where}: missing {key!r}" for key in node.get("required", ()) if key not in value]
        props, extra = node.get("properties", {}), node.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                errors += validate(item, props[key], root, f"{where}.{key}")
            elif isinstance(extra, dict):
                errors += validate(item, extra, root, f"{where}.{key}")
    if isinstance(value, list):
        if "prefixItems" in node:
            if not node.get("minItems", 0) <= len(value) <= node.get("maxItems", len(value)):
                errors.append(f"{where}: {len(value)} items")
            for i, (item, sub) in enumerate(zip(value, node["prefixItems"])):
                errors += validate(item, sub, root, f"{where}[{i}]")
        elif "items" in node:
            for i, item in enumerate(value):
                errors += validate(item, node["items"], root, f"{where}[{i}]")
    return errors


def keywords(node: Any, out: set[str]) -> set[str]:
    """Every keyword used in a schema (property names excluded)."""
    if isinstance(node, dict):
        for key, value in node.items():
            out.add(key)
            if key in ("properties", "$defs"):
                for sub in value.values():
                    keywords(sub, out)
            else:
                keywords(value, out)
    elif isinstance(node, list):
        for item in node:
            keywords(item, out)
    return out


def diagnose_json(path: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["diagnose", str(ROOT / path), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


# --- the checked-in files are what the models say ----------------------------------------------------------------


def test_checked_in_schemas_and_docs_are_current():
    stale = schema.stale(ROOT)
    assert not stale, (f"out of date: {[str(p.relative_to(ROOT)) for p in stale]}; "
                       f"run `{schema.UPDATE_COMMAND}` in the checkout and commit the result")


def test_every_output_field_is_documented():
    for name in ("diagnose", "verify"):
        generated = schema.diagnose_schema() if name == "diagnose" else schema.verify_schema()
        for model, obj in schema._models(generated).items():
            for field, prop in obj.get("properties", {}).items():
                assert prop["description"].strip(), f"{model}.{field}"
    docs = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
    for model in ("DiagnoseDocument", "OOMEvent", "OtherProcess", "Evidence", "Diagnosis", "Fix", "RunContext",
                  "Value", "MemorySample", "VerifyDocument", "VerifyTrial", "MaxBatch"):
        assert f"<!-- fields:{model} -->" in docs, f"docs/json.md has no field table for {model}"


def test_schemas_use_only_the_keywords_validated_here():
    for name in ("diagnose", "verify"):
        assert keywords(load(name), set()) <= KEYWORDS


def test_enums_are_the_contract():
    defs = load("diagnose")["$defs"]
    assert defs["Diagnosis"]["properties"]["category"]["enum"] == list(CATEGORIES) and len(CATEGORIES) == 12
    assert defs["OOMEvent"]["properties"]["kind"]["enum"] == list(EventKind.__args__)
    assert defs["OOMEvent"]["properties"]["phase"]["enum"] == list(Phase.__args__)
    root = load("diagnose")
    assert root["properties"]["schema_version"]["const"] == json_report.SCHEMA_VERSION
    assert set(root["required"]) == set(root["properties"])


def test_size_fields_are_integers():
    for name in ("diagnose", "verify"):
        generated = load(name)
        for model, obj in schema._models(generated).items():
            for field, prop in obj.get("properties", {}).items():
                if field.endswith("_bytes") or field == "bytes":
                    types = {o.get("type") for o in prop.get("anyOf", [prop])}
                    assert types <= {"integer", "null"}, f"{model}.{field}: {types}"


def test_a_stale_file_is_reported(tmp_path, capsys):
    (tmp_path / "docs" / "schema").mkdir(parents=True)
    (tmp_path / "docs" / "schema" / "diagnose.schema.json").write_text("{}\n")
    assert schema.main(["--check", "--root", str(tmp_path)]) == 1
    assert schema.UPDATE_COMMAND in capsys.readouterr().err
    assert schema.main(["--root", str(tmp_path)]) == 0
    assert schema.main(["--check", "--root", str(tmp_path)]) == 0


# --- real output validates ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES)
def test_diagnose_output_validates(path):
    doc = diagnose_json(path)
    root = load("diagnose")
    assert validate(doc, root, root) == []
    model = json_report.DiagnoseDocument.model_validate(doc)  # every key known, every type right
    assert model.model_dump(mode="json") == doc


def test_the_docs_example_is_real_output_shape():
    docs = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
    block = schema.EXAMPLE.search(docs)
    assert block, "docs/json.md lost its diagnose example"
    doc = json.loads(block.group(0).split("```json\n", 1)[1].split("```", 1)[0])
    root = load("diagnose")
    assert validate(doc, root, root) == [], f"the example is stale: run `{schema.UPDATE_COMMAND}`"
    assert doc["events"][0]["source"] == block["path"]


def test_validator_catches_drift():
    doc = diagnose_json(FIXTURES[0])
    root = load("diagnose")
    del doc["events"][0]["requested_bytes"]
    doc["events"][0]["kind"] = "cuda_oops"
    doc["diagnoses"][0]["confidence"] = "high"
    errors = validate(doc, root, root)
    assert len(errors) == 3, errors


def test_diagnose_output_validates_with_jsonschema():
    jsonschema = pytest.importorskip("jsonschema")
    for path in FIXTURES:
        jsonschema.validate(diagnose_json(path), load("diagnose"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def verify_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], cfg: str, **kw: Any) -> dict[str, Any]:
    from oomdoctor.verify import command

    command.run(write(tmp_path, cfg), fmt="json", **kw)
    return json.loads(capsys.readouterr().out)


def check_verify(doc: dict[str, Any]) -> None:
    root = load("verify")
    assert validate(doc, root, root) == []
    VerifyDocument.model_validate(doc)  # strict: an undocumented key fails here
    rendered = json.loads(render_verify(doc))
    assert rendered == {"schema_version": json_report.SCHEMA_VERSION, **doc}


def test_verify_output_validates_on_the_simulator(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from oomdoctor.verify import runner
    from oomdoctor.verify.trial import run_sim

    monkeypatch.setattr(runner, "run_trial", lambda spec, timeout: run_sim(spec))  # in-process: fast
    doc = verify_json(tmp_path, capsys, f"""
        workload: {{model: transformer, params: {TINY}}}
        device: sim
        memory: {{limit: 260MiB, non_pytorch: 0}}
        fixes: [halve-batch, free-other-process]
        steps: 1
        """, max_batch=True)
    assert doc["baseline_reproduced"] and doc["trials"][0]["parsed"]["kind"] == "cuda_oom"
    assert doc["max_batch"]["max_batch"] >= 1
    check_verify(doc)


def test_verify_output_validates_when_trials_fail(tmp_path, capsys, monkeypatch):
    from oomdoctor.verify import runner

    monkeypatch.setattr(runner, "run_trial", lambda spec, timeout: {"error": "trial process exited with status -6: "
                                                                              "boom", "seconds": 0.25})
    doc = verify_json(tmp_path, capsys, f"""
        workload: {{model: transformer, params: {TINY}}}
        device: sim
        memory: {{limit: 1GiB}}
        fixes: [expandable-segments, free-other-process]
        """)
    assert [t.get("error") is not None for t in doc["trials"]] == [True, True, True]
    check_verify(doc)


def test_verify_output_validates_with_an_allocator_fix_replayed_from_the_trace(tmp_path, capsys):
    pytest.importorskip("torch")
    doc = verify_json(tmp_path, capsys, f"""
        workload: {{model: transformer, params: {TINY}}}
        device: sim
        memory: {{limit: 260MiB, non_pytorch: 0}}
        fixes: [expandable-segments]
        steps: 1
        """)
    assert doc["trials"][1]["from_baseline_trace"] is True
    check_verify(doc)
