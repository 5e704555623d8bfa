"""The training frameworks the layout model knows, one record each: what differs between them for the estimate of
:func:`engine.scaleout.estimate.estimate_layout` (fused kernels, DTensor TP, the data-parallel sync, TP communication
overlap, master weights, the FP8 recipe), each value with its source (library + version or commit).

The one place these facts live: the validation rows of ``data/large_runs.csv`` name their framework in its
``framework`` column (:mod:`engine.validation.scaleout`), the command line takes ``--layout-framework NAME``
(:mod:`engine.cli.scaleout`) and the Scale out page a "Framework" choice; all read them here. ``generic`` is the
estimate's default behaviour (none of the framework-specific paths).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ScenarioError, named_record
from engine.scaleout.comm_volumes import DataParallelSync
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.estimate import ALL_METHODS
from engine.scaleout.layout import ZERO_STAGES
from engine.scenario.training import METHOD_LABELS, Method

NANOTRON_DP_SYNC = DataParallelSync(bucket_bytes=25 * 2**20, zero1_all_reduce=True, gather_copies=True,
                                    tensors_per_layer=6, half_gradients_per_backward=True)
"""The data-parallel sync of nanotron as its scaling benchmarks ran it (``scripts/scaling_benchmarks.py``:
``ACCUMULATE_GRAD_IN_FP32 = True``; ``examples/config_tiny_llama_bench.yaml``: ``ddp_bucket_cap_mb: 25``), read in
huggingface/nanotron@e24d2483 (2025-02-19, six days after the figure; the same in the Dec 2024 benchmark branch
67c5ebb6):

- ZeRO-0: ``DistributedDataParallel(bucket_cap_mb=25)`` with ``get_fp32_accum_hook``, which all-reduces each bucket's
  fp32 gradient buffers in its own ``all_reduce_coalesced`` call during the last backward (``optim/
  gradient_accumulator.py``): one call per 25 MiB of bf16 gradients.
- ZeRO-1: ``make_ddp = dp > 1 and not (accumulate_grad_in_fp32 and zero_stage > 0)`` (``trainer.py``), so no DDP:
  after ``train_batch_iter`` the trainer calls ``sync_gradients_across_dp(..., reduce_scatter=False)``, one blocking
  ``all_reduce`` of the whole fp32 gradient buffer ("This is too memory hungry, instead we run all_reduce"), and
  after the step ``ZeroDistributedOptimizer._all_gather_params`` gathers the bf16 weights with
  ``all_gather_coalesced`` (``distributed.py``), whose ``update_output`` copies every rank's slice of every parameter
  tensor back in a Python loop: tensors x DP ranks ``copy_`` calls. nanotron's Llama block holds 6 tensors
  (``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``, two ``TritonRMSNorm``: ``models/llama.py``).
