"""Per-GPU (and CPU) memory of a data-parallel run over N GPUs: DDP, ZeRO-1/2/3, FSDP, and CPU offload.

Starting point: the single-GPU estimate of :mod:`engine.memory`, split by component and phase. Each
strategy says which components every GPU holds whole (*replicated*), which are divided over the N
data-parallel ranks (*sharded*), which live in CPU memory (*offloaded*, also divided over the ranks), and
which buffers the strategy adds (communication buckets, gathered layers). The per-GPU peak is the largest
phase total ``sharded / N + replicated (+ buffers)``. Activations and the loss tensors are per GPU (each GPU
runs its own micro batch) and are never divided by the data-parallel size.

Which model states are partitioned (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", sec. 5: P_os, P_os+g, P_os+g+p; Zhao et al. 2023, "PyTorch FSDP", sec. 3):

============================  ==========================================  ==============================
strategy                      sharded over N                              added per GPU
============================  ==========================================  ==============================
``ddp``                       nothing                                     gradient buckets (N > 1)
``zero1``                     optimizer states (+ step temporaries)       reduce bucket
``zero2``                     + gradients                                 reduce bucket
``fsdp_shard_grad_op``        optimizer states, gradients                 one unit's unsharded gradient
``zero3``                     + weights                                   2 gathered units + reduce bucket
``fsdp_full_shard``           + weights                                   2 gathered units + 1 unit grad
============================  ==========================================  ==============================

FSDP ``NO_SHARD`` is DDP. Buffers:

- DDP gradient buckets: ``torch.nn.parallel.DistributedDataParallel`` (``bucket_cap_mb=25``) groups the
  gradients into flat buckets that the reducer allocates once, for every parameter that requires a
  gradient; unless ``gradient_as_bucket_view=True`` they are a second copy of the gradients (PyTorch docs,
  "DistributedDataParallel": *gradient_as_bucket_view ... can reduce peak memory usage, where the saved
  memory size will be equal to the total gradients size*). Modelled as one gradient-sized buffer, alive
  in every phase, only when N > 1 (one GPU runs without DDP).
- DeepSpeed reduce bucket: ``reduce_bucket_size`` defaults to 5e8 elements (DeepSpeed config docs, "ZeRO
  Optimizations": ``reduce_bucket_size`` and ``allgather_bucket_size`` default 5e8); with
  ``contiguous_gradients`` (default true) it is a flat buffer of that many elements in the gradient dtype,
  capped here at the trainable parameter count. (Hugging Face's ``"auto"`` sets it to hidden_size^2, far
  smaller; pass ``bucket_elements``.) The allgather bucket of ZeRO-1/2 bounds the chunks in which updated
  weights are gathered into the existing 16-bit weight buffers; no separate buffer is counted.
- ZeRO-3 / FSDP full shard gather the full weights of one unit (a decoder layer, or the embedding / LM head
  matrix) at a time in the compute dtype, and prefetch the next (FSDP ``backward_prefetch=BACKWARD_PRE``,
  DeepSpeed ``stage3_prefetch_bucket_size``): at the start of backward, the peak phase, the LM head is in
  use and the last decoder layer is prefetched, so the gathered bytes are the largest unit plus one decoder
  layer. Autocast's cached 16-bit copies of the whole model (``weight_copies``) are replaced by these
  gathered copies; the dequantized weight of a quantized base stays, and QLoRA gathers its units in the 4-bit
  storage size.
- Quantized frozen weights are sharded only when they are floating-point parameters (FSDP flattens, and ZeRO-3
  partitions, ``nn.Parameter`` s of a float dtype): bitsandbytes 4-bit weights with a float
  ``bnb_4bit_quant_storage`` (``Scenario.quant_storage``; transformers' default ``uint8`` is not), FP8 checkpoints.
  GPTQ/AWQ packed weights are int32 *buffers* and LLM.int8 weights int8 parameters: every GPU holds them whole
  (:func:`replicated_quantized_weights`; ``ParallelPlan.replicated_note`` says so), and units gather only their
  float weights. So a GPTQ-LoRA over 8 GPUs can hold more per GPU than a bf16 LoRA, whose base is sharded.
- DeepSpeed with mixed precision (``bf16``/``fp16`` in its config, Trainer ``bf16=True``) runs a 16-bit model and
  keeps fp32 master weights inside the optimizer: the ``weights`` component becomes 16-bit and a
  ``master_weights`` component (4 B per trainable parameter) is partitioned and offloaded with the optimizer states;
  there are no autocast copies. Gradients are those of the 16-bit model (2 B per trainable parameter: ZeRO-2/3
  keep each rank's 16-bit partition, ZeRO-1 all of them), and the optimizer step upcasts the rank's partition to
  fp32 (``master_gradients``, 4 B per trainable parameter / N, at the step only): 2 + 18/N B per parameter for
  ZeRO-2 at the step (16-bit weights; 16-bit and fp32 gradients, fp32 masters, Adam's two states over N), the
  multipliers DeepSpeed's own estimator uses since PR 5099 (DeepSpeed 0.14.3). FSDP keeps Trainer's fp32 weights
  and autocast (``MixedPrecision`` is not modelled).
- FSDP reduce-scatters each unit's gradient from an unsharded gradient of the unit: one unit's trainable
  parameters in the gradient dtype.

Offload (``Offload``): ``optimizer`` moves the optimizer states, the step's temporaries and the gradient
partitions to CPU memory, where the optimizer step runs (DeepSpeed ``offload_optimizer``, ZeRO-Offload,
Ren et al. 2021); ``optimizer_and_params`` also moves the weight shards (DeepSpeed ``offload_param``, ZeRO-3
only; FSDP ``CPUOffload(offload_params=True)``, which moves weights and gradients and runs the optimizer on
CPU). CPU memory per node = the offloaded bytes / N x GPUs per node; DeepSpeed can put the same states on
NVMe instead (``device: nvme``, ZeRO-Infinity), which this model leaves as a note.

LoRA / QLoRA under ZeRO-3 / FSDP: every weight (the frozen base, 16-bit or 4-bit, and the adapters) is in
the ``weights`` component, sharded like any other; the adapters' gradients and optimizer states are sharded
as well (ZeRO-3 / FSDP with ``use_orig_params=True`` shard frozen and trainable parameters alike).

Not modelled: tensor, pipeline, sequence and context parallelism; FSDP's root unit (embeddings and LM head
gathered together when tied); DeepSpeed's persistence threshold (small parameters kept whole) and
``stage3_max_live_parameters``; NCCL's own buffers; pinned-memory copies beyond the offloaded states.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict

from engine.memo import by_identity
from engine.model.architecture import Architecture
from engine.errors import ScenarioError
from engine.memory.device import DeviceMemory, device_memory
from engine.memory.result import MemoryEstimate
from engine.memory.components import Phase
from engine.memory.qlora_storage import sharded_quant_storage
from engine.memory.weights import quantized_bytes_per_param, split_tensors
from engine.scenario.precision import precision_spec
from engine.scenario.training import Framework, Method, QuantType, Scenario

MAX_GPUS = 1024
"""Largest number of GPUs searched for :meth:`ParallelPlan.min_gpus`."""

DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed's default ``reduce_bucket_size`` / ``allgather_bucket_size``: 5e8 elements (DeepSpeed config docs)."""

