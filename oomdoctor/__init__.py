"""oomdoctor: a post-mortem doctor for GPU out-of-memory failures in training logs.

The Python API (imported on first use, so `import oomdoctor` stays fast and never imports torch):
`diagnose_text(text, source=...)`, `diagnose_paths(paths)`, `diagnose_path(path)` -> `Report`, whose
`to_dict()`/`to_json()` are the `diagnose --format json` document (docs/json.md); `RuleSet.load(dirs)` loads
rules once for many calls; `OomdoctorError` is what a bad input raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "diagnose_text": "oomdoctor.api",
    "diagnose_paths": "oomdoctor.api",
    "diagnose_path": "oomdoctor.api",
    "RuleSet": "oomdoctor.api",
    "Report": "oomdoctor.diagnosis",
    "OomdoctorError": "oomdoctor.errors",
}

__all__ = ["OomdoctorError", "Report", "RuleSet", "__version__", "diagnose_path", "diagnose_paths", "diagnose_text"]

if TYPE_CHECKING:
    from oomdoctor.api import RuleSet, diagnose_path, diagnose_paths, diagnose_text
    from oomdoctor.diagnosis import Report
    from oomdoctor.errors import OomdoctorError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'oomdoctor' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
