"""The multi-GPU strategy a run uses, the same rule for the app's sidebar and the CLI (issue 25 item 6).

:data:`DEFAULT_STRATEGY` is ZeRO-3 for both: the strategy under which more GPUs pool their memory, so "the fewest
GPUs that fit" answers the question people ask. With one GPU and nothing offloaded a run trains plainly whatever
strategy is named (:func:`training_strategy`): DeepSpeed ZeRO or FSDP on a single GPU would only add their gathered
units and communication buckets, which the Trainer does not set up for a one-process run without a DeepSpeed/FSDP
config; the named strategy still decides the fewest-GPUs count.
"""

from __future__ import annotations

from engine.memory.parallel import Offload, Strategy

DEFAULT_STRATEGY = Strategy.ZERO3


def training_strategy(strategy: Strategy, num_gpus: int, offload: Offload = Offload.NONE) -> Strategy:
    """The strategy of ``num_gpus`` GPUs run with ``strategy``: ``strategy`` itself over several GPUs or with offload
    (ZeRO-Offload works on one GPU), plain training (:attr:`Strategy.DDP`, nothing replicated to others) on one."""
    return strategy if num_gpus > 1 or offload is not Offload.NONE else Strategy.DDP
