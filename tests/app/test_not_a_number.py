"""Letters typed into a number box (a fresh user's browser test): the browser's number field drops them and the box
sends an empty value, which Streamlit reported as the widget's fallback default, 0, so the page said "Micro batch
size: 0 is out of range". ``ui.inputs.checked_number`` draws its boxes with ``value=None``: the empty box arrives as
None (AppTest's ``set_value(None)`` sends the same empty widget state), stays empty, and is said to be not a number;
the results are those of the last valid value, marked as such (or withheld where the page stops on a message), and the
URL keeps that last valid value. The real-browser test types "abc" (tests/e2e/test_browser.py)."""

from __future__ import annotations

import pytest

from apptest_support import metric, no_exception, shown


def _errors(at) -> list[str]:
    return [shown(e.value) for e in at.error]


@pytest.mark.parametrize(("page", "key", "valid", "words"), [
    ("pages/memory.py", "micro_batch_size", 4, "Micro batch size: not a number; type a whole number from 1 to 65,536. "
     "The results use 4."),
    ("pages/memory.py", "seq_len", 1024, "Sequence length: not a number; type a whole number from 1 to 2,097,152. The "
     "results use 1,024."),
    ("pages/time_cost.py", "tc_epochs", 2.0, "Epochs: not a number; type a number from 0.01 to 10,000. The results use "
     "2."),
    ("pages/scale_out.py", "so_pp", 2, "Pipeline parallel: not a number; type a whole number from 1 to 4,096. The "
     "results use 2."),
    ("pages/scale_out.py", "so_tokens", 2_000_000_000, "Dataset tokens (one epoch): not a number; type a whole number "
     "from 1 to 1,000,000,000,000,000. The results use 2,000,000,000."),
], ids=["micro_batch", "seq_len", "epochs", "scale_out_pp", "scale_out_tokens"])
def test_an_emptied_box_is_not_a_number_and_the_last_valid_value_is_used(new_app, page, key, valid, words):
    at = new_app().switch_page(page).run()
    at.number_input(key=key).set_value(valid).run()
    no_exception(at)
    before = {m.label: m.value for m in at.metric}
    url = dict(at.query_params)
    assert float(at.query_params[key]) == valid
    at.number_input(key=key).set_value(None).run()  # what the browser sends for "abc"
    no_exception(at)
    assert at.number_input(key=key).value is None  # the box stays empty, not "0"
    errors = _errors(at)
    assert words in errors, errors
    assert not [e for e in errors if "out of range" in e], errors  # no "0 is out of range"
    label = words.split(":")[0]
    stale = [shown(w.value) for w in at.warning if "is not a number" in w.value]
    assert len(stale) == 1 and f"**{label}** is not a number, so {words.rsplit('use ', 1)[1][:-1]} is used" in stale[0], stale
    assert {m.label: m.value for m in at.metric} == before  # the results of the last valid value
    assert dict(at.query_params) == url  # the link keeps the last valid value, nothing bogus
    at.number_input(key=key).set_value(valid).run()  # typing a number again clears the message
    no_exception(at)
    assert not [e for e in _errors(at) if "not a number" in e]
    assert not [w.value for w in at.warning if "not a number" in w.value]


def test_an_emptied_box_on_a_page_that_withholds_results_is_listed_as_not_valid(new_app):
    """Scale out stops on a refused layout (no results drawn): the banner lists the empty box without claiming results
    below."""
    at = new_app().switch_page("pages/scale_out.py").run()
    at.number_input(key="so_gbs").set_value(None).run()
    at.number_input(key="so_pp").set_value(1000).run()  # more stages than the 32 layers: refused
    no_exception(at)
    assert "Global batch (sequences): not a number; type a whole number from 1 to 1,048,576. The results use 64." in \
        _errors(at)
    assert not at.metric and not [w.value for w in at.warning if "Results below" in w.value]
    stale = [w.value for w in at.warning if w.value.startswith("Inputs not valid:")]
    assert len(stale) == 1 and "**Global batch (sequences)** is not a number, so 64 is used" in stale[0], stale
    assert at.query_params["so_gbs"] == "64"


def test_an_emptied_gpu_count_stays_out_of_the_serving_workload(new_app):
    """The GPU count box is drawn on the training workload only; emptied there, the serving workload (which does not
    draw it) reads the last valid count, never None."""
    at = new_app().switch_page("pages/memory.py").run()
    at.number_input(key="num_gpus").set_value(None).run()
    no_exception(at)
    assert "GPUs: not a number; type a whole number from 1 to 1,024. The results use 1." in _errors(at)
    assert at.query_params["num_gpus"] == "1"
    at.radio(key="mem_workload").set_value("Inference").run()
    no_exception(at)
    assert metric(at, "Parameters")


def test_a_box_keeps_its_value_on_the_pages_switched_to(new_app):
    """Drawn with value=None, a box has no default of its own to show: the value is sent on every run, so the box of a
    page switched to (a new widget) shows it and never reads as empty. The freeze-tuning box is not one of the values
    the shell keeps (ui.layout), so only this sends it."""
    at = new_app().switch_page("pages/memory.py").run()
    at.number_input(key="trainable_layers_n").set_value(2).run()
    for page in ("pages/fit.py", "pages/time_cost.py", "pages/plans.py", "pages/memory.py"):
        at.switch_page(page).run()
        no_exception(at)
        assert at.number_input(key="trainable_layers_n").value == 2, page
        assert not [e for e in _errors(at) if "not a number" in e], (page, _errors(at))
