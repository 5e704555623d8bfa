"""The time model's published accuracy, read back from the stored cross-validation (``data/time_crossval.csv``,
written by ``benchmarks/validate_time.py --write``; a test keeps it equal to the current model): per source and
overall, leave-one-source-out (the headline) and in-sample (named so), single-GPU and multi-GPU apart.

Pages and the CLI read these instead of re-running the cross-validation (about a minute of model evaluations).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache

from engine.errors import CatalogError
from engine.files import labelled_csv_rows

CROSSVAL_FILE = "time_crossval.csv"


@dataclass(frozen=True, slots=True)
class StoredRow:
    """One compared row: its figure as published (``metric``), the in-sample and LOSO predictions and their errors."""

    id: str
    source: str
    group: str
    metric: str
    measured: float
    in_sample: float
    loso: float
    refit: str

    @property
    def multi_gpu(self) -> bool:
        return self.group == "multi_gpu"

    @property
    def loso_error(self) -> float:
        """LOSO predicted / measured - 1."""
        return self.loso / self.measured - 1

    @property
    def in_sample_error(self) -> float:
        """In-sample predicted / measured - 1."""
        return self.in_sample / self.measured - 1


@lru_cache(maxsize=1)
def load_crossval() -> tuple[StoredRow, ...]:
    """Every row of ``data/time_crossval.csv``. Raises CatalogError on an unreadable file or a bad row."""
    out = []
    for label, row in labelled_csv_rows(CROSSVAL_FILE):
        try:
            refit = ", ".join(f"{k[6:]}={row[k]}" for k in row if k.startswith("refit_"))
            out.append(StoredRow(id=row["id"], source=row["source"], group=row["group"], metric=row.get("metric", ""),
                                 measured=float(row["measured"]), in_sample=float(row["in_sample_predicted"]),
                                 loso=float(row["loso_predicted"]), refit=refit))
        except (KeyError, ValueError) as exc:
            raise CatalogError(f"{label}: {exc}") from None
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Rows, median and largest |error|, LOSO and in-sample, over a set of rows."""

    name: str
    rows: int
    loso_median: float
    loso_max: float
    in_sample_median: float
    in_sample_max: float

    def record(self) -> dict[str, object]:
        return {"rows": self.name, "n": self.rows, "LOSO median |error|": f"{self.loso_median:.1%}",
                "LOSO max": f"{self.loso_max:.1%}", "in-sample median (fitted on all)": f"{self.in_sample_median:.1%}",
                "in-sample max": f"{self.in_sample_max:.1%}"}


def accuracy(name: str, rows: list[StoredRow]) -> Accuracy:
    """:class:`Accuracy` of ``rows`` (zeros for none)."""
    if not rows:
        return Accuracy(name, 0, 0.0, 0.0, 0.0, 0.0)
    lo = [abs(r.loso_error) for r in rows]
    ins = [abs(r.in_sample_error) for r in rows]
    return Accuracy(name, len(rows), statistics.median(lo), max(lo), statistics.median(ins), max(ins))


def accuracy_table() -> list[Accuracy]:
    """Per source (alphabetical), then single-GPU, multi-GPU and all rows."""
    rows = list(load_crossval())
    out = [accuracy(s, [r for r in rows if r.source == s]) for s in sorted({r.source for r in rows})]
    out.append(accuracy("all single-GPU rows", [r for r in rows if not r.multi_gpu]))
    out.append(accuracy("all multi-GPU rows", [r for r in rows if r.multi_gpu]))
    out.append(accuracy("all rows", rows))
    return out
