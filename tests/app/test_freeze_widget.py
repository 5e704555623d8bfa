"""The sidebar's freeze-tuning input (issue 23): full fine-tuning of the last N blocks, as LLaMA-Factory's
finetuning_type freeze; the estimate follows it (engine.scenario.freeze)."""

from __future__ import annotations


def _components(at) -> dict[str, tuple[str, str]]:
    table = next(t.value for t in at.table if "formula" in t.value.columns)
    return {row["component"]: (row["formula"], row["source"]) for _, row in table.iterrows()}


def test_trainable_blocks_input_freezes_the_rest(new_app):
    at = new_app().run()
    assert not at.exception
    assert at.session_state["method"].value == "full"  # the page opens on full fine-tuning of Llama 3.1 8B
    box = at.number_input(key="trainable_layers_n")
    assert box.value == 0  # every parameter trains by default
    assert _components(at)["Weights"][0].startswith("all parameters")
    box.set_value(2).run()
    assert not at.exception
    weights = _components(at)["Weights"][0]
    assert "the last 2 blocks (trainable)" in weights
    assert "frozen blocks below save nothing" in _components(at)["Activations"][0]
    assert at.toggle(key="frozen_input_grads").value is False
