"""One record per fine-tuning method (engine.scenario.methods.RECORDS) and the lists derived from it.

A new PEFT method is a member of ``Method`` and its ``MethodRecord``; these tests fail when the record misses a fact the
app, the estimate, the exports or the importers read.
"""

from __future__ import annotations

import pytest

from engine.importers import peft as peft_importer
from engine.model.architecture import LinearLayer
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.plan.config_export import PEFT_TYPES, _LORA_ADAPTERS
from engine.scenario.methods import RECORDS, Method
from engine.scenario.peft import LORA_FAMILY, PROMPT_METHODS, SEQUENCE_GROWING, adapter_groups
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import DEFAULT_PRECISION, METHOD_LABELS, Scenario


@pytest.mark.parametrize("m", list(Method))
def test_every_method_has_a_complete_record(m):
    r = RECORDS[m]
    assert r.name == m.value and m.record is r and r.label.strip()
    assert isinstance(r.default_precision, PrecisionMode)
    if m is Method.FULL:
        assert r.peft_type is None and r.module_shapes is None
        return
    assert r.peft_type, "the adapter_config.json export and import need PEFT's peft_type"
    assert (r.module_shapes is None) == r.prompt, "a method adapts target modules (shapes) or adds virtual tokens"
    assert not r.grows_sequence or r.prompt


def test_lists_are_derived_from_the_records():
    assert METHOD_LABELS == {m: m.record.label for m in Method}
    assert DEFAULT_PRECISION[Method.FULL] is PrecisionMode.AMP_BF16  # transformers' mixed-precision recipe
    assert {DEFAULT_PRECISION[m] for m in Method if m is not Method.FULL} == {PrecisionMode.BF16}  # PEFT examples
    assert LORA_FAMILY == (Method.LORA, Method.QLORA, Method.DORA) == _LORA_ADAPTERS
    assert PROMPT_METHODS == (Method.PROMPT_TUNING, Method.PREFIX_TUNING, Method.P_TUNING)
    assert SEQUENCE_GROWING == (Method.PROMPT_TUNING, Method.P_TUNING)
    assert PEFT_TYPES == {m: m.record.peft_type for m in Method if m is not Method.FULL}
    # peft 0.21.2 PeftType: every peft_type the exports write is read back to a method
    assert {PEFT_TYPES[m] for m in PEFT_TYPES} <= set(peft_importer.PEFT_TYPES)
    assert peft_importer.RANK_KEY == {"lora": "r", "adalora": "init_r", "vera": "r", "loha": "r", "lokr": "r"}
    assert peft_importer.PROMPT_METHODS == ("prompt_tuning", "prefix_tuning", "p_tuning")


def test_module_shapes_are_peft_s():
    lin = LinearLayer(module="self_attn.q_proj", in_features=4096, out_features=1024, bias=False)
    arch = architecture_from_config(catalog_model("meta-llama/Llama-3.1-8B").config)
    shapes = {m: m.record.module_shapes(arch, lin, 16) for m in Method if m.record.module_shapes}
    assert shapes[Method.LORA] == [("lora_A", (16, 4096)), ("lora_B", (1024, 16))]
    assert shapes[Method.DORA][-1] == ("lora_magnitude_vector", (1024,))
    # LoKr (PEFT tuners/lokr: factorization(dim, -1)): 1024 = 32 x 32, 4096 = 64 x 64; r 16 < 64 / 2 splits w2
    assert shapes[Method.LOKR] == [("lokr_w1", (32, 64)), ("lokr_w2_a", (32, 16)), ("lokr_w2_b", (16, 64))]
    down = LinearLayer(module="mlp.down_proj", in_features=14336, out_features=4096, bias=False)
    assert Method.IA3.record.module_shapes(arch, down, 16) == [("ia3_l", (1, 14336))]  # IA3 scales its input
    groups = adapter_groups(arch, Scenario.build(method="lora", lora_targets=("q_proj",)))
    assert [(g.name, g.shape, g.count) for g in groups] == [("self_attn.q_proj.lora_A", (16, 4096), 32),
                                                            ("self_attn.q_proj.lora_B", (4096, 16), 32)]


def test_the_tracer_builds_every_traceable_method():
    # engine/trace/peft_build.peft_config (torch side) has a branch per method; QLoRA is not traceable (bitsandbytes)
    import ast
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "engine/trace/peft_build.py").read_text(encoding="utf-8")
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "peft_config")
    named = {c.value for c in ast.walk(fn) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert {m.value for m in Method if m is not Method.QLORA} <= named


@pytest.mark.parametrize("m", [m for m in Method if m is not Method.FULL])
def test_every_method_exports_an_adapter_file_that_imports_back(m):
    from engine.importers import import_configs
    from engine.plan.config_export import config_files
    from engine.plan.plans import Plan

    p = Plan(name="p", model_repo_id="meta-llama/Llama-3.2-1B", gpu="H100 SXM", dataset_total_tokens=10**6, method=m)
    f = next(f for f in config_files(p) if f.name == "adapter_config.json")
    got = import_configs([(f.name, f.text.encode())]).scenario().method
    assert got is (Method.LORA if m is Method.QLORA else m)  # the 4-bit base is the bitsandbytes file's
