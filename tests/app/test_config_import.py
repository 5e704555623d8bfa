"""The Memory page's "Import a training config" section (AppTest): paste or upload, the mapped / ignored /
unsupported tables, "Apply to the sidebar" setting the sidebar's widgets and the model, and the "open in" links."""

from __future__ import annotations

from pathlib import Path

from apptest_support import metric, no_exception

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training_configs"

AXOLOTL = """base_model: Qwen/Qwen2.5-0.5B
adapter: qlora
load_in_4bit: true
lora_r: 32
lora_alpha: 64
lora_target_linear: true
sequence_len: 1024
micro_batch_size: 4
gradient_accumulation_steps: 2
num_epochs: 2
optimizer: paged_adamw_8bit
bf16: auto
gradient_checkpointing: true
sdp_attention: true
liger_rms_norm: true
learning_rate: 0.0002
"""


def _paste(at, text: str):
    at.text_area(key="cfg_import_text").input(text).run()
    no_exception(at)
    return at


def test_paste_shows_mapped_ignored_unsupported_and_applies_to_the_sidebar(new_app):
    at = _paste(new_app().run(), AXOLOTL)
    assert at.error == []
    frames = [d.value for d in at.dataframe]
    mapped = next(f for f in frames if "value used" in f.columns)
    assert dict(zip(mapped["key"], mapped["value used"]))["micro_batch_size"] == "4"
    unsupported = next(f for f in frames if "effect (not modelled yet)" in f.columns)
    assert list(unsupported["key"]) == ["liger_rms_norm"]
    at.button(key="cfg_import_apply").click().run()
    no_exception(at)
    assert at.radio(key="model_source").value == "Catalog" and at.selectbox(key="catalog_repo").value == "Qwen/Qwen2.5-0.5B"
    assert at.number_input(key="micro_batch_size").value == 4 and at.number_input(key="seq_len").value == 1024
    assert at.number_input(key="grad_accum").value == 2 and at.number_input(key="lora_r").value == 32
    assert at.radio(key="method").value.value == "qlora" and at.selectbox(key="precision").value.value == "bf16"
    assert at.selectbox(key="optimizer").value.value == "paged_adamw_8bit"
    assert any(ms.value == ["all-linear"] for ms in at.multiselect)
    assert any("Applied" in s.value for s in at.success)
    assert metric(at, "Parameters") == "494.0M"  # Qwen2.5-0.5B: 494,032,768 unique parameters (param_counts.json)
    links = [p.proto for p in at.get("page_link")]
    assert [link.label for link in links] == ["GPU fit", "Time & cost", "Plans"]
    for link in links:  # the scenario rides in the URL that ui.share writes
        assert "model=Qwen%2FQwen2.5-0.5B" in link.query_string and "micro_batch_size=4" in link.query_string
        assert "method=qlora" in link.query_string and "lora_targets=all-linear" in link.query_string


def test_upload_several_files_sets_the_gpus(new_app):
    at = new_app().run()
    files = [(n, (FIXTURES / n).read_bytes(), "application/octet-stream")
             for n in ("sft_config_trl015.yaml", "accelerate_fsdp.yaml")]
    at.file_uploader(key="cfg_import_files").set_value(files).run()
    no_exception(at)
    at.button(key="cfg_import_apply").click().run()
    no_exception(at)
    assert at.number_input(key="num_gpus").value == 8
    assert at.selectbox(key="strategy").value.value == "fsdp_full_shard"
    assert at.selectbox(key="offload").value.value == "optimizer_and_params"
    assert at.toggle(key="gradient_checkpointing").value is True
