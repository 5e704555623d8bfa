"""issue 16 items 8-13 in the engine: plans CSV integrity (required / optional columns, one message per file,
formula injection neutralised with an exact round trip, unique names) and what truncation and packing do to the
token count. The bad-input rows of the CLI and the app are in tests/app/test_bad_inputs.py."""

from __future__ import annotations

import csv
import io

import pytest

from engine.csv_cells import FORMULA_TRIGGERS, neutralize, restore
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.plan.cost import Dataset, estimate_plan
from engine.plan.plans import Plan, evaluate_plan, plans_from_csv, plans_to_csv, unique_plan_name
from engine.scenario.training import Scenario

QWEN_05B = "Qwen/Qwen2.5-0.5B"
STAMP = {"version": "0.1.0", "exported_at": "2026-01-01T00:00:00Z"}


def plan(name: str, **fields) -> Plan:
    return Plan(**{"name": name, "model_repo_id": QWEN_05B, "gpu": "NVIDIA A100 80GB", "dataset_total_tokens": 1_000_000,
                   **fields})


def export(*plans: Plan) -> bytes:
    return plans_to_csv([(p, evaluate_plan(p)) for p in plans], **STAMP)


def drop_columns(data: bytes, *names: str) -> bytes:
    rows = list(csv.reader(io.StringIO(data.decode())))
    keep = [i for i, h in enumerate(rows[0]) if h not in names]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[r[i] for i in keep] for r in rows])
    return buf.getvalue().encode()


# --- item 8: required columns refuse the file, optional ones warn -----------------------------------------------------


def test_a_qlora_plan_without_method_and_seq_len_is_refused_not_loaded_as_full_fine_tuning():
    data = drop_columns(export(*(plan(f"q{i}", method="qlora", seq_len=512) for i in range(3))), "method", "seq_len")
    imported = plans_from_csv(data)
    assert imported.plans == ()
    assert imported.file_error.startswith("missing required columns 'method', 'seq_len'")
    assert len(imported.errors) == 1  # item 13: once for the file


def test_optional_columns_missing_load_with_a_warning_naming_each_default():
    data = drop_columns(export(plan("a", method="lora")), "optimizer", "lora_r", "precision")
    imported = plans_from_csv(data)
    assert not imported.errors and len(imported.plans) == 1
    text = " | ".join(imported.warnings)
    assert "column 'optimizer' is missing: every plan uses its default, 'adamw_fused'" in text
    assert "column 'lora_r' is missing: every plan uses its default, '16'" in text
    assert "column 'precision' is missing: every plan uses its default, the method's usual precision" in text
    assert imported.plans[0][0].precision.value == "bf16"  # LoRA's default


# --- item 13: file-level errors once ----------------------------------------------------------------------------------


def test_a_file_that_is_not_utf8_is_one_message_not_one_per_row():
    data = export(*(plan(f"plan é {i}") for i in range(50))).decode().encode("latin-1")
    imported = plans_from_csv(data)
    assert [e.row for e in imported.errors] == [0]
    assert "not UTF-8 text" in imported.file_error


def test_one_bad_row_in_a_utf8_file_is_still_that_row():
    lines = export(plan("a"), plan("b")).split(b"\n")
    lines[1] = lines[1].replace(b"a,", b"a \xff,", 1)
    imported = plans_from_csv(b"\n".join(lines))
    assert [p.name for p, _ in imported.plans] == ["b"] and [(e.row, e.reason) for e in imported.errors] == [(1, "not UTF-8 text")]


# --- item 11: formula injection --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["=1+1", "+SUM(A1)", "-2+3", "@cmd", "\tx", "'quoted", "=HYPERLINK(\"http://x\")"])
def test_formula_cells_are_neutralised_and_the_round_trip_is_exact(name):
    data = export(plan(name), plan("plain"))
    row = next(csv.DictReader(io.StringIO(data.decode(), newline="")))
    assert row["name"] == "'" + name  # a leading quote: the spreadsheet shows text
    assert not any(v.startswith(FORMULA_TRIGGERS) for r in csv.reader(io.StringIO(data.decode(), newline="")) for v in r
                   if not v.lstrip("-").replace(".", "", 1).replace("e", "", 1).replace("-", "", 1).isdigit())
    back = plans_from_csv(data)
    assert not back.errors and [p.name for p, _ in back.plans] == [name, "plain"]
    assert plans_to_csv(back.plans, version=back.app_version, exported_at=back.exported_at) == data


def test_a_plan_name_with_a_line_break_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="must be one line"):
        plan("\rx")


def test_neutralize_and_restore_are_inverse_and_leave_numbers_alone():
    for text in ["", "a", "=", "'", "''=", "-", "a=b", "\r\n"]:
        assert restore(neutralize(text)) == text
    assert neutralize(-3) == -3 and neutralize(2.5) == 2.5


