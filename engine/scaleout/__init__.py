"""Stage 4 of the flow, beside time: one training run spread over many GPUs with tensor, pipeline, context and
expert parallelism (TP x PP x CP x EP x DP), per rank.

- :mod:`~engine.scaleout.layout`: the validated :class:`~engine.scaleout.layout.Layout` and what it must divide;
- :mod:`~engine.scaleout.partition`: which parameters a rank holds (TP-sharded, replicated, expert, per stage);
- :mod:`~engine.scaleout.memory`: per-rank memory of every pipeline stage, built on the one-GPU components;
- :mod:`~engine.scaleout.buffers`: communication buffers (SP all-gather, pipeline p2p, expert all-to-all, FSDP, NCCL);
- :mod:`~engine.scaleout.fp8`: TransformerEngine / torchao float8 memory and FP8 matmuls;
- :mod:`~engine.scaleout.megatron`: Megatron-LM's own ``theoretical_memory_usage`` formula, for comparison;
- :mod:`~engine.scaleout.comm_volumes`: bytes, counts and links of every collective, and the pipeline bubble;
- :mod:`~engine.scaleout.rank_compute`: one rank's compute per micro batch on :mod:`engine.time`'s model (TP/CP/EP shapes);
- :mod:`~engine.scaleout.step_time`: the step time (compute, collectives over the cluster's links, bubble, optimizer);
- :mod:`~engine.scaleout.search`: every layout of a cluster that fits, ranked, with the Pareto front;
- :mod:`~engine.scaleout.exports`: launch settings for Megatron-LM, torchtitan, DeepSpeed and accelerate.

May import: :mod:`engine.model`, :mod:`engine.hardware`, :mod:`engine.scenario`, :mod:`engine.memory`,
:mod:`engine.time`, :mod:`engine.errors`, :mod:`engine.units`. Nothing from plan, validation or the CLI. The product
never simulates a distributed runtime: it estimates, and exports settings for the engines that run it.
"""