DDP_BUCKET_CAP_MB = 25
"""torch DistributedDataParallel ``bucket_cap_mb`` default (the buckets together still hold every gradient)."""

SHARDED_COMPONENTS = ("weights", "gradients", "optimizer_states", "optimizer_temporaries")
"""Components ZeRO-3 / FSDP FULL_SHARD divides over the GPUs (model states, Rajbhandari et al. 2020 sec. 5)."""


class Strategy(str, Enum):
    """Multi-GPU data-parallel strategy."""

    DDP = "ddp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP_FULL_SHARD = "fsdp_full_shard"
    FSDP_SHARD_GRAD_OP = "fsdp_shard_grad_op"


class Offload(str, Enum):
    """What lives in CPU memory instead of on the GPU."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_AND_PARAMS = "optimizer_and_params"


STRATEGY_LABELS = {
    Strategy.DDP: "DDP (every GPU holds everything)",
    Strategy.ZERO1: "ZeRO-1 (optimizer states sharded)",
    Strategy.ZERO2: "ZeRO-2 (+ gradients sharded)",
    Strategy.ZERO3: "ZeRO-3 (+ weights sharded)",
    Strategy.FSDP_FULL_SHARD: "FSDP FULL_SHARD (= ZeRO-3)",
    Strategy.FSDP_SHARD_GRAD_OP: "FSDP SHARD_GRAD_OP (= ZeRO-2)",
}

OFFLOAD_LABELS = {
    Offload.NONE: "No offload",
    Offload.OPTIMIZER: "Optimizer to CPU",
    Offload.OPTIMIZER_AND_PARAMS: "Optimizer and weights to CPU",
}

_SHARDED: dict[Strategy, tuple[str, ...]] = {
    Strategy.DDP: (),
    Strategy.ZERO1: ("optimizer_states", "optimizer_temporaries"),
    Strategy.ZERO2: ("optimizer_states", "optimizer_temporaries", "gradients"),
    Strategy.FSDP_SHARD_GRAD_OP: ("optimizer_states", "optimizer_temporaries", "gradients"),
    Strategy.ZERO3: SHARDED_COMPONENTS,
    Strategy.FSDP_FULL_SHARD: SHARDED_COMPONENTS,
}
FULL_SHARD = (Strategy.ZERO3, Strategy.FSDP_FULL_SHARD)
DEEPSPEED = (Strategy.ZERO1, Strategy.ZERO2, Strategy.ZERO3)
_OFFLOADED = {
    Offload.NONE: (),
    Offload.OPTIMIZER: ("optimizer_states", "optimizer_temporaries", "gradients"),
    Offload.OPTIMIZER_AND_PARAMS: ("optimizer_states", "optimizer_temporaries", "gradients", "weights"),
}


def divides_memory(strategy: Strategy) -> bool:
    """Whether more GPUs lower the per-GPU peak (every strategy but DDP)."""
    return strategy is not Strategy.DDP


def check_offload(strategy: Strategy, offload: Offload) -> None:
    """Raise ScenarioError for an offload the strategy does not offer."""
    if offload is Offload.NONE:
        return
    if strategy is Strategy.DDP:
        raise ScenarioError("offload needs ZeRO or FSDP: DDP keeps every state on the GPU")
    if offload is Offload.OPTIMIZER_AND_PARAMS and strategy not in FULL_SHARD:
        raise ScenarioError("weights can be offloaded only with zero3 or fsdp_full_shard (DeepSpeed offload_param is ZeRO-3 only)")
    if offload is Offload.OPTIMIZER and strategy.value.startswith("fsdp"):
        raise ScenarioError("FSDP offloads weights and optimizer together (CPUOffload(offload_params=True)): "
                            "use --offload optimizer_and_params with fsdp_full_shard, or a ZeRO stage")


class PhaseSplit(BaseModel):
    """Bytes of one phase by component: ``sharded`` parts are divided by the number of GPUs, ``replicated``
    parts are on every GPU, ``multi_gpu`` parts only exist when N > 1, ``offloaded`` parts are in CPU memory
    (divided over the ranks)."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    phase: Phase
    sharded_parts: dict[str, float]
    replicated_parts: dict[str, float]
    multi_gpu_parts: dict[str, float] = {}
    offloaded_parts: dict[str, float] = {}

    @property
    def sharded(self) -> float:
        return sum(self.sharded_parts.values())

    @property
    def replicated(self) -> float:
        return sum(self.replicated_parts.values())

    def gpu_bytes(self, n: int) -> float:
        return self.sharded / n + self.replicated + (sum(self.multi_gpu_parts.values()) if n > 1 else 0.0)

    def gpu_parts(self, n: int) -> dict[str, float]:
        out: dict[str, float] = {}
        for k, v in self.replicated_parts.items():
            out[k] = out.get(k, 0.0) + v
        for k, v in self.sharded_parts.items():
            out[k] = out.get(k, 0.0) + v / n
        if n > 1:
            for k, v in self.multi_gpu_parts.items():
                out[k] = out.get(k, 0.0) + v
        return out


