"""AppTest tests of the Time & cost page (pages/time_cost.py), in both modes of tests/test_app.py: ``first_request``
(the page file runs directly, as on a fresh server's first request) and ``served`` (streamlit_app.py runs, then the
page)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.validation.throughput import compare_measurements
from engine.scenario.training import Method
from engine.memory.parallel import Offload
from apptest_support import charts, metric, no_exception, shown

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "streamlit_app.py")
PAGE = "pages/time_cost.py"


@pytest.fixture
def page(new_app) -> AppTest:
    at = new_app().switch_page(PAGE).run()
    no_exception(at)
    return at


def show(at: AppTest, view: str) -> AppTest:
    """Pick a section of the page (ui.views.TIME_COST_VIEWS): a rerun draws only the chosen one (issue 26)."""
    return at.radio(key="tc_view").set_value(view).run()


def every_chart(at: AppTest) -> list[dict]:
    """Every section's charts, in the page's order of sections (each drawn alone); the page goes back to its default."""
    figs = [f for view in ("time", "shape", "dataset", "gpus", "plans") for f in charts(show(at, view))]
    show(at, "time")
    return figs


def lora_on_a100_40gb(at: AppTest, gpus: int) -> AppTest:
    """LoRA on ``gpus`` x A100 40GB priced by the seed chapter (the one source with spot prices), no exception."""
    at.radio(key="method").set_value(Method.LORA).run()
    at.selectbox(key="gpu").set_value("NVIDIA A100 40GB").run()
    at.number_input(key="num_gpus").set_value(gpus).run()
    at.selectbox(key="tc_price_source").set_value("seed chapter (approx.)").run()
    no_exception(at)
    return at


def number(text: str) -> float:
    return float(text.replace(",", "").replace("$", "").split()[0])


def hours(text: str) -> float:
    value = number(text)
    return value / 60 if text.endswith("min") else value * 24 if "days" in text else value


def test_page_renders_metrics_all_curves_and_the_comparison(page):
    at = page
    assert [t.value for t in at.title] == ["Training time and cost"]
    for label in ("Tokens to process", "Tokens/s", "Wall time", "GPU-hours", "Cost on-demand", "Cost spot"):
        assert metric(at, label)
    assert metric(at, "Tokens to process") == "15.36M"
    assert next(m.help for m in at.metric if m.label == "Tokens to process").startswith("15,360,000 tokens")  # the seed's 10,000 x 512 tokens x 3 epochs
    # One section at a time (issue 26): where the time goes by default, alone; the others on request
    assert at.radio(key="tc_view").value == "time" and len(charts(at)) == 1 and not at.dataframe
    figs = every_chart(at)
    assert len(figs) == 6  # where the time goes, tokens/s vs shape, time vs dataset, cost vs dataset, vs GPUs, plans
    stack_fig, shape_fig, time_fig, cost_fig, count_fig, plans_fig = figs
    assert {t["name"] for t in stack_fig["data"] if "name" in t} >= {"Matmuls (GEMMs)", "Optimizer step"}
    assert len(stack_fig["data"][0]["x"]) >= 6  # one bar per technique of the Memory page's sweep
    assert len(shape_fig["data"]) >= 3  # one line per micro batch size
    model_line = next(t for t in time_fig["data"] if t["name"].startswith("step-time model"))
    low = next(t for t in time_fig["data"] if t["name"].startswith("80% band"))
    high = next(t for t in time_fig["data"] if t["name"] == "band high")
    # the cross-validated band brackets the line at every dataset size (engine.time.band)
    assert all(lo < h < hi for lo, h, hi in zip(low["y"], model_line["y"], high["y"]))
    lines = [t for t in cost_fig["data"] if t.get("showlegend") is not False]
    assert len(lines) >= 3  # several GPUs
    # each cost line is shaded over its plan's 80% band (data/time_bands.csv, read here with the csv module): the
    # band's edges are cost / high and cost / low of one of the groups at every dataset size
    import csv
    from pathlib import Path

    with open(Path(__file__).resolve().parents[2] / "data" / "time_bands.csv", newline="") as f:
        groups = [(float(r["low"]), float(r["high"])) for r in csv.DictReader(f)]
    for line in lines:
        lo_t, hi_t = (next(t for t in cost_fig["data"] if t["name"] == f"{line['name']} band {end}") for end in ("low", "high"))
        assert any(all(lo == pytest.approx(c / g_hi) and hi == pytest.approx(c / g_lo)
                       for c, lo, hi in zip(line["y"], lo_t["y"], hi_t["y"])) for g_lo, g_hi in groups), line["name"]
    assert {t["name"] for t in count_fig["data"]} >= {"wall time (h)"}
    assert count_fig["layout"]["yaxis2"]["tickprefix"] == "$"  # the cost axis reads in dollars
    hours = next(t for t in count_fig["data"] if t["name"] == "wall time (h)")
    assert all(up > 0 and down > 0 for up, down in zip(hours["error_y"]["array"], hours["error_y"]["arrayminus"]))
    names = {t["name"] for t in plans_fig["data"]}
    assert {"plans that fit", "Pareto front (error bars: 80% band)"} <= names
    # the front's points carry their 80% band: wall time hours / high .. hours / low of one group of the same file
    front = next(t for t in plans_fig["data"] if t["name"].startswith("Pareto front"))
    for x, up, down in zip(front["x"], front["error_x"]["array"], front["error_x"]["arrayminus"]):
        assert any((x + up) == pytest.approx(x / g_lo) and (x - down) == pytest.approx(x / g_hi) for g_lo, g_hi in groups)
    assert all(up > 0 and down > 0 for up, down in zip(front["error_y"]["array"], front["error_y"]["arrayminus"]))
    assert "customdata[0]" in front["hovertemplate"] and len(front["customdata"]) == len(front["x"])
    # the hover writes time and cost as the bullets do (fmt_hours / fmt_usd), each with its band
    from ui.formats import fmt_hours, fmt_usd
    assert front["customdata"][0][0].startswith(fmt_hours(front["x"][0]) + " (")
    assert front["customdata"][0][1].startswith(fmt_usd(front["y"][0]) + " ($")
    rest = next(t for t in plans_fig["data"] if t["name"] == "plans that fit")
    assert not set(zip(front["x"], front["y"])) & set(zip(rest["x"], rest["y"]))  # each plan drawn once
    notes = " ".join(a["text"] for a in plans_fig["layout"].get("annotations", []))
    assert "cheapest" in notes and "fastest" in notes
    table = next(d.value for d in show(at, "measured").dataframe if "measured tokens/s" in d.value.columns)
    assert len(table) == len(compare_measurements()) >= 15 and table["error"].notna().all()
    for view in ("dataset", "gpus"):
        assert [b.proto.label for b in show(at, view).get("download_button")] == ["Download the curves (CSV)"]
    show(at, "plans")
    assert any(d.value is not None and "pareto" in d.value.columns for d in at.dataframe)
    assert [b.proto.label for b in at.get("download_button")] == ["Download the plans (CSV)"]
    text = " ".join(m.value for m in at.markdown)
    assert "**Cheapest**" in text and "**Fastest**" in text and "**Pareto front**" in text
    assert at.selectbox(key="catalog_repo").value == "meta-llama/Llama-3.1-8B"


def test_page_reacts_to_the_method_and_checkpointing(page):
    at = page
    full_tps, full_time = number(metric(at, "Tokens/s")), hours(metric(at, "Wall time"))
    at.radio(key="method").set_value(Method.LORA).run()
    no_exception(at)
    lora_tps, lora_time = number(metric(at, "Tokens/s")), hours(metric(at, "Wall time"))
    assert lora_tps != full_tps and lora_time != full_time
    at.toggle(key="gradient_checkpointing").set_value(True).run()
    no_exception(at)
    ckpt_tps, ckpt_time = number(metric(at, "Tokens/s")), hours(metric(at, "Wall time"))
    assert ckpt_tps < 0.85 * lora_tps  # the recompute costs about a third more FLOPs
    assert ckpt_time > 1.15 * lora_time
    assert "takes" in " ".join(c.value for c in at.caption)


def test_sidebar_inputs_drive_the_numbers(page):
    at = page
    at.radio(key="method").set_value(Method.LORA).run()
    tps, time = number(metric(at, "Tokens/s")), hours(metric(at, "Wall time"))
    at.toggle(key="tc_more").set_value(True).run()  # "More run options" draws the calibration input
    at.number_input(key="tc_measured").set_value(round(2 * tps)).run()  # calibrate to a run twice as fast
    no_exception(at)
    assert number(metric(at, "Tokens/s")) == pytest.approx(2 * tps, rel=0.01)
    assert any("Calibrated to your run" in i.value for i in at.info)
    at.number_input(key="tc_epochs").set_value(6.0).run()
    no_exception(at)
    assert metric(at, "Tokens to process") == "30.72M"
    assert hours(metric(at, "Wall time")) == pytest.approx(time, rel=0.03)  # twice the tokens at twice the speed


def test_seed_rule_beside_the_flops_model_and_prices_never_invented(page):
    at = lora_on_a100_40gb(page, 1)
    assert metric(at, "Tokens/s (seed rule)") == "1,000"  # 8B counts as the seed's "7B on A100-40GB"
    assert metric(at, "Wall time (seed rule)") == "4.27 h"  # the seed's example: 15,360,000 tokens at 1,000/s
    assert metric(at, "Cost on-demand (seed rule)") == "$17.07" and metric(at, "Cost spot (seed rule)") == "$5.12"
    at.selectbox(key="gpu").set_value("NVIDIA RTX 3090").run()
    no_exception(at)
    assert metric(at, "Cost on-demand") == "no price"
    assert any("no price for NVIDIA RTX 3090" in c.value for c in at.caption)
    assert any("lists nothing" in i.value for i in at.info)


def test_time_cost_inputs_survive_a_visit_to_another_page(page):
    at = page
    at.number_input(key="tc_epochs").set_value(5.0).run()
    at.selectbox(key="gpu").set_value("NVIDIA H100 80GB").run()
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    at.switch_page(PAGE).run()
    no_exception(at)
    assert at.number_input(key="tc_epochs").value == 5.0
    assert at.selectbox(key="gpu").value == "NVIDIA H100 80GB"
    assert metric(at, "Tokens to process") == "25.6M"


def test_truncated_examples_are_said_and_one_token_figure_is_used_everywhere(page):
    # issue 16 item 12: 10,000 examples x 4,000 tokens at a 512-token sequence: 5.12M tokens processed per epoch
    # (each example cut to 512), said in a warning; the metric, the curves' x axis and the "your dataset" marker all
    # use that figure (not the 40M tokens of data).
    at = page
    at.number_input(key="seq_len").set_value(512).run()
    at.number_input(key="tc_avg_tokens").set_value(4000.0).run()
    no_exception(at)
    assert any("34.88M (87%) are never trained on" in shown(w.value) for w in at.warning), [w.value for w in at.warning]
    epochs = 3  # the page's default
    assert metric(at, "Tokens to process") == f"{5.12 * epochs:.2f}M"
    time_fig, cost_fig = charts(show(at, "dataset"))
    for fig in (time_fig, cost_fig):
        assert fig["layout"]["shapes"][0]["x0"] == 5_120_000
    assert 5_120_000 in time_fig["data"][0]["x"]


def test_no_price_says_why_instead_of_empty_axes(page):
    # Lambda lists on-demand prices only: ranked by spot price, no plan has a cost, so no cost chart is drawn (the
    # page says why); the time charts stay.
    at = page
    at.selectbox(key="tc_price_source").set_value("Lambda on-demand").run()
    at.radio(key="tc_basis").set_value("spot").run()
    no_exception(at)
    names, infos = [], []
    for view in ("dataset", "plans"):
        show(at, view)
        no_exception(at)
        names += [c.proto.id for c in at.get("plotly_chart")]
        infos += [shown(i.value) for i in at.info]
    assert any(n.endswith("tc_time_dataset_chart") for n in names)
    assert not any(n.endswith("tc_cost_dataset_chart") or n.endswith("tc_plans_chart") for n in names)
    assert any(i.startswith("No cost curve to draw: 'Lambda on-demand' has no spot price for any plan that fits")
               for i in infos), infos
    assert any(i.startswith("No plan to place on the time-cost chart") for i in infos), infos
    # the spot basis says which sources list spot prices (data/gpu_prices.csv: only the seed chapter's rows do) and
    # why the cheapest-listed quote has none, in the info box (the Cheapest bullet points to it)
    assert any("Spot prices are listed by 'seed chapter (approx.)'" in i for i in infos), infos
    text = " ".join(shown(m.value) for m in at.markdown)
    assert "**Cheapest**: none: no fitting plan has a price (spot) in 'Lambda on-demand' (the note above says why)." in text
    assert "**Pareto front**: none (no plan that fits has a price to compare)." in text


def test_offload_is_refused_in_words_not_timed_silently(page):
    # The time model has no term for host transfers or the CPU optimizer step (the CLI refuses --offload with a
    # dataset size): the page says so and draws no time, rather than the no-offload numbers.
    at = page
    at.number_input(key="num_gpus").set_value(8).run()
    at.selectbox(key="offload").set_value(Offload.OPTIMIZER).run()
    no_exception(at)
    assert any(w.value.startswith("Time and cost do not model CPU offload") for w in at.warning), [w.value for w in at.warning]
    assert not any(m.label == "Wall time" for m in at.metric)


def test_the_chosen_section_is_in_the_link_and_survives_a_page_switch(new_app):
    # issue 26: the section a page draws is a URL parameter (ui.share.PARSERS), so a link opens what its sender saw,
    # and it is kept, like the scenario, while the visitor looks at another page.
    at = new_app()
    at.query_params["tc_view"] = "plans"
    at.switch_page(PAGE).run()
    no_exception(at)
    assert at.radio(key="tc_view").value == "plans"
    assert [b.proto.label for b in at.get("download_button")] == ["Download the plans (CSV)"]
    show(at, "gpus")
    assert dict(at.query_params)["tc_view"] == "gpus"
    at.switch_page("pages/memory.py").run()
    at.switch_page(PAGE).run()
    no_exception(at)
    assert at.radio(key="tc_view").value == "gpus" and dict(at.query_params)["tc_view"] == "gpus"
    bad = new_app()
    bad.query_params["tc_view"] = "everything"
    bad.switch_page(PAGE).run()
    assert bad.radio(key="tc_view").value == "time"
    assert any("tc_view='everything': must be one of time, shape, dataset, gpus, plans, measured" in shown(w.value)
               for w in bad.warning), [w.value for w in bad.warning]


def test_nodes_the_time_model_does_not_time_are_said(new_app):
    """The step time's ring puts min(GPUs, 8) GPUs on a node (engine.time.step -> collectives.data_parallel_link):
    16 GPUs at 4 per node are timed as two nodes of 8, so the page says its times are not for the sidebar's nodes
    (it was silent: found by issue 25's bad-input sweep). 8 per node, the default, agrees and gets no warning."""
    at = new_app()
    at.query_params.update({"num_gpus": "16", "gpus_per_node": "4"})
    at.switch_page(PAGE).run()
    no_exception(at)
    said = [shown(w.value) for w in at.warning]
    assert any(w.startswith("The times below are not for your nodes: time and cost put up to 8 GPUs on a node "
                            "(NVLink or PCIe inside it, the network between), here 8, not the 4 per node given.")
               for w in said), said
    at.number_input(key="gpus_per_node").set_value(8.0).run()
    assert not any(shown(w.value).startswith("The times below are not for your nodes") for w in at.warning)


def test_gpu_hours_and_costs_carry_their_80_percent_band_everywhere(page):
    # Every GPU-hours and cost the page shows carries the band of its tokens/s (engine.time.band): a time or a cost
    # x's band is x / high .. x / low. 8 GPUs: the multi-GPU band, whatever the stack.
    from engine.time.band import band_for
    from ui.formats import fmt_hours, fmt_usd

    band = band_for(8, True)
    at = lora_on_a100_40gb(page, 8)
    helps = {m.label: shown(m.help or "") for m in at.metric}
    gpu_hours, spot = number(metric(at, "GPU-hours")), number(metric(at, "Cost spot"))
    lo, hi = (number(x) for x in helps["GPU-hours"].split(" (80% band)")[0].split("–"))
    assert lo == pytest.approx(gpu_hours / band.high, rel=0.01) and hi == pytest.approx(gpu_hours / band.low, rel=0.01)
    lo, hi = (number(x) for x in helps["Cost spot"].split(" (80% band)")[0].split("–"))
    assert lo == pytest.approx(spot / band.high, rel=0.01) and hi == pytest.approx(spot / band.low, rel=0.01)
    caption = shown(next(c.value for c in at.caption if c.value.startswith("Range, not a point")))
    assert f"GPU-hours {helps['GPU-hours'].split(' (80% band)')[0]}" in caption
    assert f"spot cost {helps['Cost spot'].split(' (80% band)')[0]}" in caption
    # Against the GPU count: the cost line has error bars, as the hours line does
    show(at, "gpus")
    count_fig = charts(at)[0]
    cost = next(t for t in count_fig["data"] if t["name"].startswith("cost"))
    for n, c, up, down in zip(cost["x"], cost["y"], cost["error_y"]["array"], cost["error_y"]["arrayminus"]):
        if n > 1 and c is not None:
            assert c + up == pytest.approx(c / band.low) and c - down == pytest.approx(c / band.high)
    # Every plan that fits: low / high columns of GPU time and both costs; the cheapest and fastest with their ranges
    show(at, "plans")
    no_exception(at)
    table = next(d.value for d in at.dataframe if d.value is not None and "pareto" in d.value.columns)
    multi = table[table["num_gpus"] > 1]
    assert len(multi)
    for col in ("gpu_hours", "cost_usd_on_demand", "cost_usd_spot"):
        priced = multi[multi[col].notna()]
        assert (priced[f"{col}_low"] - priced[col] / band.high).abs().max() < 1e-6 * priced[col].max()
        assert (priced[f"{col}_high"] - priced[col] / band.low).abs().max() < 1e-6 * priced[col].max()
    text = shown(" ".join(m.value for m in at.markdown))
    for flag, what in (("cheapest", "Cheapest"), ("fastest", "Fastest")):
        row = table[table[flag]].iloc[0]
        b = band_for(int(row["num_gpus"]), True) if row["num_gpus"] > 1 else None
        line = next(seg for seg in text.split("\n") if f"**{what}**" in seg)
        assert f"({fmt_hours(row['hours_low'])}–{fmt_hours(row['hours_high'])})" in line, line
        if b is not None:
            assert row["hours_low"] == pytest.approx(row["hours"] / b.high)
        if row["cost_usd_on_demand"] == row["cost_usd_on_demand"]:  # priced (basis: on demand)
            assert f"({fmt_usd(row['cost_usd_on_demand_low'])}–{fmt_usd(row['cost_usd_on_demand_high'])})" in line, line


def test_counts_read_as_words_and_prices_per_gpu_hour_in_cents():
    # A user found "1 GPUs", "(1 plans, ...)" and "$6/GPU-hour" / "$1.8/GPU-hour" (format ,.4g) on this page.
    from ui.formats import count_of, md_usd

    assert count_of(1, "GPU") == "1 GPU" and count_of(8, "GPU") == "8 GPUs" and count_of(1_024, "plan") == "1,024 plans"
    assert md_usd(6.0) == "\\$6.00" and md_usd(1.8) == "\\$1.80"


def test_gpu_hours_read_as_a_count_when_huge():
    # a fresh user saw "655,742,238.67" GPU-hours cut off in its tile: to the hundredth below 10,000, then as counts
    # are said (fmt_big_count: four significant digits and a suffix)
    from ui.formats import fmt_gpu_hours

    assert fmt_gpu_hours(42.5) == "42.50" and fmt_gpu_hours(9_999.994) == "9,999.99"
    assert fmt_gpu_hours(655_742_238.67) == "655.7M" and fmt_gpu_hours(12_345) == "12,345"
