"""accelerate config YAML (accelerate 1.15.0 ``commands/config/config_args.py``, ``utils/dataclasses.py``), the file
``accelerate config`` writes and ``accelerate launch --config_file`` reads.

``num_processes`` is the total number of processes (GPUs) over all machines, ``num_machines`` the nodes.
``distributed_type: FSDP`` with ``fsdp_config``: version 1 names the sharding (``FULL_SHARD``, ``SHARD_GRAD_OP``,
``NO_SHARD``) in ``fsdp_reshard_after_forward`` (or the older ``fsdp_sharding_strategy``), version 2 a bool (true =
full shard); ``fsdp_offload_params`` offloads weights, gradients and the optimizer step to CPU.
``distributed_type: DEEPSPEED`` with ``deepspeed_config`` (ZeRO stage, offload devices) or a DeepSpeed file.
``mixed_precision``: autocast dtype.
"""

from __future__ import annotations

from typing import Any

from engine.errors import TrainingConfigError
from engine.importers.table import IGNORE, only_if_true, Handling, Map, Reading, Unmodelled, Unsupported, check, collect
from engine.importers.values import boolean, choice, integer, sharding, zero_stage
from engine.memory.parallel import Offload, Strategy

FORMAT, VERSION = "accelerate config", "1.15.0"


def _processes(value: Any, key: str) -> int:
    """``num_processes``: the processes (GPUs) over all machines, >= 1; -1 is what ``accelerate config`` writes when
    it was not asked (ClusterConfig's default), so launch decides and the estimate keeps its own GPU count. 0 would
    launch nothing: an error, not a value to ignore."""
    count = integer(-1)(value, key)
    check(count != 0, key, "an integer >= 1 (or -1: not set); 0 processes train nothing", value)
    return count


DISTRIBUTED = {"no": "no", "multi_gpu": "ddp", "fsdp": "fsdp", "deepspeed": "deepspeed",
               **{k: Unmodelled(f"{k.upper()}: not a GPU data-parallel run the estimate models")
                  for k in ("multi_cpu", "multi_npu", "multi_mlu", "multi_sdaa", "multi_musa", "multi_xpu", "xla",
                            "multi_hpu", "multi_neuron")},
               "megatron_lm": Unmodelled("Megatron-LM tensor/pipeline parallelism: its layout is not read from an accelerate file "
                                          "(set it on the Scale out page or with --tensor-parallel / --pipeline-parallel)")}
MIXED = {"no": "no", "bf16": "bf16", "fp16": "fp16",
         "fp8": Unmodelled("FP8 training (Transformer Engine / torchao): modelled for parallel layouts only (Scale out, "
                           "--precision fp8), not for the one-GPU estimate this import feeds")}
_DEVICE = choice({"none": "none", "cpu": "cpu",
                  "nvme": Unmodelled("ZeRO-Infinity: states on NVMe; not modelled (CPU offload is the closest)")})

