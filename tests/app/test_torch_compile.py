"""torch.compile is one fact of the run (Scenario.torch_compile, the sidebar's "More training options" switch, URL
key torch_compile): the Memory page counts the loss's compiled form and the Time & cost page times and names the same
loss. Llama-3.1-8B (the app's default model), torchtune, LoRA, micro batch 2 x 2048."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from apptest_support import open_link, shown

LINK = {"framework": "torchtune", "method": "lora", "micro_batch_size": "2", "seq_len": "2048"}
COMPILED = "torchtune CEWithChunkedOutputLoss (8 chunks), compiled"


def _components(at: AppTest) -> dict[str, str]:
    table = next(t.value for t in at.table if "formula" in t.value.columns)
    return {row["component"]: row["formula"] for _, row in table.iterrows()}


def _assumptions(at: AppTest) -> str:
    return " ".join(shown(m.value) for m in at.markdown if "CEWithChunkedOutputLoss" in m.value)


def _time_caption(at: AppTest) -> str:
    return next(shown(c.value) for c in at.caption if "attention kernel" in c.value)


def test_the_switch_counts_the_compiled_loss_and_travels_in_the_link(new_app):
    at = open_link(new_app(), "pages/memory.py", LINK)
    assert not at.exception and at.session_state["torch_compile"] is False
    assert _components(at)["Logits and loss (forward)"].startswith("6.5 B x batch x seq x vocab")
    at.toggle(key="more_options").set_value(True).run()
    assert at.selectbox(key="loss_implementation").options[0] == \
        "Framework default: torchtune CEWithChunkedOutputLoss (8 chunks)"
    at.toggle(key="torch_compile").set_value(True).run()
    assert not at.exception
    assert at.selectbox(key="loss_implementation").options[0] == f"Framework default: {COMPILED}"
    parts = _components(at)
    assert parts["Logits and loss (forward)"].startswith("2 B x batch x seq x vocab")  # the measured record
    assert parts["Logits and loss"].startswith("2.25 B x batch x seq x vocab")
    assert f"loss: {COMPILED}" in _assumptions(at)
    url = dict(at.query_params)
    assert url["torch_compile"] == "true"
    # a fresh session (a reconnect, a shared link) restores it, closed "More training options" included
    fresh = open_link(new_app(), "pages/memory.py", url)
    assert fresh.session_state["torch_compile"] is True and _components(fresh) == parts
    assert dict(fresh.query_params) == url
    closed = open_link(new_app(), "pages/memory.py", {**LINK, "torch_compile": "true"})
    assert any("torch.compile on" in shown(c.value) for c in closed.sidebar.caption)
    assert _components(closed) == parts


def test_memory_and_time_cost_name_the_same_loss(new_app):
    for compiled, loss in ((True, COMPILED), (False, "torchtune CEWithChunkedOutputLoss (8 chunks)")):
        link = {**LINK, "torch_compile": "true" if compiled else "false"}
        memory = open_link(new_app(), "pages/memory.py", link)
        time_cost = open_link(new_app(), "pages/time_cost.py", link)
        assert not memory.exception and not time_cost.exception
        assert f"loss: {loss}" in _assumptions(memory)
        caption = _time_caption(time_cost)
        assert f"loss: {loss} ·" in caption
        assert ("torch.compile" in caption) is compiled and ("fused kernels" in caption) is compiled
