"""Shared by the tracer's tests: skip without the optional [trace] extra, fail when CI said it is installed."""

from __future__ import annotations

import importlib
import os

import pytest


def need_trace_extra() -> None:
    """Skip without the [trace] extra (torch, transformers, peft), but fail under TRACE_REQUIRED=1 (CI installs it)."""
    for name in ("torch", "transformers", "peft"):
        if os.environ.get("TRACE_REQUIRED") == "1":
            importlib.import_module(name)
        else:
            pytest.importorskip(name)
