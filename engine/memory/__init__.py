"""Stage 3 of the flow: the memory of one training step (or of serving), in bytes, by named component.

One module per component group, assembled by :func:`engine.memory.estimate.estimate_memory`:

- :mod:`~engine.memory.components` (a component and the moments of a step) and :mod:`~engine.memory.result`
  (the estimate and its peak over those moments);
- :mod:`~engine.memory.weights` (weights, quantized formats, autocast copies), :mod:`~engine.memory.gradients`,
  :mod:`~engine.memory.optimizer_states`, :mod:`~engine.memory.activations`, :mod:`~engine.memory.logits`;
- :mod:`~engine.memory.device`: the allocator reserve and CUDA context (reserved, nvidia-smi);
- :mod:`~engine.memory.parallel`: the split per GPU under DDP, ZeRO-1/2/3, FSDP and offload;
- :mod:`~engine.memory.inference`: serving memory (KV cache); :mod:`~engine.memory.sweep`: estimates over a grid;
- :mod:`~engine.memory.seed_rules`: the seed chapters' simple rules, shown beside the faithful estimate.

May import: :mod:`engine.model`, :mod:`engine.scenario`, :mod:`engine.errors`, :mod:`engine.units`,
:mod:`engine.search`. Nothing from time, plan, validation or the CLI.
"""
