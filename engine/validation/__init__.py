"""Checks of the estimates against measurements: published runs and exact traces.

- :mod:`~engine.validation.measurements`: the measured and traced tables of ``data/``, validated on load;
- :mod:`~engine.validation.memory`: memory estimates against published peaks and traced steps;
- :mod:`~engine.validation.throughput`: the time model against published tokens/s.

May import every stage below it (model, hardware, scenario, memory, time, plan). Not the CLI.
"""