BUFFER_LABELS = {
    "gathered_weights": "Gathered weights (ZeRO-3/FSDP unit + prefetch)",
    "comm_buckets": "Communication buckets",
}


class ParallelPlan(BaseModel):
    """How one estimate spreads over N GPUs with one strategy. Sizes in bytes."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    strategy: Strategy
    phases: tuple[PhaseSplit, ...]
    offload: Offload = Offload.NONE
    gathered_bytes: float = 0.0
    gathered_unit: str = ""
    bucket_bytes: float = 0.0
    bucket_note: str = ""
    replicated_quantized_bytes: float = 0.0
    """Frozen quantized weights every GPU holds whole although the strategy shards weights (see the module docstring)."""
    replicated_note: str = ""
    storage_note: str = ""
    """Said when QLoRA's 4-bit storage was taken as the compute dtype (:mod:`engine.memory.qlora_storage`)."""

    def per_gpu_bytes(self, num_gpus: int) -> float:
        """Peak bytes on each of ``num_gpus`` GPUs: the largest phase's total."""
        return max(p.gpu_bytes(num_gpus) for p in self.phases)

    def first_step_per_gpu_bytes(self, num_gpus: int) -> float:
        """Peak bytes on each GPU in the first step, whose phases before the optimizer step have no optimizer
        states yet (as :attr:`engine.memory.result.MemoryEstimate.first_step_peak_bytes`, per GPU)."""
        return max(p.gpu_bytes(num_gpus) - (p.gpu_parts(num_gpus).get("optimizer_states", 0.0)
                                            if p.phase != "optimizer_step" else 0.0) for p in self.phases)

    def peak_phase(self, num_gpus: int) -> Phase:
        """The phase holding the per-GPU peak at ``num_gpus``; on ties the start of backward, then the optimizer step
        (as :attr:`engine.memory.result.MemoryEstimate.peak_phase`)."""
        tie = {"backward": 2, "optimizer_step": 1}
        return max(self.phases, key=lambda p: (p.gpu_bytes(num_gpus), tie.get(p.phase, 0))).phase

    def components_per_gpu(self, num_gpus: int) -> dict[str, float]:
        """Bytes by component on each GPU at the peak phase (sum = :meth:`per_gpu_bytes`)."""
        ph = self.peak_phase(num_gpus)
        return next(p for p in self.phases if p.phase == ph).gpu_parts(num_gpus)

    def cpu_bytes_per_gpu(self, num_gpus: int) -> float:
        """CPU memory one rank's offloaded states take (its share; the largest over the phases)."""
        return max(sum(p.offloaded_parts.values()) for p in self.phases) / num_gpus

    def cpu_bytes_per_node(self, num_gpus: int, gpus_per_node: int | None = None) -> float:
        """CPU memory a node needs for the offloaded states of its ``gpus_per_node`` ranks (default: all on one node)."""
        per_node = min(num_gpus, gpus_per_node or num_gpus)
        return self.cpu_bytes_per_gpu(num_gpus) * per_node

    def min_gpus(self, usable_bytes: float, max_gpus: int = MAX_GPUS) -> int | None:
        """Fewest GPUs (1..``max_gpus``) whose per-GPU peak fits in ``usable_bytes``; None if none does.

        Binary search over 2..max_gpus: the per-GPU peak never increases with N beyond 2 (DDP's buckets
        appear at N = 2, and DDP never divides memory).
        """
        if self.per_gpu_bytes(1) <= usable_bytes:
            return 1
        if not divides_memory(self.strategy) or self.per_gpu_bytes(max_gpus) > usable_bytes:
            return None
        lo, hi = 1, max_gpus  # lo does not fit, hi fits
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.per_gpu_bytes(mid) <= usable_bytes:
                hi = mid
            else:
                lo = mid
        return hi


