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


def nccl_bytes(group_sizes: tuple[int, ...]) -> float:
    """NCCL buffers of one rank: one communicator per parallel group larger than one rank."""
    return NCCL_BYTES_PER_COMMUNICATOR * sum(1 for n in group_sizes if n > 1)
