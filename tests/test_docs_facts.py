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


def _pct(x: float, digits: int) -> str:
    return f"{100 * x:.{digits}f}"


def test_readme_time_cross_validation_figures_are_the_stored_ones():
    # The README's LOSO figures, in its summary (whole percent) and in "How right the time is" (one decimal), are those
    # of data/time_crossval.csv, which benchmarks/validate_time.py --write stores (its printed table).
    from engine.validation.time_report import accuracy_table

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    acc = {a.name: a for a in accuracy_table()}
    single, multi, every = acc["all single-GPU rows"], acc["all multi-GPU rows"], acc["all rows"]
    summary = re.search(r"median \|error\| (\d+)% \(single GPU (\d+)%, several GPUs (\d+)%\), largest (\d+)%", readme)
    assert summary, "README: the Time & cost summary of the LOSO figures"
    assert summary.groups() == (_pct(every.loso_median, 0), _pct(single.loso_median, 0), _pct(multi.loso_median, 0),
                                _pct(every.loso_max, 0))
    detail = re.search(r"LOSO median \|error\| / largest: single GPU ([\d.]+)% / ([\d.]+)%\s+\((\d+) rows; in-sample "
                       r"([\d.]+)% / ([\d.]+)%\), several GPUs ([\d.]+)% / (\d+)% \((\d+) rows; in-sample ([\d.]+)%\), "
                       r"all ([\d.]+)% \((\d+) of", readme)
    assert detail, "README: 'How right the time is' LOSO figures"
    assert detail.groups() == (
        _pct(single.loso_median, 1), _pct(single.loso_max, 1), str(single.rows), _pct(single.in_sample_median, 1),
        _pct(single.in_sample_max, 1), _pct(multi.loso_median, 1), _pct(multi.loso_max, 0), str(multi.rows),
        _pct(multi.in_sample_median, 1), _pct(every.loso_median, 1), str(every.rows))


def test_readme_memory_validation_figures_are_the_engines():
    # The README's opening figures: benchmarks/validate_memory.py's high-confidence rows and the traced steps.
    from engine.validation.memory import validate_all, validate_traced

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    target = validate_all().target
    traced = validate_traced()[1]
    found = re.search(r"against (\d+) training steps traced .*? median error ([\d.]+)%, largest ([\d.]+)%; against the "
                      r"(\d+) high-confidence single-GPU published measurements .*? median ([\d.]+)%, largest ([\d.]+)%, "
                      r"where the seed chapters' rule is off by a median (\d+)%", readme)
    assert found, "README: the memory validation figures of its opening"
    assert found.groups() == (str(traced.rows), f"{traced.median_abs_error_pct:.2f}", f"{traced.max_abs_error_pct:.1f}",
                              str(target.rows), f"{target.median_abs_error_pct:.1f}", f"{target.max_abs_error_pct:.1f}",
                              f"{target.seed_median_abs_error_pct:.0f}")
