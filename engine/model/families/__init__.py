"""Builders of :class:`engine.model.architecture.Architecture`, one per ``model_type``.

Each builder takes the config dict and its ``model_type`` and returns the architecture, with parameter
tensors that mirror transformers' ``modeling_<type>.py`` for that type (the docstrings name what each
one follows). Grouped by kind: Llama-like decoders (:mod:`.llama`), GPT-style decoders (:mod:`.gpt`),
mixtures of experts (:mod:`.moe`), image-text models (:mod:`.multimodal`, towers in :mod:`.vision`),
encoders and encoder-decoders (:mod:`.encoders`), Qwen v1's remote-code model (:mod:`.qwen`).
"""

from __future__ import annotations

from typing import Any, Callable

from engine.model.architecture import Architecture
from engine.model.families import encoders, gpt, llama, moe, multimodal, qwen

BUILDERS: dict[str, Callable[[dict[str, Any], str], Architecture]] = {
    **llama.BUILDERS,
    **gpt.BUILDERS,
    **moe.BUILDERS,
    **multimodal.BUILDERS,
    **encoders.BUILDERS,
    **qwen.BUILDERS,
}
