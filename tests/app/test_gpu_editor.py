"""GPUs & prices page: the catalog is editable for the session, validated like the bundled CSV files."""

import pytest

from engine.errors import CatalogError
from engine.hardware.gpus import gpus_from_rows, load_gpus, load_prices, prices_from_rows


def _rows(items):
    return [(i, {**g.model_dump(), "aliases": ";".join(g.aliases)}) for i, g in enumerate(items, start=1)]


def test_edited_rows_validate_like_the_bundled_files():
    gpus = load_gpus()
    assert gpus_from_rows(_rows(gpus), "edited GPU table") == gpus
    bad = _rows(gpus)
    line, row = next((n, r) for n, r in bad if r["name"] == "NVIDIA V100 32GB")
    row["memory_gib"] = -1
    with pytest.raises(CatalogError, match=rf"edited GPU table row {line} \('NVIDIA V100 32GB'\): memory_gib"):
        gpus_from_rows(bad, "edited GPU table")
    prices = [(i, {**p.model_dump(), "date": p.date.isoformat()}) for i, p in enumerate(load_prices(), start=1)]
    assert prices_from_rows(prices, gpus, "edited price table") == load_prices()
    prices[0][1]["gpu"] = "Voodoo 5"
    with pytest.raises(CatalogError, match="edited price table row 1"):
        prices_from_rows(prices, gpus, "edited price table")


def test_page_renders_and_edits_reach_the_fit_page(new_app):
    at = new_app().switch_page("pages/gpus.py").run()
    assert not at.exception
    assert [t.value for t in at.title] == ["GPUs and prices"]
    # A session whose edited catalog halves the A100 80GB's usable memory: the What-fits verdict follows it.
    a100 = next(g for g in load_gpus() if g.name == "NVIDIA A100 80GB")
    small = a100.model_copy(update={"usable_mib": 20_000})
    at.session_state["session_gpus"] = tuple(small if g.name == a100.name else g for g in load_gpus())
    at.session_state["session_prices"] = load_prices()
    at.switch_page("pages/fit.py").run()
    assert not at.exception
    text = " ".join(c.value for c in at.caption)
    assert "usable 19.53 GiB per GPU" in text  # 20,000 MiB = 19.53 GiB
