"""Structure of data/traced_scenarios.csv, the traced ground truth (scripts/trace_table.py).

Torch-free: reads the CSV only. Accuracy of the engine against these rows is tested elsewhere.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest

from engine.model.catalog import catalog_model
from engine.scenario.training import Scenario
from engine.trace.result import CATEGORIES, PHASES

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "data" / "traced_scenarios.csv"
MODELS = {"gpt2", "llama", "qwen", "mistral"}
INT_FIELDS = ("micro_batch_size", "seq_len", "gradient_accumulation_steps", "lora_r", "num_virtual_tokens", "galore_rank")
BOOL_FIELDS = ("gradient_checkpointing", "double_quant", "prepare_kbit_training", "fused_cross_entropy", "use_rslora",
               "gradient_checkpointing_offload", "liger_kernels")


def _rows() -> list[dict[str, str]]:
    with TABLE.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


ROWS = _rows()


def scenario_of(row: dict[str, str]) -> Scenario:
    """The row's Scenario, from the CSV text of its fields."""
    fields: dict = {}
    for name in Scenario.model_fields:
        if name not in row:
            continue
        text = row[name]
        if name in INT_FIELDS:
            fields[name] = int(text)
        elif name in BOOL_FIELDS:
            assert text in ("True", "False"), (name, text)
            fields[name] = text == "True"
        elif name in ("lora_alpha", "lora_dropout"):
            fields[name] = float(text)
        elif name in ("lora_targets", "modules_to_save"):
            fields[name] = text or None
        elif name == "loraplus_lr_ratio":
            fields[name] = float(text) if text else None
        else:
            fields[name] = text
    return Scenario.build(**fields)


def config_of(row: dict[str, str]) -> dict:
    kind, _, where = row["config_source"].partition(":")
    if kind == "catalog":
        return catalog_model(where).config
    assert kind == "file" and (ROOT / where).is_file(), row["config_source"]
    import json

    return json.loads((ROOT / where).read_text())


def test_table_size_and_models():
    assert 80 <= len(ROWS) <= 200
    assert {r["model"] for r in ROWS} == MODELS


@pytest.mark.parametrize("i", range(len(ROWS)))
def test_row_is_consistent(i):
    row = ROWS[i]
    scenario = scenario_of(row)
    config_of(row)
    peak = int(row["peak_allocated_bytes"])
    phases = {p: int(row[f"{p}_peak_bytes"]) for p in PHASES}
    parts = {c: int(row[f"{c}_bytes"]) for c in CATEGORIES}
    assert peak > 0 and int(row["first_step_peak_bytes"]) > 0
    assert sum(parts.values()) == peak  # the steady-state components sum to the peak
    assert all(v >= 0 and v % 512 == 0 for v in parts.values())  # 512-byte allocator blocks
    assert row["peak_phase"] in PHASES and phases[row["peak_phase"]] == peak == max(phases.values())
    total, trainable = int(row["total_parameters"]), int(row["trainable_parameters"])
    if scenario.method.value != "full":  # PEFT: adapters, or a trainable copy of the embedding / LM head
        assert 0 < trainable < total / (4 if scenario.modules_to_save else 10)
    else:
        assert trainable == total
    if scenario.attention.value == "eager":
        assert row["attention_kernel"] == "eager"
    else:
        assert row["attention_kernel"] in ("flash", "memory_efficient", "math")
    if not scenario.precision.value.startswith("amp_") and scenario.method.value != "dora":
        assert parts["weight_copies"] == 0  # only autocast casts weights (and DoRA, to its fp32 input's dtype)
    weight_bytes = 2 if scenario.precision.value in ("bf16", "fp16") else 4
    if scenario.method.value == "full":
        assert parts["parameters"] >= weight_bytes * total
        if row["peak_phase"] == "optimizer" and scenario.optimizer.value in ("adamw", "adamw_fused"):
            assert parts["gradients"] >= weight_bytes * total
            assert parts["optimizer_states"] >= 2 * weight_bytes * total
    if scenario.optimizer.value == "sgd":
        assert parts["optimizer_states"] == 0
    assert row["torch_version"] and row["transformers_version"] and row["peft_version"]


def test_each_factor_covered_on_each_model():
    seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for row in ROWS:
        s = scenario_of(row)
        f = seen[row["model"]]
        f["precision"].add(s.precision.value)
        f["gc"].add(s.gradient_checkpointing)
        f["method"].add(s.method.value)
        f["attention"].add(s.attention.value)
        f["shape"].add((s.micro_batch_size, s.seq_len))
        f["optimizer"].add(s.optimizer.value)
    for model in MODELS:
        f = seen[model]
        assert {"fp32", "amp_bf16", "bf16"} <= f["precision"], model
        assert f["gc"] == {False, True}, model
        assert {"full", "lora"} <= f["method"], model
        assert {"eager", "sdpa"} <= f["attention"], model
        assert {(1, 512), (4, 1024)} <= f["shape"], model
        assert {"adamw_fused", "adamw", "adafactor", "sgd"} <= f["optimizer"], model


def test_checkpointing_lowers_the_activation_peak():
    """Same model, precision, shape and optimizer: with gradient checkpointing, the forward peak is lower."""
    by_key = {}
    for row in ROWS:
        s = scenario_of(row)
        if s.method.value == "full" and s.attention.value == "sdpa" and s.optimizer.value == "adamw_fused" \
                and s.gradient_accumulation_steps == 1:
            by_key[(row["model"], s.precision.value, s.micro_batch_size, s.seq_len, s.gradient_checkpointing)] = row
    pairs = [(by_key[k], by_key[k[:-1] + (True,)]) for k in by_key if not k[-1] and k[:-1] + (True,) in by_key]
    assert len(pairs) >= 12
    for off, on in pairs:
        assert int(on["forward_peak_bytes"]) < int(off["forward_peak_bytes"])
