"""Every published throughput row the step-time model is checked on, one list: the single-GPU and small-cluster rows
of ``data/throughput_measurements.csv`` (:mod:`engine.validation.throughput`) and the large runs of
``data/large_runs.csv`` (:mod:`engine.validation.scaleout`), as :class:`engine.validation.crossval.Row`, with the
function that predicts a row under given constants, and the rows left out with their reason.

A large run's figure is whichever it publishes first of tokens/s per GPU, MFU and TFLOP/s per GPU (all proportional
to the step time); a throughput row's is tokens/s of all its GPUs. ``source`` is the publisher (the LOSO group):
:func:`source_key`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from engine.errors import EngineError
from engine.files import labelled_csv_rows
from engine.time.constants import TimeConstants, using
from engine.validation.crossval import Row
from engine.validation.measurements import ThroughputMeasurement, load_throughput_measurements
from engine.validation.scaleout import RUNS_FILE, compare_row
from engine.validation.throughput import compare_measurement

THROUGHPUT_FIGURES = ("tokens_per_s_per_gpu", "mfu", "tflops_per_gpu")
"""Columns of large_runs.csv that publish a throughput figure; a row with none of them is a memory-only row."""


def source_key(text: str) -> str:
    """The publisher of a source text: a GitHub ``owner/repo`` where the text starts with one ("pytorch/torchtitan
    docs (2024)" -> "pytorch/torchtitan"), "<authors> et al." for a paper, else the text before its first comma."""
    m = re.match(r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(\s|$)", text)
    if m and " et al" not in text[:40]:
        return m.group(1)
    m = re.match(r"(.*? et al)", text)
    if m:
        return m.group(1).replace("(", "").strip() + "."
    return text.split(",")[0].strip()


@lru_cache(maxsize=1)
def _large_runs() -> tuple[dict, ...]:
    return tuple(row for _, row in labelled_csv_rows(RUNS_FILE))


def _published(row: dict) -> bool:
    return any(re.match(r"\s*[0-9.]+", row.get(col) or "") for col in THROUGHPUT_FIGURES)


def throughput_rows() -> tuple[tuple[Row, ...], tuple[tuple[str, str, str], ...]]:
    """(rows compared, rows left out as (id, source, reason)) over both files, in file order. A row is compared
    when it is expressible and the model predicts it at the fitted constants."""
    rows: list[Row] = []
    out: list[tuple[str, str, str]] = []
    for m in load_throughput_measurements():
        src = source_key(m.source)
        if not m.expressible:
            out.append((m.id, src, m.why_not_expressible))
            continue
        rows.append(Row(id=m.id, source=src, multi_gpu=m.num_gpus > 1, measured=m.tokens_per_second, key=("t", m.id),
                        hf_stack=m.framework == "hf"))
    for row in _large_runs():
        if not _published(row):
            continue
        src = source_key(row["source"])
        result = compare_row(row)
        if isinstance(result, str):
            out.append((row["id"], src, result))
            continue
        fig = next((c for c in result if not c.metric.startswith("memory")), None)
        if fig is None:
            out.append((row["id"], src, "the model gives no step time for this layout"))
            continue
        rows.append(Row(id=row["id"], source=src, multi_gpu=True, measured=fig.published, key=("l", row["id"])))
    return tuple(rows), tuple(out)


@lru_cache(maxsize=1)
def _by_id() -> tuple[dict[str, ThroughputMeasurement], dict[str, dict]]:
    return {m.id: m for m in load_throughput_measurements()}, {r["id"]: r for r in _large_runs()}


def predict(row: Row, constants: TimeConstants) -> float:
    """The model's figure for ``row`` (same unit as ``row.measured``) with ``constants`` in force.

    Raises:
        EngineError: the row cannot be estimated (not one :func:`throughput_rows` compares).
    """
    measurements, runs = _by_id()
    kind, rid = row.key
    with using(constants):
        if kind == "t":
            return compare_measurement(measurements[rid]).predicted_tokens_per_second
        result = compare_row(runs[rid])
    if isinstance(result, str):
        raise EngineError(f"{rid}: {result}")
    return next(c.ours for c in result if not c.metric.startswith("memory"))


def metric_of(row: Row) -> str:
    """What ``row.measured`` is: tokens/s of all the row's GPUs, or the large run's tokens/s per GPU, MFU or TFLOP/s."""
    kind, rid = row.key
    if kind == "t":
        return "tokens/s (all GPUs)"
    run = _by_id()[1][rid]
    col = next(c for c in THROUGHPUT_FIGURES if re.match(r"\s*[0-9.]+", run.get(c) or ""))
    return {"tokens_per_s_per_gpu": "tokens/s per GPU", "mfu": "MFU", "tflops_per_gpu": "TFLOP/s per GPU"}[col]


def total_published_rows() -> int:
    """Every published throughput row of both files (compared or not): the denominator of "rows compared"."""
    return len(load_throughput_measurements()) + sum(1 for row in _large_runs() if _published(row))


def unmatched_reference_rows(reference: list[dict]) -> list[dict]:
    """Rows of a reference table (``measured.csv``'s columns: ``tokens_per_s``, ``n_gpus``) that publish tokens/s and
    match no row of the two data files: its tokens/s, or tokens/s x GPUs, within 0.5% of a throughput row's total, or
    of a large run's tokens/s per GPU (or that x GPUs). Such a row is a published figure the files do not carry yet."""
    totals = [m.tokens_per_second for m in load_throughput_measurements()]
    totals += [m.tokens_per_second / m.num_gpus for m in load_throughput_measurements()]
    for row in _large_runs():
        m = re.match(r"\s*([0-9.]+)", row.get("tokens_per_s_per_gpu") or "")
        if m:
            totals.append(float(m.group(1)))
    out = []
    for ref in reference:
        m = re.match(r"\s*([0-9.]+)", ref.get("tokens_per_s") or "")
        if not m:
            continue
        value, gpus = float(m.group(1)), float(re.match(r"\s*([0-9]+)", ref.get("n_gpus") or "1").group(1))
        if not any(abs(value / t - 1) < 0.005 or abs(value * gpus / t - 1) < 0.005 for t in totals):
            out.append(ref)
    return out
