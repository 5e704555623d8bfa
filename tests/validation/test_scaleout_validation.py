"""Parallel layouts against the published large runs of data/large_runs.csv: every row compared or explained."""

from __future__ import annotations

import csv

import pytest

from engine.files import data_file
from engine.validation.scaleout import validate_large_runs


@pytest.fixture(scope="module")
def val():
    return validate_large_runs()


def test_every_row_is_compared_or_explained(val):
    ids = {r["id"] for r in csv.DictReader(data_file("large_runs.csv").open(encoding="utf-8"))}
    assert {r.id for r in val.rows} | {n.id for n in val.not_expressible} == ids
    assert all(n.reason for n in val.not_expressible)


def test_megatron_h100_weak_scaling_mfu(val):
    # Megatron-LM README H100 table (MFU 41-49 %), on engine.time's model with nothing fitted on these rows (the
    # provisional model's 0.6 efficiency was chosen on them; it is gone).
    rows = [r for r in val.rows if r.id.startswith("megatron_h100_") and "strong" not in r.id]
    assert len(rows) == 9
    errs = sorted(abs(r.error_pct) for r in rows)
    assert errs[len(errs) // 2] < 10  # median
    # the 70B-462B rows, where TP and PP communication and the bubble matter, within 7 % (314B: -6.4 % since the
    # attention share was refitted from 0.8 to 0.7, once nanotron's rows ran its fused kernels; it was -1.6 %)
    assert all(abs(r.error_pct) < 7 for r in rows if r.id.split("_")[-1] in ("70B", "119B", "177B", "314B", "462B"))


def test_throughput_summary(val):
    # data/large_runs.csv, every throughput row: tokens/s per GPU, MFU, TFLOP/s (README and Methodology figures).
    # Since issue 23: + Korthikanti's four Table 3 models, NeMo's Llama 3 / Llama 2 70B, Nemotron 340B and Mixtral
    # 8x22B, torchtitan's two 64x A100 selective rows and LLaMA-65B (tokens/s), nanotron's 29 heatmap cells and MT-NLG
    # 530B on 2240 GPUs (MFU), NeMo Automodel's two LoRA rows at TP 2 x FSDP 4 and llm-foundry's 11 MPT rows
    # (tokens/s), Megatron-LM's two strong-scaling points (MFU).
    # median 11.5 % at attention share 0.7; 12.1 % with the MPT rows (Composer's eager elementwise ops, 5-34 % over)
    assert val.summary("tokens")[0] == 58 and val.summary("tokens")[1] < 13
    assert val.summary("mfu")[0] == 41 and val.summary("mfu")[1] < 16
    assert val.summary("tflops")[0] == 10 and val.summary("tflops")[1] < 10


def test_torchtitan_compile_gain(val):
    # torchtitan Table 1, Llama 3.1 8B on 8 H100: torch.compile 5762 -> 6667 tokens/s (+16 %); ours from the fused
    # elementwise bytes and kernels within 10 points of it.
    r = {x.id: x.ours for x in val.rows if x.id.startswith("tt_8b_8gpu_") and x.metric.startswith("tokens")}
    assert 0.06 < r["tt_8b_8gpu_29"] / r["tt_8b_8gpu_28"] - 1 < 0.26


def test_full_recompute_memory_rows(val):
    # torchtitan Llama 3.1 8B with full AC and CP 1-8 at 32k-262k tokens: 84 GiB reserved; ours within 10 %.
    rows = [r for r in val.rows if r.id.startswith("tt_8b_cp") and r.metric.startswith("memory")]
    assert len(rows) == 4
    assert all(abs(r.error_pct) < 10 for r in rows)


def test_nemo_throughput(val):
    rows = {r.id: r for r in val.rows if r.id.startswith("nemo_")}
    # Llama 3 8B (CP 2), Llama 2 7B, Mixtral 8x7B (EP 8) on DGX-H100: within 12 %, under. Since issue 23 attention on
    # Hopper runs at FlashAttention-2's measured rates (FA3 paper) x the fitted training share; NeMo's Transformer
    # Engine runs cuDNN's fused attention, which the same paper measures ~1.6x faster than FA2 at 2k-16k: not modelled
    # per stack yet, so these rows come out 12-15 % slow at the fitted attention share 0.7 (8-10 % at 0.8; within 5 %
    # when every kernel ran at 35 % of peak).
    # Issue 23: the rows run as NeMo's scripts/performance run them: no recompute (recommended_model_configs
    # recompute_layers 0), which moved these from 12-15 % under to within 8 %.
    assert all(-8 < rows[k].error_pct < 0 for k in ("nemo_24.12_LLAMA3-8B_8", "nemo_24.12_LLAMA2-7B_8"))
    assert abs(rows["nemo_25.02_Mixtral-8x7B_64"].error_pct) < 5
    # GPT-3 175B in FP8 (TP 4, PP 8, v 6) and the other dense TP > 1 rows: NeMo's performance recipes overlap the TP
    # communication (MegatronCommOverlapCallback tp_comm_overlap=True, userbuffers): within 10 % (was under by a fifth
    # with TP on the critical path and selective recompute).
    dense_tp = ("nemo_25.02_GPT3-175B_512", "nemo_24.12_GPT3-175B_512", "nemo_24.12_LLAMA3-70B_64",
                "nemo_24.12_LLAMA2-70B_64", "nemo_24.12_Nemotron-340B_128")
    assert all(-10 < rows[k].error_pct < 0 for k in dense_tp)


def test_torchtitan_op_sac_memory_rows(val):
    # torchtitan Llama 3.1 8B FSDP2 with op-level SAC (torchtitan Tables 1 and 3, torchao's float8 table): 47.6-82.4
    # GiB reserved; ours within 10 % (it was 79-129 % over when "selective" meant Korthikanti's attention core only).
    ids = ("tt_8b_8gpu_", "tt_8b_128gpu_", "torchao_h100_8b_")
    rows = [r for r in val.rows if r.id.startswith(ids) and r.metric.startswith("memory")]
    assert len(rows) == 9
    assert all(abs(r.error_pct) < 10 for r in rows)


def test_torchtitan_fsdp_pp_memory_rows(val):
    # 405B on 512 GPUs, FSDP 8 x TP 8 x PP 8 (+ CP): 72.7-84.9 GiB. Without the stage kept gathered and the fp32
    # gradients accumulated unsharded we were 67-71 % under; now within 25 % (still under, see the Methodology page).
    rows = [r for r in val.rows if r.id.startswith("tt_405b") and r.metric.startswith("memory")]
    assert len(rows) == 6
    assert all(-25 < r.error_pct < 0 for r in rows)
    n, median, _ = val.summary("memory")
    assert n == 49 and median < 10  # 23 rows + nanotron's 26 heatmap cells that print a peak (issue 23)


def test_nemo_automodel_lora_rows_under_tensor_parallel(val):
    # NeMo Automodel docs/performance-summary.mdx, LoRA on DGX-H100 at TP 2 x FSDP 4 (issue 23: they were left out as
    # "tensor parallelism is not modelled"): both compared now, on tokens/s per GPU (1091.85 and 2250.31).
    rows = {r.id: r for r in val.rows if r.id.startswith("nemo_automodel_")}
    assert set(rows) == {"nemo_automodel_l33_70b_lora_8", "nemo_automodel_q25_32b_lora_8"}
    assert rows["nemo_automodel_l33_70b_lora_8"].published == 1091.85
    assert all("LoRA rank 16" in r.assumed and r.layout.startswith("TP2 PP1 DP4") for r in rows.values())
    assert all(abs(r.error_pct) < 20 for r in rows.values())


def test_qwen25_32b_config_counts_its_published_parameters():
    from engine.validation.run_configs import run_architecture
    arch, _ = run_architecture("Qwen/Qwen2.5-32B")
    h, kv, ffn, L, vocab = 5120, 1024, 27648, 64, 152064  # hf.co/Qwen/Qwen2.5-32B config.json
    block = 2 * h * h + 2 * h * kv + (h + 2 * kv) + 3 * h * ffn + 2 * h  # q, o, k, v, q/k/v biases, MLP, norms
    assert arch.total_parameters == L * block + 2 * vocab * h + h
    assert abs(arch.total_parameters / 32.5e9 - 1) < 0.01  # the model card's "32.5B"


def test_megatron_strong_scaling_points(val):
    # Megatron-LM README @ d98e8a64 "Strong Scaling Results": GPT-3 175B (the model table's 177B) at batch 1152,
    # MFU 47 % at 96 GPUs and 42 % at 4,608, at the model table's TP 8 x PP 6 for that model and batch.
    rows = {r.id: r for r in val.rows if "gpt3_strong" in r.id}
    assert {k: r.published for k, r in rows.items()} == {"megatron_h100_gpt3_strong_96": 0.47,
                                                         "megatron_h100_gpt3_strong_4608": 0.42}
    assert all(r.layout.startswith("TP8 PP6") for r in rows.values())
    # the trend holds: MFU falls with the GPU count (12 micro batches per pipeline at 4,608 GPUs, 576 at 96)
    assert rows["megatron_h100_gpt3_strong_4608"].ours < rows["megatron_h100_gpt3_strong_96"].ours


def test_llm_foundry_rows_are_the_readmes_cells(val):
    # mosaicml/llm-foundry scripts/train/benchmarking/README.md @ 8c8dd48f: the 512-GPU rows of the large-scale H100
    # BF16 table and the 8-GPU, 2048-token rows of the H100 BF16 table; the 7B row at 8 GPUs publishes 10643 T/s/GPU.
    rows = {r.id: r for r in val.rows if r.id.startswith("llmfoundry_mpt_")}
    assert len(rows) == 11
    assert rows["llmfoundry_mpt_7b_8gpu_2048"].published == 10643
    assert rows["llmfoundry_mpt_3b_512gpu_2048"].layout.endswith("ZeRO-2")  # SHARD_GRAD_OP