def device_memory_per_gpu(est: MemoryEstimate, plan: "ParallelPlan", num_gpus: int) -> DeviceMemory:
    """Allocated, reserved and nvidia-smi bytes of one GPU of ``plan`` at ``num_gpus`` (see
    :class:`engine.memory.device.DeviceMemory`). Paged optimizer states (all of a paged optimizer's states) are outside
    torch's allocator: their per-GPU share is counted as pageable, not allocated."""
    per_gpu = plan.per_gpu_bytes(num_gpus)
    pageable = plan.components_per_gpu(num_gpus).get("optimizer_states", 0.0) if est.pageable_bytes else 0.0
    return device_memory(per_gpu - pageable, pageable)


@by_identity()
def decoder_layer_parameters(arch: Architecture) -> int:
    """Parameters of one decoder block: the per-layer tensor groups (count a multiple of the layer count)
    divided by the number of layers. Blocks of the supported families are identical in size."""
    per_layer = sum(
        g.parameters for g in arch.tensors
        if g.role in ("attention", "mlp", "norms") and g.count >= arch.num_layers and g.count % arch.num_layers == 0
    )
    return per_layer // arch.num_layers


@by_identity()
def largest_gathered_unit(arch: Architecture) -> tuple[int, str]:
    """(parameters, description) of the largest unit ZeRO-3 / FSDP gathers at once: a decoder layer, or
    the embedding / LM head matrix when that is larger (it is for most models with large vocabularies)."""
    layer = decoder_layer_parameters(arch)
    matrices = [(g.numel, g.name) for g in arch.tensors if g.role in ("embeddings", "lm_head")]
    biggest, name = max(matrices, default=(0, ""))
    if biggest > layer:
        return biggest, f"{name} matrix ({biggest:,} parameters; a decoder layer has {layer:,})"
    return layer, f"one decoder layer ({layer:,} parameters)"


