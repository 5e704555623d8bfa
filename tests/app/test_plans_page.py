"""AppTest tests of the Plans page (pages/plans.py) and of sharing a scenario as a URL (ui/share.py), in both modes of
tests/conftest.py's ``new_app``."""

from __future__ import annotations

import ast
import csv
import io
import json

import pytest
from streamlit.testing.v1 import AppTest

from engine.plan.plans import Plan, evaluate_plan, plans_to_csv
from engine.scenario.training import Method
from engine.model.sources import config_from_catalog
from hubstub import StubRepo
from ui.formats import md_plain
from apptest_support import no_exception, open_link, warnings_shown

PAGE = "pages/plans.py"
QWEN_05B = "Qwen/Qwen2.5-0.5B"
TOKEN = "hf_PlansPageSecretToken_NeverShare_9"


def peak_bytes(at: AppTest) -> int:
    help_text = next(m.help for m in at.metric if m.label == "Peak memory")
    return int(help_text.removesuffix(" bytes").replace(",", ""))


@pytest.fixture
def page(new_app) -> AppTest:
    return open_link(new_app(), PAGE, {"model": QWEN_05B})


def test_plans_page_starts_empty_then_saves_and_compares(page):
    assert any("No saved plans yet" in i.value for i in page.info)
    page.text_input(key="plan_name").input("first").run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    page.radio(key="method").set_value(Method.LORA).run()
    page.text_input(key="plan_name").input("second").run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    plans = page.session_state["saved_plans"]
    assert [p.name for p, _ in plans] == ["first", "second"]
    assert [p.method.value for p, _ in plans] == ["full", "lora"]
    assert len(page.get("plotly_chart")) == 2
    memory = json.loads(page.get("plotly_chart")[0].proto.spec)
    assert {t["name"] for t in memory["data"]} >= {"weights", "activations"}
    labels = [b.proto.label for b in page.get("download_button")]
    # Two CSVs, then the chosen plan ("first": full fine-tuning on one GPU) as config files that re-import to it.
    assert labels == ["Download all plans (CSV)", "Download this plan (CSV)", "sft_config.yaml", "axolotl.yaml",
                      "llamafactory.yaml"]
    code = page.code[0].value
    ast.parse(code)
    assert "TrainingArguments(" in code


def test_plan_names_are_shown_as_typed_and_long_ones_do_not_run_into_the_legend(page):
    name = "<b>bold</b> & **not bold** — a plan name far longer than any axis label should be"
    page.text_input(key="plan_name").input(name).run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    assert [s.value for s in page.success] == [r"Saved plan '\<b\>bold\</b\> \& \*\*not bold\*\* — a plan name far "
                                               r"longer than any axis label should be'."]
    for chart in page.get("plotly_chart"):
        fig = json.loads(chart.proto.spec)
        bars = [t for t in fig["data"] if t["type"] == "bar"]
        assert bars[0]["orientation"] == "h"  # names on the y axis, horizontal: none slanted, none overlapping
        tick = bars[0]["y"][0]
        assert tick == "&lt;b&gt;bold&lt;/b&gt; &amp; **not bold** …"  # 28 characters, escaped: shown, not applied
        assert bars[0]["customdata"][0] == "&lt;b&gt;bold&lt;/b&gt; &amp; **not bold** — a plan name far longer than " \
            "any axis label should be"  # the whole name on hover
        # the legend at the figure's top, above the plot and any subplot title
        legend = fig["layout"]["legend"]
        assert legend.get("yref") == "container" and legend["y"] == 1 and legend["yanchor"] == "top"
        assert fig["layout"]["margin"]["t"] >= 90


def exported_file() -> bytes:
    plans = [Plan(name=n, model_repo_id=QWEN_05B, method=m, gpu="NVIDIA A100 80GB", dataset_total_tokens=1_000_000)
             for n, m in (("a", "full"), ("b", "qlora"))]
    return plans_to_csv([(p, evaluate_plan(p)) for p in plans], version="0.1.0", exported_at="2026-01-01T00:00:00Z")


