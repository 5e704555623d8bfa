"""Communication buffers of a parallel layout, per rank, in bytes, each with its source.

Tensor buffers (counted in ``torch.cuda.max_memory_allocated``):

- **sequence-parallel all-gather**: with SP the input of each column-parallel linear is all-gathered from s/TP to
  the full sequence into one reused buffer (Megatron ``get_global_memory_buffer()`` in
  ``megatron/core/tensor_parallel/layers.py``, ``LinearWithGradAccumulationAndAsyncCommunication``); backward
  gathers again into the same buffer for the weight gradient.
- **pipeline send/recv**: each stage receives one activation (forward) and one gradient (backward) of
  (s / CP) x b x h (/ TP with SP) per micro batch and sends its own (Megatron ``p2p_communication.py``,
  ``get_tensor_shapes`` in ``schedules.py``); two such tensors are modelled alive at once.
- **expert all-to-all**: the permuted tokens sent to and received from the other EP ranks, T x top-k x capacity
  factor tokens of h elements each way (Megatron ``MoEAlltoAllTokenDispatcher``; capacity ``ceil(T k CF / E)``
  per expert from ``moe_utils.get_capacity``; dropless = CF 1 on average).
- **ZeRO-3 / FSDP**: the gathered weights of the block in use and of the one prefetched, in the compute dtype,
  and one block's unsharded gradient in fp32 before its reduce-scatter (torchtitan ``mixed_precision_reduce =
  float32``; PyTorch FSDP2 ``fully_shard`` with ``reshard_after_forward``).

- **a framework's DP sync** (:class:`engine.scaleout.comm_volumes.DataParallelSync`, the framework's record):
  PyTorch DDP's bucket copy of the gradients, a coalesced all-gather's flattened copies, and the 16-bit gradients
  of a backward whose gradients an fp32 accumulator collects (:func:`ddp_bucket_bytes`,
  :func:`coalesced_gather_bytes`, :func:`half_gradient_excess`).

Not tensors (added to what nvidia-smi shows, not to the allocated peak):

- **NCCL**: each communicator a rank joins allocates its own buffers, ``NCCL_BUFFSIZE`` (4 MiB by default, NCCL
  environment-variable docs) per channel and peer; :data:`NCCL_BYTES_PER_COMMUNICATOR` assumes 16 channels and
  2 ring peers.
"""

from __future__ import annotations

NCCL_BUFFSIZE = 4 * 2**20
"""NCCL's default ``NCCL_BUFFSIZE``: 4 MiB (NCCL docs, "Environment Variables")."""
NCCL_CHANNELS = 16
"""Channels per communicator assumed (NCCL picks 2-32 by topology; NVSwitch systems use 16-32)."""
NCCL_BYTES_PER_COMMUNICATOR = NCCL_BUFFSIZE * NCCL_CHANNELS * 2
"""128 MiB per communicator (buffer x channels x 2 ring peers): an assumption, not a measurement."""


def sequence_parallel_gather_bytes(tokens_per_rank_full_seq: float, hidden: int, compute_bytes: int) -> float:
    """One all-gathered activation: (s / CP) x b x h elements of the compute dtype."""
    return tokens_per_rank_full_seq * hidden * compute_bytes


def pipeline_p2p_bytes(tokens_per_rank: float, hidden: int, compute_bytes: int, tp_split: int) -> float:
    """Two boundary tensors (one received activation, one received gradient) of (s / CP) x b x h (/ TP with SP)."""
    return 2.0 * tokens_per_rank * hidden * compute_bytes / tp_split


def expert_all_to_all_bytes(tokens_per_rank: float, top_k: int, hidden: int, compute_bytes: int,
                            capacity_factor: float | None) -> float:
    """Send and receive buffers of one MoE layer's token dispatch: 2 x T x k x CF x h x bytes."""
    cf = 1.0 if capacity_factor is None else capacity_factor
    return 2.0 * tokens_per_rank * top_k * cf * hidden * compute_bytes


def fsdp_unit_bytes(block_parameters: float, compute_bytes: int, reduce_bytes: int = 4) -> tuple[float, float]:
    """(gathered weights of two blocks in the compute dtype, one block's unsharded gradient in ``reduce_bytes``)."""
    return 2.0 * block_parameters * compute_bytes, block_parameters * reduce_bytes


def ddp_bucket_bytes(rank_parameters: float, param_bytes: float) -> float:
    """PyTorch DDP's gradient buckets: ``Reducer::initialize_buckets`` (``torch/csrc/distributed/c10d/reducer.cpp``)
    allocates each bucket's flat ``gradients`` tensor once, in the parameters' dtype, and with
    ``gradient_as_bucket_view=False`` (the default) copies each ``.grad`` into it: a second copy of every gradient,
    ``rank_parameters`` x ``param_bytes``, alive for the whole run."""
    return rank_parameters * param_bytes


def coalesced_gather_bytes(rank_parameters: float, param_bytes: float, ranks: int) -> float:
    """An all-gather of every parameter through flattened buffers (nanotron@e24d2483 ``distributed.py``
    ``all_gather_coalesced``: ``_flatten_dense_tensors`` of this rank's slices as the input and of each rank's slices
    as one output per rank, copied back by ``update_output``): the whole 16-bit model once plus this rank's 1/``ranks``."""
    return rank_parameters * param_bytes * (1.0 + 1.0 / ranks)


def half_gradient_excess(rank_parameters: float, param_bytes: float, freed_bytes: float) -> float:
    """How far the end of one micro batch's backward rises above its start when the backward makes the 16-bit
    ``.grad`` of all ``rank_parameters`` (freed only after it returns, nanotron ``FP32GradientAccumulator.backward``)
    while it frees that micro batch's saved tensors, ``freed_bytes``: max(0, P x bytes - freed). The peak of the
    backward is its start or its end (gradients grow as the saved tensors go)."""
    return max(0.0, rank_parameters * param_bytes - freed_bytes)


def nccl_bytes(group_sizes: tuple[int, ...]) -> float:
    """NCCL buffers of one rank: one communicator per parallel group larger than one rank."""
    return NCCL_BYTES_PER_COMMUNICATOR * sum(1 for n in group_sizes if n > 1)
