"""End-to-end tests of the command line, ``python -m engine params|estimate``, run as a subprocess.

Expected numbers come from the reference data in ../shared/reference (read by the tests only, never by the
product): ``configs/param_counts.json`` gives the unique parameter count transformers loads for each repo id.
Hub tests talk only to the local stub of tests/hubstub.py on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hubstub import StubRepo, refused_endpoint

from reference import config_path, param_counts, require_reference
from engine.cli import main

require_reference()
ROOT = Path(__file__).resolve().parents[2]
PARAM_COUNTS: dict[str, dict] = param_counts()
LLAMA_8B = "meta-llama/Llama-3.1-8B"
LLAMA_8B_PARAMS = 8_030_261_248  # param_counts.json, meta-llama/Llama-3.1-8B unique_parameters
LLAMA_1B = "meta-llama/Llama-3.2-1B"
LLAMA_1B_PARAMS = 1_235_814_400  # param_counts.json, meta-llama/Llama-3.2-1B unique_parameters
QWEN3_06B_PARAMS = 596_049_920  # param_counts.json, Qwen/Qwen3-0.6B unique (checkpoint total 751,632,384: tied lm_head)
TOKEN = "hf_CliTestTokenNeverPrinted_0123456789"


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m engine ARGS`` from the project root with the test's interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=ROOT,
        env=env if env is not None else os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_one_line_error(proc: subprocess.CompletedProcess) -> str:
    """Non-zero exit, nothing on stdout, exactly one line on stderr, no traceback; returns that line."""
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_reference_set_is_complete():
    # The reference data holds 20 models, each with its config next to param_counts.json.
    assert len(PARAM_COUNTS) == 20
    for repo_id in PARAM_COUNTS:
        assert config_path(repo_id).is_file(), repo_id


# --- params ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_id", sorted(PARAM_COUNTS))
def test_params_matches_reference_unique_parameters(repo_id):
    expected = PARAM_COUNTS[repo_id]["unique_parameters"]  # param_counts.json

    out = ok_json(run_cli("params", "--config", str(config_path(repo_id))))

    assert out["total_parameters"] == expected
    assert sum(out["components"].values()) == expected
    assert all(v >= 0 for v in out["components"].values())
    assert out["source"] == {"kind": "file", "name": config_path(repo_id).name}


# --- estimate --------------------------------------------------------------------------------------------------------


def test_estimate_pure_bf16_adamw_is_ten_bytes_per_parameter_at_the_step():
    out = ok_json(run_cli("estimate", "--config", str(config_path(LLAMA_8B)),
                          "--method", "full", "--precision", "bf16", "--optimizer", "adamw"))
    n = LLAMA_8B_PARAMS
    comps = out["components"]

    assert out["total_parameters"] == n
    assert out["trainable_parameters"] == n
    assert sum(comps.values()) == out["total_bytes"]
    assert out["phase_totals_bytes"][out["peak_phase"]] == out["total_bytes"]
    assert out["total_bytes"] == max(out["phase_totals_bytes"].values())
    # Pure bf16 + torch (foreach) AdamW at optimizer.step(): bf16 weights 2 + bf16 grads 2 + two bf16 states 4,
    # plus foreach temporaries of about one parameter copy (2): 10 bytes per parameter, no activations alive.
    assert out["peak_phase"] == "optimizer_step"
    assert comps["weights"] == 2 * n
    assert comps["gradients"] == 2 * n
    assert comps["optimizer_states"] == 4 * n
    assert comps["optimizer_temporaries"] == 2 * n
    assert out["total_bytes"] == 10 * n == 80_302_612_480
    assert out["scenario"]["precision"] == "bf16" and out["scenario"]["optimizer"] == "adamw"


def test_estimate_lora_r16_on_attention_matches_peft():
    out = ok_json(run_cli("estimate", "--config", str(config_path(LLAMA_8B)), "--method", "lora",
                          "--lora-r", "16", "--lora-targets", "q_proj,k_proj,v_proj,o_proj"))

    # PEFT print_trainable_parameters, Llama-3-8B, r=16 on q,k,v,o:
    # "trainable params: 13,631,488 || all params: 8,043,892,736"
    assert out["trainable_parameters"] == 13_631_488
    assert out["total_parameters"] == LLAMA_8B_PARAMS
    assert out["total_parameters"] + out["trainable_parameters"] == 8_043_892_736
    assert out["scenario"]["lora_targets"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert sum(out["components"].values()) == out["total_bytes"]


# Stable option names and values of the CLI (the spec): each must be accepted and reach the scenario.
OPTION_VALUES = (
    [("--method", m, "method") for m in ("full", "lora", "qlora")]
    + [("--precision", p, "precision") for p in ("fp32", "amp_bf16", "amp_fp16", "bf16", "fp16")]
    + [("--optimizer", o, "optimizer")
       for o in ("adamw", "adamw_fused", "adamw_8bit", "paged_adamw_8bit", "adafactor", "sgd")]
    + [("--attention", a, "attention") for a in ("eager", "sdpa", "flash_attention_2")]
)
SMALL = "HuggingFaceTB/SmolLM2-135M"


@pytest.mark.parametrize(("option", "value", "field"), OPTION_VALUES, ids=[f"{o}={v}" for o, v, _ in OPTION_VALUES])
def test_every_choice_is_accepted(option, value, field):
    out = ok_json(run_cli("estimate", "--config", str(config_path(SMALL)), option, value))
    assert out["scenario"][field] == value
    assert out["total_parameters"] == 134_515_008  # param_counts.json, HuggingFaceTB/SmolLM2-135M
    assert out["total_bytes"] > 0


def test_numeric_and_flag_options_are_accepted():
    out = ok_json(run_cli("estimate", "--config", str(config_path(SMALL)), "--method", "lora",
                          "--micro-batch-size", "3", "--seq-len", "512", "--gradient-checkpointing",
                          "--lora-r", "8", "--lora-targets", "q_proj,v_proj"))
    sc = out["scenario"]
    assert (sc["micro_batch_size"], sc["seq_len"], sc["gradient_checkpointing"], sc["lora_r"]) == (3, 512, True, 8)
    assert sc["lora_targets"] == ["q_proj", "v_proj"]
    # SmolLM2-135M (reference config): 30 layers, hidden 576, 9 heads / 3 kv heads of 64 -> q: 576x576, v: 576x192.
    # LoRA r=8: r*(in+out) per module = 8*(576+576) + 8*(576+192) = 15,360 per layer, x 30 layers.
    assert out["trainable_parameters"] == 30 * (8 * (576 + 576) + 8 * (576 + 192)) == 460_800


def test_estimate_help_lists_every_stable_option():
    proc = run_cli("estimate", "--help")
    assert proc.returncode == 0
    for name in ("--method", "--precision", "--optimizer", "--micro-batch-size", "--seq-len",
                 "--gradient-checkpointing", "--lora-r", "--lora-targets", "--attention", "--config", "--model"):
        assert name in proc.stdout, name
    for value in ("full", "lora", "qlora", "fp32", "amp_bf16", "amp_fp16", "bf16", "fp16", "adamw", "adamw_8bit",
                  "eager", "sdpa", "flash_attention_2"):
        assert value in proc.stdout, value


# --- bad input -------------------------------------------------------------------------------------------------------


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "not_json.json").write_text("this is not JSON\n")
    (tmp_path / "bogus.json").write_text(json.dumps({"model_type": "bogus"}))
    return tmp_path


@pytest.mark.parametrize(
    ("case", "args", "needle"),
    [
        ("missing_file", ["params", "--config", "{tmp}/missing.json"], "missing.json"),
        ("non_json", ["params", "--config", "{tmp}/not_json.json"], "not valid JSON"),
        ("unsupported_model_type", ["params", "--config", "{tmp}/bogus.json"], "bogus"),
        ("micro_batch_0", ["estimate", "--config", "{llama}", "--micro-batch-size", "0"], "--micro-batch-size: Input should be greater than or equal to 1 (got 0)"),
        ("seq_len_too_long", ["estimate", "--config", "{llama}", "--seq-len", "10000000"], "--seq-len: Input should be less than or equal to"),
        ("unknown_lora_target", ["estimate", "--config", "{llama}", "--method", "lora", "--lora-targets", "foo_proj"],
         "foo_proj"),
        ("flash_in_fp32", ["estimate", "--config", "{llama}", "--attention", "flash_attention_2",
                           "--precision", "fp32"], "flash_attention_2"),
        ("unknown_method", ["estimate", "--config", "{llama}", "--method", "bogus"], "--method"),
        ("unknown_precision", ["estimate", "--config", "{llama}", "--precision", "fp64"], "--precision"),
        ("no_subcommand", [], "command"),
        # A bundled catalog entry is not a config.json: the message names the --model that reads it.
        ("catalog_entry_as_config", ["params", "--config", "{root}/data/models/openai-community__gpt2.json"],
         "bundled catalog entry, not a config.json: its model is 'openai-community/gpt2', which --model "
         "openai-community/gpt2"),
        # No catalog name is like "nonexistent": the whole catalog is listed, not an unrelated guess.
        ("gpu_unlike_any", ["estimate", "--config", "{llama}", "--gpu", "nonexistent"],
         "unknown GPU 'nonexistent': no catalog GPU has a similar name (nearest in spelling: "),
        ("gpu_misspelt", ["estimate", "--config", "{llama}", "--gpu", "H300"], "closest: NVIDIA H200, NVIDIA H100 80GB"),
        # A name of several GPUs that is no GPU's alias has no default in the catalog: refused with them ("A100" is
        # the A100 80GB's alias and reads as it with a warning: tests/cli/test_cli_gpu_names.py).
        ("gpu_ambiguous_no_alias", ["estimate", "--config", "{llama}", "--gpu", "A100 SXM", "--dataset-tokens", "1000000"],
         "ambiguous GPU 'A100 SXM': it names 2 GPUs of the catalog (NVIDIA A100 40GB, NVIDIA A100 80GB) and the catalog "
         "declares none of them its GPU for that name; give one of these names"),
    ],
)
def test_bad_input_is_one_line_on_stderr(bad_files, case, args, needle):
    args = [a.format(tmp=bad_files, llama=config_path(LLAMA_8B), root=Path(__file__).resolve().parents[2]) for a in args]
    line = assert_one_line_error(run_cli(*args))
    assert needle in line


# --- --model: Hub (stub), fallback, offline ---------------------------------------------------------------------------


def test_model_from_the_hub(hub_stub):
    repo = "Qwen/Qwen3-0.6B"
    hub_stub.add(repo, StubRepo(config=json.loads(config_path(repo).read_text())))

    proc = run_cli("params", "--model", repo)
    out = ok_json(proc)

    assert out["total_parameters"] == QWEN3_06B_PARAMS
    assert out["source"] == {"kind": "hub", "name": repo, "repo_id": repo}
    assert proc.stderr == ""
    assert f"/{repo}/resolve/main/config.json" in hub_stub.paths("GET")


def test_model_hub_unavailable_falls_back_to_the_catalog(hub_stub):
    hub_stub.add(LLAMA_1B, StubRepo(config={"model_type": "llama"}, status=503))

    proc = run_cli("params", "--model", LLAMA_1B)
    out = ok_json(proc)

    assert out["total_parameters"] == LLAMA_1B_PARAMS
    assert out["source"]["kind"] == "catalog_fallback"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("notice: ")
    assert "503" in lines[0] and LLAMA_1B in lines[0]
    assert f"/{LLAMA_1B}/resolve/main/config.json" in hub_stub.paths("GET")  # it did try the Hub first


def test_model_hub_unavailable_and_not_bundled_is_an_error(hub_stub):
    hub_stub.add("acme/down", StubRepo(config={"model_type": "llama"}, status=503))
    line = assert_one_line_error(run_cli("params", "--model", "acme/down"))
    assert "acme/down" in line and "503" in line


def test_model_gated_needs_hf_token_which_is_never_printed(hub_stub):
    repo = "Qwen/Qwen3-0.6B"
    hub_stub.valid_tokens.add(TOKEN)
    hub_stub.add(repo, StubRepo(config=json.loads(config_path(repo).read_text()), gated=True))

    denied = run_cli("params", "--model", repo)
    line = assert_one_line_error(denied)
    assert "gated" in line and repo in line

    allowed = run_cli("params", "--model", repo, env={**os.environ, "HF_TOKEN": TOKEN})
    assert ok_json(allowed)["total_parameters"] == QWEN3_06B_PARAMS
    for proc in (denied, allowed):
        assert TOKEN not in proc.stdout + proc.stderr
    assert [r.token_accepted for r in hub_stub.requests if r.path.endswith("/config.json")] == [False, True]
    # The checkpoint cross-check also went out with the token (the repo has no safetensors: a reason, not a failure).
    assert "no safetensors" in ok_json(allowed)["checkpoint"]["reason"]


def test_offline_model_uses_the_bundled_copy_without_any_server(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with refused_endpoint() as url:  # nothing listens: any request would fail (and show a notice)
        monkeypatch.setenv("HF_ENDPOINT", url)
        proc = run_cli("params", "--offline", "--model", LLAMA_1B)
    out = ok_json(proc)
    assert out["total_parameters"] == LLAMA_1B_PARAMS
    assert out["source"]["kind"] == "catalog"
    assert proc.stderr == ""


def test_offline_model_not_in_catalog_is_an_error(monkeypatch):
    with refused_endpoint() as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        line = assert_one_line_error(run_cli("params", "--offline", "--model", "acme/not-bundled"))
    assert "acme/not-bundled" in line


def test_malformed_repo_id_is_rejected_before_any_request(hub_stub):
    line = assert_one_line_error(run_cli("params", "--model", "not a repo id"))
    assert "owner/name" in line
    assert [p for p in hub_stub.paths() if "/resolve/" in p] == []


def test_unbounded_and_deeply_nested_inputs_fail_fast(tmp_path):
    # /dev/zero must not be read forever: the reader stops past the 2 MiB cap.
    result = run_cli("params", "--config", "/dev/zero", timeout=20)
    assert result.returncode == 2 and "at most" in result.stderr and "Traceback" not in result.stderr
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = run_cli("params", "--config", str(deep))
    assert result.returncode == 2 and "nested too deeply" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_output_into_a_closed_pipe_is_quiet():
    # `python -m engine params ... | head -c 0`: no BrokenPipeError traceback, exit status 0.
    proc = subprocess.Popen([sys.executable, "-m", "engine", "params", "--config", str(config_path(LLAMA_8B))],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves before the CLI writes (it is still importing), so the write hits EPIPE
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert b"Traceback" not in err and b"BrokenPipe" not in err


def test_unsupported_model_type_falls_back_to_an_approximation(tmp_path):
    # A model_type the engine does not count, with Llama-3.1-8B's sizes: approximate, with a notice, not a failure.
    cfg = {**json.loads(config_path(LLAMA_8B).read_text()), "model_type": "exaone_like"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    proc = run_cli("params", "--config", str(path))
    out = ok_json(proc)
    assert out["approximate"] is True and out["model_type"] == "exaone_like"
    assert out["total_parameters"] == LLAMA_8B_PARAMS
    assert proc.stderr.startswith("notice: model_type 'exaone_like' is not counted exactly")
    # Without the usual sizes there is nothing to approximate: still a one-line error.
    path.write_text(json.dumps({"model_type": "mystery"}))
    assert "not supported" in assert_one_line_error(run_cli("params", "--config", str(path)))


def test_a_plan_that_does_not_fit_says_so_at_the_top_level():
    # Llama-3.1-8B full fine-tuning in mixed bf16 peaks near 122 GiB: not on one A100 80GB, never with DDP.
    out = ok_json(run_cli("estimate", "--offline", "--model", LLAMA_8B, "--gpu", "a100 80gb", "--strategy", "ddp",
                          "--examples", "10000", "--avg-tokens", "512"))
    assert out["fits"] is False and out["min_gpus"] is None
    assert any("does not fit" in w and "try --strategy zero3" in w for w in out["warnings"])
    # The default strategy is the app's, ZeRO-3 (engine.plan.strategy): its fewest GPUs is a count.
    out = ok_json(run_cli("estimate", "--offline", "--model", LLAMA_8B, "--gpu", "a100 80gb",
                          "--examples", "10000", "--avg-tokens", "512"))
    assert out["fits"] is False and out["min_gpus"] and out["min_gpus_strategy"] == "zero3"
    assert any(f"the fewest that fit with zero3 is {out['min_gpus']}" in w for w in out["warnings"])
    bad = run_cli("estimate", "--offline", "--model", LLAMA_8B, "--gpu", "a100 80gb", "--num-gpus", "0")
    assert "at least 1" in assert_one_line_error(bad)


def test_torch_compile_is_one_switch_for_memory_and_time():
    """--torch-compile on a torchtune run: the memory estimate counts the compiled chunked loss (2 B x logits at the
    forward, the measured record; 2.25 B at backward) and the step time names the same loss with fused kernels on; without it both
    count the eager chunked loss (6.5 B x logits, 5 B at backward)."""
    common = ("estimate", "--model", LLAMA_8B, "--offline", "--framework", "torchtune", "--method", "lora",
              "--micro-batch-size", "2", "--seq-len", "2048", "--gpu", "H100 SXM", "--dataset-tokens", "1000000")
    logits = 2 * 2048 * 128_256
    on, off = ok_json(run_cli(*common, "--torch-compile")), ok_json(run_cli(*common))
    assert on["scenario"]["torch_compile"] is True and off["scenario"]["torch_compile"] is False
    assert on["formulas"]["logits_forward"].startswith("2 B x batch x seq x vocab")
    assert off["formulas"]["logits_forward"].startswith("6.5 B x batch x seq x vocab")
    assert on["formulas"]["logits_loss"].startswith("2.25 B x batch x seq x vocab")
    assert off["formulas"]["logits_loss"].startswith("5 B x batch x seq x vocab")
    assert on["components"]["logits_loss"] == 2.25 * logits  # alive at the peak (backward's start)
    assert on["time_cost"]["loss_implementation"] == "torchtune_chunked_compiled" and on["time_cost"]["fused_kernels"]
    assert off["time_cost"]["loss_implementation"] == "torchtune_chunked" and not off["time_cost"]["fused_kernels"]
    assert on["assumptions"][0].endswith("(8 chunks), compiled")


def test_cuda_graphs_is_a_compiled_run_for_memory_too():
    """--cuda-graphs is torch.compile(mode="reduce-overhead") (its help says so): the scenario is compiled, so a
    torchtune run's memory counts the compiled chunked loss (2 B x logits at the forward, the measured record), as
    --torch-compile does."""
    common = ("estimate", "--model", LLAMA_8B, "--offline", "--framework", "torchtune", "--method", "lora",
              "--micro-batch-size", "2", "--seq-len", "2048", "--gpu", "H100 SXM", "--dataset-tokens", "1000000")
    graphs = ok_json(run_cli(*common, "--cuda-graphs"))
    assert graphs["scenario"]["torch_compile"] is True
    assert graphs["formulas"]["logits_forward"].startswith("2 B x batch x seq x vocab")
    assert graphs["time_cost"]["loss_implementation"] == "torchtune_chunked_compiled"


def test_a_gpu_count_that_does_not_fill_nodes_says_what_would(capsys):
    # 10 GPUs over nodes of 8 (the default --gpus-per-node): two nodes would need 16; the message names the flag and
    # what would work (a fresh user found "10 GPUs do not fill nodes of 8" too terse)
    code = main(["estimate", "--model", "meta-llama/Llama-3.2-1B", "--offline", "--num-gpus", "10",
                 "--pipeline-parallel", "5", "--gpu", "H100 80GB"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert ("10 GPUs do not fill nodes of 8 GPUs (--gpus-per-node 8): use a multiple of 8 GPUs or at most 8, or another "
            "--gpus-per-node") in err
