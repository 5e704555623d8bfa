"""AppTest tests of the Plans page's actions a fresh user found wanting (ui/plan_actions.py, ui/plans.py): removal in
two steps that name the plan, re-importing an exported file without duplicating the library, rename saying what it
did, comparison charts readable with many plans, and the default plan name's GPU count."""

from __future__ import annotations

import json
import os

import pytest
import sqlalchemy as sa

from apptest_support import no_exception, open_link, warnings_shown, shown
from engine.plan.plans import Plan, evaluate_plan, plans_to_csv
from engine.scenario.training import Method
from ui.plan_store import PlanStore

PAGE = "pages/plans.py"
QWEN_05B = "Qwen/Qwen2.5-0.5B"
pytestmark = pytest.mark.parametrize("new_app", ["served"], indirect=True)  # the page, not the routing


def library() -> PlanStore:
    """The test's library on its own engine, as another replica (tests/conftest.py's _own_plans_database)."""
    return PlanStore(sa.create_engine(os.environ["FINETUNE_FIT_PLANS_URL"]))


def names() -> list[str]:
    return [p.plan.name for p in library().plans()]


def plan(name: str, **extra) -> Plan:
    return Plan(name=name, model_repo_id=QWEN_05B, gpu="NVIDIA A100 80GB", dataset_total_tokens=1_000_000, **extra)


def successes(at) -> list[str]:
    return [shown(s.value) for s in at.success]


def infos(at) -> list[str]:
    return [shown(i.value) for i in at.info]


def buttons(at) -> set[str]:
    return {b.key for b in at.button}


@pytest.fixture
def page(new_app):
    for name, method in (("alpha", Method.FULL), ("beta *b*", Method.LORA), ("gamma", Method.QLORA)):
        library().create(plan(name, method=method))
    return open_link(new_app(), PAGE, {"model": QWEN_05B})


def test_removal_takes_a_confirmation_naming_the_plan_then_nothing_is_chosen(page):
    page.selectbox(key="plans_chosen").set_value("beta *b*").run()
    page.button(key="plans_remove").click().run()
    no_exception(page)
    assert names() == ["alpha", "beta *b*", "gamma"]  # one click removes nothing
    assert "Remove 'beta *b*' from the team library? Every session loses it; this cannot be undone." in warnings_shown(page)
    assert {"plans_remove_confirm", "plans_remove_cancel"} <= buttons(page)
    page.button(key="plans_remove_cancel").click().run()
    assert names() == ["alpha", "beta *b*", "gamma"] and "plans_remove_confirm" not in buttons(page)

    page.button(key="plans_remove").click().run()
    page.button(key="plans_remove_confirm").click().run()
    no_exception(page)
    assert names() == ["alpha", "gamma"]
    assert "Removed 'beta *b*'." in successes(page)
    # nothing chosen in its place: the selector shows its placeholder, no plan's buttons under it to click again
    assert page.selectbox(key="plans_chosen").value is None
    assert not {"plans_remove", "plans_remove_confirm", "plans_rename"} & buttons(page)
    page.run()  # the message is said once
    assert "Removed 'beta *b*'." not in successes(page) and names() == ["alpha", "gamma"]


def test_choosing_another_plan_disarms_the_removal(page):
    page.button(key="plans_remove").click().run()  # armed for "alpha", the first plan
    assert any("Remove 'alpha'" in w for w in warnings_shown(page))
    page.selectbox(key="plans_chosen").set_value("gamma").run()
    no_exception(page)
    assert "plans_remove_confirm" not in buttons(page)
    assert not any("Remove '" in w for w in warnings_shown(page))
    page.selectbox(key="plans_chosen").set_value("alpha").run()
    assert "plans_remove_confirm" not in buttons(page) and names() == ["alpha", "beta *b*", "gamma"]


def test_a_plan_changed_by_someone_else_after_the_first_click_is_not_removed(page):
    page.button(key="plans_remove").click().run()  # armed for "alpha" at version 1
    other = library()
    other.replace(plan("alpha", method=Method.LORA), other.get("alpha").version, author="colleague")
    page.button(key="plans_remove_confirm").click().run()
    no_exception(page)
    assert names() == ["alpha", "beta *b*", "gamma"]
    assert any(w.startswith("Not removed: the plan 'alpha' was changed by colleague") for w in warnings_shown(page))
    assert "plans_remove_confirm" not in buttons(page)  # disarmed: a new removal starts from the first click


