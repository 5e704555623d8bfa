"""A fresh session restores its scenario from the URL (ui/share.py): what a browser gets when it reconnects to another
replica after its own died, or to the same server restarted. The browser still shows the last URL; the new session
must read every setting back from it, never write the defaults over it."""

from __future__ import annotations

from apptest_support import no_exception, warnings_shown
from engine.scenario.training import Method

QWEN_05B = "Qwen/Qwen2.5-0.5B"


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_a_new_session_on_the_last_url_restores_the_whole_time_and_cost_scenario(new_app):
    at = new_app()
    at.query_params["model"] = QWEN_05B
    at.switch_page("pages/time_cost.py").run()
    no_exception(at)
    at.radio(key="method").set_value(Method.LORA).run()
    at.number_input(key="micro_batch_size").set_value(4).run()
    at.radio(key="tc_size_mode").set_value("Total tokens").run()
    at.number_input(key="tc_total_tokens").set_value(9_000_000).run()
    at.number_input(key="tc_epochs").set_value(2.0).run()
    at.number_input(key="tc_runs").set_value(3).run()
    at.toggle(key="tc_more").set_value(True).run()  # "More run options" (ui.scenario_form) draws the next two
    at.toggle(key="tc_fused").set_value(True).run()
    at.radio(key="tc_basis").set_value("spot").run()
    at.selectbox(key="tc_max_gpus").set_value(16).run()
    sources = at.selectbox(key="tc_price_source").options
    at.selectbox(key="tc_price_source").set_value(sources[-1]).run()
    no_exception(at)
    url, shown = dict(at.query_params), metrics(at)
    assert url["tc_total_tokens"] == "9000000" and url["tc_max_gpus"] == "16" and url["tc_fused"] == "true"

    fresh = new_app()  # another session (another replica): only the browser's URL carries over
    for k, v in url.items():
        fresh.query_params[k] = v
    fresh.switch_page("pages/time_cost.py").run()
    no_exception(fresh)
    assert not warnings_shown(fresh) or not any("ignored" in w for w in warnings_shown(fresh))
    assert dict(fresh.query_params) == url  # the URL is not rewritten to the defaults
    for key, value in (("tc_size_mode", "Total tokens"), ("tc_total_tokens", 9_000_000), ("tc_epochs", 2.0),
                       ("tc_runs", 3), ("tc_fused", True), ("tc_basis", "spot"), ("tc_max_gpus", 16),
                       ("tc_price_source", sources[-1]), ("micro_batch_size", 4), ("method", Method.LORA)):
        assert fresh.session_state[key] == value, key
    assert metrics(fresh) == shown  # the same tokens, hours and cost


def test_a_bad_price_source_or_gpu_limit_in_a_link_is_ignored_with_a_warning(new_app):
    at = new_app()
    at.query_params["model"] = QWEN_05B
    at.query_params["tc_price_source"] = "Bob's GPUs"
    at.query_params["tc_max_gpus"] = "7"
    at.switch_page("pages/time_cost.py").run()
    no_exception(at)
    text = " ".join(warnings_shown(at))
    assert "tc_price_source=\"Bob's GPUs\": not a price source" in text and "tc_max_gpus='7': must be one of" in text


def test_a_repo_id_that_does_not_load_leaves_no_other_model_in_the_url(new_app, hub_stub):
    # A fresh user's run: after a Hub repo id that does not load (unknown here; an offline Hub without a bundled copy
    # alike) the page showed its error and no model, but the URL still said model=<the catalog model shown before>, so
    # the link (and a reconnect) reopened a model the page was not showing. The URL now follows the picker: hub=<the
    # repo id>, no model=; a new session on it shows the same error, not the old model.
    from hubstub import StubRepo

    hub_stub.add("acme/tiny", StubRepo(config={"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                               "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256}))
    at = new_app().run()
    assert dict(at.query_params)["model"] == "meta-llama/Llama-3.1-8B"
    at.radio(key="model_source").set_value("Hub repo id").run()
    at.text_input(key="hub_repo_id").input("acme/missing").run()
    no_exception(at)
    assert [e.value for e in at.error if "acme/missing" in e.value] and not at.metric
    url = dict(at.query_params)
    assert "model" not in url and url["hub"] == "acme/missing" and url["method"] == "full"
    at.switch_page("pages/model.py").run()  # another page: still no other model in the link
    assert "model" not in dict(at.query_params) and dict(at.query_params)["hub"] == "acme/missing"

    fresh = new_app()
    for k, v in url.items():
        fresh.query_params[k] = v
    fresh.run()
    no_exception(fresh)
    assert [e.value for e in fresh.error if "acme/missing" in e.value] and not fresh.metric
    assert dict(fresh.query_params) == url

    at.text_input(key="hub_repo_id").input("acme/tiny").run()  # a repo that loads: shown, and the link names it
    no_exception(at)
    assert dict(at.query_params)["hub"] == "acme/tiny" and "model" not in dict(at.query_params)