def gathered_parameters(arch: Architecture) -> tuple[int, str]:
    """(parameters, description) gathered at once under ZeRO-3 / FSDP full shard: the largest unit in use
    plus the next decoder layer prefetched."""
    unit, what = largest_gathered_unit(arch)
    layer = decoder_layer_parameters(arch)
    return unit + layer, f"{what} + the next decoder layer prefetched ({layer:,} parameters)"


def replicated_quantized_weights(arch: Architecture, scenario: Scenario) -> tuple[float, int, str]:
    """(bytes, parameters, why) of the frozen quantized weights FSDP / ZeRO-3 cannot shard: GPTQ/AWQ packed int32
    buffers, LLM.int8 int8 weights, bitsandbytes 4-bit weights in ``uint8`` storage; (0, 0, "") when there are none
    or they are shardable (bitsandbytes with a float ``bnb_4bit_quant_storage``, FP8, torchtune's QLoRA, whose
    torchao ``NF4Tensor`` FSDP2 shards: torchtune's 8-GPU Llama-3.1-405B QLoRA, data/measured_memory.csv m008).

    Raises:
        ScenarioError: as :func:`engine.memory.weights.split_tensors` (full fine-tuning of a stored-quantized model).
    """
    stored = arch.stored_quantization
    if stored is None and scenario.method is not Method.QLORA:
        return 0.0, 0, ""
    t = split_tensors(arch, scenario, precision_spec(scenario.precision))
    params = sum(g.parameters for g in t.quantized)
    if stored is not None:
        if stored.shardable:
            return 0.0, 0, ""
        why = f"{stored.description}: {stored.storage_note or 'not float parameters'}"
    elif scenario.framework is Framework.TORCHTUNE:
        return 0.0, 0, ""  # torchao's NF4Tensor implements FSDP2's sharding: torchtune's QLoRA shards its 4-bit base
    elif scenario.quant_type is QuantType.INT8:
        why = "LLM.int8 weights are int8 parameters: FSDP and ZeRO-3 shard float parameters only"
    elif scenario.quant_storage.is_float:
        return 0.0, 0, ""
    else:
        why = ("bitsandbytes 4-bit weights in bnb_4bit_quant_storage uint8 (transformers' default): FSDP and ZeRO-3 shard "
               "float parameters only; set bnb_4bit_quant_storage to the compute dtype (--quant-storage bf16) to shard them")
    return params * t.quantized_bpp, params, why


def _grad_bytes_per_param(est: MemoryEstimate) -> float:
    grads = est.parts_by_key.get("gradients")
    if grads is None or not est.trainable_parameters:
        return 0.0
    return grads.bytes / est.trainable_parameters


