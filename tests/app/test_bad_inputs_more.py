"""Bad input through the app (issue 25): a repeated link key is ignored with a warning, never the last value without
a word (item 4); a damaged bundled data file gives one clear box on every page instead of the exception box (item
5: a copy of ``data/`` with one bad cell, pointed at with ``FINETUNE_FIT_DATA``, the loaders' own switch); the import
section's "Mapped" and "Applied" counts are the same count (item 3); a token-looking repo id in the link or the box is
never shown (item 2); a header-only or duplicated-column plans CSV is said as such on the Plans page (item 4)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from apptest_support import hub, no_exception, shown, warnings_shown

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
PAGES = ["pages/memory.py", "pages/model.py", "pages/fit.py", "pages/time_cost.py", "pages/plans.py",
         "pages/scale_out.py", "pages/gpus.py", "pages/methodology.py"]


def test_a_repeated_link_key_is_ignored_with_a_warning(new_app):
    at = new_app()
    at.query_params["micro_batch_size"] = ["2", "8"]
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    text = " ".join(warnings_shown(at))
    assert "micro_batch_size is given 2 times ('2', '8'): ignored; a link gives each setting once" in text
    assert at.number_input(key="micro_batch_size").value == 1  # neither value was taken silently


@pytest.mark.parametrize("page", PAGES)
def test_a_damaged_gpu_table_is_one_clear_box_on_every_page(new_app, tmp_path, monkeypatch, page):
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data", data)
    with (data / "gpus.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    rows[3][rows[0].index("memory_bandwidth_gbps")] = "fast"
    with (data / "gpus.csv").open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    monkeypatch.setenv("FINETUNE_FIT_DATA", str(data))
    at = new_app().switch_page(page).run()
    no_exception(at)
    errors = [shown(e.value) for e in at.error]
    assert len(errors) == 1, errors
    assert errors[0].startswith("A bundled data file does not validate, so nothing can be computed: gpus.csv row 4 "
                                "('NVIDIA V100 32GB'): memory_bandwidth_gbps: Input should be a valid number")


def test_mapped_and_applied_counts_agree(new_app):
    at = new_app().run()
    at.text_area(key="cfg_import_text").input(
        "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nmicro_batch_size: 2\nsequence_len: 1024\nbf16: true\n"
        "fp16: false\n").run()
    # 6 keys; the settings: bf16 and fp16 make one (the precision), axolotl's defaults for what the file leaves out
    # (accumulation, LoRA dropout) and the model are settings too. The old page said "Mapped (6)" and "Applied 7".
    header = next(m.value for m in at.markdown if m.value.startswith("**Mapped**"))
    assert header == "**Mapped** (6 keys, 7 sidebar settings)"
    at.button(key="cfg_import_apply").click().run()
    no_exception(at)
    assert any(s.value.startswith("Applied 7 sidebar settings from the 6 mapped keys") for s in at.success), \
        [s.value for s in at.success]


def test_a_token_looking_repo_id_is_never_shown(new_app, hub_stub):
    at = hub(new_app().run(), f"meta-llama/{TOKEN}")
    no_exception(at)
    assert TOKEN not in " ".join(e.value for e in at.error)
    assert any("looks like a Hugging Face token" in shown(e.value) for e in at.error)
    assert hub_stub.requests == []


@pytest.mark.parametrize(("text", "needle"), [
    ("header", "the file has column names but no plan rows"),
    ("duplicate", "a column appears more than once ('seq_len' is columns"),
])
def test_the_plans_page_says_what_is_wrong_with_the_file(new_app, text, needle):
    from engine.plan.plans import Plan, evaluate_plan, plans_to_csv

    plan = Plan(name="p", model_repo_id="meta-llama/Llama-3.2-1B", gpu="NVIDIA A100 80GB", dataset_total_tokens=10**6)
    data = plans_to_csv([(plan, evaluate_plan(plan))]).decode()
    header, row = data.splitlines()[:2]
    body = header + "\n" if text == "header" else f"{header},seq_len\n{row},64\n"
    at = new_app().switch_page("pages/plans.py").run()
    at.file_uploader(key="plans_import").set_value(("plans.csv", body.encode(), "text/csv")).run()
    no_exception(at)
    assert any(needle in shown(e.value) for e in at.error), [e.value for e in at.error]  # not only "No saved plans"


def test_a_fraction_in_a_whole_number_box_is_set_back_with_a_message(new_app):
    """Issue 25 item 6: the sidebar's whole-number boxes are float boxes shown as whole numbers ("%.0f"), so the server
    sees what was typed (Streamlit's integer box parses it with parseInt: "2.5" arrived as 2, "1e30" as 1, without a
    word; the real-browser test types them). A fraction is set back to the last valid value, said under the box."""
    at = new_app()
    at.switch_page("pages/memory.py").run()
    at.number_input(key="micro_batch_size").set_value(4.0).run()
    assert at.query_params["micro_batch_size"] == "4"  # a whole number in the link, never "4.0"
    at.number_input(key="micro_batch_size").set_value(2.5).run()
    no_exception(at)
    assert at.number_input(key="micro_batch_size").value == 4  # the box shows what the results use
    assert "Micro batch size: 2.5 is not a whole number, so it is back to 4." in [shown(e.value) for e in at.error]
    assert at.query_params["micro_batch_size"] == "4"
    at.number_input(key="micro_batch_size").set_value(1e30).run()
    no_exception(at)
    errors = [shown(e.value) for e in at.error]
    assert "Micro batch size: 1e+30 is out of range; it must be a whole number from 1 to 65,536. The results use 4." \
        in errors, errors
    assert at.query_params["micro_batch_size"] == "4"


@pytest.mark.parametrize("link, workload, note", [
    ({"method": "inference"}, "Inference", "method='inference' read as mem_workload='Inference'"),
    ({"method": "Inference", "mem_workload": "Fine-tuning"}, "Fine-tuning",
     "inference is the Memory page's workload, and the link also gives mem_workload='Fine-tuning'"),
])
def test_a_method_inference_link_opens_the_inference_workload(new_app, link, workload, note):
    """The fresh-user finding of issue 25: the CLI's ``--method inference`` tried as ``/memory?method=inference`` was
    refused ("must be one of full, lora, ..."); inference is the Memory page's Workload radio, so the link means it."""
    at = new_app()
    for key, value in link.items():
        at.query_params[key] = value
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    assert at.radio(key="mem_workload").value == workload
    assert note in " ".join(warnings_shown(at))
    assert "must be one of full" not in " ".join(warnings_shown(at))


def test_every_whole_number_box_checks_what_was_typed(new_app):
    """The PEFT boxes (virtual tokens, GaLore rank) and the GPU fit page's seed scenario go through the same check as
    the sidebar (they were integer boxes: a fraction or "1e30" was cut by parseInt in the browser without a word)."""
    at = new_app()
    at.query_params["method"] = "prompt_tuning"
    at.switch_page("pages/memory.py").run()
    at.number_input(key="num_virtual_tokens").set_value(0.0).run()
    no_exception(at)
    assert "Virtual tokens: 0 is out of range; it must be a whole number from 1 to 65,536. The results use 20." in \
        [shown(e.value) for e in at.error]
    fit = new_app()
    fit.query_params["fit_view"] = "largest"  # the seed's table (ui.views)
    fit.switch_page("pages/fit.py").run()
    fit.number_input(key="seed_micro_batch").set_value(1.5).run()
    no_exception(fit)
    assert "Micro batch: 1.5 is not a whole number, so it is back to 1." in [shown(e.value) for e in fit.error]