def test_import_loads_good_rows_lists_bad_ones_and_round_trips(page):
    data = exported_file()
    rows = list(csv.reader(io.StringIO(data.decode())))
    bad = list(rows[1])
    bad[0], bad[rows[0].index("gpu")] = "c", "Voodoo 5 6000"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([*rows, bad])
    page.file_uploader(key="plans_import").set_value(("plans.csv", buf.getvalue().encode(), "text/csv")).run()
    no_exception(page)
    assert [p.name for p, _ in page.session_state["saved_plans"]] == ["a", "b"]
    assert any("row 3: unknown GPU 'Voodoo 5 6000'" in e.value for e in page.error)
    # the file's stamp is kept, so re-exporting the imported plans gives the file back
    stamp = page.session_state["saved_plans_stamp"]
    assert plans_to_csv(page.session_state["saved_plans"], version=stamp[0], exported_at=stamp[1]) == data


def test_shared_url_reproduces_the_memory_totals(new_app):
    at = new_app().run()
    no_exception(at)
    at.selectbox(key="catalog_repo").set_value(QWEN_05B).run()
    at.radio(key="method").set_value(Method.QLORA).run()
    at.number_input(key="micro_batch_size").set_value(4).run()
    at.number_input(key="lora_r").set_value(64).run()
    at.toggle(key="gradient_checkpointing").set_value(True).run()
    next(m for m in at.multiselect if (m.key or "").startswith("lora_targets_")).set_value(
        ["q_proj", "v_proj", "down_proj"]).run()
    no_exception(at)
    peak, params = peak_bytes(at), dict(at.query_params)
    assert params["model"] == QWEN_05B and params["method"] == "qlora" and params["lora_r"] == "64"
    assert params["lora_targets"] == "q_proj,v_proj,down_proj"

    fresh = new_app()
    for k, v in params.items():
        fresh.query_params[k] = v
    fresh.run()
    no_exception(fresh)
    assert fresh.warning.values == [] or not any("ignored" in w for w in fresh.warning.values)
    assert fresh.selectbox(key="catalog_repo").value == QWEN_05B
    assert peak_bytes(fresh) == peak
    assert dict(fresh.query_params) == params


def test_bad_url_values_are_ignored_with_a_warning(new_app):
    at = new_app()
    for k, v in {"method": "bitfit", "micro_batch_size": "-2", "seq_len": "abc", "model": "acme/nope",
                 "lora_targets": "nonexistent_proj", "precision": "bf16"}.items():
        at.query_params[k] = v
    at.run()
    no_exception(at)
    text = " ".join(warnings_shown(at))
    for needle in ("method='bitfit'", "micro_batch_size='-2'", "seq_len='abc'", "model='acme/nope'"):
        assert needle in text
    assert at.selectbox(key="precision").value.value == "bf16"  # the good value is kept
    assert at.number_input(key="micro_batch_size").value == 1


def test_token_never_in_url_or_exported_plans(new_app, hub_stub):
    repo = "acme/gated-qwen"
    hub_stub.valid_tokens.add(TOKEN)
    hub_stub.add(repo, StubRepo(config=config_from_catalog(QWEN_05B)[0], gated=True))
    at = new_app()
    at.query_params["hub"] = repo
    at.switch_page(PAGE).run()
    no_exception(at)
    at.text_input(key="hf_token_input").input(TOKEN).run()
    no_exception(at)
    at.button(key="plan_save").click().run()
    no_exception(at)
    plans = at.session_state["saved_plans"]
    assert plans[0][0].model_repo_id == repo
    assert TOKEN not in json.dumps(dict(at.query_params))
    assert dict(at.query_params)["hub"] == repo
    assert TOKEN.encode() not in plans_to_csv(plans)


