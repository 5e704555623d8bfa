"""The sidebar's "More training options" (ui.peft_form, issue 26): closed by default, its inputs are not drawn (fewer
widgets per rerun), yet their values apply to the estimate, are listed under the toggle when not at their defaults,
stay in the session across pages and in the link, and a fresh session restores them from the link."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from apptest_support import no_exception, open_link
from engine.scenario.training import Attention

LINK = {"method": "lora", "attention": "eager", "liger_kernels": "true", "modules_to_save": "lm_head"}


def _components(at: AppTest) -> dict[str, str]:
    table = next(t.value for t in at.table if "formula" in t.value.columns)
    return {row["component"]: row["formula"] for _, row in table.iterrows()}


def _keys(at: AppTest, kind: str) -> set[str]:
    return {w.key for w in at.get(kind) if w.key}


def test_closed_by_default_and_its_inputs_not_drawn(new_app):
    at = new_app().run()
    no_exception(at)
    assert at.toggle(key="more_options").value is False
    assert not {"attention", "framework", "loss_implementation", "transformers_version"} & _keys(at, "selectbox")
    assert not {"fused_ce", "liger_kernels", "use_rslora"} & _keys(at, "toggle")
    assert not any("Set under More training options" in c.value for c in at.caption)  # all at their defaults
    at.toggle(key="more_options").set_value(True).run()
    no_exception(at)
    assert {"attention", "framework", "loss_implementation", "transformers_version"} <= _keys(at, "selectbox")
    assert {"fused_ce", "liger_kernels"} <= _keys(at, "toggle")
    assert dict(at.query_params)["more_options"] == "true"


def test_hidden_values_from_a_link_apply_are_listed_and_kept(new_app):
    default = open_link(new_app(), "pages/memory.py", {"method": "lora"})
    at = open_link(new_app(), "pages/memory.py", LINK)
    assert at.toggle(key="more_options").value is False and "attention" not in _keys(at, "selectbox")
    caption = next(c.value for c in at.caption if "Set under More training options" in c.value)
    assert "Attention implementation eager" in caption and "Modules to save lm\\_head" in caption
    assert "Liger RMSNorm / SwiGLU / RoPE on" in caption
    assert _components(at) != _components(default)  # eager attention and Liger kernels change the estimate
    url = dict(at.query_params)
    assert {k: url[k] for k in LINK} == LINK
    # another page (no training sidebar) and back: the values stay in the session
    at.switch_page("pages/model.py").run()
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    assert at.session_state["attention"] == Attention.EAGER and at.session_state["modules_to_save"] == ["lm_head"]
    assert {k: dict(at.query_params)[k] for k in LINK} == LINK
    # opened, the inputs show the link's values
    at.toggle(key="more_options").set_value(True).run()
    assert at.selectbox(key="attention").value == Attention.EAGER
    assert at.toggle(key="liger_kernels").value is True and at.multiselect(key="modules_to_save").value == ["lm_head"]
    # a fresh session (a reconnect) restores them from the URL
    fresh = open_link(new_app(), "pages/memory.py", dict(at.query_params))
    assert _components(fresh) == _components(at) and dict(fresh.query_params) == dict(at.query_params)


def test_time_cost_run_options_hidden_apply_from_a_link(new_app):
    """Time & cost's "More run options" (ui.scenario_form.TC_MORE): closed, the calibration, fused kernels and plan
    search limit from a link are not drawn, yet calibrate the page (tokens/s scaled to the measured run) and are said."""
    base = open_link(new_app(), "pages/time_cost.py", {})
    assert at_key_absent(base, "tc_measured") and base.toggle(key="tc_more").value is False
    tps = float(next(m.value for m in base.metric if m.label == "Tokens/s").replace(",", ""))
    link = {"tc_measured": str(round(2 * tps)), "tc_fused": "true", "tc_max_gpus": "16"}
    at = open_link(new_app(), "pages/time_cost.py", link)
    assert at_key_absent(at, "tc_measured")
    assert any("Calibrated to your run" in i.value for i in at.info)
    caption = next(c.value for c in at.caption if "Set under More run options" in c.value)
    assert "Other fused kernels on" in caption and "Plan search up to 16 GPUs" in caption
    url = dict(at.query_params)
    assert float(url["tc_measured"]) == round(2 * tps) and (url["tc_fused"], url["tc_max_gpus"]) == ("true", "16")
    at.toggle(key="tc_more").set_value(True).run()
    assert at.number_input(key="tc_measured").value == round(2 * tps) and at.selectbox(key="tc_max_gpus").value == 16


def at_key_absent(at: AppTest, key: str) -> bool:
    return key not in {w.key for kind in ("number_input", "selectbox", "toggle") for w in at.get(kind) if w.key}


def test_a_chosen_loss_that_torch_compile_compiles_says_so_in_its_label(new_app):
    # torchtune's recipes compile CEWithChunkedOutputLoss under compile: True (training.compile_loss,
    # pytorch/torchtune@a6290a5b), so Scenario.loss counts its compiled form: the option says so, it is not silent.
    at = open_link(new_app(), "pages/memory.py", {"more_options": "true", "framework": "torchtune",
                                                  "loss_implementation": "torchtune_chunked"})
    no_exception(at)
    box = at.selectbox(key="loss_implementation")
    assert "torchtune CEWithChunkedOutputLoss (8 chunks)" in box.options
    at.toggle(key="torch_compile").set_value(True).run()
    no_exception(at)
    options = at.selectbox(key="loss_implementation").options
    assert "torchtune CEWithChunkedOutputLoss (8 chunks) -> compiled (torch.compile)" in options
    assert "Hugging Face transformers (fp32 logits)" in options  # transformers' loss runs as it is
