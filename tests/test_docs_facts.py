"""Numbers the README states about the code, checked against the code (one place per fact: the code)."""

from __future__ import annotations

import re
from pathlib import Path

from engine.model.families import BUILDERS

ROOT = Path(__file__).resolve().parents[1]


def test_readme_model_type_count_is_the_builders():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    counts = [int(n) for n in re.findall(r"exactly for (\d+) model types", readme)]
    assert counts == [len(BUILDERS)], "README: 'counts its parameters exactly for N model types' must be len(BUILDERS)"
