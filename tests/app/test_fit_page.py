"""AppTest tests of the GPU fit page (pages/fit.py), in both modes of tests/test_app.py: ``first_request`` (the page
file runs directly, as on a fresh server's first request) and ``served`` (streamlit_app.py runs, then the page)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.hardware.gpus import load_gpus
from engine.model.catalog import load_models
from engine.model.build import architecture_from_config
from engine.plan.fit import TECHNIQUES, model_matrix
from engine.scenario.training import Scenario
from ui.charts import short_gpu_name
from engine.memory.parallel import Strategy
from engine.scenario.training import Method
from engine.plan.verdict import Verdict
from apptest_support import charts, metric, no_exception

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "streamlit_app.py")
PAGE = "pages/fit.py"


@pytest.fixture
def fit_page(new_app) -> AppTest:
    at = new_app().switch_page(PAGE).run()
    no_exception(at)
    return at


def heatmap(fig: dict) -> dict:
    (trace,) = fig["data"]
    assert trace["type"] == "heatmap"
    return trace


def seed_table(at: AppTest):
    return next(t.value for t in at.table if "GPUs (seed)" in t.value.columns)


def show(at: AppTest, view: str) -> AppTest:
    """Pick a section of the page (ui.views.FIT_VIEWS): a rerun draws only the chosen one (issue 26)."""
    return at.radio(key="fit_view").set_value(view).run()


def both_heatmaps(at: AppTest) -> tuple[dict, dict]:
    """The models and the techniques heatmap, each drawn alone in its section (the page stays on the models')."""
    (models,) = charts(show(at, "models"))
    (techniques,) = charts(show(at, "techniques"))
    show(at, "models")
    return heatmap(models), heatmap(techniques)


def test_page_renders_both_heatmaps_the_seed_table_and_what_fits(fit_page):
    at = fit_page
    assert [t.value for t in at.title] == ["Which GPU does it fit on?"]
    # One section at a time (issue 26): the models' heatmap by default, alone; the other sections on request.
    assert at.radio(key="fit_view").value == "models" and len(charts(at)) == 1 and not at.table
    assert [b.proto.label for b in at.get("download_button")] == ["Download fit_models_x_gpus (CSV)"]
    # No cell text by default (issue 26: colour and hover only, fewer SVG elements to lay out on each redraw)
    # ... and the choice reads as a word: it was "None", Python's word, at first open (a fresh user's run)
    assert at.radio(key="fit_labels").value == "Off"
    assert at.radio(key="fit_labels").options == ["Fewest GPUs", "Headroom", "Off"]
    assert all("text" not in heatmap(f) for f in charts(at))
    at.radio(key="fit_labels").set_value("Fewest GPUs").run()
    models_fig, techniques_fig = both_heatmaps(at)
    gpus = load_gpus()
    assert len(models_fig["x"]) == len(gpus) and len(models_fig["y"]) == len(load_models())
    assert techniques_fig["y"] == [t.label for t in TECHNIQUES] + ["Inference · bf16 serving"]
    cell = models_fig["text"][0][0]
    # Columns grouped by memory (least usable first); each cell the fewest GPUs (ZeRO-3, the sidebar's default), at most
    # four characters so 28 columns stay readable at 1,400 px.
    catalog = [(m.name, architecture_from_config(m.config)) for m in load_models()]
    matrix = model_matrix(catalog, Scenario(), gpus, Strategy.ZERO3)
    by_memory = sorted(gpus, key=lambda g: g.usable_memory_bytes)
    assert models_fig["x"] == [short_gpu_name(g.name) + ("" if g.bf16 else " ⚠") for g in by_memory]  # mixed bf16
    for r, row in enumerate(matrix.rows):
        cells = dict(zip(matrix.gpus, row.cells))
        for c, g in enumerate(by_memory):
            cell = cells[g.name]
            # blank: fits on one GPU (its green says it), ≈ tight on one (under the safety margin), else ×N or ✗
            # (engine.plan.verdict)
            label = ({Verdict.FITS: "", Verdict.TIGHT: "≈"}.get(cell.verdict)
                     if cell.verdict is not Verdict.DOES_NOT_FIT
                     else ("✗" if cell.min_gpus is None else f"×{cell.min_gpus}"))
            assert models_fig["text"][r][c] == label
            assert len(models_fig["text"][r][c]) <= 4
    assert "×" in "".join(models_fig["text"][matrix.rows.index(next(x for x in matrix.rows if x.label == "Llama 3.1 8B"))])
    at.radio(key="fit_labels").set_value("Headroom").run()
    headroom = heatmap(charts(at)[0])["text"]
    a100 = models_fig["x"].index("A100 80GB")
    llama = next(i for i, x in enumerate(matrix.rows) if x.label == "Llama 3.1 8B")
    value = next(c for g, c in zip(matrix.gpus, matrix.rows[llama].cells) if g == "NVIDIA A100 80GB").headroom_bytes / 2**30
    assert headroom[llama][a100] == f"{'+' if value >= 0 else '−'}{abs(value):.0f}"
    # No labels: no text template either (plotly.js would still format one per cell), colour and hover stay.
    at.radio(key="fit_labels").set_value("Off").run()
    bare = heatmap(charts(at)[0])
    assert "texttemplate" not in bare and "text" not in bare and bare["z"] == models_fig["z"] and bare["customdata"]
    assert "fewest GPUs" in models_fig["customdata"][0][0]
    show(at, "techniques")
    assert [b.proto.label for b in at.get("download_button")] == ["Download fit_techniques_x_gpus (CSV)"]
    show(at, "largest")
    assert charts(at) == [] and not at.get("download_button")
    assert any("Why the numbers differ from the seed's" in m.value for m in at.markdown)
    seed = seed_table(at)
    assert list(seed["GPUs (seed)"]) == ["RTX 3090", "RTX 4090", "A100-40GB", "A100-80GB", "H100", "2× A100-40GB",
                                         "4× A100-80GB", "8× H100"]
    assert list(seed["seed: efficient"]) == ["3B", "3B", "7B", "13B", "13B", "7-13B", "30-40B", "70B"]
    assert metric(at, "Largest micro batch") and metric(at, "Longest sequence")  # what fits: under every section
    assert at.selectbox(key="catalog_repo").value == "meta-llama/Llama-3.1-8B"  # the picker is on this page too


def test_changing_the_scenario_changes_cells(fit_page):
    at = fit_page
    before_models, before_tech = (h["z"] for h in both_heatmaps(at))
    at.number_input(key="seq_len").set_value(8192).run()
    no_exception(at)
    after_models, after_tech = (h["z"] for h in both_heatmaps(at))
    assert after_models != before_models and after_tech != before_tech
    # Longer sequences never need less memory; the headroom shrinks unless the optimizer step stays the peak.
    flat = [(b, a) for rb, ra in zip(before_models, after_models) for b, a in zip(rb, ra) if b is not None]
    assert flat and all(a <= b for b, a in flat) and sum(a < b for b, a in flat) > len(flat) // 2

    at.radio(key="method").set_value(Method.QLORA).run()
    no_exception(at)
    qlora_models = heatmap(charts(at)[0])["z"]
    assert qlora_models != after_models


def test_unit_switch_rescales_the_cells(fit_page):
    at = fit_page
    gib = heatmap(charts(at)[0])["z"]
    at.radio(key="unit").set_value("GB").run()
    no_exception(at)
    gb = heatmap(charts(at)[0])["z"]
    b, a = next((b, a) for rb, ra in zip(gib, gb) for b, a in zip(rb, ra) if b)
    assert a / b == pytest.approx(2**30 / 1e9)


def test_what_fits_follows_the_chosen_gpu_and_strategy(fit_page):
    at = fit_page
    at.selectbox(key="gpu").set_value("NVIDIA T4").run()
    no_exception(at)
    assert metric(at, "Largest micro batch") == "none"  # 8B full fine-tuning on a 16 GB T4
    assert any("no bf16 support" in w.value for w in at.warning)
    at.selectbox(key="gpu").set_value("NVIDIA H200").run()
    at.selectbox(key="strategy").set_value(Strategy.ZERO3).run()
    at.number_input(key="num_gpus").set_value(8).run()
    no_exception(at)
    assert metric(at, "Largest micro batch") not in ("none", "")


def test_seed_table_follows_its_own_scenario(fit_page):
    at = show(fit_page, "largest")
    lora = list(seed_table(at)["computed: lora"])
    at.selectbox(key="seed_efficient").set_value(Method.QLORA).run()
    no_exception(at)
    qlora = list(seed_table(at)["computed: qlora"])
    assert qlora != lora


def test_a_fit_with_less_than_the_safety_margin_shows_tight_may_not_fit(new_app, request):
    # issue 16 item 4: GPT-2-large (GPT-2's config with n_embd 1280, n_layer 36, n_head 20), full fine-tuning at
    # micro batch 4 x 1,024 on a V100 32GB fits by 422,042 bytes: the page says "tight: may not fit".
    import json

    from engine.model.sources import config_from_catalog

    if request.node.callspec.params["new_app"] == "first_request":
        pytest.skip("multipage-v1 path: an uploader's value cannot be carried to a page drawing its own picker")
    cfg = {**config_from_catalog("openai-community/gpt2")[0], "n_embd": 1280, "n_layer": 36, "n_head": 20}
    at = new_app().run()
    at.radio(key="model_source").set_value("Upload config.json").run()
    at.file_uploader(key="config_upload").set_value(("config.json", json.dumps(cfg).encode(), "application/json")).run()
    at.number_input(key="micro_batch_size").set_value(4).run()
    at.number_input(key="seq_len").set_value(1024).run()
    at.switch_page(PAGE).run()
    at.selectbox(key="gpu").set_value(next(g.name for g in load_gpus() if "V100" in g.name and "32" in g.name)).run()
    no_exception(at)
    assert any("tight: may not fit" in w.value for w in at.warning), [w.value for w in at.warning]
    at.radio(key="fit_labels").set_value("Fewest GPUs").run()
    (techniques,) = (heatmap(f) for f in charts(show(at, "techniques")))
    assert any(cell.startswith("≈") for row in techniques["text"] for cell in row)


def test_the_captions_name_the_strategy_each_matrix_computes(fit_page):
    """A new user's report: the page said the fewest GPUs used the sidebar's strategy (zero3) for both matrices, while
    the techniques caption and CSV said DDP for every row but ZeRO-3. What is computed (engine.plan.fit): the models
    matrix uses the sidebar's strategy, the techniques matrix each row's own (Technique.strategy), whatever the sidebar."""
    at = fit_page
    assert at.selectbox(key="strategy").value == Strategy.ZERO3
    captions = " ".join(c.value for c in at.caption)
    assert "for the fewest GPUs, the sidebar's strategy (zero3)" in captions
    show(at, "techniques")
    captions = " ".join(c.value for c in at.caption)
    assert "the fewest GPUs, the sidebar's strategy" not in captions and "sidebar's zero3 is not used here" in captions
    assert "each row's own strategy (not the sidebar's zero3)" in captions
    assert "every other training row uses DDP" in captions and "min_gpus_strategy" in captions
    # ... and the engine's rows and CSV records agree: DDP everywhere but the ZeRO-3 row, named per row
    from engine.plan.fit import technique_matrix
    arch = architecture_from_config(next(m for m in load_models() if m.name == "Llama 3.1 8B").config)
    records = technique_matrix(arch, Scenario(), load_gpus()[:1]).records()
    assert {r["row"]: r["min_gpus_strategy"] for r in records} == {
        **{t.label: t.strategy.value for t in TECHNIQUES}, "Inference · bf16 serving": "ddp"}
    assert [t.label for t in TECHNIQUES if t.strategy is Strategy.ZERO3] == ["Full · mixed bf16, ZeRO-3 (min GPUs)"]
    assert "strategy" not in records[0]