def test_every_csv_download_of_the_pages_neutralises_text_cells():
    import pandas as pd

    from ui.downloads import csv_bytes

    frame = pd.DataFrame({"row": ["=cmd|' /C calc'!A0", "ok"], "headroom_bytes": [-5, 7]})
    rows = list(csv.reader(io.StringIO(csv_bytes(frame).decode())))
    assert rows[1] == ["'=cmd|' /C calc'!A0", "-5"] and rows[2] == ["ok", "7"]
    assert csv_bytes(pd.DataFrame({"a": ["\rx"]})).decode() == "a\n\"'\rx\"\n"  # quoted: CR stays in its cell


def test_csv_downloads_write_booleans_as_the_plans_csv_does_and_quote_only_where_needed():
    # The downloads wrote Python's True / False and quoted every text cell; they now write as the plans CSV does
    # (engine.csv_cells.csv_text): true / false, a cell quoted only for a comma, a quote or a line break (a CR in the
    # middle of a cell too, which Python 3.11's csv writer leaves bare), a missing number empty.
    import pandas as pd

    from engine.plan.layout_cost import layout_plans_csv
    from ui.downloads import csv_bytes, records_csv

    frame = pd.DataFrame({"name": ["plain", "a, b", 'say "hi"', "x\ry", "=1+1"], "fits": [True, False, True, False, True],
                          "gb": [1.5, float("nan"), 2.0, 3.25, 4.0], "n": [1, 2, 3, 4, 5]})
    text = csv_bytes(frame).decode()
    assert text == ('name,fits,gb,n\nplain,true,1.5,1\n"a, b",false,,2\n"say ""hi""",true,2.0,3\n"x\ry",false,3.25,4\n'
                    "'=1+1,true,4.0,5\n")
    assert list(csv.reader(io.StringIO(text, newline="")))[4] == ["x\ry", "false", "3.25", "4"]
    records = frame.to_dict("records")
    assert records_csv(records) == csv_bytes(frame) and records_csv([]) == b""
    assert layout_plans_csv([{"layout": "TP1", "fits": True, "note": None}]) == b"layout,fits,note\nTP1,true,\n"


def test_the_plans_csv_and_the_downloads_share_one_cell_rule():
    # engine.csv_cells.cell_value is the one rule: booleans as true/false, an enum as its value, NaN and None empty,
    # text neutralised (OWASP CSV injection); the plans CSV adds only its own two cases (target modules joined by
    # commas, infinity empty) and leaves quoting to csv.writer, cell_text quotes where a reader needs it.
    from engine.csv_cells import cell_text, cell_value
    from engine.plan.plans import _cell
    from engine.scenario.training import Method

    for value, text in [(True, "true"), (False, "false"), (Method.QLORA, "qlora"), (None, ""), (float("nan"), ""),
                        ("=1+1", "'=1+1"), ("a, b", "a, b"), (3, "3"), (2.5, "2.5")]:
        assert cell_value(value) == text and _cell(value) == text
    assert cell_text("a, b") == '"a, b"' and cell_text(True) == "true"
    assert _cell(("q_proj", "v_proj")) == "q_proj,v_proj" and _cell(float("inf")) == ""
    assert cell_text(float("inf")) == "inf"


# --- item 9: never lose a plan silently -----------------------------------------------------------------------------


def test_unique_plan_names():
    assert unique_plan_name("a", []) == "a"
    assert unique_plan_name("a", ["a"]) == "a (2)"
    assert unique_plan_name("a", ["a", "a (2)", "a (3)"]) == "a (4)"


# --- item 12: truncation and packing ---------------------------------------------------------------------------------


def test_long_examples_are_truncated_and_the_estimate_says_so():
    # 10,000 examples x 4,000 tokens at a 512-token sequence: 40M tokens of data, 5.12M processed per epoch (each
    # example cut to 512), 34.88M (87%) never trained on: the same 5.12M as 1,000-token examples, but now said.
    long = Dataset(examples=10_000, avg_tokens=4_000)
    assert long.tokens_per_epoch(512) == 5_120_000 and long.dataset_tokens == 40_000_000
    assert long.truncated_tokens(512) == 34_880_000
    (note,) = long.token_notes(512)
    assert "40.00M tokens of data give 5.12M tokens per epoch; 34.88M (87%) are never trained on" in note
    assert Dataset(examples=10_000, avg_tokens=1_000).token_notes(512)[0].endswith("to use them")
    assert Dataset(examples=10_000, avg_tokens=400).token_notes(512) == ()  # packed, nothing cut
    padded = Dataset(examples=10_000, avg_tokens=400, packing=False)
    assert "padded to 512 tokens" in padded.token_notes(512)[0] and padded.tokens_per_epoch(512) == 5_120_000
    arch = architecture_from_config(config_from_catalog(QWEN_05B)[0])
    pe = estimate_plan(arch, Scenario.build(seq_len=512), long, find_gpu("A100 80GB"))
    assert pe.run.tokens == 5_120_000 and any("never trained on" in n for n in pe.notes)
