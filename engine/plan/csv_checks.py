"""Checks of a plans CSV's header and size made before any row is read (:func:`engine.plan.plans.plans_from_csv`):
a file that would load silently wrong, or block a session, is refused with one reason."""

from __future__ import annotations

from engine.csv_cells import restore

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


def layout_csv_problem(header: list[str], first_row: list[str]) -> str | None:
    """Why a file is refused when it is a layout CSV, or None: the Scale out page's "Download this layout's plan
    (CSV)" (:meth:`engine.plan.layout_cost.LayoutRun.record`, its first column ``layout``) or ``python -m engine plan``
    with a layout (:mod:`engine.cli.plan_layout`, the same columns after the model's and the scenario's). Such a row is
    one parallel layout's results; a plan is a GPU count and a ZeRO / FSDP strategy (no tensor or pipeline
    parallelism), so no plan can hold it, and the message says so, names the file's layout and where it opens.
    Checked only for a file that lacks a plan's required columns (a plans CSV has no ``layout`` column)."""
    if "layout" not in header:
        return None
    row = dict(zip(header, first_row)) if len(first_row) == len(header) else {}
    label, gpu, count = (restore(row.get(k, "")).strip() for k in ("layout", "gpu", "num_gpus"))
    what = f"layout {shown_cell(label, 80)}" if label else "a parallel layout"
    where = f" on {count if count.isdigit() else shown_cell(count, 8)} x {shown_cell(gpu)}" if gpu and count else ""
    return (f"this is a layout CSV ({what}{where}), as the Scale out page's 'Download this layout's plan (CSV)' and "
            "`python -m engine plan` with a layout write it: one parallel layout's results, which no plan can hold (a "
            "plan is a GPU count with a ZeRO / FSDP strategy, no tensor or pipeline parallelism). Reopen the layout on "
            "the Scale out page (its link carries every input) or with `python -m engine estimate` and the same layout "
            "options; plans load from a plans CSV (the Plans page's 'Download all plans (CSV)' or 'Download this plan "
            "(CSV)', or `python -m engine plan` without a layout)")
