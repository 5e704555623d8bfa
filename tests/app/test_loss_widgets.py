"""The Memory page's loss implementation and transformers version boxes (issue 25 items 8 and 12): each changes the
logits component as engine.memory.loss_paths computes it (bytes per logit read from each library's code)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from apptest_support import shown
from engine.scenario.loss import TransformersVersion

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
    assert at.selectbox(key="loss_implementation").value is None  # the framework's own loss by default
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
    assert box.value is None and box.options[0] == "Framework default: torchtune CEWithChunkedOutputLoss (8 chunks)"
    assert not [c for c in at.sidebar.caption if "recipes run" in c.value]  # no "not counted" note any more
    formula, source = _components(at)["Logits and loss"]
    assert formula.startswith("5 B x batch x seq x vocab") and "every chunk's fp32 log-softmax" in formula
    assert source.startswith("torchtune torchtune/modules/loss/ce_chunked_output_loss.py") and "a6290a5b" in source
    assumptions = " ".join(shown(m.value) for m in at.markdown if "CEWithChunkedOutputLoss" in m.value)
    assert "loss: torchtune CEWithChunkedOutputLoss (8 chunks)" in assumptions
    at.selectbox(key="loss_implementation").set_value("torchtune_ce").run()  # a run that set torch.nn.CrossEntropyLoss
    assert _components(at)["Logits and loss"][0].startswith("12 B x batch x seq x vocab")
