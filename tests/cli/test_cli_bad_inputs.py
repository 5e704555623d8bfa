"""The CLI's answers to bad input (issue 25 items 2, 5, 6): exit status 2 and one line on stderr naming the flag (not
the engine's field), values cut, a token-looking text never echoed nor sent to the Hub, a damaged data file named by
file, row and column; ``--num-gpus 1 --strategy zero3`` as the app computes it; ``FINETUNE_FIT_HUB_TIMEOUT`` obeyed.

The Hub rows talk to the local stub of tests/hubstub.py; a damaged data file is a copy of ``data/`` with one cell
changed, pointed at with ``FINETUNE_FIT_DATA`` (the loaders' own switch: no loading code is mocked).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hubstub import StubRepo

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"  # the shape of a Hub user access token: hf_ + 34 letters and digits
LLAMA_1B = "meta-llama/Llama-3.2-1B"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr[-2000:]
    return lines[0]


@pytest.fixture
def local_config(tmp_path) -> Path:
    """Llama 3.2 1B's config.json (the bundled catalog copy) as a local file."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(json.loads((ROOT / "data/models/meta-llama__Llama-3.2-1B.json").read_text())["config"]))
    return path


# --- item 2: token-looking text ---------------------------------------------------------------------------------------


def test_a_token_in_the_repo_id_is_not_echoed_nor_sent(hub_stub):
    line = one_line_error(run_cli("estimate", "--model", f"meta-llama/{TOKEN}"))
    assert TOKEN not in line and "looks like a Hugging Face token" in line
    assert hub_stub.requests == []  # nothing was sent to the Hub
    assert hub_stub.unexpected == []


def test_a_token_as_the_revision_is_never_put_in_the_request_path(hub_stub):
    from engine.model.sources import config_from_catalog

    hub_stub.add("acme/model", StubRepo(config=config_from_catalog(LLAMA_1B)[0]))
    line = one_line_error(run_cli("estimate", "--model", "acme/model", "--revision", TOKEN))
    assert TOKEN not in line and "The revision holds (text that looks like a Hugging Face token" in line
    assert hub_stub.requests == []  # nothing was asked of the Hub


def test_a_token_as_base_model_is_not_echoed_in_the_error_nor_the_json(tmp_path):
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text(f"base_model: {TOKEN}\nadapter: lora\nmicro_batch_size: 1\n")
    line = one_line_error(run_cli("estimate", "--from-config", str(cfg), "--offline"))
    assert TOKEN not in line and "base_model or its revision holds (text that looks like a Hugging Face token" in line
    done = run_cli("estimate", "--from-config", str(cfg), "--offline", "--model", LLAMA_1B)
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    assert json.loads(done.stdout)["import"]["mapped"]["base_model"].startswith("(text that looks like")


def test_a_token_in_an_argparse_error_is_redacted(local_config):
    line = one_line_error(run_cli("estimate", "--config", str(local_config), "--seq-len", TOKEN))
    assert TOKEN not in line and "hf_…(token-like text not shown)" in line


# --- item 6: flags, long values, GPU names, strategy, timeout ------------------------------------------------------------


@pytest.mark.parametrize(("args", "needle"), [
    (("--micro-batch-size", "0"), "--micro-batch-size: Input should be greater than or equal to 1 (got 0)"),
    (("--seq-len", "10000000"), "--seq-len: Input should be less than or equal to 2097152 (got 10000000)"),
    (("--lora-r", "0", "--method", "lora"), "--lora-r: Input should be greater than or equal to 1 (got 0)"),
    (("--lora-dropout", "2", "--method", "lora"), "--lora-dropout: "),
])
def test_field_errors_name_the_flag(local_config, args, needle):
    line = one_line_error(run_cli("estimate", "--config", str(local_config), *args))
    assert needle in line
    assert "micro_batch_size:" not in line and "seq_len:" not in line and "lora_r:" not in line


@pytest.mark.parametrize("flag", ["--seq-len", "--micro-batch-size", "--lora-r"])
def test_a_5000_digit_number_is_not_echoed_whole(local_config, flag):
    line = one_line_error(run_cli("estimate", "--config", str(local_config), flag, "9" * 5000))
    assert len(line) < 300 and "5,000 characters" in line


def test_an_unknown_gpu_lists_the_closest_few_not_the_catalog(local_config):
    line = one_line_error(run_cli("estimate", "--config", str(local_config), "--gpu", "nonexistent"))
    listed = line.split("nearest in spelling: ")[1].split(")")[0]
    assert 1 <= len(listed.split(", ")) <= 3, line
    assert "28 GPUs of the catalog" in line and "NVIDIA RTX 3090" not in line


