"""AppTest tests of links (ui/share.py): a GPU name of several GPUs (read as the catalog's GPU for it, or refused),
and the Memory page's serving settings in the URL."""

from __future__ import annotations

from apptest_support import no_exception, shown, warnings_shown


def link_warning(at) -> str:
    return " ".join(w for w in warnings_shown(at) if "Some settings in the link were ignored" in w)


def link_note(at) -> str:
    """The link's notes as shown (Markdown escaped: the link's text is shown as typed), unescaped."""
    return " ".join(shown(w.value) for w in at.warning if w.value.startswith("Read from the link: "))


def test_a_family_gpu_name_in_a_link_applies_the_catalogs_gpu_and_says_so(new_app):
    # gpu=V100 opened the V100 16GB silently, then was refused; it now opens the 16GB (the catalog's GPU for "V100",
    # its alias in data/gpus.csv) with a warning naming the 32GB, and the URL names the GPU in full from then on.
    at = new_app()
    at.query_params["gpu"] = "V100"
    at.query_params["num_gpus"] = "2"
    at.run()
    no_exception(at)
    assert link_note(at) == ("Read from the link: gpu='V100': 'V100' read as NVIDIA V100 16GB (the catalog's GPU for "
                             "that name); it also fits NVIDIA V100 32GB: give the full name for another")
    assert not link_warning(at)
    assert at.session_state["gpu"] == "NVIDIA V100 16GB" and at.session_state["num_gpus"] == 2
    assert at.query_params["gpu"] == "NVIDIA V100 16GB"

    # An old link's key (tc_gpu, before the pages shared one GPU) with "H100": the SXM board, said.
    old = new_app()
    old.query_params["tc_gpu"] = "H100"
    old.run()
    no_exception(old)
    assert old.session_state["gpu"] == "NVIDIA H100 80GB"
    assert link_note(old) == ("Read from the link: tc_gpu='H100': 'H100' read as NVIDIA H100 80GB (the catalog's GPU "
                              "for that name); it also fits NVIDIA H100 80GB PCIe, NVIDIA H100 NVL: give the full name "
                              "for another")

    # The link's text is shown as typed, not as Markdown: "*V100*" is the V100's name with stars, not an emphasis.
    starred = new_app()
    starred.query_params["gpu"] = "*V100*"
    starred.run()
    assert starred.session_state["gpu"] == "NVIDIA V100 16GB"
    assert "gpu='\\*V100\\*': '\\*V100\\*' read as NVIDIA V100 16GB" in starred.warning[0].value

    exact = new_app()
    exact.query_params["gpu"] = "V100-32GB"
    exact.run()
    assert exact.session_state["gpu"] == "NVIDIA V100 32GB" and not link_warning(exact) and not link_note(exact)


def test_a_gpu_name_of_several_gpus_that_is_no_alias_is_ignored_with_its_candidates(new_app):
    at = new_app()
    at.query_params["gpu"] = "V100 SXM2"
    at.query_params["num_gpus"] = "2"
    at.run()
    no_exception(at)
    assert ("gpu='V100 SXM2': ambiguous: it names 2 GPUs of the catalog (NVIDIA V100 16GB, NVIDIA V100 32GB) and the "
            "catalog declares none of them its GPU for that name; give one of these names") in link_warning(at)
    assert at.session_state["gpu"] == "NVIDIA A100 80GB"  # the default, not a guessed V100
    assert at.session_state["num_gpus"] == 2  # the link's other settings still apply


SERVING = {"mem_workload": "Inference", "inf_weight_precision": "int4", "inf_kv_dtype": "fp8", "inf_concurrency": "16",
           "inf_seq_len": "4096"}


def _serving_peak(seq_len: int, concurrency: int) -> str:
    # The same serving scenario through the engine: Llama 3.1 8B (the catalog default), int4 weights, fp8 KV cache.
    from engine.memory.inference import InferenceScenario, KvCacheDtype, WeightPrecision, estimate_inference
    from engine.model.build import architecture_from_config
    from engine.model.sources import config_from_catalog
    from engine.units import fmt_bytes

    arch = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
    isc = InferenceScenario.build(weight_precision=WeightPrecision.INT4, kv_cache_dtype=KvCacheDtype.FP8,
                                  concurrency=concurrency, seq_len=seq_len)
    return fmt_bytes(estimate_inference(arch, isc).total_bytes, "GiB")


