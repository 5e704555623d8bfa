"""An edited GPU or price table (GPUs & prices page, or a damaged data file) with values that pass a "> 0" check but
are typos (issue 25): a price of 1e308 per GPU-hour overflowed every cost of a plan to infinity; a GPU of 1e308 GiB.
Both are refused naming the row and column; NaN, inf, 0 and negatives were already refused (kept here as rows)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from engine.errors import CatalogError
from engine.hardware.gpus import MAX_MEMORY_GIB, MAX_USD_PER_GPU_HOUR, gpus_from_rows, load_gpus, prices_from_rows

DATA = Path(__file__).resolve().parents[2] / "data"


def _rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("column, value", [("on_demand_usd_per_hour", "1e308"), ("on_demand_usd_per_hour", "1001"),
                                           ("spot_usd_per_hour", "1e308"), ("on_demand_usd_per_hour", "nan"),
                                           ("on_demand_usd_per_hour", "inf"), ("on_demand_usd_per_hour", "-1"),
                                           ("on_demand_usd_per_hour", "0")])
def test_an_edited_price_out_of_range_is_refused_naming_row_and_column(column, value):
    row = dict(_rows("gpu_prices.csv")[0])
    row[column] = value
    with pytest.raises(CatalogError) as info:
        prices_from_rows([(1, row)], load_gpus(), "edited price table")
    assert "edited price table row 1" in str(info.value) and column in str(info.value), str(info.value)


@pytest.mark.parametrize("value", ["1e308", "4097", "0", "nan", "inf"])
def test_an_edited_gpu_memory_out_of_range_is_refused(value):
    row = dict(_rows("gpus.csv")[0])
    row["memory_gib"] = value
    with pytest.raises(CatalogError, match="memory_gib"):
        gpus_from_rows([(1, row)], "edited GPU table")


def test_the_bounds_are_far_above_every_bundled_row():
    assert max(g.memory_gib for g in load_gpus()) * 10 < MAX_MEMORY_GIB
    top = max(float(r["on_demand_usd_per_hour"]) for r in _rows("gpu_prices.csv"))
    assert top * 50 < MAX_USD_PER_GPU_HOUR


def test_a_second_price_of_one_gpu_and_source_is_refused():
    # Before: both rows loaded; "cheapest" took the lower, a named source the first: an edit's effect hung on row order.
    rows = _rows("gpu_prices.csv")
    again = {**rows[0], "on_demand_usd_per_hour": "0.01", "source_name": rows[0]["source_name"].upper()}
    with pytest.raises(CatalogError, match=f"edited price table row {len(rows) + 1}.*row 1 already prices"):
        prices_from_rows(list(enumerate(rows + [again], start=1)), load_gpus(), "edited price table")


def test_an_empty_gpu_name_says_so_and_no_empty_list_is_shown():
    from engine.hardware.gpus import find_gpu

    with pytest.raises(CatalogError, match="no GPU named"):
        find_gpu("   ")
    with pytest.raises(CatalogError) as info:
        find_gpu("nvidia")
    assert "nearest in spelling: )" not in str(info.value)
