"""Stage 1 of the flow: from a ``config.json`` to an :class:`~engine.model.architecture.Architecture`.

- :mod:`~engine.model.hub`, :mod:`~engine.model.sources`: reading a config from the Hugging Face Hub (a token
  unlocks gated repos), a file, or the bundled catalog (:mod:`~engine.model.catalog`);
- :mod:`~engine.model.architecture`: the data model (tensor groups, block linears, sizes);
- :mod:`~engine.model.build` dispatches on ``model_type`` to the builders of :mod:`~engine.model.families`,
  which read values through :mod:`~engine.model.config_fields`;
- :mod:`~engine.model.quantization`: the stored weight format of pre-quantized checkpoints;
- :mod:`~engine.model.checkpoint`: the checkpoint's own parameter count, for a cross-check.

May import: :mod:`engine.errors`, :mod:`engine.units`, :mod:`engine.files`. Nothing from a later stage.
"""