def test_the_serving_settings_are_in_the_link_and_a_link_reproduces_them(new_app):
    at = new_app().run()
    at.radio(key="mem_workload").set_value("Inference").run()
    no_exception(at)
    # From the first serving run: the URL carries the workload and every serving input, defaults included.
    assert {k: at.query_params[k] for k in SERVING} == {
        "mem_workload": "Inference", "inf_weight_precision": "as_stored", "inf_kv_dtype": "bf16", "inf_concurrency": "1",
        "inf_seq_len": "8192"}
    at.selectbox(key="inf_weight_precision").set_value("int4").run()
    at.selectbox(key="inf_kv_dtype").set_value("fp8").run()
    at.number_input(key="inf_concurrency").set_value(16).run()
    at.number_input(key="inf_seq_len").set_value(4096).run()
    no_exception(at)
    params = dict(at.query_params)
    assert {k: params[k] for k in SERVING} == SERVING
    peak = next(m.value for m in at.metric if m.label == "Peak memory")
    assert peak == _serving_peak(4096, 16)

    fresh = new_app()
    for k, v in params.items():
        fresh.query_params[k] = v
    fresh.run()
    no_exception(fresh)
    assert not link_warning(fresh)
    assert fresh.radio(key="mem_workload").value == "Inference"
    assert fresh.selectbox(key="inf_kv_dtype").value.value == "fp8"
    assert fresh.number_input(key="inf_concurrency").value == 16
    assert next(m.value for m in fresh.metric if m.label == "Peak memory") == peak
    assert dict(fresh.query_params) == params


def test_bad_serving_values_in_a_link_are_ignored_with_a_warning(new_app):
    at = new_app()
    for k, v in {"mem_workload": "inference", "inf_weight_precision": "int3", "inf_kv_dtype": "fp4",
                 "inf_concurrency": "0", "inf_seq_len": "abc"}.items():
        at.query_params[k] = v
    at.run()
    no_exception(at)
    text = link_warning(at)
    for needle in ("inf_weight_precision='int3': must be one of as_stored, bf16, fp16, int8, fp8, int4",
                   "inf_kv_dtype='fp4': must be one of bf16, fp16, fp8, int8",
                   "inf_concurrency='0': must be between 1 and 1048576",
                   "inf_seq_len='abc': must be an integer between 1 and 2097152"):
        assert needle in text, text
    assert at.radio(key="mem_workload").value == "Inference"  # any letter case
    assert at.selectbox(key="inf_weight_precision").value == "as_stored"  # the defaults, not the bad values
    assert at.number_input(key="inf_concurrency").value == 1


def test_an_old_link_without_serving_settings_still_opens_the_same_training_view(new_app):
    old = {"model": "Qwen/Qwen2.5-0.5B", "method": "qlora", "micro_batch_size": "4", "gpu": "NVIDIA L4"}
    at = new_app()
    for k, v in old.items():
        at.query_params[k] = v
    at.run()
    no_exception(at)
    assert not link_warning(at)
    assert at.radio(key="mem_workload").value == "Fine-tuning"
    assert at.number_input(key="micro_batch_size").value == 4 and at.session_state["gpu"] == "NVIDIA L4"
    assert {k: at.query_params[k] for k in old} == old


def test_a_links_unknown_key_and_lora_targets_are_shown_as_typed_not_as_markdown(new_app):
    # Anyone can write a link: a key "[docs](https://evil.example)" must read as that text in the warning, not become
    # a live link in the app (ui/share.py escapes the link's text with ui.formats.md_plain).
    at = new_app()
    at.query_params["[docs](https://evil.example)"] = "1"
    at.query_params["lora_targets"] = "q_proj,**bold**"
    at.query_params["method"] = "lora"
    at.run()
    no_exception(at)
    raw = " ".join(w.value for w in at.warning)
    # escaped, and the auto-link broken by a zero-width space after "https:" (ui.formats.md_plain)
    assert "\\[docs\\]\\(https:\u200b//evil\\.example\\)" in raw and "](https://evil" not in raw
    assert "\\*\\*bold\\*\\*" in raw
    assert any("[docs](https://evil.example): not a setting of this app" in w for w in warnings_shown(at))


def test_a_token_pasted_as_hub_repo_or_revision_in_a_link_is_neither_shown_nor_kept(new_app):
    at = new_app()
    at.query_params["hub"] = "meta-llama/Llama-3.2-1B"
    at.query_params["rev"] = "hf_SECRETTOKEN999"
    at.run()
    no_exception(at)
    text = " ".join(w.value for w in at.warning) + " ".join(e.value for e in at.error) + " ".join(at.query_params.values())
    assert "SECRETTOKEN" not in text
    assert at.session_state["hub_revision"] == ""
    bad = new_app()
    bad.query_params["hub"] = "hf_SECRETTOKEN999"
    bad.run()
    no_exception(bad)
    assert "SECRETTOKEN" not in " ".join(w.value for w in bad.warning) + " ".join(bad.query_params.values())
    assert any("not a repo id" in w for w in warnings_shown(bad))