KEYS: dict[str, Handling] = {
    **{k: IGNORE for k in ("compute_environment", "machine_rank", "main_training_function", "rdzv_backend",
                           "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "debug", "downcast_bf16",
                           "enable_cpu_affinity", "gpu_ids", "main_process_ip", "main_process_port", "tpu_name",
                           "tpu_zone", "commands", "command_file", "ipex_config.*", "mpirun_config.*")},
    "distributed_type": Map("acc_distributed", choice(DISTRIBUTED)),
    "num_processes": Map("acc_processes", _processes), "num_machines": Map("acc_machines", integer()),
    "mixed_precision": Map("mixed", choice(MIXED)),
    "use_cpu": Unsupported("trains on the CPU: no GPU memory estimate applies"),
    "dynamo_config.dynamo_backend": Unsupported("torch.compile (dynamo) fuses kernels: faster, often fewer saved "
                                                "activations than eager"),
    "dynamo_config.*": IGNORE,
    "fp8_config.*": Unsupported("FP8 training: not modelled"),
    "parallelism_config.*": Unsupported("tensor/context/sequence parallelism (ParallelismConfig): not modelled"),
    "fsdp_config.fsdp_version": Map("acc_fsdp_version", choice({1: 1, 2: 2})),
    "fsdp_config.fsdp_reshard_after_forward": Map("acc_reshard", sharding),
    "fsdp_config.fsdp_sharding_strategy": Map("acc_reshard", sharding),
    "fsdp_config.fsdp_offload_params": Map("acc_fsdp_offload", boolean),
    "fsdp_config.fsdp_activation_checkpointing": Map("fsdp_activation_checkpointing", only_if_true),
    "fsdp_config.*": IGNORE,  # wrap policy, prefetch, state dict type, cpu_ram_efficient_loading, sync_module_states, ...
    "deepspeed_config.deepspeed_config_file": Unsupported(
        "names a DeepSpeed config file (ZeRO stage, offload): import that file as well"),
    "deepspeed_config.zero_stage": Map("strategy", zero_stage),
    "deepspeed_config.offload_optimizer_device": Map("acc_offload_optimizer", _DEVICE),
    "deepspeed_config.offload_param_device": Map("acc_offload_param", _DEVICE),
    "deepspeed_config.gradient_accumulation_steps": Map("gradient_accumulation_steps",
                                                        lambda v, k: "auto" if v == "auto" else integer()(v, k)),
    "deepspeed_config.*": IGNORE,  # gradient_clipping, zero3_init_flag, zero3_save_16bit_model, launcher, hostfile
    "megatron_lm_config.*": Unsupported("Megatron-LM parallelism: not modelled"),
}


def matches(doc: dict[str, Any]) -> bool:
    """An accelerate config: ``distributed_type`` beside ``compute_environment`` or ``num_processes`` (decision 5)."""
    return "distributed_type" in doc and any(k in doc for k in ("compute_environment", "num_processes", "mixed_precision",
                                                                 "fsdp_config", "deepspeed_config"))


def read(doc: dict[str, Any]) -> Reading:
    r = collect(doc, KEYS, FORMAT, VERSION)
    s = r.settings
    kind = s.pop("acc_distributed", None)
    processes, machines = s.pop("acc_processes", None), s.pop("acc_machines", None)
    if processes == -1:
        r.notes.append("num_processes: -1 (not set): accelerate launch decides; the GPU count is the estimate's own")
    if processes is not None and processes >= 1:
        s["num_gpus"] = processes
        if machines:
            # accelerate launches num_processes // num_machines per machine; a count that does not divide is no run
            # (8 over 3 machines was read as 2 per node, 8 over 16 as 1 per node: 16 GPUs, not 8)
            if processes % machines:
                raise TrainingConfigError(f"num_processes ({processes}) is not a multiple of num_machines ({machines}): "
                                          "each machine runs num_processes / num_machines processes")
            s["gpus_per_node"] = processes // machines
    if kind == "ddp" or (kind == "no" and processes in (None, 1)):
        s["strategy"] = Strategy.DDP
    version, reshard = s.pop("acc_fsdp_version", 1), s.pop("acc_reshard", None)
    offload = s.pop("acc_fsdp_offload", None)
    if kind == "fsdp":
        if reshard is None:
            reshard = Strategy.FSDP_FULL_SHARD  # FullyShardedDataParallelPlugin's default
        s["strategy"] = reshard
        s["offload"] = Offload.OPTIMIZER_AND_PARAMS if offload else Offload.NONE
    opt, param = s.pop("acc_offload_optimizer", "none"), s.pop("acc_offload_param", "none")
    if kind == "deepspeed" and "strategy" in s:
        s["offload"] = Offload.OPTIMIZER_AND_PARAMS if param == "cpu" else Offload.OPTIMIZER if opt == "cpu" else Offload.NONE
        if param == "cpu" and opt != "cpu":
            r.unsupported["deepspeed_config.offload_param_device"] = "weights offloaded without the optimizer: not modelled"
            s.pop("offload")
    if s.get("gradient_accumulation_steps") == "auto":
        s.pop("gradient_accumulation_steps")
    del version
    return r
