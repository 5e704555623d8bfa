"""Our parallel-layout estimates against published large runs (``data/large_runs.csv``, each row with its source).

Each row is expressed in the engine's terms (catalog model or a GPT-style config from the row's sizes, layout, batch,
recompute, ZeRO/FSDP, precision, GPU) and compared on what it measured: peak memory per GPU (torchtitan's and
torchao's ``max reserved`` -> our allocated peak + allocator reserve of the most loaded rank) or throughput
(tokens/s per GPU, MFU or TFLOP/s per GPU -> the step time of :mod:`engine.scaleout.step_time`, engine.time's model
on the rank's shapes). A row
that cannot be expressed (its model's config is not public or not bundled, its layout is not stated) is listed with
the reason, never silently dropped. Where a source is silent the assumption is stated in ``assumed``.
"""

from __future__ import annotations

import re
import statistics

from pydantic import BaseModel, ConfigDict

from engine.errors import EngineError
from engine.files import labelled_csv_rows
from engine.hardware.gpus import find_gpu
from engine.model.architecture import Architecture
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.frameworks import NANOTRON_DP_SYNC, Framework, framework
from engine.scaleout.layout import Layout, Recompute
from engine.scaleout.recompute import torchtitan_layer_sac_layers
from engine.scaleout.step_time import Cluster
from engine.scenario.loss import LossImplementation
from engine.scenario.training import Attention, Method, Scenario
from engine.time.fabrics import Fabric, fabric
from engine.time.rates import power_limited
from engine.time.throughput import flops_per_token
from engine.validation.run_configs import run_architecture

RUNS_FILE = "large_runs.csv"
GIB = 2**30

_CATALOG = {"meta-llama/Llama-3.1-405B": "meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
            "meta-llama/Llama-3.1-8B": "meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3-8B": "meta-llama/Llama-3.1-8B",
            "meta-llama/Meta-Llama-3-70B": "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.1-70B",
            "meta-llama/Llama-2-7b-hf": "meta-llama/Llama-2-7b-hf", "mistralai/Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-v0.1"}
_GPUS = (("H200", "H200"), ("B200", "B200"), ("A100", "A100 80GB"), ("H100", "H100 SXM"))
TDP_WATTS = {"NVIDIA H100 80GB": 700.0}
"""Board power of the catalog GPUs a run states a cap for: H100 SXM5 700 W (NVIDIA H100 Tensor Core GPU datasheet,
"Max thermal design power: up to 700W (configurable)")."""


def _row_gpu(row: dict):
    """The catalog GPU of a row, power-limited (:func:`engine.time.rates.power_limited`) when the row states a cap
    below the GPU's TDP ("500W" in torchtitan's Grand Teton H100 rows)."""
    gpu = next((find_gpu(name) for key, name in _GPUS if key in row["gpu"]), None)
    cap = re.search(r"(\d{3,4})\s*W\b", row["gpu"])
    if gpu is not None and cap and gpu.name in TDP_WATTS:
        return power_limited(gpu, float(cap.group(1)), TDP_WATTS[gpu.name])
    return gpu


class RunComparison(BaseModel):
    """One published row against our estimate: ``metric`` (memory_gib, tokens_per_s_per_gpu, mfu, tflops_per_gpu)."""

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    model: str
    layout: str
    metric: str
    published: float
    ours: float
    error_pct: float
    assumed: str

    def record(self) -> dict:
        return {"id": self.id, "model": self.model, "layout": self.layout, "metric": self.metric,
                "published": round(self.published, 3), "ours": round(self.ours, 3), "error %": round(self.error_pct, 1),
                "assumed": self.assumed, "source": self.source}


