"""Import a training config the user already has (stage 4, after the scenario and the multi-GPU strategies; beside
:mod:`engine.time`): recognise its format by content, map every key that changes memory or time onto the
:class:`~engine.scenario.training.Scenario` and the parallel settings of :mod:`engine.memory.parallel`, and say what
was ``mapped``, ``ignored`` (no effect on memory or time) and ``unsupported`` (an effect not modelled yet, in words).

- :mod:`~engine.importers.parse`: bytes -> dict (``yaml.safe_load`` only; size, depth and alias-expansion limits).
- :mod:`~engine.importers.table`: the key tables' handlings and the walk that applies one.
- :mod:`~engine.importers.values`: checked converters and shared value tables (optimizer names, dtypes, FSDP).
- one module per format, each with ONE key table ``KEYS``: :mod:`~engine.importers.trainer` (TrainingArguments and
  TRL SFTConfig), :mod:`~engine.importers.axolotl`, :mod:`~engine.importers.llamafactory`,
  :mod:`~engine.importers.torchtune`, :mod:`~engine.importers.deepspeed`, :mod:`~engine.importers.accelerate`,
  :mod:`~engine.importers.peft` (adapter_config.json), :mod:`~engine.importers.bnb` (BitsAndBytesConfig).
- :mod:`~engine.importers.combine`: detection order, several files into one :class:`ImportResult`, conflicts.
- :mod:`~engine.importers.model_ref`: the named base model, read through :mod:`engine.model.sources`.

It imports the model, scenario and memory stages only; the plan stage's exports (:mod:`engine.plan.config_export`)
write files these importers read back to the same scenario.
"""

from engine.importers.combine import ImportResult, import_configs
from engine.importers.model_ref import load_imported_model, model_repo
from engine.importers.parse import MAX_IMPORT_BYTES, parse_training_config, read_config_bytes

__all__ = ["ImportResult", "import_configs", "load_imported_model", "model_repo", "MAX_IMPORT_BYTES",
           "parse_training_config", "read_config_bytes"]
