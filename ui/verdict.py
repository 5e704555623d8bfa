"""One way to show the fit verdict (fits / tight: may not fit / does not fit, engine.plan.verdict) on every page."""

from __future__ import annotations

from typing import Callable

import streamlit as st

from engine.plan.verdict import SAFETY_MARGIN_FRACTION, VERDICT_LABELS, Verdict
from ui.formats import md_plain

VERDICT_MARKS = {Verdict.FITS: "✓", Verdict.TIGHT: "≈", Verdict.DOES_NOT_FIT: "✗"}
"""Heatmap cell marks: ✓ fits, ≈ tight (may not fit), ✗ does not fit."""

TIGHT_NOTE = (f"tight: may not fit: less than {SAFETY_MARGIN_FRACTION:.0%} of the peak to spare, the amount by which "
              "published runs' allocator reserve (+5 to +20%) can exceed the modelled 10%")


def verdict_label(verdict: Verdict) -> str:
    """``fits``, ``tight: may not fit`` or ``does not fit``."""
    return VERDICT_LABELS[verdict]


def verdict_box(verdict: Verdict) -> Callable[..., object]:
    """The Streamlit call that frames a verdict's message: ``st.success`` when it fits, else ``st.warning``."""
    return st.success if verdict is Verdict.FITS else st.warning


def show_tight(verdict: Verdict, where: str) -> None:
    """An ``st.warning`` saying the fit on ``where`` is tight (nothing for the other verdicts)."""
    if verdict is Verdict.TIGHT:
        st.warning(f"On {md_plain(where)}: {TIGHT_NOTE}.")
