"""Plan names in the shared library cannot pass for another plan's (issue 25: nothing a visitor types can mislead
another visitor; engine/plan/plan_names.py): a new name with a bidirectional override, a zero-width or control
character is refused saying which character; a name that differs from a saved one only in letter case, spacing or
character forms (a no-break space, full-width letters) is refused by the store, and an import saves it under a
numbered name instead; a plan already stored with such a name is still listed. Against real databases (SQLite file,
PostgreSQL when configured: tests/databases.py), as tests/app/test_plan_store.py."""

from __future__ import annotations

import csv
import io
import json

import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from databases import database_url  # noqa: F401 - the fixture
from engine.plan.plan_names import name_problem, plan_name_key
from engine.plan.plans import Plan, plans_from_csv, plans_to_csv, unique_plan_name
from ui.plan_store import PlanExists, PlanStore

QWEN_05B = "Qwen/Qwen2.5-0.5B"


def plan(name: str) -> Plan:
    return Plan(name=name, model_repo_id=QWEN_05B, gpu="NVIDIA A100 80GB", dataset_total_tokens=1_000_000)


@pytest.mark.parametrize("name, code", [
    ("Llama 8B \u202eBOL", "U+202E RIGHT-TO-LEFT OVERRIDE"),   # shows as "Llama 8B LOB"
    ("Llama\u200b 8B", "U+200B ZERO WIDTH SPACE"),
    ("Llama 8B\u2066", "U+2066 LEFT-TO-RIGHT ISOLATE"),
    ("\ufeffLlama 8B", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ("Llama\x00 8B", "U+0000 NUL"),
    ("Llama\x1b[2J 8B", "U+001B ESCAPE"),  # a terminal escape, for whoever prints the CLI's CSV
    ("Llama\u2028 8B", "U+2028 LINE SEPARATOR"),
])
def test_a_name_with_an_invisible_or_control_character_is_refused_naming_it(name, code):
    with pytest.raises(ValidationError) as info:
        plan(name)
    assert code in str(info.value)


@pytest.mark.parametrize("name", ["   ", ""])
def test_a_blank_name_is_refused(name):
    with pytest.raises(ValidationError):
        plan(name)


def test_ordinary_names_pass():
    for name in ("Llama 8B LoRA 2x A100", "Qwen 7B — QLoRA (ünïcödé)", "計画 A", "=1+2 is neutralised on export"):
        assert name_problem(name) is None and plan(name).name == name


def test_lookalike_names_have_one_key():
    names = ["Plan A", "plan a", " Plan  A ", "Plan\tA", "Plan\u00a0A", "\uff30\uff4c\uff41\uff4e \uff21"]  # NBSP, full width
    assert len({plan_name_key(n) for n in names}) == 1
    assert plan_name_key("Plan B") != plan_name_key("Plan A")
    assert unique_plan_name("plan a", ["Plan A"]) == "plan a (2)"
    assert unique_plan_name("Plan A (2)", ["Plan A", "plan a (2)"]) == "Plan A (2) (2)"


def test_the_store_refuses_a_lookalike_and_an_import_numbers_it(database_url):
    store = PlanStore(sa.create_engine(database_url))
    store.create(plan("Plan A"))
    for lookalike in ("plan a", " Plan  A", "Plan\u00a0A"):
        with pytest.raises(PlanExists, match="differs from .* only in letter case, spacing or character forms"):
            store.create(plan(lookalike))
    saved = store.create_unique(plan("PLAN A"))  # the import path: saved under a name that reads differently
    assert saved.plan.name == "PLAN A (2)"
    assert [p.plan.name for p in store.plans()] == ["Plan A", "PLAN A (2)"]


def test_rename_to_a_lookalike_is_refused_but_a_case_change_of_itself_is_not(database_url):
    store = PlanStore(sa.create_engine(database_url))
    store.create(plan("Plan A"))
    b = store.create(plan("Plan B"))
    with pytest.raises(PlanExists):
        store.rename("Plan B", "plan a", b.version)
    store.rename("Plan B", "plan b", b.version)
    assert sorted(p.plan.name for p in store.plans()) == ["Plan A", "plan b"]


def test_a_plan_stored_before_the_rule_is_still_listed(database_url):
    store = PlanStore(sa.create_engine(database_url))
    store.create(plan("placeholder"))
    with store.engine.begin() as conn:  # a row written by an older version, whose names had no such rule
        record = json.loads(conn.execute(sa.text("SELECT record FROM plans")).scalar_one())
        record["name"] = "old\u200bname"
        conn.execute(sa.text("UPDATE plans SET name = :n, record = :r"), {"n": "old\u200bname", "r": json.dumps(record)})
    assert [p.plan.name for p in store.plans()] == ["old\u200bname"]


def test_a_csv_row_with_a_bidi_override_is_refused_with_its_row_number():
    text = _exported_csv(plan("Plan A"))
    rows = list(csv.reader(io.StringIO(text)))
    rows[1][rows[0].index("name")] = "Plan \u202eA"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    imported = plans_from_csv(out.getvalue().encode())
    assert not imported.plans and len(imported.errors) == 1
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in str(imported.errors[0])


def _exported_csv(p: Plan) -> str:
    from engine.model.sources import config_from_catalog
    from engine.plan.plans import evaluate_plan

    return plans_to_csv([(p, evaluate_plan(p, config_from_catalog(QWEN_05B)[0]))]).decode("utf-8")


TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


def test_a_token_in_a_csv_cell_is_not_quoted_back_in_the_row_error():
    # Before: "name: looks like a Hugging Face token ... (got 'my hf_AbCd... plan')": the Plans page showed the token.
    text = _exported_csv(plan("Plan A"))
    rows = list(csv.reader(io.StringIO(text)))
    rows[1][rows[0].index("name")] = f"my {TOKEN} plan"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    imported = plans_from_csv(out.getvalue().encode())
    assert len(imported.errors) == 1 and "looks like a Hugging Face token" in imported.errors[0].reason
    assert TOKEN not in imported.errors[0].reason and "hf_AbCd" not in imported.errors[0].reason


def test_the_plans_page_does_not_show_the_token_of_a_refused_row(new_app):
    from apptest_support import no_exception, rendered_text, shown

    text = _exported_csv(plan("Plan A"))
    rows = list(csv.reader(io.StringIO(text)))
    rows[1][rows[0].index("model_revision")] = TOKEN
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    at = new_app().switch_page("pages/plans.py").run()
    at.file_uploader(key="plans_import").set_value(("plans.csv", out.getvalue().encode(), "text/csv")).run()
    no_exception(at)
    assert any("looks like a Hugging Face token" in shown(e.value) for e in at.error)
    assert "AbCdEfGhIj" not in rendered_text(at)  # (not "hf_AbCd": md_plain writes the underscore as "\\_")


def test_the_plans_page_refuses_a_lookalike_and_an_invisible_character_in_words(new_app):
    from apptest_support import no_exception, shown, warnings_shown

    at = new_app()
    at.query_params["model"] = QWEN_05B
    at.switch_page("pages/plans.py").run()
    at.text_input(key="plan_name").input("Plan A").run()
    at.button(key="plan_save").click().run()
    at.text_input(key="plan_name").input("plan  a").run()
    at.button(key="plan_save").click().run()
    no_exception(at)
    assert any("differs from 'plan  a' only in letter case, spacing or character forms" in w
               for w in warnings_shown(at)), warnings_shown(at)
    assert [p.name for p, _ in at.session_state["saved_plans"]] == ["Plan A"]
    at.text_input(key="plan_name").input("Plan \u202eB").run()
    no_exception(at)
    assert any("U+202E RIGHT-TO-LEFT OVERRIDE" in shown(e.value) for e in at.error), [e.value for e in at.error]


def test_an_uploaded_file_name_with_an_invisible_character_cannot_name_a_plans_model():
    # The Plans page names an uploaded config's plan "upload:<file name>", as the browser sent the name.
    with pytest.raises(ValidationError, match="U\\+202E"):
        Plan(name="p", model_repo_id="upload:evil\u202enosj.json", gpu="NVIDIA A100 80GB", dataset_total_tokens=10**6)
    with pytest.raises(ValidationError, match="U\\+2028"):
        Plan(name="p", model_repo_id="upload:a\u2028import os.json", gpu="NVIDIA A100 80GB", dataset_total_tokens=10**6)


def test_the_code_snippet_quotes_the_model_as_a_python_string():
    from engine.model.sources import config_from_catalog
    from engine.plan.training_code import training_code

    p = Plan(name="p", model_repo_id="upload:config (1).json", gpu="NVIDIA A100 80GB", dataset_total_tokens=10**6)
    code = training_code(p, config_from_catalog(QWEN_05B)[0])
    assert code.splitlines()[0].startswith("# Plan 'p': 'upload:config (1).json', full")
    compile(code, "<plan>", "exec")


def test_thousands_of_unknown_columns_are_one_warning():
    # Before: 5,000 extra columns were 5,000 warnings (5,000 boxes on the Plans page, 5,000 lines of the CLI).
    text = _exported_csv(plan("Plan A"))
    header, row = text.strip().split("\n")
    extra = [f"col{i}" for i in range(5000)]
    data = f"{header},{','.join(extra)}\n{row},{','.join('1' for _ in extra)}\n".encode()
    imported = plans_from_csv(data)
    assert len(imported.plans) == 1
    unknown = [w for w in imported.warnings if "not plans-CSV columns" in w]
    assert unknown == ["5,000 columns are not plans-CSV columns: ignored ('col0', 'col1', 'col2', 'col3', 'col4', "
                       "'col5', 'col6', 'col7', 'col8', 'col9' and 4,990 more)"]
