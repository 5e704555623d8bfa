"""Checks of a plans CSV's header and size made before any row is read (:func:`engine.plan.plans.plans_from_csv`):
a file that would load silently wrong, or block a session, is refused with one reason."""

from __future__ import annotations

MAX_PLAN_ROWS = 1_000
"""The most plan rows a plans CSV may have. Every row is validated and recomputed (about 2 ms each, more for a large
model), so 20,000 rows took 38 s in the CLI and would block an app session as long; a team's plans file holds tens.
A longer file is refused at once, saying so (split it)."""


def shown_cell(text: str, limit: int = 40) -> str:
    """``repr`` of a cell for a message, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def header_problem(header: list[str], data_rows: int) -> str | None:
    """Why a file is refused for its header or size, or None: a column given twice (one value would silently win:
    ``micro_batch_size`` 1 and 64 is 58 times the memory), column names and no plan row, or more than
    :data:`MAX_PLAN_ROWS` rows (``data_rows``: the non-blank rows under the header)."""
    twice = [c for c in dict.fromkeys(header) if c and header.count(c) > 1]
    if twice:
        where = "; ".join(f"{shown_cell(c)} is columns " + ", ".join(str(i + 1) for i, h in enumerate(header) if h == c)
                          for c in twice)
        return (f"a column appears more than once ({where}): a plan would take one of the values without a word; "
                "keep one column of each name")
    if data_rows == 0:
        return "the file has column names but no plan rows: export a plan, or add rows under the header"
    if data_rows > MAX_PLAN_ROWS:
        return (f"the file has {data_rows:,} plan rows; at most {MAX_PLAN_ROWS:,} are read (each is recomputed): "
                "split it into smaller files")
    return None
