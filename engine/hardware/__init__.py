"""Hardware: the GPU catalog and the GPU-hour prices (:mod:`~engine.hardware.gpus`), validated on load.

An input beside the scenario: memory fits are checked against a GPU, time is computed on one, cost is priced
per GPU-hour. May import: :mod:`engine.errors`, :mod:`engine.files`. Nothing from a later stage.
"""