def plan_parallel(
    est: MemoryEstimate,
    arch: Architecture,
    scenario: Scenario,
    strategy: Strategy,
    offload: Offload = Offload.NONE,
    bucket_elements: int = DEEPSPEED_BUCKET_ELEMENTS,
) -> ParallelPlan:
    """Split the single-GPU estimate ``est`` of ``scenario`` on ``arch`` for ``strategy`` and ``offload``
    (see the module docstring). An inference estimate (no gradients, one phase) is replicated on every GPU
    whatever the strategy (data-parallel serving: one copy per GPU).

    Raises:
        ScenarioError: an offload the strategy does not offer.
    """
    check_offload(strategy, offload)
    phases_of = tuple(dict.fromkeys(ph for p in est.parts for ph in p.phases))
    inference = "inference" in phases_of
    grad_b = _grad_bytes_per_param(est)
    trainable = est.trainable_parameters
    sharded_keys = () if inference else _SHARDED[strategy]
    offloaded_keys = _OFFLOADED[offload]
    gathered = 0.0
    unit_desc = ""
    bucket = 0.0
    bucket_note = ""
    full_shard = strategy in FULL_SHARD and not inference
    storage_note = ""
    if full_shard:  # QLoRA without a named bnb_4bit_quant_storage: the FSDP recipe's compute dtype (said in the plan)
        scenario, storage_note = sharded_quant_storage(scenario)
    kept_whole, kept_params, kept_why = (replicated_quantized_weights(arch, scenario) if full_shard else (0.0, 0, ""))
    if full_shard:
        params, unit_desc = gathered_parameters(arch)
        per = (quantized_bytes_per_param(scenario.double_quant, scenario.quant_type) if scenario.method is Method.QLORA
               else precision_spec(scenario.precision).compute_bytes)
        gathered = params * per
        if kept_params:
            # The packed linears are on every GPU already: a unit gathers only its float weights (norms; the
            # embedding / LM head matrix, which is never quantized) in the compute dtype.
            compute = precision_spec(scenario.precision).compute_bytes
            unit, _ = largest_gathered_unit(arch)
            layer_float = decoder_layer_parameters(arch) - kept_params // arch.num_layers
            matrix = unit if unit > decoder_layer_parameters(arch) else layer_float
            gathered = (matrix + layer_float) * compute
            unit_desc += "; the quantized linears are replicated, so only their float weights are gathered"
    # The dequantized weight of a quantized base is a temporary, not autocast's cache: it stays under full sharding.
    keep_copies = getattr(scenario, "method", None) is Method.QLORA or arch.stored_quantization is not None
    master = _deepspeed_master_split(est, arch, scenario, strategy) if not inference else None
    if master is not None:
        sharded_keys = sharded_keys + ("master_weights", "master_gradients")
        if offload is not Offload.NONE:
            offloaded_keys = offloaded_keys + ("master_weights", "master_gradients")
        grad_b = float(precision_spec(scenario.precision).compute_bytes)  # the 16-bit model's gradients
    if not inference and trainable:
        if strategy in DEEPSPEED:
            elems = min(bucket_elements, trainable)
            bucket = elems * grad_b
            bucket_note = f"reduce bucket: min(reduce_bucket_size {bucket_elements:.3g}, {trainable:,} trainable) x {grad_b:g} B"
        elif strategy.value.startswith("fsdp"):
            unit_params, _ = largest_gathered_unit(arch) if full_shard else (decoder_layer_parameters(arch), "")
            unit_params = max(unit_params, decoder_layer_parameters(arch))
            elems = min(unit_params * trainable / max(arch.total_parameters, 1), trainable)
            bucket = elems * grad_b
            bucket_note = f"one unit's unsharded gradient before reduce-scatter: {elems:,.0f} trainable x {grad_b:g} B"
        elif strategy is Strategy.DDP:
            bucket = trainable * grad_b
            bucket_note = (f"DDP reducer buckets (bucket_cap_mb={DDP_BUCKET_CAP_MB}) hold a copy of all {trainable:,} "
                           f"gradients x {grad_b:g} B (gradient_as_bucket_view=False)")
    phases = []
    for ph in phases_of:
        comps = est.components_at(ph)
        if master is not None and comps.get("weights"):
            comps = {**{k: v for k, v in comps.items() if k != "weight_copies"},
                     "weights": master[0], "master_weights": master[1]}
            if comps.get("gradients"):
                comps["gradients"] = trainable * grad_b
            if ph == "optimizer_step":
                comps["master_gradients"] = trainable * 4.0
        sharded: dict[str, float] = {}
        replicated: dict[str, float] = {}
        offloaded: dict[str, float] = {}
        for k, v in comps.items():
            if k == "weight_copies" and full_shard and not keep_copies:
                continue
            if k == "weights" and kept_whole and v:
                replicated[k] = kept_whole  # buffers / int parameters: neither sharded nor offloaded
                v -= kept_whole
            if k in offloaded_keys and not inference:
                offloaded[k] = v
                continue
            (sharded if k in sharded_keys else replicated)[k] = v
        multi: dict[str, float] = {}
        if strategy is Strategy.DDP:
            if bucket:
                multi["comm_buckets"] = bucket
        elif bucket:
            replicated["comm_buckets"] = bucket
        if full_shard and ph in ("forward", "backward", "recompute"):
            replicated["gathered_weights"] = gathered
        phases.append(PhaseSplit(phase=ph, sharded_parts=sharded, replicated_parts=replicated,
                                 multi_gpu_parts=multi, offloaded_parts=offloaded))
    note = (f"{kept_params:,} quantized weights ({kept_whole / 1e9:.2f} GB) replicated on every GPU: {kept_why}"
            if kept_whole else "")
    return ParallelPlan(strategy=strategy, offload=offload, phases=tuple(phases), gathered_bytes=gathered,
                        gathered_unit=unit_desc, bucket_bytes=bucket, bucket_note=bucket_note,
                        replicated_quantized_bytes=kept_whole, replicated_note=note, storage_note=storage_note)


