"""The note of a ``--gpu`` name that fits several GPUs (:func:`engine.hardware.gpus.gpu_name_note`): "A100" is read as
the catalog's GPU for that name (NVIDIA A100 80GB) and the run goes on (exit 0), with one ``warning:`` line on stderr
for a person and the same text in the JSON's top-level ``warnings`` for a script, so the choice is never silent."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def warn_gpu_name(args: argparse.Namespace, out: dict[str, Any] | None = None) -> None:
    """Say the note of ``args.gpu`` (if any) on stderr and append it to ``out["warnings"]`` (JSON output; None for the
    CSV of ``plan``). Call it once the output is complete, so a run that fails says its one error line only.

    Raises:
        CatalogError: ``args.gpu`` is not a GPU name (callers have resolved it already, so it does not happen).
    """
    if getattr(args, "gpu", None) is None:
        return
    from engine.hardware.gpus import gpu_name_note  # the GPU catalog: only when a GPU was named

    note = gpu_name_note(args.gpu)
    if note is None:
        return
    print(f"warning: {note}", file=sys.stderr)
    if out is not None:
        out.setdefault("warnings", []).append(note)
