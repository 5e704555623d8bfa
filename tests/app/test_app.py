"""Tests of the Streamlit app (streamlit_app.py and its pages) with ``streamlit.testing.v1.AppTest``.

Expected parameter counts come from ../shared/reference/configs/param_counts.json (``unique_parameters``),
read by the tests only. Hub tests talk only to the local stub of tests/hubstub.py on 127.0.0.1.

Every interactive test runs in two modes, because a ``pages/`` folder next to the entrypoint makes Streamlit take
its multipage-v1 path until some session has called ``st.navigation`` (process-wide flag
``PagesManager.uses_pages_directory``):

* ``first_request``: the test's first run is a fresh server's first request (the flag on: Streamlit runs the page
  file directly, and the app reroutes it through ``st.navigation``); later runs are served.
* ``served``: the flag stays off, so every run executes streamlit_app.py and then the page, as a server does once
  any session has run ``st.navigation``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.model.build import architecture_from_config
from engine.memory.estimate import estimate_memory
from engine.scenario.optimizer import Optimizer
from engine.scenario.training import Attention, Method, Scenario
from engine.model.sources import config_from_catalog
from hubstub import StubRepo
from reference import param_counts, reference_config, require_reference
from apptest_support import hub, no_exception, rendered_text, shown, warnings_shown

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "streamlit_app.py")
require_reference()
PARAM_COUNTS: dict[str, dict] = param_counts()
LLAMA_8B = "meta-llama/Llama-3.1-8B"
QWEN_05B = "Qwen/Qwen2.5-0.5B"
LLAMA_8B_PARAMS = PARAM_COUNTS[LLAMA_8B]["unique_parameters"]  # 8,030,261,248
QWEN_05B_PARAMS = PARAM_COUNTS[QWEN_05B]["unique_parameters"]  # 494,032,768
GPT2 = "openai-community/gpt2"
GPT2_PARAMS = PARAM_COUNTS[GPT2]["unique_parameters"]  # 124,439,808 (checkpoint 137,022,720 incl. attn.bias buffers)
LORA_QKVO_R16 = 13_631_488  # PEFT print_trainable_parameters, Llama-3-8B r=16 on q,k,v,o
TOKEN = "hf_AppTestSecretToken_DoNotRender_42"
GIB_PER_GB = 2**30 / 1e9


@pytest.fixture
def app(new_app) -> AppTest:
    at = new_app().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


# --- helpers --------------------------------------------------------------------------------------------------------


def metrics(at: AppTest) -> dict[str, tuple[str, str]]:
    """label -> (value, help) of every st.metric on the page."""
    return {m.label: (m.value, m.help) for m in at.metric}


def peak_bytes(at: AppTest) -> int:
    """Peak memory in bytes, from the metric's help text ``'160,605,224,960 bytes'``."""
    help_text = metrics(at)["Peak memory"][1]
    assert help_text.endswith(" bytes"), help_text
    return int(help_text.removesuffix(" bytes").replace(",", ""))


def errors(at: AppTest) -> list[str]:
    return [shown(e.value) for e in at.error]  # as read: ui.formats.md_plain's escapes removed


def sidebar_captions(at: AppTest) -> list[str]:
    return [c.value for c in at.sidebar.caption]


def default_form_scenario(**overrides) -> Scenario:
    """The sidebar form's defaults (ui/scenario_form.py): full fine-tuning, the method's default precision (mixed bf16
    for full, pure bf16 for LoRA/QLoRA: engine.scenario.training.DEFAULT_PRECISION), micro batch 1, sequence 2048,
    no accumulation or checkpointing, sdpa; torch fused AdamW (the Trainer default)."""
    fields = dict(method=Method.FULL, optimizer=Optimizer.ADAMW_FUSED, micro_batch_size=1,
                  seq_len=2048, gradient_accumulation_steps=1, gradient_checkpointing=False, attention=Attention.SDPA)
    return Scenario.build(**{**fields, **overrides})


def engine_peak(repo_id: str, **overrides) -> int:
    config, _ = config_from_catalog(repo_id)
    return round(estimate_memory(architecture_from_config(config), default_form_scenario(**overrides)).total_bytes)


