"""Access to ../shared/reference (published configs, official parameter counts) for tests only.

The product never reads it. It sits beside the checkout in this project's workspace and in CI; in a
clone without it, the modules that compare against it are skipped with that reason, except under CI
(``CI`` set), where its absence is an error (see conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
CONFIGS = REFERENCE / "configs"
AVAILABLE = (CONFIGS / "param_counts.json").is_file()
MISSING_REASON = f"reference data not found at {REFERENCE} (published configs and counts live beside the checkout)"


def require_reference() -> None:
    """Skip the calling test module when the reference data is absent."""
    if not AVAILABLE:
        pytest.skip(MISSING_REASON, allow_module_level=True)


def param_counts() -> dict[str, dict]:
    """``param_counts.json``: repo id -> checkpoint_total, unique_parameters, note."""
    return json.loads((CONFIGS / "param_counts.json").read_text())


def config_path(repo_id: str) -> Path:
    """Path of the published config.json key fields of ``repo_id``."""
    return CONFIGS / (repo_id.replace("/", "__") + ".json")


def reference_config(repo_id: str) -> dict:
    """The published config.json key fields of ``repo_id``."""
    return json.loads(config_path(repo_id).read_text())
