"""Plans (engine/plan/plans.py): evaluation, CSV export/import round trip, bad rows, generated training code, CLI."""

from __future__ import annotations

import ast
import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest


from engine.cli import main
from engine.plan.cost import estimate_plan
from engine.model.build import architecture_from_config
from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.scenario.optimizer import Optimizer
from engine.memory.parallel import Strategy
from engine.plan.plans import CSV_COLUMNS, Plan, evaluate_plan, plans_from_csv, plans_to_csv
from engine.plan.training_code import training_code, zero3_config
from engine.model.sources import config_from_catalog

ROOT = Path(__file__).resolve().parents[2]
LLAMA_8B = "meta-llama/Llama-3.1-8B"
QWEN_05B = "Qwen/Qwen2.5-0.5B"
STAMP = "2026-01-02T03:04:05Z"


def qlora_plan(**overrides) -> Plan:
    fields = dict(name="llama qlora", model_repo_id=LLAMA_8B, method="qlora", precision="amp_bf16",
                  optimizer="paged_adamw_8bit", micro_batch_size=2, seq_len=1024, gradient_accumulation_steps=8,
                  gradient_checkpointing=True, lora_r=32, lora_alpha=64.0, lora_targets=("q_proj", "v_proj"),
                  gpu="NVIDIA A100 80GB", num_gpus=2, strategy="zero3", dataset_examples=10_000,
                  dataset_avg_tokens=512.0, epochs=3.0)
    return Plan(**{**fields, **overrides})


def full_plan(**overrides) -> Plan:
    fields = dict(name="qwen full", model_repo_id=QWEN_05B, method="full", precision="fp32", gpu="NVIDIA H100 80GB SXM",
                  dataset_total_tokens=5_000_000, price_source="cheapest")
    return Plan(**{**fields, **overrides})


@pytest.fixture(scope="module")
def evaluated():
    plans = [qlora_plan(), full_plan(gpu=find_gpu("H100 SXM").name)]
    return [(p, evaluate_plan(p)) for p in plans]


@pytest.fixture(scope="module")
def exported(evaluated) -> bytes:
    return plans_to_csv(evaluated, version="0.1.0", exported_at=STAMP)


# --- evaluation ---------------------------------------------------------------------------------------------------------


def test_evaluate_plan_matches_the_engine():
    plan = qlora_plan()
    result = evaluate_plan(plan)
    arch = architecture_from_config(config_from_catalog(LLAMA_8B)[0])
    est = estimate_memory(arch, plan.scenario())
    assert result.total_bytes == est.total_bytes
    assert sum(result.components_bytes.values()) == pytest.approx(est.total_bytes)
    pe = estimate_plan(arch, plan.scenario(), plan.dataset(), find_gpu(plan.gpu), 2, plan.strategy, estimate=est)
    assert (result.fits, result.hours, result.cost_usd_on_demand) == (pe.fits, pe.run.hours, pe.run.cost_usd_on_demand)
    assert result.per_gpu_peak_bytes == pe.per_gpu_peak_bytes


def test_evaluate_plan_takes_a_config_dict_for_a_model_not_in_the_catalog():
    config = config_from_catalog(QWEN_05B)[0]
    plan = full_plan(model_repo_id="acme/not-bundled")
    assert evaluate_plan(plan, config).total_bytes == evaluate_plan(full_plan()).total_bytes


def test_plan_rejects_an_invalid_scenario():
    with pytest.raises(ValueError, match="micro_batch_size"):
        qlora_plan(micro_batch_size=0)


# --- CSV ------------------------------------------------------------------------------------------------------------


def test_export_has_one_row_per_plan_with_units_and_stamp(exported):
    rows = list(csv.DictReader(io.StringIO(exported.decode("utf-8"))))
    assert len(rows) == 2 and tuple(rows[0]) == CSV_COLUMNS
    for col in ("total_bytes", "total_gb", "train_hours", "cost_on_demand_usd", "cost_spot_usd", "mem_weights_bytes",
                "mem_activations_bytes", "per_gpu_peak_bytes"):
        assert col in rows[0]
    assert rows[0]["app_version"] == "0.1.0" and rows[0]["exported_at"] == STAMP
    assert rows[0]["lora_targets"] == "q_proj,v_proj" and rows[0]["strategy"] == "zero3"