- Memory (what a rank holds, P its bf16 parameters, d the DP size): ``FP32GradientAccumulator``
  (``optim/gradient_accumulator.py``) keeps the fp32 gradient buffer of all P (``build_grad_buffers`` over
  ``grad_buckets_named_params``, "independently of ZeRO sharding") and fp32 weights of the parameters its optimizer
  updates (``helpers.py`` ``init_optimizer_and_grad_accumulator``: ZeRO-1 builds it on its 1/d slices,
  ``optim/zero.py``), AdamW's two states on those: 2 + 4 + 4 + 8 B per parameter at ZeRO-0, 2 + 4 + 12/d at ZeRO-1,
  the engine's master-weight states. On top: every backward's bf16 ``.grad`` (``backward`` adds them into the buffer
  and sets them to None), DDP's bf16 buckets at ZeRO-0 (2 B), the all-gather's flattened copies at ZeRO-1's
  step (2 + 2/d B)."""


@dataclass(frozen=True)
class Framework:
    """What one training framework changes in a layout's estimate.

    - ``fused_kernels``: its default kernels fuse the elementwise ops (norms, activations, RoPE, softmax, loss) the
      step time counts as memory-bound passes (:func:`engine.scaleout.step_time.step_time` ``fused_kernels``).
    - ``dtensor_tp``: tensor parallelism as PyTorch DTensor runs it
      (:func:`engine.scaleout.comm_volumes.model_parallel_collectives` ``dtensor_tp``).
    - ``dp_sync``: its data-parallel gradient sync where it is not the default (None): collectives and memory
      (:class:`engine.scaleout.comm_volumes.DataParallelSync`).
    - ``tp_comm_overlap_available`` / ``tp_comm_overlap``: whether it can run the TP collectives under the GEMMs,
      and whether it does so unless told otherwise.
    - ``async_tp_linears``: its TP overlap is asynchronous TP linears, not a fused all-gather-matmul: each
      sequence-parallel collective runs beside the one GEMM its linear computes meanwhile, the row-parallel forward
      reduce-scatter blocking (:data:`engine.scaleout.comm_volumes.TP_WINDOWS`, :func:`engine.scaleout.step_time.comm_sums`).
    - ``master_weights``: it trains a 16-bit model with fp32 master weights (:class:`engine.scaleout.memory.Context`);
      None: no framework default (the caller's).
    - ``fp8_recipe``: the FP8 recipe its FP8 training uses (:class:`engine.scaleout.fp8.Fp8Recipe`).
    - ``zero_stages``: the data-parallel sharding stages it runs (:attr:`engine.scaleout.layout.Layout.zero`); the
      estimate refuses another and the layout search tries only these.
    - ``methods``: the fine-tuning methods it runs (``Scenario.method``); the estimate and the search refuse another.
    - ``interleaved_schedule``: it has the interleaved pipeline schedule (virtual stages); the estimate refuses
      virtual stages without it and the search does not try them.
    - ``cost_balanced_stages``: with no split given, it splits the layers over the pipeline stages by its compute
      cost with the output layer counted (:func:`engine.scaleout.stage_split.cost_balanced_layers`), not evenly.
    - ``sources``: (field, where its value was read) pairs.
    """

    name: str
    label: str
    fused_kernels: bool = False
    dtensor_tp: bool = False
    dp_sync: DataParallelSync | None = None
    tp_comm_overlap_available: bool = True
    tp_comm_overlap: bool = False
    async_tp_linears: bool = False
    master_weights: bool | None = None
    fp8_recipe: Fp8Recipe = Fp8Recipe.TE
    zero_stages: tuple[int, ...] = ZERO_STAGES
    methods: tuple[Method, ...] = ALL_METHODS
    cost_balanced_stages: bool = False
    interleaved_schedule: bool = True
    sources: tuple[tuple[str, str], ...] = ()

    def source(self, field: str) -> str:
        """Where ``field``'s value was read ("" when it is the generic default)."""
        return dict(self.sources).get(field, "")

    def summary(self) -> str:
        """One sentence of what choosing it changes, for a page caption or a note."""
        parts = [("fused kernels" if self.fused_kernels else "unfused elementwise kernels"),
                 *(["DTensor TP (each gathered input kept for backward)"] if self.dtensor_tp else []),
                 *(["its own data-parallel sync and what it holds"] if self.dp_sync else []),
                 *(["pipeline stages split by compute cost, the output layer counted"] if self.cost_balanced_stages
                   else []),
                 *([] if self.interleaved_schedule else ["no interleaved pipeline schedule"]),
                 ("TP overlap" + (" (asynchronous TP linears: each collective beside one GEMM)" if self.async_tp_linears
                                  else "") + (" on by default" if self.tp_comm_overlap else " available, off by default")
                  if self.tp_comm_overlap_available else "no TP overlap"),
                 *(["16-bit model + fp32 master weights"] if self.master_weights else []),
                 *([f"ZeRO-{'/'.join(map(str, self.zero_stages))} only"] if self.zero_stages != ZERO_STAGES else []),
                 *([" / ".join(METHOD_LABELS[m] for m in self.methods) + " only"] if self.methods != ALL_METHODS else [])]
        return f"{self.label}: " + ", ".join(parts)

    def layout_settings(self, fused_kernels: bool = False, tp_comm_overlap: bool | None = None) -> dict:
        """The keywords of :func:`engine.scaleout.estimate.estimate_layout` this framework sets (``fused_kernels``,
        ``tp_comm_overlap``, ``dtensor_tp``, ``dp_sync``, ``async_tp_linears``, ``zero_stages``, ``methods``, ``cost_balanced_stages``,
        ``interleaved_schedule``, ``framework_label``);
        ``fused_kernels`` True turns fused kernels on whatever the
        framework (torch.compile); ``tp_comm_overlap`` None: the framework's default.

        Raises:
            ScenarioError: ``tp_comm_overlap`` True for a framework that cannot overlap its TP communication.
        """
        if tp_comm_overlap and not self.tp_comm_overlap_available:
            raise ScenarioError(f"TP communication overlap: {self.label} does not overlap its TP collectives with the GEMMs")
        return {"fused_kernels": bool(fused_kernels or self.fused_kernels),
                "tp_comm_overlap": self.tp_comm_overlap if tp_comm_overlap is None else bool(tp_comm_overlap),
                "dtensor_tp": self.dtensor_tp, "dp_sync": self.dp_sync, "async_tp_linears": self.async_tp_linears,
                "zero_stages": self.zero_stages, "methods": self.methods,
                "cost_balanced_stages": self.cost_balanced_stages, "interleaved_schedule": self.interleaved_schedule,
                "framework_label": self.label}


_MEGATRON_FUSED = ("Megatron-LM core_v0.14.0 (23e00ed0) megatron/training/arguments.py: the fusions are on unless "
                   "turned off (--no-masked-softmax-fusion, --no-bias-gelu-fusion, --no-bias-swiglu-fusion, "
                   "--no-bias-dropout-fusion, --no-rope-fusion; fused RMSNorm/LayerNorm through TransformerEngine)")
_MEGATRON_OVERLAP = ("Megatron-LM core_v0.14.0 arguments.py --tp-comm-overlap (store_true: off unless given; "
                     "TransformerEngine userbuffers)")
_MASTER = "a 16-bit model with fp32 master weights and gradients in the optimizer (Megatron-LM --bf16 / --fp16)"

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework(name="generic", label="Generic (PyTorch eager)",
              sources=(("fused_kernels", "the estimate's default: eager PyTorch modules, one kernel per op"),)),
    Framework(name="megatron", label="Megatron-LM", fused_kernels=True, master_weights=True,
              sources=(("fused_kernels", _MEGATRON_FUSED), ("tp_comm_overlap", _MEGATRON_OVERLAP),
                       ("master_weights", _MASTER),
                       ("fp8_recipe", "Megatron-LM --fp8-format through TransformerEngine"))),
    Framework(name="nemo", label="NeMo (Megatron-core)", fused_kernels=True, master_weights=True,
              sources=(("fused_kernels", "NeMo 2.0 trains Megatron-core GPT models with TransformerEngine layers: "
                                         "Megatron-LM's fusions (" + _MEGATRON_FUSED + ")"),
                       ("tp_comm_overlap", "NeMo MegatronCommOverlapCallback(tp_comm_overlap=...): off by default, "
                                           "on in its performance recipes (pretrain_recipe(performance_mode=True))"),
                       ("master_weights", _MASTER + " through Megatron-core's distributed optimizer"),
                       ("fp8_recipe", "NeMo fp8 through TransformerEngine (MegatronMixedPrecision fp8='hybrid')"))),
    Framework(name="torchtitan", label="torchtitan", dtensor_tp=True, master_weights=True,
              fp8_recipe=Fp8Recipe.TORCHAO,
              sources=(("fused_kernels", "torchtitan v0.2.2 (73a0e697) torchtitan/config/job_config.py: "
                                         "compile.enable defaults to false (eager kernels; torch.compile when set)"),
                       ("dtensor_tp", "torchtitan's TP plan: DTensor ColwiseParallel / RowwiseParallel "
                                      "(torchtitan/models/llama3/infra/parallelize.py)"),
                       ("tp_comm_overlap", "torchtitan job_config.py parallelism.enable_async_tensor_parallel "
                                           "(AsyncTP), default false"),
                       ("master_weights", "FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): fp32 "
                                          "parameters sharded, bf16 compute copies"),
                       ("fp8_recipe", "torchtitan's float8 converter runs torchao.float8 (tensorwise by default)"))),
    Framework(name="nanotron", label="nanotron", fused_kernels=True, dp_sync=NANOTRON_DP_SYNC, master_weights=True,
              async_tp_linears=True, zero_stages=(0, 1), methods=(Method.FULL,), cost_balanced_stages=True,
              interleaved_schedule=False,
              sources=(("interleaved_schedule", "huggingface/nanotron@2411b022 src/nanotron/parallel/pipeline_parallel/"
                                               "engine.py: AllForwardAllBackwardPipelineEngine and "
                                               "OneForwardOneBackwardPipelineEngine, no interleaved engine"),
                       ("cost_balanced_stages", "huggingface/nanotron@2411b022 src/nanotron/models/base.py build_model "
                                               "('Balance compute across PP blocks') with the costs of "
                                               "models/llama.py get_block_compute_costs (output layer = vocab x "
                                               "hidden)"),
                       ("fused_kernels", "huggingface/nanotron@03b83fc8 src/nanotron/models/llama.py: TritonRMSNorm, "
                                         "flash_attn.layers.rotary.RotaryEmbedding, fused qkv_proj and gate_up_proj"),
                       ("dp_sync", "NANOTRON_DP_SYNC (huggingface/nanotron@e24d2483 trainer.py, "
                                   "optim/gradient_accumulator.py, optim/zero.py)"),
                       ("tp_comm_overlap", "nanotron's asynchronous TP linears (huggingface/nanotron@e24d2483 "
                                           "config/parallelism_config.py ParallelismArgs.tp_linear_async_communication: "
                                           "default False, opt-in; scripts/scaling_benchmarks.py turns it on with "
                                           "tp_mode REDUCE_SCATTER)"),
                       ("async_tp_linears", "huggingface/nanotron@e24d2483 parallel/tensor_parallel/functional.py "
                                            "_ColumnLinearAsyncCommunication, _RowLinearAsyncCommunication: each "
                                            "collective beside one GEMM (engine.scaleout.comm_volumes.TP_WINDOWS)"),
                       ("master_weights", "FP32GradientAccumulator: fp32 gradients and weights beside the bf16 "
                                          "model (huggingface/nanotron@e24d2483 optim/gradient_accumulator.py)"),
                       ("fp8_recipe", "no FP8 training in nanotron's benchmarks; TransformerEngine named as the "
                                      "estimate's default"),
                       ("zero_stages", "huggingface/nanotron@06e39568 src/nanotron/helpers.py "
                                       "init_optimizer_and_grad_accumulator: OptimizerArgs.zero_stage 0 builds the "
                                       "plain optimizer, any stage above 0 the ZeroDistributedOptimizer, which shards "
                                       "the optimizer states over the DP group (ZeRO-1); parameters and gradients stay "
                                       "whole on every rank"),
                       ("methods", "huggingface/nanotron@2411b022: no adapter (LoRA / PEFT) and no quantized-weight "
                                   "(bitsandbytes, NF4) code in src/ (git grep -i 'lora|peft|bitsandbytes|nf4': none); "
                                   "config/config.py ModelArgs gives every parameter one dtype (bf16 by default) and "
                                   "has no quantization field; scripts/scaling_benchmarks.py's runs train the whole "
                                   "model"))),
)}
"""Every framework by name (:func:`framework`); ``generic`` first, the default."""

DEFAULT_FRAMEWORK = "generic"


def framework(name: str | None) -> Framework:
    """The framework called ``name`` (None: :data:`DEFAULT_FRAMEWORK`).

    Raises:
        ScenarioError: no framework of that name (the message lists the known ones).
    """
    return named_record(FRAMEWORKS, name, DEFAULT_FRAMEWORK, "framework")
