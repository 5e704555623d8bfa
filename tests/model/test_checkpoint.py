"""Checkpoint parameter counts read from safetensors headers served by the local Hub stub.

Expected totals: ../shared/reference/configs/param_counts.json ``checkpoint_total`` (the Hub's safetensors
count) and ``unique_parameters`` (in memory), with the notes that explain the two differences.
"""

import json
import struct

from engine.model.build import architecture_from_config
from engine.model.checkpoint import explain_difference, fetch_checkpoint_count
from hubstub import StubRepo
from reference import param_counts, reference_config, require_reference

require_reference()
COUNTS = param_counts()


def safetensors_header(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A safetensors file holding only its header (8-byte little-endian length + JSON), as the format spec says.

    The stub serves it; huggingface_hub reads the header with a range request and never the data.
    """
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        size = n * {"BF16": 2, "F32": 4, "U8": 1}[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


def tensors_of(repo_id: str, extra: dict | None = None) -> dict[str, tuple[str, list[int]]]:
    """One safetensors entry per parameter tensor of our architecture (names made up, shapes real)."""
    arch = architecture_from_config(reference_config(repo_id))
    out = {f"{g.name}.{i}": ("BF16", list(g.shape)) for g in arch.tensors for i in range(g.count)}
    return {**out, **(extra or {})}


def test_single_file_checkpoint_with_a_stored_tied_head(hub_stub):
    # Qwen3-0.6B: tie_word_embeddings true, yet the checkpoint stores lm_head.weight (151,936 x 1,024).
    rid = "Qwen/Qwen3-0.6B"
    body = safetensors_header(tensors_of(rid, {"lm_head.weight": ("BF16", [151_936, 1_024])}))
    hub_stub.add(rid, StubRepo(config=reference_config(rid), files={"model.safetensors": body}))
    count = fetch_checkpoint_count(rid, timeout_s=5)
    assert count.total == COUNTS[rid]["checkpoint_total"] == 751_632_384
    assert count.by_dtype == {"BF16": 751_632_384} and count.files == 1
    arch = architecture_from_config(reference_config(rid))
    causes = explain_difference(arch, reference_config(rid), count.total)
    assert len(causes) == 1 and "tied LM head (155,582,464" in causes[0]
    # Only headers travelled: every GET asked for a byte range.
    gets = [r for r in hub_stub.requests if r.method == "GET" and r.path.endswith(".safetensors")]
    assert gets


def test_sharded_checkpoint_with_buffers(hub_stub):
    # GPT-2: the checkpoint holds 12 attn.bias buffers of 1,024 x 1,024 that transformers does not load.
    rid = "openai-community/gpt2"
    tensors = tensors_of(rid, {f"h.{i}.attn.bias": ("F32", [1, 1, 1_024, 1_024]) for i in range(12)})
    names = list(tensors)
    shard1 = {n: tensors[n] for n in names[: len(names) // 2]}
    shard2 = {n: tensors[n] for n in names[len(names) // 2 :]}
    index = {"metadata": {"total_size": 0},
             "weight_map": {**{n: "model-00001-of-00002.safetensors" for n in shard1},
                            **{n: "model-00002-of-00002.safetensors" for n in shard2}}}
    hub_stub.add(rid, StubRepo(config=reference_config(rid), files={
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": safetensors_header(shard1),
        "model-00002-of-00002.safetensors": safetensors_header(shard2),
    }))
    count = fetch_checkpoint_count(rid, timeout_s=5)
    assert count.total == COUNTS[rid]["checkpoint_total"] == 137_022_720 and count.files == 2
    arch = architecture_from_config(reference_config(rid))
    assert "attn.bias" in explain_difference(arch, reference_config(rid), count.total)[0]


def test_no_safetensors_and_gated_give_a_reason_not_an_error(hub_stub):
    hub_stub.add("acme/binonly", StubRepo(config={"model_type": "llama"}, files={"pytorch_model.bin": b"x"}))
    count = fetch_checkpoint_count("acme/binonly", timeout_s=5)
    assert count.total is None and "no safetensors" in count.reason
    hub_stub.add("acme/gated", StubRepo(config={}, gated=True, files={"model.safetensors": b""}))
    count = fetch_checkpoint_count("acme/gated", token=False, timeout_s=5)
    assert count.total is None and "gated" in count.reason


def test_equal_counts_need_no_explanation():
    rid = "meta-llama/Llama-3.1-8B"
    arch = architecture_from_config(reference_config(rid))
    assert explain_difference(arch, reference_config(rid), COUNTS[rid]["checkpoint_total"]) == []
    odd = explain_difference(arch, reference_config(rid), COUNTS[rid]["checkpoint_total"] + 7)
    assert "no known cause" in odd[0]


def test_cli_params_model_prints_the_checkpoint_count(hub_stub):
    import os
    import subprocess
    import sys
    from pathlib import Path

    rid = "Qwen/Qwen3-0.6B"
    body = safetensors_header(tensors_of(rid, {"lm_head.weight": ("BF16", [151_936, 1_024])}))
    hub_stub.add(rid, StubRepo(config=reference_config(rid), files={"model.safetensors": body}))
    result = subprocess.run([sys.executable, "-m", "engine", "params", "--model", rid], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2], env=os.environ.copy(), timeout=60)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["total_parameters"] == COUNTS[rid]["unique_parameters"]
    assert out["checkpoint"]["total_parameters"] == COUNTS[rid]["checkpoint_total"]
    assert out["checkpoint"]["difference"] == 155_582_464
    assert "tied LM head" in out["checkpoint"]["explanations"][0]


def test_model_page_shows_both_counts_for_a_hub_model(hub_stub):
    import streamlit as st
    from streamlit.testing.v1 import AppTest
    from pathlib import Path

    st.cache_data.clear()
    rid = "Qwen/Qwen3-0.6B"
    body = safetensors_header(tensors_of(rid, {"lm_head.weight": ("BF16", [151_936, 1_024])}))
    hub_stub.add(rid, StubRepo(config=reference_config(rid), files={"model.safetensors": body}))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "streamlit_app.py"), default_timeout=30).run()
    at.radio(key="model_source").set_value("Hub repo id").run()
    at.text_input(key="hub_repo_id").set_value(rid).run()
    at.switch_page("pages/model.py").run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["In memory (this tool)"] == "596,049,920"  # param_counts.json unique_parameters
    assert metrics["Stored in safetensors"] == "751,632,384"  # param_counts.json checkpoint_total
    assert metrics["Difference"] == "+155,582,464"
    assert any("tied LM head" in m.value for m in at.markdown)
    st.cache_data.clear()


def test_offline_mode_is_said_in_words_not_an_exception_name(hub_stub, monkeypatch, new_app):
    # HF_HUB_OFFLINE=1: the count said "the Hub could not be read (OfflineModeIsEnabled)"; now the words the config
    # read uses, and no request is made.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    count = fetch_checkpoint_count("Qwen/Qwen3-0.6B", timeout_s=5)
    assert count.total is None
    assert count.reason == "the Hub could not be read (offline mode is on: HF_HUB_OFFLINE is set)"
    assert not hub_stub.requests
    at = new_app().switch_page("pages/model.py").run()
    at.button(key="read_checkpoint").click().run()  # a catalog model: read on demand
    assert not at.exception
    said = " ".join(i.value for i in at.info if "No checkpoint count" in i.value)
    assert "offline mode is on" in said and "OfflineModeIsEnabled" not in said, said