# --- Memory page with the catalog ------------------------------------------------------------------------------------


def test_default_app_shows_llama_3_1_8b(app):
    assert app.selectbox(key="catalog_repo").value == LLAMA_8B
    m = metrics(app)
    assert m["Parameters"][0] == "8.03B"
    assert f"{LLAMA_8B_PARAMS:,} unique parameters" in m["Parameters"][1]  # param_counts.json: 8,030,261,248
    assert m["Trainable parameters"][0] == "8.03B"  # full fine-tuning trains everything
    assert peak_bytes(app) == engine_peak(LLAMA_8B)
    assert m["Peak memory"][0] == f"{peak_bytes(app) / 2**30:,.2f} GiB"  # GiB is the default unit
    assert len(app.get("plotly_chart")) == 1  # the technique sweep (the checklist's waterfall waits in its closed expander)
    assert f"{LLAMA_8B_PARAMS:,} parameters" in " ".join(sidebar_captions(app))


def test_changing_the_catalog_model_changes_parameters_and_peak(app):
    before = peak_bytes(app)

    app.selectbox(key="catalog_repo").set_value(QWEN_05B).run()

    no_exception(app)
    m = metrics(app)
    assert m["Parameters"][0] == "494.0M"
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in m["Parameters"][1]  # param_counts.json: 494,032,768
    assert peak_bytes(app) == engine_peak(QWEN_05B)
    assert peak_bytes(app) < before  # a 0.5B model needs far less than an 8B one
    assert "Qwen2.5 0.5B" in " ".join(shown(c.value) for c in app.caption)


@pytest.mark.parametrize("method", [Method.LORA, Method.QLORA])
def test_changing_the_method_changes_trainable_parameters_and_peak(app, method):
    full_peak = peak_bytes(app)

    app.radio(key="method").set_value(method).run()

    no_exception(app)
    m = metrics(app)
    assert m["Parameters"][0] == "8.03B"
    assert m["Trainable parameters"][0] == "13.6M"
    assert m["Trainable parameters"][1].startswith(f"{LORA_QKVO_R16:,} ")  # PEFT: 13,631,488 (r=16 on q,k,v,o)
    assert peak_bytes(app) == engine_peak(LLAMA_8B, method=method)
    assert peak_bytes(app) < full_peak


def test_qlora_needs_less_than_lora_with_bf16_base_weights(app):
    app.radio(key="method").set_value(Method.LORA).run()
    lora = peak_bytes(app)
    app.radio(key="method").set_value(Method.QLORA).run()
    # LoRA's default keeps the frozen base in bf16 (2 B/param); QLoRA stores the decoder linears in 4 bits.
    assert peak_bytes(app) < lora


def test_switching_unit_to_gb_rescales_the_peak(app):
    nbytes = peak_bytes(app)
    gib_text = metrics(app)["Peak memory"][0]
    assert gib_text.endswith(" GiB")

    app.radio(key="unit").set_value("GB").run()

    no_exception(app)
    gb_text = metrics(app)["Peak memory"][0]
    assert gb_text.endswith(" GB")
    assert peak_bytes(app) == nbytes  # same estimate, other unit
    assert gb_text == f"{nbytes / 1e9:,.2f} GB"
    gib, gb = (float(t.split()[0].replace(",", "")) for t in (gib_text, gb_text))
    assert gb / gib == pytest.approx(GIB_PER_GB, abs=0.01 / gib)  # values are shown to 2 decimals


def test_scenario_survives_a_visit_to_another_page(app):
    app.radio(key="method").set_value(Method.LORA).run()
    app.radio(key="unit").set_value("GB").run()
    lora_peak = peak_bytes(app)

    app.switch_page("pages/model.py").run()
    no_exception(app)
    app.switch_page("pages/memory.py").run()

    no_exception(app)
    assert app.radio(key="method").value is Method.LORA
    assert app.radio(key="unit").value == "GB"
    assert metrics(app)["Trainable parameters"][0] == "13.6M"
    assert peak_bytes(app) == lora_peak


# --- other pages -----------------------------------------------------------------------------------------------------


