"""Stage 4 of the flow, beside memory: how long a training step takes and how many tokens per second a plan trains.

The step-time model adds up one step from the architecture and the memory estimate:

- :mod:`~engine.time.rates`: a GPU's sustained matmul, HBM and attention rates, with sources;
- :mod:`~engine.time.gemm`: every GEMM's (m, n, k) and its roofline time;
- :mod:`~engine.time.attention`: attention's work and traffic by kernel;
- :mod:`~engine.time.memory_bound`: bytes of elementwise ops, loss, casts, dequantization, optimizer step;
- :mod:`~engine.time.overhead`: kernel launches and per-step host time;
- :mod:`~engine.time.collectives`: ring collectives over a link, overlap with compute (reusable by any parallelism);
- :mod:`~engine.time.step`: one optimizer step on one GPU by category;
- :mod:`~engine.time.throughput`: tokens/s of GPUs x count x strategy, MFU and HFU as results, calibration;
- :mod:`~engine.time.sweep`: the step across techniques and shapes;
- :mod:`~engine.time.flops` (the 6N rule) and :mod:`~engine.time.seed` (the seed's throughput table);
- :mod:`~engine.time.constants`: the few fitted global constants in one record (cross-validated by
  :mod:`engine.validation.crossval`);
- :mod:`~engine.time.band`: the cross-validated 80% band of every tokens/s, hours and cost.

May import: :mod:`engine.model`, :mod:`engine.hardware`, :mod:`engine.scenario`, :mod:`engine.memory`,
:mod:`engine.errors`, :mod:`engine.units`. Nothing from plan, validation or the CLI.
"""