def test_rename_says_what_it_did_and_empties_the_box(page):
    page.text_input(key="plans_new_name").input("gamma").run()
    page.button(key="plans_rename").click().run()
    no_exception(page)
    assert any("Not renamed: a plan named 'gamma' is already saved" in w for w in warnings_shown(page))
    assert page.text_input(key="plans_new_name").value == "gamma"  # kept, to correct
    page.text_input(key="plans_new_name").input("alpha <2>").run()
    page.button(key="plans_rename").click().run()
    no_exception(page)
    assert names() == ["alpha <2>", "beta *b*", "gamma"]
    assert "Renamed 'alpha' to 'alpha <2>'." in successes(page)
    assert page.text_input(key="plans_new_name").value == ""
    assert page.selectbox(key="plans_chosen").value == "alpha <2>"
    page.button(key="plans_rename").click().run()  # an empty box: said, not ignored
    assert any("type the new name of 'alpha <2>' in the box first" in w for w in warnings_shown(page))


def _upload(at, data: bytes) -> None:
    at.file_uploader(key="plans_import").set_value(("plans.csv", data, "text/csv")).run()
    no_exception(at)


def test_reimporting_an_exported_file_skips_the_plans_already_there(page):
    exported = plans_to_csv(page.session_state["saved_plans"], version="0.1.0", exported_at="2026-01-01T00:00:00Z")
    _upload(page, exported)
    assert names() == ["alpha", "beta *b*", "gamma"]  # no "(2)" copies
    assert infos(page) == ["Imported 'plans.csv': nothing new; 3 already in the library, skipped."]
    assert "Skipped, the same plan is saved under that name: 'alpha', 'beta *b*', 'gamma'." in [
        shown(c.value) for c in page.caption]

    # a same-name plan with other content is still saved, numbered; the same plans again are still skipped
    changed = [(p, evaluate_plan(p)) for p in (plan("alpha", method=Method.QLORA), plan("delta"))]
    _upload(page, plans_to_csv(changed))
    assert names() == ["alpha", "beta *b*", "gamma", "alpha (2)", "delta"]
    assert successes(page) == ["Imported 'plans.csv': saved 2 plan(s), each recomputed from its inputs; 0 already in "
                               "the library, skipped; 1 renamed."]
    assert "Saved under a new name, as a different plan has the name: 'alpha' as 'alpha (2)'." in infos(page)
    _upload(page, plans_to_csv(changed))  # a second import of that file: its "alpha" is "alpha (2)" now
    assert names() == ["alpha", "beta *b*", "gamma", "alpha (2)", "delta"]
    assert infos(page) == ["Imported 'plans.csv': nothing new; 2 already in the library, skipped."]


def test_the_compare_charts_read_with_many_plans_and_list_only_drawn_series(page):
    store = library()
    for i in range(13):  # 17 plans, some names long, one a numbered copy
        store.create(plan(f"qwen 0.5B LoRA run {i:02d} on a long descriptive name" if i % 3 else f"run {i}",
                          method=Method.LORA, seq_len=256 * (i + 1)))
    store.create_unique(plan("run 0", method=Method.QLORA))  # "run 0 (2)"
    page.run()
    no_exception(page)
    memory, time_cost = (json.loads(c.proto.spec) for c in page.get("plotly_chart"))
    for fig in (memory, time_cost):
        bars = [t for t in fig["data"] if t["type"] == "bar"]
        assert all(b["orientation"] == "h" for b in bars)  # names on the y axis: horizontal, never overlapping
        ticks = bars[0]["y"]
        assert len(ticks) == 17 and "run 0 (2)" in ticks and all(len(t) <= 28 for t in ticks)
        assert fig["layout"]["height"] >= 17 * 24  # a row per plan
        assert fig["layout"]["yaxis"]["autorange"] == "reversed"  # the first plan on top, as in the table
    # the default price source lists no spot price for the A100 80GB: no "spot" series in the legend, and why
    series = [t["name"] for t in time_cost["data"]]
    assert series == ["hours", "on demand"]
    captions = [c.value for c in page.caption]
    assert any(c.startswith("No spot bars: no plan's price source lists a spot price") for c in captions)


def test_the_default_plan_name_writes_the_gpu_count_as_the_app_does(new_app):
    at = open_link(new_app(), PAGE, {"model": QWEN_05B})
    placeholder = at.text_input(key="plan_name").placeholder
    assert " 1 x NVIDIA " in placeholder and "1xNVIDIA" not in placeholder, placeholder
