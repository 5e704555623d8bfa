"""Leave-one-source-out cross-validation (engine.validation.crossval) on tables whose answer is known by hand, and the
row collection of engine.validation.time_rows on the data files."""

from __future__ import annotations

import math

import pytest

from engine.time.constants import FITTED, TimeConstants, current, using
from engine.validation.crossval import Row, Table, cross_validate, fit, grid_points, objective, prediction_table
from engine.validation.time_rows import source_key

GRID = {"gemm_efficiency": (0.7, 0.8, 0.9)}


def _predict_linear(row: Row, k: TimeConstants) -> float:
    # A model whose prediction is proportional to the constant: the measured value of a row says which constant
    # would be exact (measured = key x constant).
    return row.key * k.gemm_efficiency


def test_fit_picks_the_constant_that_matches_most_rows():
    rows = [Row("a", "s1", False, 0.9 * 10, 10), Row("b", "s2", False, 0.9 * 20, 20), Row("c", "s3", False, 0.7 * 5, 5)]
    table = prediction_table(rows, _predict_linear, GRID)
    # Losses by hand: at 0.9 rows a, b exact, c off by log(0.9/0.7) = 0.2513; at 0.7: 2 x 0.2513; at 0.8: 2 x
    # log(0.9/0.8) + log(0.8/0.7) = 0.2356 + 0.1335 = 0.3691.
    loss = objective(table, [0, 1, 2])
    assert loss == pytest.approx([2 * math.log(9 / 7), 2 * math.log(9 / 8) + math.log(8 / 7), math.log(9 / 7)])
    assert table.points[fit(table, [0, 1, 2])].gemm_efficiency == 0.9


def test_leave_one_source_out_refits_without_the_source():
    # s1 and s2 say 0.9, s3 says 0.7. Without s1 the fit sees one vote each and every grid point costs log(9/7)
    # (0.8 costs log(9/8) + log(8/7), the same): the tie goes to the prior, 0.80, so s1 misses by 0.8/0.9 - 1.
    rows = [Row("a", "s1", False, 9.0, 10), Row("b", "s2", False, 18.0, 20), Row("c", "s3", True, 3.5, 5)]
    res = cross_validate(prediction_table(rows, _predict_linear, GRID))
    assert res.in_sample_error == pytest.approx((0.0, 0.0, 0.9 / 0.7 - 1))
    assert res.refit["s3"].gemm_efficiency == 0.9
    assert res.loso_error[2] == pytest.approx(0.9 / 0.7 - 1)
    assert res.loso_error[0] == pytest.approx(0.8 / 0.9 - 1)
    assert res.refit["s1"].gemm_efficiency == 0.8
    assert res.summary(multi_gpu=True).rows == 1
    assert res.summary(multi_gpu=False).max_abs_error == pytest.approx(abs(0.8 / 0.9 - 1))


def test_sources_weigh_by_the_square_root_of_their_rows():
    # Four rows of one source (weight 1/2 each, total 2) against one row of another (weight 1): the big source wins,
    # but by 2 to 1, not 4 to 1.
    rows = [Row(f"a{i}", "big", False, 9.0, 10) for i in range(4)] + [Row("b", "small", False, 7.0, 10)]
    table = prediction_table(rows, _predict_linear, GRID)
    loss = objective(table, range(5))
    assert loss[2] == pytest.approx(math.log(9 / 7))      # at 0.9: only "small" misses, weight 1
    assert loss[0] == pytest.approx(4 * 0.5 * math.log(9 / 7))


def test_a_row_is_evaluated_only_on_the_constants_it_reads():
    calls = []

    def predict(row: Row, k: TimeConstants) -> float:
        calls.append(k)
        return 1.0 + k.gemm_efficiency  # never reads eager_host_factor

    grid = {"gemm_efficiency": (0.7, 0.8, 0.9), "eager_host_factor": (1.0, 2.0, 3.0)}
    table = prediction_table([Row("a", "s", False, 1.8, None)], predict, grid)
    assert len(table.points) == 9
    # 1 base + 1 perturbation of the GEMM constant (the first that moves the prediction settles it) + 2 of the host
    # factor (neither moves it: irrelevant) + 3 distinct GEMM values
    assert len(calls) == 1 + 1 + 2 + 3
    assert table.predicted[0][:3] == pytest.approx((1.7, 1.7, 1.7))


def test_constants_scope_is_restored():
    assert current() is FITTED
    with using(FITTED.with_values(gemm_efficiency=0.5)):
        assert current().gemm_efficiency == 0.5
    assert current() is FITTED
    assert len(grid_points(GRID)) == 3


def test_source_key_groups_publishers():
    assert source_key("pytorch/torchtitan docs (2024)") == "pytorch/torchtitan"
    assert source_key("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md @ b5bcd76c") == "pytorch/torchtitan"
    assert source_key("Korthikanti et al. 2022 arXiv:2205.05198") == "Korthikanti et al."
    assert source_key("LlamaFactory paper") == "LlamaFactory paper"
    assert source_key("NVIDIA NeMo Framework docs, performance summary (container 24.12)") == "NVIDIA NeMo Framework docs"