def test_time_cost_page_offers_the_curves_as_csv(new_app):
    at = open_link(new_app(), "pages/time_cost.py", {"model": QWEN_05B})
    labels = []
    for view in ("dataset", "plans"):  # one section at a time (ui.views): the curves' and the plans' sections
        at.radio(key="tc_view").set_value(view).run()
        no_exception(at)
        labels += [b.proto.label for b in at.get("download_button")]
    assert "Download the curves (CSV)" in labels and "Download the plans (CSV)" in labels


def test_saving_under_an_existing_name_never_replaces_a_plan_silently(page):
    # issue 16 item 9: the default name is made unique; a typed existing name needs the explicit "Replace" choice.
    page.button(key="plan_save").click().run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    names = [p.name for p, _ in page.session_state["saved_plans"]]
    assert len(names) == 2 and names[1] == names[0] + " (2)"
    page.radio(key="method").set_value(Method.LORA).run()
    page.text_input(key="plan_name").input(names[0]).run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    # The name is escaped for Markdown (ui.formats.md_plain): the browser shows it as typed.
    assert any(f"A plan named '{md_plain(names[0])}' is already saved" in w.value for w in page.warning)
    assert [p.method.value for p, _ in page.session_state["saved_plans"]] == ["full", "full"]  # nothing replaced
    page.checkbox(key="plan_overwrite").check().run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    plans = page.session_state["saved_plans"]
    # replaced in place in the library (oldest first by creation), now the LoRA scenario
    assert [p.name for p, _ in plans] == names and plans[0][0].method.value == "lora"
    assert any(f"Replaced plan '{md_plain(names[0])}'" in s.value for s in page.success)


def test_import_of_a_file_missing_required_columns_is_one_error(page):
    data = exported_file()
    rows = list(csv.reader(io.StringIO(data.decode())))
    keep = [i for i, h in enumerate(rows[0]) if h not in ("method", "seq_len")]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[r[i] for i in keep] for r in rows])
    page.file_uploader(key="plans_import").set_value(("plans.csv", buf.getvalue().encode(), "text/csv")).run()
    no_exception(page)
    errs = [e.value for e in page.error]
    assert len(errs) == 1 and md_plain("The file was not loaded: missing required columns 'method', 'seq_len'") in errs[0]
    assert "saved_plans" not in page.session_state or page.session_state["saved_plans"] == []


def test_the_snippet_heading_says_what_the_snippet_reproduces(page):
    # The heading was the same for every plan ("Ready-to-run starting point (TrainingArguments, LoraConfig,
    # BitsAndBytesConfig, DeepSpeed ZeRO-3)"), naming DeepSpeed for a one-GPU plan that has none.
    page.radio(key="method").set_value(Method.QLORA).run()
    page.text_input(key="plan_name").input("qlora *one* GPU").run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    heading = next(m.value for m in page.markdown if "Trainer script" in m.value)
    assert heading == ("**Hugging Face Trainer script: bitsandbytes BitsAndBytesConfig \\(4\\-bit NF4\\), PEFT LoraConfig, "
                       "transformers TrainingArguments** for plan 'qlora \\*one\\* GPU': a starting point to copy, not "
                       "a full script")
    assert "DeepSpeed" not in heading and "BitsAndBytesConfig(" in page.code[0].value


def test_chart_labels_after_an_import_read_as_the_names_listed(page):
    # Fresh user's browser test (17_chart_labels_after_import.png): imported copies were listed as "... (2)" but the
    # axes read "... (3)" / "(4)" (the tick's position), so no label matched its plan.
    names = ["**bold** <script>x</script>", '=HYPERLINK("http://x")']
    for name in names:
        page.text_input(key="plan_name").input(name).run()
        page.button(key="plan_save").click().run()
        no_exception(page)
    # the same names, other plans (QLoRA): saved as numbered copies (the same plans would be skipped)
    others = [p.model_copy(update={"method": Method.QLORA}) for p, _ in page.session_state["saved_plans"]]
    data = plans_to_csv([(p, evaluate_plan(p)) for p in others], version="0.1.0", exported_at="2026-01-01T00:00:00Z")
    page.file_uploader(key="plans_import").set_value(("plans.csv", data, "text/csv")).run()
    no_exception(page)
    listed = [p.name for p, _ in page.session_state["saved_plans"]]
    assert listed == [*names, "**bold** <script>x</script> (2)", '=HYPERLINK("http://x") (2)']
    for chart in page.get("plotly_chart"):
        bars = [t for t in json.loads(chart.proto.spec)["data"] if t["type"] == "bar"]
        # escaped (shown, not applied); the 31-character copy cut to 28 with its " (2)" kept whole
        assert bars[0]["y"] == ["**bold** &lt;script&gt;x&lt;/script&gt;", '=HYPERLINK("http://x")',
                                "**bold** &lt;script&gt;x&lt;/scr… (2)", '=HYPERLINK("http://x") (2)']


