"""issue 16 item 4: the fit verdict (fits / tight / does_not_fit) and its safety margin (engine.plan.verdict)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from engine.cli import main
from engine.hardware.gpus import find_gpu
from engine.memory.device import CUDA_CONTEXT_BYTES
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.plan.fit import check_fit
from engine.plan.verdict import SAFETY_MARGIN_FRACTION, Verdict, fit_verdict
from engine.scenario.training import Scenario

# GPT-2-large: GPT-2's config with n_embd 1280, n_layer 36, n_head 20 (openai-community/gpt2-large config.json);
# 774,030,080 parameters, the published 774M.
GPT2_LARGE = {**config_from_catalog("openai-community/gpt2")[0], "n_embd": 1280, "n_layer": 36, "n_head": 20}


def test_margin_is_the_published_reserve_spread_above_the_modelled_reserve():
    assert SAFETY_MARGIN_FRACTION == pytest.approx(0.20 - 0.10)
    usable = 80e9
    # Modelled device total = 1.1 x allocated + context; tight until 1.2 x allocated + context fits.
    edge_fit = (usable - CUDA_CONTEXT_BYTES) / 1.1
    edge_tight = (usable - CUDA_CONTEXT_BYTES) / 1.2
    assert fit_verdict(edge_fit * 1.0001, usable) is Verdict.DOES_NOT_FIT
    assert fit_verdict(edge_fit * 0.9999, usable) is Verdict.TIGHT
    assert fit_verdict(edge_tight * 1.0001, usable) is Verdict.TIGHT
    assert fit_verdict(edge_tight * 0.9999, usable) is Verdict.FITS
    assert Verdict.TIGHT.fits and not Verdict.DOES_NOT_FIT.fits


def test_gpt2_large_on_a_v100_with_422_kb_to_spare_is_tight():
    # Reported as running out of memory: micro batch 4 x 1,024 tokens, full fine-tuning, on a V100 32GB.
    arch = architecture_from_config(GPT2_LARGE)
    assert arch.total_parameters == 774_030_080
    fit = check_fit(arch, Scenario.build(micro_batch_size=4, seq_len=1024), find_gpu("V100 32GB"))
    assert fit.fits and 0 < fit.headroom_bytes < 1_000_000  # 422,042 bytes
    assert fit.verdict is Verdict.TIGHT


def test_cli_keeps_fits_and_adds_verdict_with_a_warning(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GPT2_LARGE))
    assert main(["estimate", "--config", str(cfg), "--micro-batch-size", "4", "--seq-len", "1024", "--gpu", "V100 32GB"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is True and out["verdict"] == "tight"
    assert any(w.startswith("tight: may not fit on 1 x NVIDIA V100 32GB") for w in out["warnings"])
    assert main(["estimate", "--config", str(cfg), "--micro-batch-size", "1", "--seq-len", "128", "--gpu", "V100 32GB"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "fits"
    assert main(["estimate", "--config", str(cfg), "--micro-batch-size", "16", "--seq-len", "1024", "--gpu", "V100 32GB"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["verdict"] == "does_not_fit"


def test_plans_carry_the_verdict_and_old_files_without_it_still_load():
    from engine.plan.plans import CSV_COLUMNS, Plan, evaluate_plan, plans_from_csv, plans_to_csv

    plan = Plan(name="gpt2 large", model_repo_id="custom/gpt2-large", micro_batch_size=4, seq_len=1024, gpu="V100 32GB",
                dataset_total_tokens=1_000_000)
    result = evaluate_plan(plan, GPT2_LARGE)
    assert result.verdict is Verdict.TIGHT and result.fits
    data = plans_to_csv([(plan, result)], version="0.1.0", exported_at="2026-01-01T00:00:00Z")
    row = next(csv.DictReader(io.StringIO(data.decode())))
    assert "verdict" in CSV_COLUMNS and row["verdict"] == "tight" and row["fits"] == "true"
    back = plans_from_csv(data, lambda repo, rev: GPT2_LARGE)
    assert plans_to_csv(back.plans, version=back.app_version, exported_at=back.exported_at) == data  # exact round trip
    # A file written before the verdict column: it loads, and the verdict is recomputed.
    rows = list(csv.reader(io.StringIO(data.decode())))
    i = rows[0].index("verdict")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([c for j, c in enumerate(r) if j != i] for r in rows)
    old = buf.getvalue().encode()
    old_import = plans_from_csv(old, lambda repo, rev: GPT2_LARGE)
    assert not old_import.errors and old_import.plans[0][1].verdict is Verdict.TIGHT
