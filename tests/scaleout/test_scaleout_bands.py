"""Scale-out layouts with a dataset carry the time model's 80% band on tokens/s, hours, GPU-hours and cost, as the
one-GPU plan does (issue 23, "A range, not a point": CLI JSON, the plan CSV row, the layout search's runs).

The expected figures are derived here from the band's record in ``data/time_bands.csv`` (read with the csv module,
not through the engine): tokens/s x (low, high); hours, GPU-hours and cost / (high, low). Each test failed before the
layouts had bands (the JSON and the CSV row had no ``*_low`` / ``*_high``; the search's runs were points).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.plan.cost import Dataset, quote_price
from engine.plan.layout_cost import candidate_runs, layout_run
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.layout import Layout
from engine.scaleout.search import Candidate
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario

ROOT = Path(__file__).resolve().parents[2]
# The command: full training of Llama 3.1 8B, TP 2 over 16 H100s (two nodes), one billion tokens.
ARGS = ["--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "full", "--tensor-parallel", "2", "--num-gpus",
        "16", "--gpu", "H100 80GB", "--dataset-tokens", "1000000000"]
BANDED = ("tokens_per_second", "hours", "gpu_hours", "cost_usd_on_demand", "cost_usd_spot")


def band_record(group: str) -> tuple[float, float]:
    """(low, high) of ``group``'s row of data/time_bands.csv."""
    with open(ROOT / "data" / "time_bands.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["group"] == group)
    return float(row["low"]), float(row["high"])


def expected_band(out: dict, low: float, high: float) -> dict[str, float | None]:
    exp: dict[str, float | None] = {"tokens_per_second_low": out["tokens_per_second"] * low,
                                    "tokens_per_second_high": out["tokens_per_second"] * high}
    for key in BANDED[1:]:
        v = out[key]
        exp[f"{key}_low"] = None if v is None else v / high
        exp[f"{key}_high"] = None if v is None else v / low
    return exp


def assert_band(got: dict, exp: dict, rel: float = 1e-9) -> None:
    for key, value in exp.items():
        if value is None:
            assert got[key] in (None, ""), key
        else:
            assert float(got[key]) == pytest.approx(value, rel=rel), key


def test_estimate_with_a_layout_and_a_dataset_gives_every_figure_its_band(capsys):
    assert main(["estimate", *ARGS]) == 0
    out = json.loads(capsys.readouterr().out)
    low, high = band_record("multi_gpu")
    assert low < 1 < high  # a real band, so the assertions below can fail
    assert_band(out, expected_band(out, low, high))
    assert out["hours_low"] < out["hours"] < out["hours_high"]
    assert out["gpu_hours_low"] == pytest.approx(out["hours_low"] * 16, rel=1e-12)
    assert "80% band" in out["band_note"] and "several GPUs" in out["band_note"]
    # the step time's own band (per rank's layout) says the same tokens/s range
    assert out["step_time"]["tokens_per_second_low"] == pytest.approx(out["tokens_per_second_low"], rel=1e-12)


def test_plan_with_a_layout_writes_the_band_in_its_csv_row(capsys):
    args = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "full", "--tensor-parallel", "2",
            "--num-nodes", "2", "--gpu", "H100 80GB", "--dataset-tokens", "1000000000"]
    assert main(args) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 1
    row = rows[0]
    low, high = band_record("multi_gpu")
    point = {k: (None if row[k] == "" else float(row[k])) for k in BANDED}
    assert_band(row, expected_band(point, low, high), rel=1e-5)  # the row's tokens/s is rounded to 0.1


def test_layout_run_record_and_search_runs_carry_the_band():
    arch = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=2)
    layout = Layout(tensor_parallel=2, data_parallel=8, zero=3, global_batch_size=64)
    est = estimate_layout(arch, Scenario(method="full"), layout, cluster, master_weights=True)
    data = Dataset(total_tokens=10**9)
    run = layout_run(est, cluster, data, 2048)
    low, high = band_record("multi_gpu")
    rec = run.record()
    assert_band(rec, expected_band({**rec, "tokens_per_second": run.run.tokens_per_second}, low, high))
    # the search table's runs: the same band on the same tokens/s
    cand = Candidate(layout=layout, fits=True, reason="", peak_allocated_bytes=1.0, device_bytes=1.0, max_stage=0,
                     step_s=est.time.step_s, tokens_per_second=est.time.tokens_per_second,
                     gpu_hours_per_million_tokens=None, usd_per_million_tokens=None)
    (found,) = candidate_runs([cand], data, 2048, quote_price(cluster.gpu))
    assert found.hours_low == pytest.approx(found.hours / high, rel=1e-12)
    assert found.cost_usd_on_demand_range[1] == pytest.approx(found.cost_usd_on_demand / low, rel=1e-12)
