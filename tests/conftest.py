"""Test-wide settings: the rule-catalog cache lives in a temporary folder, never in the user's ~/.cache."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("OOMDOCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="oomdoctor-test-cache-"))