def test_model_page(app):
    app.switch_page("pages/model.py").run()
    no_exception(app)
    assert [t.value for t in app.title] == ["Model architecture"]
    m = metrics(app)
    assert m["Parameters"] == ("8.03B", f"{LLAMA_8B_PARAMS:,}")  # param_counts.json: 8,030,261,248
    assert m["Tied embeddings"][0] == "no"  # Llama 3.1 8B config: tie_word_embeddings false
    assert len(app.get("plotly_chart")) == 1
    assert app.selectbox(key="catalog_repo").value == LLAMA_8B  # the picker is on every page


# The picker is drawn by the entrypoint (ui.layout.app_shell), so its widgets keep their values across pages. On
# Streamlit's multipage-v1 path (a fresh server's first request, and every AppTest run by default) a page runs
# without the entrypoint and draws the picker itself; ui.layout re-assigns the picker's keyed values so the choice
# survives, but a file_uploader's value cannot be re-assigned, so an upload survives a page switch only on the
# entrypoint path.


def test_model_page_follows_the_picked_model(app):
    app.selectbox(key="catalog_repo").set_value(GPT2).run()
    app.switch_page("pages/model.py").run()
    no_exception(app)
    m = metrics(app)
    assert m["Parameters"][1] == f"{GPT2_PARAMS:,}"  # param_counts.json: 124,439,808
    assert m["Tied embeddings"][0] == "yes"  # GPT-2 ties wte and lm_head


def test_uploaded_config_survives_a_visit_to_another_page(app):
    # Also on a fresh server's first request: the app reroutes it through the entrypoint, which keeps the uploader.
    upload(app, json.dumps(reference_config(QWEN_05B)).encode())
    app.switch_page("pages/model.py").run()
    no_exception(app)
    assert app.radio(key="model_source").value == "Upload config.json"
    assert metrics(app)["Parameters"][1] == f"{QWEN_05B_PARAMS:,}"  # param_counts.json: 494,032,768


def test_methodology_page(app):
    app.switch_page("pages/methodology.py").run()
    no_exception(app)
    assert [t.value for t in app.title] == ["Methodology"]
    assert "Issue #" not in rendered_text(app) and "issue #" not in rendered_text(app)


def test_methodology_charts_put_every_validation_row_against_its_measurement(app):
    from engine.validation.memory import validate_all
    from engine.validation.time_report import load_crossval

    app.switch_page("pages/methodology.py").run()
    figs = {c.proto.id.rsplit("-", 1)[-1]: json.loads(c.proto.spec) for c in app.get("plotly_chart")}
    memory = next(f for k, f in figs.items() if k.endswith("memory_validation_chart"))
    speed = next(f for k, f in figs.items() if k.endswith("throughput_validation_chart"))
    rows = validate_all().rows
    for fig, expected in ((memory, [(r.measured_bytes / 2**30, r.estimate_bytes / 2**30) for r in rows]),
                          (speed, [(r.measured, r.loso) for r in load_crossval()])):  # leave-one-source-out
        assert fig["layout"]["xaxis"]["type"] == fig["layout"]["yaxis"]["type"] == "log"
        names = [t.get("name") for t in fig["data"]]
        assert {"within ±10%", "within ±25%", "predicted = measured"} <= set(names)
        line = next(t for t in fig["data"] if t.get("name") == "predicted = measured")
        assert line["x"] == line["y"]  # y = x
        band = next(t for t in fig["data"] if t.get("name") == "within ±10%")
        assert band["y"][0] == pytest.approx(1.1 * band["x"][0])
        (dots,) = [t for t in fig["data"] if t.get("customdata")]
        assert sorted(zip(dots["x"], dots["y"])) == sorted(expected)  # every row at its measured (x), predicted (y)
        assert len(dots["customdata"]) == len(expected)  # the row on hover
    legend = {g: [t["name"] for t in memory["data"] if t.get("legendgroup") == g] for g in ("colour", "symbol")}
    assert set(legend["colour"]) == {r.source for r in rows}  # one colour per source
    assert set(legend["symbol"]) == {r.memory_kind for r in rows}  # one marker per memory kind