def test_round_trip_export_import_export_is_byte_identical(exported):
    imported = plans_from_csv(exported)
    assert imported.errors == () and len(imported.plans) == 2
    assert (imported.app_version, imported.exported_at) == ("0.1.0", STAMP)
    again = plans_to_csv(imported.plans, version=imported.app_version, exported_at=imported.exported_at)
    assert again == exported


def test_a_new_export_stamps_the_current_version_and_time(evaluated):
    row = next(csv.DictReader(io.StringIO(plans_to_csv(evaluated).decode())))
    assert row["app_version"] == "0.1.0" and row["exported_at"].endswith("Z") and row["exported_at"] != STAMP


def test_imported_numbers_are_recomputed_not_trusted(exported):
    text = exported.decode().replace(",31984336896,", ",1,")  # any tampered output column is ignored
    imported = plans_from_csv(text.encode())
    assert plans_to_csv(imported.plans, version="0.1.0", exported_at=STAMP) == exported


def corrupt(exported: bytes, column: str, value: str, row: int = 1) -> bytes:
    rows = list(csv.reader(io.StringIO(exported.decode())))
    rows[row][rows[0].index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode()


def only_second_loads(imported, needle: str) -> None:
    assert [p.name for p, _ in imported.plans] == ["qwen full"]
    assert len(imported.errors) == 1 and imported.errors[0].row == 1, imported.errors
    assert needle in imported.errors[0].reason, imported.errors[0].reason


def test_import_unknown_gpu(exported):
    only_second_loads(plans_from_csv(corrupt(exported, "gpu", "Voodoo 5 6000")), "unknown GPU")


A100_NOTE = ("'A100' read as NVIDIA A100 80GB (the catalog's GPU for that name); it also fits NVIDIA A100 40GB, "
             "NVIDIA A100 40GB PCIe, NVIDIA A100 80GB PCIe: give the full name for another")


def test_import_of_a_family_gpu_name_loads_the_catalogs_gpu_and_says_so(exported, evaluated):
    # A hand-edited file (or a published run) saying "A100" loads on the A100 80GB, the catalog's GPU for that name,
    # under that name, and the import says so: re-exported, the file is the one that named the GPU in full.
    imported = plans_from_csv(corrupt(exported, "gpu", "A100"))
    assert not imported.errors
    assert imported.warnings == (f"row 1: {A100_NOTE}",)
    (plan, result), second = imported.plans
    assert plan == evaluated[0][0] and plan.gpu == "NVIDIA A100 80GB"
    assert result == evaluated[0][1] and second == evaluated[1]
    assert plans_to_csv(imported.plans, version=imported.app_version, exported_at=imported.exported_at) == exported


def test_import_of_a_name_of_several_gpus_that_is_no_alias_is_refused_with_the_candidates(exported):
    # "A100 SXM" fits the 40GB and 80GB SXM boards and the catalog declares neither its GPU for that name.
    only_second_loads(plans_from_csv(corrupt(exported, "gpu", "A100 SXM")),
                      "ambiguous GPU 'A100 SXM': it names 2 GPUs of the catalog (NVIDIA A100 40GB, NVIDIA A100 80GB)")


def test_import_negative_batch(exported):
    only_second_loads(plans_from_csv(corrupt(exported, "micro_batch_size", "-4")), "micro_batch_size")


def test_import_unknown_method(exported):
    only_second_loads(plans_from_csv(corrupt(exported, "method", "bitfit")), "method")


def test_import_row_with_a_missing_cell(exported):
    lines = exported.split(b"\n")
    lines[1] = lines[1].rsplit(b",", 1)[0]  # the first plan's row lost its last cell
    only_second_loads(plans_from_csv(b"\n".join(lines)), "cells for")


def test_import_missing_required_column_refuses_the_file_once(exported):
    # issue 16 items 8 and 13: one file-level reason (row 0), not one per row, and no plan loads.
    rows = list(csv.reader(io.StringIO(exported.decode())))
    col = rows[0].index("gpu")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([r[:col] + r[col + 1:] for r in rows])
    imported = plans_from_csv(buf.getvalue().encode())
    assert imported.plans == () and [e.row for e in imported.errors] == [0]
    assert "missing required column 'gpu'" in imported.file_error


def test_import_missing_optional_column_uses_its_default_and_says_so(exported):
    rows = list(csv.reader(io.StringIO(exported.decode())))
    col = rows[0].index("calibration")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([r[:col] + r[col + 1:] for r in rows])
    imported = plans_from_csv(buf.getvalue().encode())
    assert imported.errors == () and len(imported.plans) == 2
    assert all(plan.calibration == 1.0 for plan, _ in imported.plans)
    assert imported.warnings == ("column 'calibration' is missing: every plan uses its default, '1.0'",)


def test_import_non_utf8_row(exported):
    lines = exported.split(b"\n")
    lines[1] = lines[1].replace(b"llama qlora", b"llama \xff\xfe qlora")
    only_second_loads(plans_from_csv(b"\n".join(lines)), "UTF-8")


def test_import_model_not_bundled_without_a_resolver(exported):
    only_second_loads(plans_from_csv(corrupt(exported, "model_repo_id", "acme/unknown")), "acme/unknown")


def test_import_empty_file():
    assert plans_from_csv(b"").errors[0].reason == "the file is empty"


def test_no_token_in_an_exported_csv():
    token = "hf_PlansSecretToken_NeverExport_7"
    assert not [f for f in Plan.model_fields if "hf" in f or f in ("token", "secret")]  # no field could hold one
    plan = qlora_plan()
    assert token.encode() not in plans_to_csv([(plan, evaluate_plan(plan))])


# --- generated code ---------------------------------------------------------------------------------------------------


def calls(code: str) -> dict[str, dict]:
    """Keyword arguments (literals only) of each call, by function name."""
    out: dict[str, dict] = {}
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            kw = {}
            for k in node.keywords:
                try:
                    kw[k.arg] = ast.literal_eval(k.value)
                except ValueError:
                    kw[k.arg] = ast.unparse(k.value)
            out[node.func.id] = kw
    return out


def test_qlora_code_is_valid_python_and_matches_the_plan():
    plan = qlora_plan()
    c = calls(training_code(plan))
    ta, lora, bnb = c["TrainingArguments"], c["LoraConfig"], c["BitsAndBytesConfig"]
    assert ta["per_device_train_batch_size"] == 2 and ta["gradient_accumulation_steps"] == 8
    assert ta["gradient_checkpointing"] is True and ta["bf16"] is True and ta["fp16"] is False
    assert ta["optim"] == Optimizer.PAGED_ADAMW_8BIT.hf_name == "paged_adamw_8bit"
    assert ta["deepspeed"] == "deepspeed_config"
    assert lora["r"] == 32 and lora["lora_alpha"] == 64.0 and lora["target_modules"] == ["q_proj", "v_proj"]
    assert bnb["load_in_4bit"] is True and bnb["bnb_4bit_quant_type"] == "nf4" and bnb["bnb_4bit_use_double_quant"] is True
    tree = ast.parse(training_code(plan))
    ds = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and n.targets[0].id == "deepspeed_config")
    assert ast.literal_eval(ds) == zero3_config(plan) and zero3_config(plan)["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize("precision, bf16, fp16", [("fp32", False, False), ("amp_bf16", True, False),
                                                   ("amp_fp16", False, True), ("bf16", True, False)])
