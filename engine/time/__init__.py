"""Stage 3' of the flow, beside memory: how long a step takes and how many tokens per second a GPU trains.

- :mod:`~engine.time.throughput`: FLOPs per token, step time on a GPU, tokens/s, the seed's throughput table.

May import: :mod:`engine.model`, :mod:`engine.hardware`, :mod:`engine.scenario`, :mod:`engine.memory`,
:mod:`engine.errors`, :mod:`engine.units`. Nothing from plan, validation or the CLI.
"""