def test_model_page_as_the_very_first_request_shows_the_picker(new_app):
    # A bookmarked /model URL on a fresh server: the page must still draw the model picker and the model.
    at = new_app().switch_page("pages/model.py").run()
    no_exception(at)
    assert [t.value for t in at.title] == ["Model architecture"]
    assert at.radio(key="model_source").value == "Catalog"
    assert metrics(at)["Parameters"][1] == f"{LLAMA_8B_PARAMS:,}"


# --- uploads ---------------------------------------------------------------------------------------------------------


def upload(at: AppTest, data: bytes, name: str = "config.json") -> AppTest:
    if at.radio(key="model_source").value != "Upload config.json":
        at.radio(key="model_source").set_value("Upload config.json").run()
        no_exception(at)
    at.file_uploader(key="config_upload").set_value((name, data, "application/json")).run()
    no_exception(at)
    return at


def test_upload_source_without_a_file_asks_for_one(app):
    app.radio(key="model_source").set_value("Upload config.json").run()
    no_exception(app)
    assert errors(app) == []
    assert metrics(app) == {}  # no model, no estimate
    assert any("config.json" in i.value for i in app.info)


def test_upload_valid_reference_config(app):
    upload(app, json.dumps(reference_config(GPT2)).encode())
    assert errors(app) == []
    assert f"{GPT2_PARAMS:,} parameters" in " ".join(sidebar_captions(app))  # param_counts.json: 124,439,808
    assert f"{GPT2_PARAMS:,} unique parameters" in metrics(app)["Parameters"][1]


@pytest.mark.parametrize(
    ("case", "data", "needle"),
    [
        ("not_json", b"this is not JSON", "not valid JSON"),
        ("json_array", b'[{"model_type": "llama"}]', "JSON object"),
        ("unsupported_model_type", b'{"model_type": "bogus", "hidden_size": 64}', "bogus"),
        ("negative_hidden_size",
         json.dumps({**reference_config("meta-llama/Llama-3.2-1B"), "hidden_size": -2048}).encode(), "hidden_size"),
        ("not_utf8", b"\xff\xfe\x00\x80{garbage", "UTF-8"),
    ],
)
def test_upload_bad_config_shows_an_error(app, case, data, needle):
    upload(app, data)
    errs = errors(app)
    assert len(errs) == 1 and needle in errs[0], errs
    assert metrics(app) == {}  # no estimate from a bad config


def test_bad_upload_then_good_upload_recovers(app):
    upload(app, b"[1, 2]")
    assert len(errors(app)) == 1
    upload(app, json.dumps(reference_config(QWEN_05B)).encode())
    assert errors(app) == []
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in metrics(app)["Parameters"][1]


# --- Hub repo id -----------------------------------------------------------------------------------------------------


def resolve_requests(stub) -> list:
    return [r for r in stub.requests if "/resolve/" in r.path]


def test_hub_config_loads(app, hub_stub):
    hub_stub.add("acme/qwen-copy", StubRepo(config=reference_config(QWEN_05B)))
    hub(app, "acme/qwen-copy")
    assert errors(app) == []
    assert f"{QWEN_05B_PARAMS:,} parameters" in " ".join(sidebar_captions(app))  # param_counts.json: 494,032,768
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in metrics(app)["Parameters"][1]
    assert [(r.path, r.has_authorization) for r in resolve_requests(hub_stub)] == [
        ("/acme/qwen-copy/resolve/main/config.json", False)
    ]


def test_hub_missing_repo(app, hub_stub):
    hub(app, "acme/does-not-exist")
    errs = errors(app)
    assert len(errs) == 1 and "acme/does-not-exist" in errs[0] and "not found" in errs[0]
    assert metrics(app) == {}