def test_one_gpu_with_zero3_is_the_apps_estimate(local_config):
    # The app trains one GPU without sharding whatever the strategy (ui.hardware: engine.plan.strategy); the CLI did
    # add ZeRO-3's gathered units and buckets on one GPU (Llama 3.1 8B LoRA: 33.04 GiB against the app's 31.60).
    common = ("estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "lora", "--gpu", "H100 SXM")
    zero3 = json.loads(run_cli(*common, "--num-gpus", "1", "--strategy", "zero3").stdout)
    plain = json.loads(run_cli(*common, "--strategy", "ddp").stdout)
    default = json.loads(run_cli(*common).stdout)
    assert zero3["per_gpu_peak_bytes"] == plain["per_gpu_peak_bytes"] == default["per_gpu_peak_bytes"]
    assert round(zero3["per_gpu_peak_bytes"] / 2**30, 2) == 31.60  # the Memory page's figure (README)
    assert zero3["strategy"] == "ddp" and zero3["min_gpus_strategy"] == "zero3"
    assert default["min_gpus_strategy"] == "zero3"  # one default for the app and the CLI


def test_the_hub_timeout_setting_is_obeyed_by_the_cli(hub_stub):
    from engine.model.sources import config_from_catalog

    hub_stub.add("acme/slow", StubRepo(config=config_from_catalog(LLAMA_1B)[0], delay_s=6.0))
    start = time.monotonic()
    line = one_line_error(run_cli("estimate", "--model", "acme/slow", env={"FINETUNE_FIT_HUB_TIMEOUT": "0.5"}))
    assert "no answer within 0.5 s" in line
    assert time.monotonic() - start < 5.5  # not the stub's 6 s (the process start included)


# --- item 5: a damaged bundled data file ---------------------------------------------------------------------------------


def _damaged_copy(tmp_path: Path, name: str, column: str, row: int, value: str) -> Path:
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data", data)
    with (data / name).open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    rows[row][rows[0].index(column)] = value
    with (data / name).open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    return data


@pytest.mark.parametrize(("name", "column", "value", "needles"), [
    ("gpus.csv", "memory_bandwidth_gbps", "fast", ("gpus.csv row 4", "memory_bandwidth_gbps", "(got 'fast')")),
    ("gpus.csv", "usable_mib", "-5", ("gpus.csv row 4", "usable_mib", "greater than 0")),
    ("gpu_prices.csv", "on_demand_usd_per_hour", "1e999", ("gpu_prices.csv row 4", "on_demand_usd_per_hour")),
    ("gpu_prices.csv", "date", "yesterday", ("gpu_prices.csv row 4", "date")),
])
def test_a_damaged_data_file_is_one_line_naming_file_row_and_column(tmp_path, local_config, name, column, value,
                                                                    needles):
    data = _damaged_copy(tmp_path, name, column, 3, value)  # the 3rd data row: line 4 of the file
    line = one_line_error(run_cli("estimate", "--config", str(local_config), "--gpu", "H100 SXM", "--dataset-tokens",
                                  "1000000", env={"FINETUNE_FIT_DATA": str(data)}))
    for needle in needles:
        assert needle in line, line


# --- item 7: the README's GPT-2-large claim is what the CLI says -----------------------------------------------------


@pytest.mark.parametrize(("precision", "verdict", "headroom"), [
    ("amp_fp16", "tight", 422_042), ("amp_bf16", "tight", 422_042), ("fp32", "does_not_fit", -4_540_994_662),
])
def test_readme_gpt2_large_on_a_v100_32gb(tmp_path, precision, verdict, headroom):
    # README "What changed in the numbers": GPT-2-large (GPT-2's config with n_embd 1280, n_layer 36, n_head 20,
    # openai-community/gpt2-large's config.json) full fine-tuning at 4 x 1,024 on a V100 32GB: tight in mixed
    # precision (422 KB to spare), short by 4.5 GB in fp32.
    from engine.model.sources import config_from_catalog

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**config_from_catalog("openai-community/gpt2")[0], "n_embd": 1280, "n_layer": 36,
                               "n_head": 20}))
    done = run_cli("estimate", "--config", str(cfg), "--micro-batch-size", "4", "--seq-len", "1024", "--gpu",
                   "V100 32GB", "--precision", precision)
    out = json.loads(done.stdout)
    assert (out["verdict"], out["headroom_bytes"]) == (verdict, headroom)
    readme = (ROOT / "README.md").read_text()
    assert "has 422 KB to spare and is\n  now tight; in fp32 (Trainer without `fp16=True`) it does not fit (4.5 GB short)" in readme


def test_a_token_as_a_plan_name_is_refused_not_exported(local_config):
    line = one_line_error(run_cli("plan", "--config", str(local_config), "--gpu", "H100 SXM", "--dataset-tokens",
                                  "1000000", "--name", TOKEN))
    assert TOKEN not in line and "name: looks like a Hugging Face token" in line