def _deepspeed_master_split(est: MemoryEstimate, arch: Architecture, scenario: Scenario, strategy: Strategy) -> tuple[float, float] | None:
    """(16-bit weights on the GPU, fp32 master weights) for DeepSpeed with mixed precision, else None.

    Trainer's autocast keeps fp32 weights and caches 16-bit copies; DeepSpeed's ``bf16``/``fp16`` modes instead
    cast the model to 16 bits and keep an fp32 master copy of the trainable weights inside the optimizer, which
    ZeRO partitions (and offloads) with the optimizer states (Rajbhandari et al. 2020, sec. 3: 2 + 2 + 12 B per
    parameter, the 12 being master weights, momentum and variance). Full fine-tuning and LoRA only (QLoRA's
    4-bit base is left as stored)."""
    spec = precision_spec(scenario.precision)
    if strategy not in DEEPSPEED or not spec.autocast or spec.weight_bytes != 4:
        return None
    if scenario.method is Method.QLORA:
        return None
    # A checkpoint stored quantized keeps its packed linears as stored: only its float weights become 16-bit.
    stored = arch.stored_quantization
    packed = sum(g.parameters for g in arch.tensors if g.linear) if stored is not None else 0
    adapters = est.trainable_parameters if scenario.method is not Method.FULL else 0  # LoRA adapters: 16-bit as well
    float_params = est.total_parameters - packed + adapters
    weights = packed * (stored.bytes_per_param if stored is not None else 0.0) + float_params * spec.compute_bytes
    return weights, est.trainable_parameters * 4.0


# --------------------------------------------------------------------------------------------------
# DeepSpeed's own model-state estimators, for comparison