def test_hub_gated_repo_needs_a_token_that_is_never_rendered(app, hub_stub, new_app):
    repo = "acme/gated-llama"
    hub_stub.valid_tokens.add(TOKEN)
    hub_stub.add(repo, StubRepo(config=reference_config("meta-llama/Llama-3.2-1B"), gated=True))
    llama_1b = PARAM_COUNTS["meta-llama/Llama-3.2-1B"]["unique_parameters"]  # 1,235,814,400

    hub(app, repo)
    errs = errors(app)
    assert len(errs) == 1 and "gated" in errs[0] and repo in errs[0]
    assert app.text_input(key="hf_token_input").proto.type == app.text_input(key="hf_token_input").proto.PASSWORD

    app.text_input(key="hf_token_input").input(TOKEN).run()
    no_exception(app)
    assert errors(app) == []
    assert f"{llama_1b:,} unique parameters" in metrics(app)["Parameters"][1]
    assert resolve_requests(hub_stub)[-1].token_accepted  # the typed token was really sent...
    text = rendered_text(app)
    assert TOKEN not in text and "DoNotRender" not in text  # ...and never rendered
    assert TOKEN not in json.dumps(app.query_params)  # nor put in the URL

    # Another session without a token must not get the gated config from a cache.
    other = new_app().run()
    hub(other, repo)
    errs = errors(other)
    assert len(errs) == 1 and "gated" in errs[0]


def test_hub_unavailable_falls_back_to_the_bundled_copy(app, hub_stub):
    hub_stub.add(QWEN_05B, StubRepo(config=reference_config(QWEN_05B), status=503))
    hub(app, QWEN_05B)
    assert errors(app) == []
    warnings = [w.value for w in app.warning]
    assert any("503" in w and "bundled copy" in w for w in warnings), warnings
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in metrics(app)["Parameters"][1]


@pytest.mark.parametrize("bad_id", ["not a repo id", "owner/name/extra", "https://huggingface.co/acme/x"])
def test_hub_malformed_repo_id(app, hub_stub, bad_id):
    hub(app, bad_id)
    errs = errors(app)
    assert len(errs) == 1 and "owner/name" in errs[0]
    assert resolve_requests(hub_stub) == []  # rejected before any request


def test_a_link_carries_the_hardware_and_flags_bad_keys(new_app):
    # One hardware setting for every page, in the URL; a link made before it (mem_num_gpus, tc_gpu) still reads;
    # an unknown GPU is ignored with a warning naming the closest names, like any other bad value.
    at = new_app()
    for k, v in {"num_gpus": "4", "strategy": "zero3", "gpu": "H100 SXM", "offload": "optimizer", "colour": "red"}.items():
        at.query_params[k] = v
    at.run()
    no_exception(at)
    assert at.session_state["num_gpus"] == 4 and at.session_state["strategy"].value == "zero3"
    assert at.session_state["gpu"] == "NVIDIA H100 80GB" and at.session_state["offload"].value == "optimizer"
    assert any("colour: not a setting of this app" in w for w in warnings_shown(at))

    old = new_app()
    for k, v in {"mem_num_gpus": "2", "tc_gpu": "NVIDIA L4"}.items():
        old.query_params[k] = v
    old.run()
    assert old.session_state["num_gpus"] == 2 and old.session_state["gpu"] == "NVIDIA L4"

    bad = new_app()
    bad.query_params["gpu"] = "H300"
    bad.query_params["num_gpus"] = "0"
    bad.run()
    no_exception(bad)
    warning = next(w for w in warnings_shown(bad) if "ignored" in w)
    assert "gpu='H300': not a GPU of the catalog; closest: NVIDIA H200, NVIDIA H100 80GB" in warning
    assert "num_gpus='0': must be between 1 and 1024" in warning
    assert bad.session_state["gpu"] == "NVIDIA A100 80GB"  # the default: the link's GPU was ignored


def test_serving_weight_precision_shows_its_default_not_choose_an_option(app):
    # Found by a fresh-user review: the default "as stored" was None, which Streamlit draws as "Choose an option".
    app.radio(key="mem_workload").set_value("Inference").run()
    no_exception(app)
    box = app.selectbox(key="inf_weight_precision")
    assert box.value == "as_stored" and box.format_func(box.value) == "as stored (bf16 if not quantized)"
    # Served as stored: Llama-3.1-8B's bf16 weights, 8,030,261,248 x 2 B = 16.06 GB (14.96 GiB) of the catalog default.
    assert next(m.value for m in app.metric if m.label == "Weights") in ("14.96 GiB", "16.06 GB")
