"""The Memory page's loss implementation and transformers version boxes (issue 25 items 8 and 12): each changes the
logits component as engine.memory.loss_paths computes it (bytes per logit read from each library's code)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from apptest_support import open_link, shown
from engine.scenario.loss import TransformersVersion
from ui.peft_form import FRAMEWORK_LOSS

LLAMA_8B_VOCAB = 128_256


def _components(at: AppTest) -> dict[str, tuple[str, str]]:
    table = next(t.value for t in at.table if "formula" in t.value.columns)
    return {row["component"]: (row["formula"], row["source"]) for _, row in table.iterrows()}


def _more_options(at: AppTest) -> AppTest:
    """Open the sidebar's "More training options" (ui.peft_form), where the two boxes are drawn."""
    return at.toggle(key="more_options").set_value(True).run()


def test_loss_implementation_box_changes_the_logits_formula(new_app):
    at = new_app().run()
    assert not at.exception
    _more_options(at)
    assert at.selectbox(key="loss_implementation").value == FRAMEWORK_LOSS  # the framework's own loss by default
    assert _components(at)["Logits and loss"][0].startswith("12 B x batch x seq x vocab")
    box = at.selectbox(key="loss_implementation")
    megatron = box.options.index("Megatron-LM vocab-parallel cross-entropy")
    assert "torchtune CEWithChunkedOutputLoss (8 chunks), compiled" in box.options
    box.select_index(megatron).run()
    formula, source = _components(at)["Logits and loss"]
    assert not at.exception
    assert formula.startswith("6 B x batch x seq x vocab") and "Megatron-LM" in source


def test_transformers_version_box_shows_the_shifted_copy(new_app):
    at = new_app().run()
    at.number_input(key="micro_batch_size").set_value(2).run()
    _more_options(at)
    versions = at.selectbox(key="transformers_version")
    assert versions.index == 0 and TransformersVersion(at.session_state["transformers_version"]).value == "4.50+"
    assert versions.options[1] == "4.46 to 4.49"
    versions.select_index(1).run()
    assert not at.exception
    formula, source = _components(at)["Logits and loss (forward)"]
    assert formula.startswith("14 B x batch x seq x vocab") and "shifted copy" in formula and "4.46-4.49" in source


def test_torchtune_counts_its_recipes_chunked_loss(new_app):
    # Framework torchtune, loss left to the framework: the box names torchtune's CEWithChunkedOutputLoss (the loss of
    # its recipe configs since 0.3.0, pytorch/torchtune@4fba6cd4) and the Memory page's components count it:
    # Llama-3.1-8B-like vocab, every chunk's fp32 log-softmax + one chunk's two gradients = 4 + 8/8 B per logit.
    at = _more_options(new_app().run())
    assert at.selectbox(key="loss_implementation").options[0] == "Framework default: Hugging Face transformers (fp32 logits)"
    at.selectbox(key="framework").set_value("torchtune").run()
    assert not at.exception
    box = at.selectbox(key="loss_implementation")
    assert box.value == FRAMEWORK_LOSS and box.options[0] == "Framework default: torchtune CEWithChunkedOutputLoss (8 chunks)"
    assert not [c for c in at.sidebar.caption if "recipes run" in c.value]  # no "not counted" note any more
    formula, source = _components(at)["Logits and loss"]
    assert formula.startswith("5 B x batch x seq x vocab") and "every chunk's fp32 log-softmax" in formula
    assert source.startswith("torchtune torchtune/modules/loss/ce_chunked_output_loss.py") and "a6290a5b" in source
    assumptions = " ".join(shown(m.value) for m in at.markdown if "CEWithChunkedOutputLoss" in m.value)
    assert "loss: torchtune CEWithChunkedOutputLoss (8 chunks)" in assumptions
    at.selectbox(key="loss_implementation").set_value("torchtune_ce").run()  # a run that set torch.nn.CrossEntropyLoss
    assert _components(at)["Logits and loss"][0].startswith("12 B x batch x seq x vocab")


def _box_shows(at: AppTest) -> str:
    """What the browser shows in the loss box: the selected option's label the widget message carries (empty when it
    carries none, and the browser shows Streamlit's "Choose an option" placeholder)."""
    return at.selectbox(key="loss_implementation").proto.raw_value


def test_the_loss_box_shows_the_loss_in_effect_not_a_placeholder(new_app):
    # A None option value reaches the browser as no selection (Streamlit 1.67): the box showed "Choose an option"
    # while the framework's loss applied. Every framework, and a fresh link that opens the options.
    at = _more_options(new_app().run())
    for framework, label in (("hf", "Hugging Face transformers (fp32 logits)"),
                             ("torchtune", "torchtune CEWithChunkedOutputLoss (8 chunks)"),
                             ("litgpt", "LitGPT chunked (16-bit logits)")):
        at.selectbox(key="framework").set_value(framework).run()
        box = at.selectbox(key="loss_implementation")
        assert box.options[box.index] == _box_shows(at) == f"Framework default: {label}", framework
    link = open_link(new_app(), "pages/memory.py", {"framework": "torchtune", "more_options": "true"})
    assert _box_shows(link) == "Framework default: torchtune CEWithChunkedOutputLoss (8 chunks)"
    assert "loss_implementation" not in link.query_params  # the framework's loss: no parameter, as before


def test_the_loss_choice_round_trips_through_the_link(new_app):
    at = open_link(new_app(), "pages/memory.py", {"framework": "torchtune", "more_options": "true"})
    at.selectbox(key="loss_implementation").set_value("megatron").run()
    assert at.query_params["loss_implementation"] == "megatron"
    fresh = open_link(new_app(), "pages/memory.py", dict(at.query_params))
    assert _box_shows(fresh) == "Megatron-LM vocab-parallel cross-entropy"
    fresh.selectbox(key="loss_implementation").set_value(FRAMEWORK_LOSS).run()
    assert "loss_implementation" not in fresh.query_params
    assert _box_shows(fresh) == "Framework default: torchtune CEWithChunkedOutputLoss (8 chunks)"
    # an old link naming a loss still opens it
    old = open_link(new_app(), "pages/memory.py", {"loss_implementation": "hf", "more_options": "true"})
    assert _box_shows(old) == "Hugging Face transformers (fp32 logits)"
    assert not [w for w in old.warning if "link" in w.value]