class DeepSpeedEstimate(BaseModel):
    """DeepSpeed's estimate of model-state memory (no activations, no buffers other than its factor)."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    function: str
    gpu_bytes_per_gpu: float
    cpu_bytes_per_node: float
    largest_layer_params: int = 0
    note: str


def largest_module_parameters(arch: Architecture) -> int:
    """Parameters of the largest single module (DeepSpeed's ``model_to_params`` counts each module's own
    parameters, ``recurse=False``): the largest weight matrix here (embedding / LM head for most LLMs)."""
    return max((g.numel for g in arch.tensors), default=0)


def deepspeed_zero2_model_states(total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
                                 cpu_offload: bool = True, additional_buffer_factor: float = 1.5) -> tuple[int, int]:
    """(cpu_mem, gpu_mem) bytes: DeepSpeed ``deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs``
    as in DeepSpeed 0.14.3 and later (PR 5099, merged 2024-06-04, still the formula in the 0.19 releases).

    offload: GPU 2 x params (16-bit weights); CPU params x max(4 x total_gpus, 16) x 1.5.
    no offload: GPU 2 x params + 18 x params / total_gpus (2 = 16-bit weights; 18 = 16-bit gradients 2 + fp32
    gradients 4 + fp32 master weights 4 + Adam momentum and variance 8, partitioned); CPU params x 4 x
    gpus_per_node x 1.5. Before PR 5099 the GPU figure was 4 x params + 16 x params / total_gpus, which counted the
    16-bit gradients whole on every GPU although ZeRO-2 partitions them.
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def deepspeed_zero3_model_states(total_params: int, largest_layer_params: int, num_gpus_per_node: int = 1,
                                 num_nodes: int = 1, cpu_offload: bool = True, cpu_offload_params: bool = True,
                                 zero_init: bool = True, additional_buffer_factor: float = 1.5) -> tuple[int, int, int]:
    """(cpu_mem, gpu_mem, largest_layer_memory) bytes: DeepSpeed
    ``deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs`` (called by
    ``estimate_zero3_model_states_mem_needs_all_live``; formula as in DeepSpeed's ``stage3.py``).

    largest_layer_memory = 4 x largest layer params (its 16-bit weight and gradient); GPU: that, plus
    2 x params / total_gpus with optimizer offload only, plus 18 x params / total_gpus without offload.
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            factor = 18 * gpus_factor if zero_init else max(4 * num_gpus_per_node, 18 * gpus_factor)
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            factor = 16 * gpus_factor if zero_init else max(4 * num_gpus_per_node, 16 * gpus_factor)
        cpu_mem = total_params * factor * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        cpu_mem = (largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor if zero_init
                   else total_params * 4 * num_gpus_per_node * additional_buffer_factor)
    return int(cpu_mem), int(gpu_mem), int(largest_layer_memory)


def deepspeed_estimate(arch: Architecture, strategy: Strategy, offload: Offload, num_gpus: int,
                       gpus_per_node: int | None = None) -> DeepSpeedEstimate | None:
    """DeepSpeed's model-state estimate for ``zero2`` / ``zero3`` (None for the other strategies)."""
    per_node = min(num_gpus, gpus_per_node or num_gpus)
    nodes = max(1, -(-num_gpus // per_node))
    total = arch.total_parameters
    why = ("DeepSpeed counts model states only (16-bit weights, gradients, fp32 Adam states and master "
           "weights, 18 B/param for ZeRO-3), for a fully trained model: no activations, loss tensors or buckets; "
           "for LoRA/QLoRA it overstates, since frozen weights have no gradient or optimizer state")
    if strategy is Strategy.ZERO2:
        cpu, gpu = deepspeed_zero2_model_states(total, per_node, nodes, cpu_offload=offload is not Offload.NONE)
        return DeepSpeedEstimate(function="deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs",
                                 gpu_bytes_per_gpu=gpu, cpu_bytes_per_node=cpu,
                                 note=why + "; its formula as in DeepSpeed 0.14.3 and later (PR 5099): 2P + 18P/N per GPU "
                                      "without offload (earlier releases printed 4P + 16P/N)")
    if strategy is Strategy.ZERO3:
        largest = largest_module_parameters(arch)
        cpu, gpu, _ = deepspeed_zero3_model_states(total, largest, per_node, nodes,
                                                   cpu_offload=offload is not Offload.NONE,
                                                   cpu_offload_params=offload is Offload.OPTIMIZER_AND_PARAMS)
        return DeepSpeedEstimate(function="deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs_all_live",
                                 gpu_bytes_per_gpu=gpu, cpu_bytes_per_node=cpu, largest_layer_params=largest, note=why)
    return None
