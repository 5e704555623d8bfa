"""A plans CSV that would load silently wrong, or block a session, is refused or noted (issue 25 item 4): a column
given twice (the last one won: micro batch 1 -> 64, 58 times the memory), an unknown column (dropped without a
word), a header without rows ("No saved plans yet"), a NUL byte in a name (kept), more rows than
:data:`engine.plan.csv_checks.MAX_PLAN_ROWS` (20,000 rows took 38 s)."""

from __future__ import annotations

import csv
import io
import time

from engine.plan.plans import Plan, evaluate_plan, plans_from_csv, plans_to_csv


def _csv(n: int = 1) -> str:
    plans = [Plan(name=f"p{i}", model_repo_id="meta-llama/Llama-3.2-1B", method="lora", seq_len=512,
                  gpu="NVIDIA A100 80GB", dataset_total_tokens=1_000_000) for i in range(n)]
    return plans_to_csv([(p, evaluate_plan(p)) for p in plans], version="0.1.0",
                        exported_at="2026-01-01T00:00:00Z").decode()


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _write(rows: list[list[str]]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode()


def test_a_duplicated_column_is_refused_naming_it():
    rows = _rows(_csv())
    rows[0].append("micro_batch_size")
    rows[1].append("64")
    result = plans_from_csv(_write(rows))
    assert result.plans == ()
    assert result.file_error.startswith("a column appears more than once ('micro_batch_size' is columns 7, ")
    assert "keep one column of each name" in result.file_error


def test_an_unknown_column_is_noted():
    rows = _rows(_csv())
    rows[0].append("learning_rate")
    rows[1].append("2e-4")
    result = plans_from_csv(_write(rows))
    assert len(result.plans) == 1
    assert "column 'learning_rate' is not a plans-CSV column: ignored" in result.warnings


def test_a_header_only_file_says_so():
    result = plans_from_csv(_csv().splitlines()[0].encode() + b"\n")
    assert result.file_error == "the file has column names but no plan rows: export a plan, or add rows under the header"


def test_a_nul_byte_in_a_name_refuses_the_row():
    rows = _rows(_csv(2))
    rows[1][0] = "p\x000"
    result = plans_from_csv(_write(rows))
    assert [p.name for p, _ in result.plans] == ["p1"]
    assert [(e.row, e.reason.split(" (")[0]) for e in result.errors] == [(1, "holds a NUL character")]


def test_more_rows_than_the_cap_are_refused_at_once():
    from engine.plan.csv_checks import MAX_PLAN_ROWS

    rows = _rows(_csv())
    many = _write([rows[0]] + [rows[1]] * (MAX_PLAN_ROWS + 1))
    start = time.monotonic()
    result = plans_from_csv(many)
    assert time.monotonic() - start < 5  # refused before any row is recomputed (a hang guard, not a speed target)
    assert result.file_error == (f"the file has {MAX_PLAN_ROWS + 1:,} plan rows; at most {MAX_PLAN_ROWS:,} are read "
                                 "(each is recomputed): split it into smaller files")


# --- a layout CSV (the Scale out page's, or `plan` with a layout) is named as such, not "missing required column" ---

LAYOUT_PLAN = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "full", "--tensor-parallel", "2",
               "--num-nodes", "2", "--gpu", "H100 80GB", "--dataset-tokens", "1000000000"]
LAYOUT_WORDS = ("this is a layout CSV (layout 'TP2 PP1 DP8, mb 1, none recompute, DDP' on 16 x 'NVIDIA H100 80GB'), as "
                "the Scale out page's 'Download this layout's plan (CSV)' and `python -m engine plan` with a layout "
                "write it: one parallel layout's results, which no plan can hold")


def test_a_layout_csv_written_by_plan_is_refused_as_a_layout_csv(capsys, tmp_path):
    from engine.cli import main

    assert main(LAYOUT_PLAN) == 0
    data = capsys.readouterr().out.encode()
    imported = plans_from_csv(data)
    assert imported.plans == () and imported.file_error.startswith(LAYOUT_WORDS), imported.file_error
    assert "missing required column" not in imported.file_error
    assert "Reopen the layout on the Scale out page" in imported.file_error
    path = tmp_path / "layout.csv"
    path.write_bytes(data)
    assert main(["plan", "--input", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: {LAYOUT_WORDS}"), err


def test_a_plans_csv_with_a_column_named_layout_still_loads():
    rows = _rows(_csv())
    imported = plans_from_csv(_write([[*rows[0], "layout"], [*rows[1], "TP2 PP1 DP8"]]))
    assert [p.name for p, _ in imported.plans] == ["p0"] and imported.file_error is None
    assert "column 'layout' is not a plans-CSV column: ignored" in imported.warnings
