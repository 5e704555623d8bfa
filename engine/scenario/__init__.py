"""Stage 2 of the flow: what the user runs on the architecture.

- :mod:`~engine.scenario.training`: the validated training :class:`~engine.scenario.training.Scenario`
  (method, precision, micro batch size, sequence length, checkpointing, attention, LoRA settings, ...);
- :mod:`~engine.scenario.precision`: precision modes and the bytes they store and compute in;
- :mod:`~engine.scenario.methods`: the fine-tuning methods, one record each (label, default precision, PEFT's
  ``peft_type`` and config keys, method groups, trainable tensors per module);
- :mod:`~engine.scenario.optimizer`: optimizers, one record each (label, Trainer name, state bytes, step kind, ...);
- :mod:`~engine.scenario.lora`: LoRA target modules resolved against the architecture's linears.

May import: :mod:`engine.model`, :mod:`engine.errors`, :mod:`engine.units`. Nothing from a later stage.
"""