def test_full_code_precision_flags(precision, bf16, fp16):
    c = calls(training_code(full_plan(precision=precision, optimizer="adamw")))
    assert "LoraConfig" not in c and "BitsAndBytesConfig" not in c and "deepspeed" not in c["TrainingArguments"]
    assert (c["TrainingArguments"]["bf16"], c["TrainingArguments"]["fp16"]) == (bf16, fp16)
    assert c["TrainingArguments"]["optim"] == "adamw_torch"


@pytest.mark.parametrize("strategy", list(Strategy), ids=lambda s: s.value)
def test_code_for_every_strategy_is_valid_python(strategy):
    plan = qlora_plan(strategy=strategy)
    code = training_code(plan)
    ta = calls(code)["TrainingArguments"]
    if strategy.value.startswith("zero"):
        ds = next(n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Assign) and n.targets[0].id == "deepspeed_config")
        assert ast.literal_eval(ds)["zero_optimization"]["stage"] == int(strategy.value[-1])
        assert ta["deepspeed"] == "deepspeed_config"
    else:
        assert "deepspeed" not in ta and "deepspeed_config" not in code
    assert ("fsdp" in ta) == strategy.value.startswith("fsdp")


def test_lora_code_resolves_the_default_targets_and_fp4():
    c = calls(training_code(qlora_plan(lora_targets=None, quant_type="fp4", double_quant=False, strategy="ddp")))
    assert c["LoraConfig"]["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert c["BitsAndBytesConfig"]["bnb_4bit_quant_type"] == "fp4"
    assert c["BitsAndBytesConfig"]["bnb_4bit_use_double_quant"] is False


# --- CLI ------------------------------------------------------------------------------------------------------------


def test_cli_plan_writes_the_csv_of_the_estimate_options(tmp_path, capsysbinary):
    args = ["plan", "--model", LLAMA_8B, "--offline", "--method", "qlora", "--precision", "amp_bf16", "--optimizer", "paged_adamw_8bit",
            "--micro-batch-size", "2", "--seq-len", "1024", "--gradient-accumulation-steps", "8", "--gradient-checkpointing",
            "--lora-r", "32", "--lora-alpha", "64", "--lora-targets", "q_proj,v_proj", "--gpu", "a100 80gb",
            "--num-gpus", "2", "--strategy", "zero3", "--examples", "10000", "--avg-tokens", "512", "--epochs", "3",
            "--name", "llama qlora"]
    assert main(args) == 0
    out = capsysbinary.readouterr().out
    row = next(csv.DictReader(io.StringIO(out.decode())))
    expected = next(csv.DictReader(io.StringIO(plans_to_csv([(qlora_plan(), evaluate_plan(qlora_plan()))]).decode())))
    assert {k: v for k, v in row.items() if k != "exported_at"} == {k: v for k, v in expected.items() if k != "exported_at"}


def test_cli_plan_input_round_trips_to_a_file(tmp_path, exported):
    src, dst = tmp_path / "plans.csv", tmp_path / "out.csv"
    src.write_bytes(exported)
    assert main(["plan", "--input", str(src), "--output", str(dst)]) == 0
    assert dst.read_bytes() == exported


def test_cli_plan_input_lists_bad_rows_on_stderr(tmp_path, exported, capsys):
    src = tmp_path / "plans.csv"
    src.write_bytes(corrupt(exported, "gpu", "Voodoo 5 6000"))
    assert main(["plan", "--input", str(src)]) == 0
    err = capsys.readouterr().err
    assert "row 1: unknown GPU" in err


def test_cli_plan_input_says_how_a_family_gpu_name_was_read(tmp_path, exported, capsys):
    src, dst = tmp_path / "plans.csv", tmp_path / "out.csv"
    src.write_bytes(corrupt(exported, "gpu", "A100"))
    assert main(["plan", "--input", str(src), "--output", str(dst)]) == 0
    assert capsys.readouterr().err.splitlines() == [f"warning: row 1: {A100_NOTE}"]
    assert dst.read_bytes() == exported  # the row now names NVIDIA A100 80GB


def test_cli_plan_needs_a_gpu_and_a_dataset():
    proc = subprocess.run([sys.executable, "-m", "engine", "plan", "--model", LLAMA_8B, "--offline"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "needs --gpu" in proc.stderr


def test_torch_compile_column_round_trips_and_old_files_load_without_it():
    """Scenario.torch_compile is a plan column (a Scenario field): a compiled torchtune plan exports and imports back
    with its compiled loss counted; a file from before the column loads every plan uncompiled, and says so."""
    plan = qlora_plan(name="tt compile", method="lora", optimizer="adamw_fused", framework="torchtune",
                      torch_compile=True, strategy="ddp", num_gpus=1)
    result = evaluate_plan(plan)
    assert "torch_compile" in CSV_COLUMNS
    data = plans_to_csv([(plan, result)], version="0.1.0", exported_at=STAMP)
    (back, back_result), = plans_from_csv(data).plans
    assert back.torch_compile is True and back.scenario().loss.value == "torchtune_chunked_compiled"
    assert back_result.total_bytes == result.total_bytes
    rows = list(csv.reader(io.StringIO(data.decode())))
    col = rows[0].index("torch_compile")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([r[:col] + r[col + 1:] for r in rows])
    old = plans_from_csv(buf.getvalue().encode())
    assert old.errors == () and old.plans[0][0].torch_compile is False
    assert old.warnings == ("column 'torch_compile' is missing: every plan uses its default, 'false'",)
