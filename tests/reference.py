"""Access to ../shared/reference (published configs and parameter counts) for tests only."""

from __future__ import annotations

import json
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
CONFIGS = REFERENCE / "configs"


def param_counts() -> dict[str, dict]:
    """``param_counts.json``: repo id -> checkpoint_total, unique_parameters, note."""
    return json.loads((CONFIGS / "param_counts.json").read_text())


def reference_config(repo_id: str) -> dict:
    """The published config.json key fields of ``repo_id``."""
    return json.loads((CONFIGS / (repo_id.replace("/", "__") + ".json")).read_text())
