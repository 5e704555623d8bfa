"""The step-time model against every published throughput row, cross-validated (run by hand:
``python benchmarks/validate_time.py``).

Rows: ``data/throughput_measurements.csv`` and ``data/large_runs.csv`` (:mod:`engine.validation.time_rows`); the
tokens/s rows of ``../shared/reference/measured.csv`` that neither file carries count in the total as not compared.
The model's few global constants (:class:`engine.time.constants.TimeConstants`) are refitted without each source and
that source predicted (:mod:`engine.validation.crossval`). Prints every row (measured, LOSO and in-sample error), the
LOSO table per source, overall single-GPU and multi-GPU, the in-sample figures (named so), the constants and the rows
left out with their reason. Exits 1 when a target is missed: at least 85% of rows compared, LOSO median |error| <= 12%
and max <= 40% (single-GPU and multi-GPU each).

``--write`` also writes what the product reads from this run: ``data/time_bands.csv`` (the 80% band of each group
of comparable rows, :mod:`engine.time.band`) and ``data/time_crossval.csv`` (every row's measured figure, in-sample
and LOSO predictions and the constants refitted without its source: the Methodology page's chart and table). Print
the in-sample constants and set them as :data:`engine.time.constants.FITTED` when they change.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.validation.bands import band_table, coverage, row_groups  # noqa: E402
from engine.validation.crossval import Summary, cross_validate, prediction_table  # noqa: E402
from engine.validation.time_rows import (  # noqa: E402
    metric_of, predict, throughput_rows, total_published_rows, unmatched_reference_rows,
)

TARGET_COMPARED = 0.85
TARGET_MEDIAN = 0.12
TARGET_MAX = 0.40
REFERENCE = ROOT.parent / "shared" / "reference" / "measured.csv"


def _line(name: str, s: Summary) -> str:
    return f"{name:34} {s.rows:4d} rows  median |error| {s.median_abs_error:6.1%}  max {s.max_abs_error:6.1%}  ({s.worst})"


def _write(result, bands) -> None:
    with (ROOT / "data" / "time_bands.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["group", "rows", "sources", "low", "high", "calibrated_low", "calibrated_high"])
        for b in bands:
            w.writerow([b.group, b.rows, b.sources, f"{b.low:.4f}", f"{b.high:.4f}", f"{b.calibrated_low:.4f}",
                        f"{b.calibrated_high:.4f}"])
    t = result.table
    names = list(t.points[0].as_dict())
    with (ROOT / "data" / "time_crossval.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "source", "group", "metric", "measured", "in_sample_predicted", "loso_predicted",
                    *[f"refit_{n}" for n in names]])
        for i, (row, g) in enumerate(zip(t.rows, row_groups(result))):
            k = result.refit[row.source].as_dict()
            w.writerow([row.id, row.source, g, metric_of(row), f"{row.measured:.6g}",
                        f"{row.measured * (1 + result.in_sample_error[i]):.6g}",
                        f"{row.measured * (1 + result.loso_error[i]):.6g}", *[f"{k[n]:g}" for n in names]])
    print("wrote data/time_bands.csv and data/time_crossval.csv")


def main() -> int:
    rows, left_out = throughput_rows()
    reference = list(csv.DictReader(REFERENCE.open())) if REFERENCE.exists() else []
    extra = unmatched_reference_rows(reference)
    total = total_published_rows() + len(extra)
    result = cross_validate(prediction_table(rows, predict))
    t = result.table
    print(f"{'id':34} {'source':28} {'GPUs':5} {'measured':>10} {'LOSO':>8} {'in-sample':>10}")
    for i, row in enumerate(t.rows):
        print(f"{row.id[:34]:34} {row.source[:28]:28} {'multi' if row.multi_gpu else 'one':5} {row.measured:10.4g} "
              f"{result.loso_error[i]:+8.1%} {result.in_sample_error[i]:+10.1%}")
    print("\nLeave-one-source-out (constants refitted without the source):")
    for source in sorted({r.source for r in t.rows}):
        k = result.refit[source]
        print(_line(source[:34], result.summary(source=source)) + "  refit " +
              ", ".join(f"{n}={v:g}" for n, v in k.as_dict().items()))
    single, multi = result.summary(multi_gpu=False), result.summary(multi_gpu=True)
    print()
    print(_line("LOSO, single GPU", single))
    print(_line("LOSO, multi-GPU", multi))
    print(_line("LOSO, all", result.summary()))
    print(_line("in-sample, single GPU", result.summary(multi_gpu=False, loso=False)))
    print(_line("in-sample, multi-GPU", result.summary(multi_gpu=True, loso=False)))
    print("in-sample constants: " + ", ".join(f"{n}={v:g}" for n, v in t.points[result.in_sample].as_dict().items()))
    bands = band_table(result)
    print("\n80% bands (measured / predicted, LOSO; calibrated = within each source):")
    for b in bands:
        print(f"  {b.group:17} {b.rows:4d} rows {b.sources:3d} sources  x{b.low:.3f}..x{b.high:.3f}  calibrated "
              f"x{b.calibrated_low:.3f}..x{b.calibrated_high:.3f}")
    cov = coverage(result, bands)
    print(f"  measurements inside their group's band: {cov:.0%}")
    if "--write" in sys.argv:
        _write(result, bands)
    compared = len(rows) / total
    sources = len({r.source for r in t.rows})
    print(f"\nrows compared: {len(rows)} of {total} published throughput rows ({compared:.0%}), {sources} sources"
          f" ({len(extra)} tokens/s rows of measured.csv are in neither data file)")
    print("\nLeft out:")
    for rid, src, reason in left_out:
        print(f"  {rid} ({src}): {reason}")
    for ref in extra:
        print(f"  measured.csv {ref['source']} {ref['model_id']} {ref['technique']}: not in the data files")
    misses = []
    if compared < TARGET_COMPARED:
        misses.append(f"rows compared {compared:.0%} < {TARGET_COMPARED:.0%}")
    for name, s in (("single GPU", single), ("multi-GPU", multi)):
        if s.median_abs_error > TARGET_MEDIAN:
            misses.append(f"{name} LOSO median {s.median_abs_error:.1%} > {TARGET_MEDIAN:.0%}")
        if s.max_abs_error > TARGET_MAX:
            misses.append(f"{name} LOSO max {s.max_abs_error:.1%} > {TARGET_MAX:.0%}")
    if misses:
        print("\nTARGET MISSED: " + "; ".join(misses))
        return 1
    print("\nall targets met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