def test_long_names_that_cut_the_same_are_shown_whole():
    from ui.plans import time_cost_compare_figure

    names = ["a plan name far longer than an axis label, run one", "a plan name far longer than an axis label, run two",
             "short"]
    plans = [Plan(name=n, model_repo_id=QWEN_05B, method="lora", gpu="NVIDIA A100 80GB", dataset_total_tokens=1_000_000)
             for n in names]
    fig = time_cost_compare_figure([(p, evaluate_plan(p)) for p in plans])
    assert list(fig.data[0].y) == [*names[:2], "short"]  # cut to 28 both read "a plan name far longer than…"


def test_the_compare_table_charts_and_summary_carry_the_80_percent_band(page):
    # Every time and cost of a saved plan carries the band of its tokens/s (engine.time.band): x / high .. x / low,
    # in the compare table's low / high columns, as error bars on the time and cost bars, and in the save line.
    from engine.time.band import band_for
    from ui.formats import fmt_hours
    from apptest_support import column_config, shown, table

    page.selectbox(key="tc_price_source").set_value("seed chapter (approx.)").run()  # lists on-demand and spot prices
    page.selectbox(key="gpu").set_value("NVIDIA A100 40GB").run()
    page.text_input(key="plan_name").input("banded").run()
    page.button(key="plan_save").click().run()
    no_exception(page)
    (plan, _), = page.session_state["saved_plans"]
    result = evaluate_plan(plan)  # the engine's own result of the saved plan, recomputed here
    bands = [band_for(plan.num_gpus, hf) for hf in (True, False)]
    assert any(result.hours / b.high == pytest.approx(result.band["hours_low"]) for b in bands)
    frame = table(page, "train_hours_low")
    row = frame.value.iloc[0]
    for point, key in (("train_hours", "hours"), ("cost_on_demand_usd", "cost_usd_on_demand"),
                       ("cost_spot_usd", "cost_usd_spot"), ("tokens_per_second", "tokens_per_second")):
        assert row[f"{point}_low"] == pytest.approx(result.band[f"{key}_low"])
        assert row[f"{point}_high"] == pytest.approx(result.band[f"{key}_high"])
        assert row[f"{point}_low"] < row[point] < row[f"{point}_high"]
    assert column_config(frame)["cost_spot_usd_high"]["label"] == "cost spot high (USD)"
    fig = json.loads(page.get("plotly_chart")[1].proto.spec)
    bars = {t["name"]: t for t in fig["data"]}
    for name, point, key in (("hours", result.hours, "hours"), ("on demand", result.cost_usd_on_demand, "cost_usd_on_demand"),
                             ("spot", result.cost_usd_spot, "cost_usd_spot")):
        err = bars[name]["error_x"]
        assert point + err["array"][0] == pytest.approx(result.band[f"{key}_high"])
        assert point - err["arrayminus"][0] == pytest.approx(result.band[f"{key}_low"])
    summary = shown(next(c.value for c in page.caption if "80% band in brackets" in c.value))
    assert f"({fmt_hours(result.band['hours_low'])}–{fmt_hours(result.band['hours_high'])})" in summary
    assert f"(${result.band['cost_usd_spot_low']:,.2f}–${result.band['cost_usd_spot_high']:,.2f}) spot" in summary
