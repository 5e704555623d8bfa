"""The estimation engine: pure, typed computation with no UI import (Streamlit pages and the CLI sit on top).

The data flows one way, and the packages follow it::

    config.json ──> model ──> scenario ──> memory ─┬─> plan (fit, cost, plans, checklist) ──> validation ──> cli
    (Hub, file,     (architecture)  (training     time ─┘
     catalog)                        settings)   (throughput)
                    hardware (GPUs, prices) ──────────^

A package imports only from its own stage and the stages before it (``tests/test_layout.py`` enforces this,
and that there are no import cycles and no module over 600 lines). Foundations used by every stage:
:mod:`engine.errors` (typed exceptions), :mod:`engine.units`, :mod:`engine.files` (the one place that opens
``data/``), :mod:`engine.search` (monotone searches). :mod:`engine.trace` is the optional exact tracer, at the
level of memory (it builds the real model from the config and scenario in a torch subprocess).
:mod:`engine.importers` (stage 4, beside ``time``) reads the training configs users already have (TrainingArguments,
TRL, axolotl, LLaMA-Factory, torchtune, DeepSpeed, accelerate, PEFT, bitsandbytes) into a scenario and the multi-GPU
settings; :mod:`engine.plan.config_export` writes a plan back as those files.

See ``docs/architecture.md`` for each package's role and where to add a model family, a memory component, an
optimizer, a PEFT method, a GPU or a page (each backed by a test that fails when a new entry misses a place).
"""
