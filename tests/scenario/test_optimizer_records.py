"""One record per optimizer (engine.scenario.optimizer.RECORDS), and every list of optimizers derived from it.

Adding an optimizer is a member of ``Optimizer`` plus its ``OptimizerRecord``; these tests fail when the record misses
a fact another part of the product reads (label, host-loop kind, export spelling, importer names, tracer build).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from engine.importers import import_configs
from engine.importers.values import HF_OPTIMIZERS, record_names, sgd_momentum
from engine.plan.config_export import config_files
from engine.plan.plans import Plan
from engine.plan.training_code import training_code
from engine.scenario.optimizer import EXPORTS, RECORDS, HostLoop, Optimizer, StepKernel
from engine.scenario.training import Method

ROOT = Path(__file__).resolve().parents[2]
TRAINER_FILES = {"sft_config.yaml": "optim", "axolotl.yaml": "optimizer", "llamafactory.yaml": "optim"}


def _method(o: Optimizer) -> Method:
    return {"full": Method.FULL, "lora_pairs": Method.LORA}.get(o.record.requires, Method.FULL)


def _plan(o: Optimizer, method: Method | None = None) -> Plan:
    return Plan(name="p", model_repo_id="meta-llama/Llama-3.2-1B", gpu="H100 SXM", dataset_total_tokens=10**6,
                method=method or _method(o), optimizer=o, lora_targets=("q_proj", "v_proj"))


@pytest.mark.parametrize("o", list(Optimizer))
def test_every_optimizer_has_a_complete_record(o):
    r = RECORDS[o]
    assert r.name == o.value and o.record is r
    assert r.label.strip(), "the app's widget shows the label"
    assert isinstance(r.host_loop, HostLoop) and isinstance(r.step_kernel, StepKernel)
    assert set(r.export_notes) <= set(EXPORTS), "export notes are keyed by the exports that name an optimizer"
    if r.trainer_optim is None:  # the exports must be able to say how to build it instead
        assert r.unnamed_note and r.build_code
    else:
        assert r.trainer_optim_args or r.trainer_optim in r.trainer_imports, "an export must import back to it"


def test_importer_name_maps_come_from_the_records():
    for field in ("trainer_imports", "torchtune_components", "deepspeed_types"):
        names = record_names(field)
        assert names == {n: o for o in Optimizer for n in getattr(o.record, field)}
    assert {k: v for k, v in HF_OPTIMIZERS.items() if isinstance(v, Optimizer)} == record_names("trainer_imports")
    # transformers OptimizerNames (5.24.0): the aliases the Trainer maps to the same optimizers
    assert HF_OPTIMIZERS["adamw_bnb_8bit"] is Optimizer.ADAMW_8BIT and HF_OPTIMIZERS["adamw_torch"] is Optimizer.ADAMW


def test_ui_labels_tracer_list_and_time_kinds_come_from_the_records():
    from engine.plan.checklist import MEMORY_SAVING_OPTIMIZERS
    from engine.time.memory_bound import FUSED_OPTIMIZERS, MULTI_PASS_OPTIMIZER_PASSES, optimizer_passes
    from engine.time.overhead import PYTHON_SECONDS_PER_TENSOR, SECONDS_PER_KERNEL, optimizer_host_seconds
    from engine.trace import TRACEABLE_OPTIMIZERS

    assert TRACEABLE_OPTIMIZERS == {"adamw", "adamw_fused", "adafactor", "sgd", "sgd_momentum", "galore_adamw", "lora_fa"}
    assert set(FUSED_OPTIMIZERS) == {Optimizer.ADAMW_FUSED, Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT,
                                     Optimizer.PAGED_ADAMW_32BIT, Optimizer.LION_8BIT, Optimizer.LION_32BIT,
                                     Optimizer.GALORE_ADAMW_8BIT_LAYERWISE}  # bitsandbytes' kernel per tensor
    assert set(MEMORY_SAVING_OPTIMIZERS) == {Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT,
                                             Optimizer.PAGED_ADAMW_32BIT, Optimizer.LION_8BIT}
    assert optimizer_passes(Optimizer.ADAMW) == MULTI_PASS_OPTIMIZER_PASSES and optimizer_passes(Optimizer.LION_8BIT) == 1
    # 250 tensors: bitsandbytes and Adafactor loop in Python per tensor; torch's steps launch per chunk of 100
    assert optimizer_host_seconds(Optimizer.ADAMW_8BIT, 250) == pytest.approx(250 * PYTHON_SECONDS_PER_TENSOR)
    assert optimizer_host_seconds(Optimizer.ADAFACTOR, 250) == pytest.approx(250 * PYTHON_SECONDS_PER_TENSOR)
    assert optimizer_host_seconds(Optimizer.ADAMW_FUSED, 250) == pytest.approx(3 * 1 * SECONDS_PER_KERNEL)
    assert optimizer_host_seconds(Optimizer.ADAMW, 250) == pytest.approx(3 * 12 * SECONDS_PER_KERNEL)


def test_the_app_labels_every_optimizer():
    from ui.scenario_form import OPTIMIZER_LABELS

    assert all(OPTIMIZER_LABELS[o] == o.record.label for o in Optimizer)


def test_the_tracer_builds_every_traceable_optimizer():
    source = (ROOT / "engine/trace/step.py").read_text(encoding="utf-8")
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "make_optimizer")
    built = {c.comparators[0].value for c in ast.walk(fn) if isinstance(c, ast.Compare)
             and isinstance(c.left, ast.Name) and c.left.id == "name" and isinstance(c.comparators[0], ast.Constant)}
    assert {o.value for o in Optimizer if o.record.traceable} == built


def _snippet_optimizer(code: str):
    """The optimizer the snippet's TrainingArguments(...) selects: (optim, optim_args) read from the call."""
    call = next(n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
                and getattr(n.func, "id", None) == "TrainingArguments")
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return kw.get("optim"), kw.get("optim_args")


@pytest.mark.parametrize("o", list(Optimizer))
def test_no_snippet_or_export_names_another_optimizer(o):
    p = _plan(o)
    optim, args = _snippet_optimizer(training_code(p))
    if o.record.trainer_optim is None:
        code = training_code(p)
        assert optim is None and o.record.unnamed_note in code and o.record.build_code[0] in code
    else:
        named = HF_OPTIMIZERS[optim]
        parsed = dict(kv.split("=") for kv in args.split(",")) if args else None
        assert (Optimizer.SGD_MOMENTUM if sgd_momentum(named, parsed) else named) is o
    for f in config_files(p):
        if f.name not in TRAINER_FILES:
            continue
        body = yaml.safe_load(f.text)
        if o.record.trainer_optim is None:
            assert TRAINER_FILES[f.name] not in body, f"{f.name} must not name an optimizer in place of {o.value}"
            assert any(o.value in x and o.record.unnamed_note in x for x in f.lost), f.lost
            assert o.record.unnamed_note in f.text  # said at the top of the file
        else:
            r = import_configs([(f.name, f.text.encode())])
            assert r.scenario().optimizer is o, (f.name, f.text)