class NotExpressed(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    model: str
    reason: str


def _num(text: str) -> float | None:
    m = re.match(r"\s*([0-9.]+)", text or "")
    return float(m.group(1)) if m else None


def _int(text: str, default: int = 1) -> int:
    v = _num(text)
    return int(v) if v else default


def gpt_style(model: str, vocab: int, seq: int, dropout: float = 0.0, tied: bool = False) -> Architecture | None:
    """A GPT-style architecture from a row's ``(a=.., h=.., L=..)``: LayerNorm, GeLU MLP of 4h, biases, learned
    positions, an untied head (``tied``: the head is the input embedding, as MPT's ``tie_word_embeddings`` default);
    ``dropout`` on the attention probabilities and the residual branches."""
    m = re.search(r"a=(\d+), h=(\d+), L=(\d+)", model) or re.search(r"h=(\d+), L=(\d+)", model)
    if not m:
        return None
    if len(m.groups()) == 3:
        a, h, L = (int(x) for x in m.groups())
    else:
        h, L = (int(x) for x in m.groups())
        a = h // 128
    return architecture_from_config({"model_type": "gpt2", "n_embd": h, "n_layer": L, "n_head": a, "vocab_size": vocab,
                                     "n_positions": seq, "tie_word_embeddings": tied, "activation_function": "gelu",
                                     "resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout})


TIED_EMBEDDING = "tied embedding"
"""What a row's notes say when its model's output layer is its input embedding (MPT: ``MPTConfig``
``tie_word_embeddings=True``, llm-foundry@8c8dd48f ``llmfoundry/models/mpt/configuration_mpt.py``): the head's GEMM
is the same, its weight, gradient and optimizer states are held and moved once."""

UNFUSED_ATTENTION = "unfused attention"
"""What a row's notes say when its run predates FlashAttention in its framework: Megatron-LM before
``--use-flash-attn`` (2023) ran attention as ``baddbmm`` + its fused softmax + dropout + ``bmm`` over the full s x s
scores (:func:`engine.time.attention.fused_softmax_score_bytes`), with Megatron-LM's default dropout."""

MEGATRON_DROPOUT = 0.1
"""Megatron-LM's default ``--attention-dropout`` and ``--hidden-dropout`` (``megatron/arguments.py``), the values of
runs that do not state theirs."""


def _arch(row: dict, seq: int) -> tuple[Architecture | None, str]:
    if row["model"] in _CATALOG:
        note = {"meta-llama/Meta-Llama-3-8B": " (Llama 3.1 8B's architecture)",
                "meta-llama/Meta-Llama-3-70B": " (Llama 3.1 70B's architecture)",
                "meta-llama/Llama-3.3-70B-Instruct": " (Llama 3.1 70B's architecture)"}.get(row["model"], "")
        return architecture_from_config(config_from_catalog(_CATALOG[row["model"]])[0]), note
    published = run_architecture(row["model"], row.get("params_b", ""))
    if published is not None:
        return published
    m = re.search(r"vocab (\d+)", row["notes"])
    vocab = int(m.group(1)) if m else 51200
    if row["model"].startswith("GPT3-175B"):
        return gpt_style("a=96, h=12288, L=96", 51200, seq), "GPT-3 175B sizes, vocab 51200"
    unfused = UNFUSED_ATTENTION in row["notes"]
    tied = TIED_EMBEDDING in row["notes"]
    arch = gpt_style(row["model"], vocab, seq, MEGATRON_DROPOUT if unfused else 0.0, tied) if "GPT" in row["model"] else None
    return arch, f"GPT-style config from the row's sizes, vocab {vocab}" + ("; tied embedding" if tied else "") + (
        f"; attention unfused (full s x s scores, Megatron's fused softmax), dropout {MEGATRON_DROPOUT:g} (Megatron-LM "
        "default)" if unfused else "")


def row_framework(row: dict) -> Framework:
    """The framework the row's run was made with: its ``framework`` column (data/large_runs.csv, from the row's
    source: Megatron-LM's README tables and Korthikanti et al. ran Megatron-LM, torchtitan's benchmarks and torchao's
    float8 tables torchtitan, ...; ``generic`` for a stack not in :data:`engine.scaleout.frameworks.FRAMEWORKS`).

    Raises:
        ScenarioError: a framework name the registry does not know.
    """
    return framework(row.get("framework") or None)


def row_fabric(row: dict) -> Fabric:
    """The network between the row's nodes: its ``fabric`` column (data/large_runs.csv; ``efa`` for nanotron's rows,
    made on Hugging Face's AWS cluster: huggingface/nanotron@e24d2483 ``scripts/scaling_benchmarks.py`` submits to
    the slurm partition ``hopper-prod`` and its launch scripts ``examples/train_tiny_llama.sh`` export
    ``FI_PROVIDER="efa"``; ``infiniband`` for the others: their sources name InfiniBand, an RDMA network or none, and
    Llama 3's name RoCE, for which no published figure separating its NCCL bus bandwidth from InfiniBand's was found).

    Raises:
        ScenarioError: a fabric name the registry does not know.
    """
    return fabric(row.get("fabric") or None)


def _recompute(text: str, torchtitan: bool = False) -> str:
    """The row's recompute in our terms. torchtitan's "selective" is its op-level SAC: ``selective_ac_option =
    "op"`` in ``train_configs/llama3_8b.toml`` at 9dec370 and ``models/llama3/train_configs/llama3_8b.toml`` at
    e7c0cae (the configs of its benchmarks), "per-op SAC" in torchao's table; Megatron's is Korthikanti's."""
    t = text.lower()
    if "full" in t:
        return "full"
    if "selective" in t or "sac" in t or "default" in t:
        return "selective_op" if torchtitan else "selective"
    return "none"


def _default_recompute(row: dict) -> str:
    """The recompute of a row that does not state one: none for Megatron-LM's H100 table (its flags list none) and for
    nanotron (``ParallelismArgs.recompute_layer`` defaults to False, and the benchmark configs of
    ``scripts/scaling_benchmarks.py`` do not set it); Megatron's selective otherwise."""
    return "none" if row["id"].startswith("megatron_h100") or row_framework(row).name == "nanotron" else "selective"


def torchtitan_stage_layers(num_layers: int, pp: int, stages_per_rank: int = 1) -> tuple[int, ...]:
    """Layers per pipeline rank as torchtitan splits them without ``pipeline_parallel_split_points``
    (``generate_split_points`` in ``torchtitan/parallelisms/pipelining_utils.py`` at 9dec370): L // S layers per
    stage for S = PP x stages per rank, the first stage gets no extra layer, the remainder goes one each to the next
    stages; rank r holds stages r, r + PP, ..."""
    total = pp * stages_per_rank
    base, extra = divmod(num_layers, total)
    sizes = [base]
    for _ in range(1, total - 1):
        sizes.append(base + (1 if extra > 0 else 0))
        extra -= 1 if extra > 0 else 0
    sizes.append(num_layers - sum(sizes))
    return tuple(sum(sizes[r + k * pp] for k in range(stages_per_rank)) for r in range(pp))


def embedding_chunk_layers(num_layers: int, pp: int) -> tuple[int, ...] | None:
    """Layers per pipeline rank when the embedding and the output layer (with the loss) each fill one pipeline chunk
    as a layer would: (layers + 2) / PP slots per rank, the first and last rank one layer fewer (Llama 3, Grattafiori
    et al. 2024 sec. 3.3.2: "we reduce one Transformer layer each from the first and the last stages ... the first
    model chunk on the first stage has only the embedding"; Megatron-LM --account-for-embedding-in-pipeline-split,
    --account-for-loss-in-pipeline-split). None when the slots do not split evenly."""
    slots, rest = divmod(num_layers + 2, pp)
    if rest or pp < 2 or slots < 2:
        return None
    return (slots - 1,) + (slots,) * (pp - 2) + (slots - 1,)


def _local_batch(row: dict, dp: int) -> int | None:
    m = re.search(r"local batch size (\d+)", row["notes"])
    if m:
        return int(m.group(1))
    gbs = _num(row["global_batch"])
    return int(gbs) // dp if gbs else None


def _fp8(row: dict) -> Fp8Recipe | None:
    if "fp8" not in row["precision"].lower():
        return None
    recipe = row_framework(row).fp8_recipe
    if recipe is Fp8Recipe.TORCHAO and "rowwise" in row["precision"].lower():
        return Fp8Recipe.TORCHAO_ROWWISE
    return recipe


def run_settings(row: dict) -> tuple[bool, bool]:
    """(fused kernels, TP communication overlapped) as the row's run had them: its framework's default kernels
    (:class:`engine.scaleout.frameworks.Framework` ``fused_kernels``: Megatron-LM, NeMo, nanotron), or torch.compile
    where the row says so ("compile" in its precision or notes: torchtitan's and NeMo AutoModel's runs); TP overlap
    where the row states it (Megatron ``--tp-comm-overlap``, torchtitan AsyncTP, nanotron
    ``tp_linear_async_communication``) or its framework runs it by default."""
    text = (row["precision"] + " " + row["notes"]).lower()
    fw = row_framework(row)
    fused = fw.fused_kernels or "compile" in text
    overlap = (fw.tp_comm_overlap or "tp-comm-overlap" in text or "asynctp" in text.replace(" ", "")
               or "tp_linear_async_communication" in text)
    return fused, overlap


LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
"""Every linear of a Llama / Qwen2 block: NeMo Automodel's ``target_modules: '*_proj'``."""


def run_scenario(row: dict, seq: int, micro_batch: int, precision: str) -> tuple[Scenario, bool]:
    """(the scenario a rank runs, whether fp32 master weights are kept). Full training with master weights unless the
    notes say "LoRA r=<rank>": then LoRA of that rank on every linear (``*_proj``), the base in pure bf16
    (``torch_dtype: bf16``, as NeMo Automodel's LoRA benchmark configs load it), no master copy; the adapters in bf16
    (the torchtune framework's dtype) and the loss an fp32-upcast cross-entropy over the whole logits (``hf``, as
    counted before the torchtune framework's default became its chunked loss; not re-read from NeMo Automodel)."""
    m = re.search(r"LoRA r=(\d+)", row["notes"])
    if not m:
        attention = Attention.EAGER if UNFUSED_ATTENTION in row["notes"] else Attention.SDPA
        return Scenario(seq_len=seq, micro_batch_size=micro_batch, precision=precision, attention=attention), True
    return Scenario.build(method=Method.LORA, lora_r=int(m.group(1)), lora_targets=LORA_TARGETS, precision="bf16",
                          seq_len=seq, micro_batch_size=micro_batch, framework="torchtune",
                          loss_implementation=LossImplementation.HF), False


def compare_row(row: dict) -> list[RunComparison] | str:
    """Our estimate of one row on each figure it publishes, or why it cannot be expressed."""
    if not row["tp"] or not row["pp"] or not _num(row["num_gpus"]) or "DeepSeek" in row["model"]:
        return ("layout or model not expressible: " + (
            "DeepSeek-V3's architecture (MLA, 256 routed experts + 1 shared, top 8) is buildable (deepseek_v3), but its "
            "DualPipe schedule is not a pipeline schedule of engine.scaleout (bidirectional micro batches with the EP "
            "all-to-all overlapped inside paired forward/backward chunks: its bubble and exposure differ from 1F1B and "
            "interleaved 1F1B), the H800 (NVLink cut to 400 GB/s) is not in the GPU catalog, and the figure is derived "
            "from a GPU-hour budget (180K H800-hours per 1T tokens), not a measured step"
            if "DeepSeek" in row["model"] else "the row gives no single layout"))
    seq = _int(row["seq_len"], 4096)
    arch, assumed = _arch(row, seq)
    if arch is None:
        return f"model not in the catalog and no sizes in the row: {row['model']}"
    gpu = _row_gpu(row)
    if gpu is None:
        return f"GPU not in the catalog: {row['gpu']}"
    tp, pp, cp, ep = _int(row["tp"]), _int(row["pp"]), _int(row["cp"]), _int(row["ep"])
    world = _int(row["num_gpus"])
    dp = world // (tp * pp * cp)
    mb = _int(row["micro_batch"], 1)
    gbs = _int(row["global_batch"], mb * dp)
    fw = row_framework(row)
    torchtitan = fw.name == "torchtitan"
    split = None
    local = _local_batch(row, dp)
    if torchtitan and pp > 1 and local and not row["micro_batch"]:
        # torchtitan at 9dec370 splits the local batch into pipeline_parallel_microbatches micro batches, by default
        # the PP degree (build_pipeline_schedule in pipelining_utils.py), and its stages as generate_split_points does
        # (Interleaved1F1B's two stages per rank give every rank the same layer count here: 126 layers, PP 8).
        mb, gbs = max(local // pp, 1), local * dp
        split = torchtitan_stage_layers(arch.num_layers, pp, 2 if "interleaved" in row["notes"].lower() else 1)
    gbs = max(gbs - gbs % (mb * dp), mb * dp)
    vp = re.search(r"VP=(\d+)", row["notes"])
    v = int(vp.group(1)) if vp and pp > 1 else 1
    if split is not None and "interleaved" in row["notes"].lower():
        v = 2  # torchtitan's Interleaved1F1B: two stages per rank (generate_split_points above), bubble (PP-1)/(2m)
    if v > 1 and split is None and "embedding and output each one pipeline chunk" in row["notes"]:
        split = embedding_chunk_layers(arch.num_layers, pp)
    zero_text = row["zero_or_fsdp"].lower()
    zero = (2 if "shard_grad_op" in zero_text or "zero-2" in zero_text else 3 if "fsdp" in zero_text
            else 0 if "zero-0" in zero_text or "none" == zero_text else 1)
    precision = "amp_fp16" if "fp16" in row["precision"] and "bf16" not in row["precision"] else "amp_bf16"
    try:
        layout = Layout.build(tensor_parallel=tp, pipeline_parallel=pp, context_parallel=cp, expert_parallel=ep,
                              data_parallel=dp, sequence_parallel=tp > 1 and "no" not in row["sequence_parallel"].lower()[:2],
                              recompute=_recompute(row["recompute"] or _default_recompute(row), torchtitan),
                              layers_per_stage=split,
                              recompute_layers=(torchtitan_layer_sac_layers(arch.num_layers, 2)
                                                if "every second layer" in row["recompute"] else None),
                              virtual_pipeline=v if v > 1 and (split is not None or arch.num_layers % (pp * v) == 0)
                              and (gbs // (mb * dp)) % pp == 0 else 1,
                              zero=zero, micro_batch_size=mb, global_batch_size=gbs)
        sc, master = run_scenario(row, seq, mb, precision)
        inter = 200.0 if "A100" in row["gpu"] else 400.0
        cluster = Cluster(gpu=gpu, nodes=max(1, world // 8), gpus_per_node=min(8, world), inter_node_gbits=inter,
                          fabric=row_fabric(row).name)
        fused, tp_overlap = run_settings(row)
        # the framework's settings from its one record, as the CLI and the Scale out page pass them
        est = estimate_layout(arch, sc, layout, cluster, _fp8(row), master_weights=master,
                              **fw.layout_settings(fused_kernels=fused, tp_comm_overlap=tp_overlap))
    except EngineError as exc:
        return f"not expressible: {exc}"
    assumed += "; " + "; ".join(x for x in (
        f"recompute {layout.recompute.value}" + (" (not stated)" if not row["recompute"] else ""),
        (f"torchtitan PP: local batch {local} = {layout.micro_batches} micro batches (PP degree) of {mb}, layers per "
         f"rank {list(split)}" + (" (Interleaved1F1B modelled as 1F1B on the same per-rank layers)"
                                  if "interleaved" in row["notes"].lower() and layout.virtual_pipeline == 1 else "")) if split else "",
        (f"layers per stage {' + '.join(map(str, est.layout.layers_per_stage))} ({fw.label}'s cost-balanced split)"
         if est.layout.layers_per_stage != layout.layers_per_stage else ""),
        f"ZeRO {zero}" + (" (not stated)" if not row["zero_or_fsdp"] else ""),
        f"{inter:g} Gb/s per GPU between nodes over {cluster.network.label}",
        "16-bit model with fp32 master weights" if master else f"LoRA rank {sc.lora_r} on every linear, pure bf16",
        "fused kernels" if fused else "", ("TP collectives beside one GEMM each (nanotron's asynchronous TP linears; row forward reduce-scatters "
         "blocking)" if fw.async_tp_linears else "TP communication overlapped with the GEMMs") if tp_overlap else "",
        "nanotron's DP sync (DDP buckets of 25 MiB; ZeRO-1: blocking fp32 all-reduce, bf16 all-gather with per-tensor "
        "copies) and what it holds (fp32 gradients of every parameter, DDP's bf16 bucket copy, each backward's bf16 "
        "gradients, the all-gather's flat copies)" if fw.dp_sync == NANOTRON_DP_SYNC else "") if x)
    out = []
    t = est.time
    base = dict(id=row["id"], source=f"{row['source']}, {row['locator']}", model=row["model"], layout=layout.label(),
                assumed=assumed.strip("; "))
    mem = _num(row["measured_memory_gib"])
    if mem:
        ours = est.memory.max_stage.peak_reserved_bytes / GIB
        out.append(RunComparison(metric="memory_gib (reserved)", published=mem, ours=ours, error_pct=100 * (ours - mem) / mem, **base))
    tps = _num(row["tokens_per_s_per_gpu"])
    if tps and t:
        ours = t.tokens_per_second_per_gpu
        out.append(RunComparison(metric="tokens_per_s_per_gpu", published=tps, ours=ours, error_pct=100 * (ours - tps) / tps, **base))
    elif _num(row["mfu"]) and t:
        pub = _num(row["mfu"])
        out.append(RunComparison(metric="mfu", published=pub, ours=t.mfu, error_pct=100 * (t.mfu - pub) / pub, **base))
    elif _num(row["tflops_per_gpu"]) and t:
        pub = _num(row["tflops_per_gpu"])
        peak = (gpu.bf16_tflops or gpu.fp16_tflops or 1.0)
        ours = t.mfu * peak
        if "counts recompute" in row["notes"]:
            # Narayanan et al. 2021 eq. 3 (96 B s l h^2 ...) counts the recompute forward: the published figure is
            # hardware FLOP/s, so compare our executed FLOPs (model FLOPs x executed / model), not MFU x peak.
            flops = flops_per_token(arch, sc.model_copy(update={"gradient_checkpointing": layout.recompute is Recompute.FULL}))
            ours *= flops.total / flops.model_flops
        out.append(RunComparison(metric="tflops_per_gpu", published=pub, ours=ours, error_pct=100 * (ours - pub) / pub, **base))
    return out or "the row publishes no memory or throughput figure"


class ScaleoutValidation(BaseModel):
    model_config = ConfigDict(frozen=True)

    rows: tuple[RunComparison, ...]
    not_expressible: tuple[NotExpressed, ...]

    def summary(self, metric_prefix: str) -> tuple[int, float, float]:
        """(rows, median |error| %, max |error| %) of the comparisons whose metric starts with ``metric_prefix``."""
        errs = [abs(r.error_pct) for r in self.rows if r.metric.startswith(metric_prefix)]
        return (len(errs), statistics.median(errs), max(errs)) if errs else (0, 0.0, 0.0)


def validate_large_runs() -> ScaleoutValidation:
    """Every row of ``data/large_runs.csv`` compared or explained. Raises CatalogError on an unreadable file."""
    rows, missing = [], []
    for _, row in labelled_csv_rows(RUNS_FILE):
        result = compare_row(row)
        if isinstance(result, str):
            missing.append(NotExpressed(id=row["id"], model=row["model"], reason=result))
        else:
            rows.extend(result)
    return ScaleoutValidation(rows=tuple(rows), not_expressible=tuple(missing))
