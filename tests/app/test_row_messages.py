"""A number typed out of range in an input that sits in a row of columns (``st.columns``: micro batch size beside
sequence length in the sidebar, the Scale out layout's four a row, ...) is said full width under the row, not in the
input's half- or quarter-width column, where the sentence wrapped a few letters a line (a fresh user's browser test).
The column still says "Out of range" under the input, and the value is refused as before: the results (and the link)
use the last valid one (:func:`ui.inputs.checked_number` ``below``)."""

from __future__ import annotations

import pytest

from apptest_support import no_exception, shown


def _parent_of(block, match):
    """(parent block, node) of the first node under ``block`` for which ``match(node)``, depth first."""
    for node in getattr(block, "children", {}).values():
        if match(node):
            return block, node
        found = _parent_of(node, match)
        if found:
            return found
    return None


def _holds(block, key: str) -> bool:
    return any(getattr(n, "key", None) == key or _holds(n, key) for n in getattr(block, "children", {}).values())


# (page, link parameters, input key, typed value, where the row is, the message, the value the results use)
CASES = [
    ("pages/memory.py", {}, "micro_batch_size", 0, "sidebar",
     "Micro batch size: 0 is out of range; it must be a whole number from 1 to 65,536. The results use 1.", "1"),
    ("pages/memory.py", {}, "seq_len", 0, "sidebar",
     "Sequence length: 0 is out of range; it must be a whole number from 1 to 2,097,152. The results use 2,048.", "2048"),
    ("pages/memory.py", {}, "num_gpus", 0, "sidebar",
     "GPUs: 0 is out of range; it must be a whole number from 1 to 1,024. The results use 1.", "1"),
    ("pages/memory.py", {"method": "lora"}, "lora_r", 0, "sidebar",
     "Rank r: 0 is out of range; it must be a whole number from 1 to 65,536. The results use 16.", "16"),
    ("pages/time_cost.py", {}, "tc_epochs", 0.0, "sidebar",
     "Epochs: 0 is out of range; it must be from 0.01 to 10,000. The results use 3.", "3.0"),
    ("pages/memory.py", {"mem_workload": "Inference"}, "inf_concurrency", 0, "main",
     "Concurrent sequences: 0 is out of range; it must be a whole number from 1 to 1,048,576. The results use 1.", "1"),
    ("pages/scale_out.py", {}, "so_pp", 5000, "main",
     "Pipeline parallel: 5,000 is out of range; it must be a whole number from 1 to 4,096. The results use 1.", "1"),
    ("pages/scale_out.py", {}, "so_tokens", 0, "main",
     "Dataset tokens (one epoch): 0 is out of range; it must be a whole number from 1 to 1,000,000,000,000,000. The "
     "results use 1,000,000,000.", "1000000000"),
]


@pytest.mark.parametrize(("page", "params", "key", "value", "where", "words", "used"), CASES,
                         ids=[c[2] for c in CASES])
def test_an_out_of_range_input_in_a_row_is_said_under_the_row(new_app, page, params, key, value, where, words, used):
    at = new_app()
    at.query_params.update(params)
    at.switch_page(page).run()
    no_exception(at)
    at.number_input(key=key).set_value(value).run()
    no_exception(at)
    root = at.sidebar if where == "sidebar" else at.main
    found = _parent_of(root, lambda n: getattr(n, "type", None) == "error" and shown(n.value) == words)
    assert found, [shown(e.value) for e in at.error]
    parent, _ = found
    # under the row, full width: a child of the block that holds the row, not of one of the row's columns
    assert getattr(parent, "type", None) != "column", "the message is in the input's column"
    row = next(n for n in parent.children.values() if getattr(n, "type", None) == "flex_container" and _holds(n, key))
    column = next(c for c in row.children.values() if _holds(c, key))
    assert [shown(c.value) for c in column.children.values() if getattr(c, "type", None) == "caption"] == \
        [":red[Out of range]"]  # the input still says it is out of range
    assert not any(getattr(c, "type", None) == "error" for c in column.children.values())
    # refused as before: the box keeps what was typed, the results and the link use the last valid value
    assert at.number_input(key=key).value == value
    stale = [w.value for w in at.warning if w.value.startswith("Results below are not for the inputs as shown")]
    assert len(stale) == 1 and words.split(":")[0] in stale[0], stale
    assert at.query_params[key] == used


def test_an_input_of_its_own_line_keeps_its_message_under_it(new_app):
    # Gradient accumulation steps has the sidebar's width: its message stays right under it, no "Out of range" caption.
    at = new_app().switch_page("pages/memory.py").run()
    at.number_input(key="grad_accum").set_value(0).run()
    no_exception(at)
    words = "Gradient accumulation steps: 0 is out of range; it must be a whole number from 1 to 1,000,000. The " \
            "results use 1."
    parent, _ = _parent_of(at.sidebar, lambda n: getattr(n, "type", None) == "error" and shown(n.value) == words)
    kids = list(parent.children.values())
    i = next(i for i, n in enumerate(kids) if getattr(n, "key", None) == "grad_accum")
    assert getattr(kids[i + 1], "type", None) == "error" and shown(kids[i + 1].value) == words
    assert not any(getattr(n, "type", None) == "caption" and "Out of range" in n.value for n in kids)
