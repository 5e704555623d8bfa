"""Stage 4 of the flow: answers a user acts on, built from memory and time.

- :mod:`~engine.plan.fit`: does a scenario fit a GPU (and how many), what fits (largest micro batch, sequence);
- :mod:`~engine.plan.cost`: a dataset's training time and cost on a GPU at a price;
- :mod:`~engine.plan.plans`: saved plans (compare, CSV export/import, share, training code);
- :mod:`~engine.plan.checklist`: the seeds' checklist of techniques as a waterfall of savings.

May import every lower stage (model, hardware, scenario, memory, time). Not validation, the CLI or the trace.
"""
