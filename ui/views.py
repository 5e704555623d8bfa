"""The section a long page draws: one choice per page (a horizontal radio), kept across page switches and in the URL.

A rerun draws only the chosen section, so a sidebar change computes, sends and redraws one section's charts instead
of all of them (``st.tabs`` would run and send every tab's body on every rerun, hidden or not): the GPU fit page drew
two heatmaps and the seed table per rerun, the Time & cost page six charts and two tables (issue 26; the figures are
in README, "Deploy"). The choice is a URL parameter (``ui.share.PARSERS``: ``fit_view=techniques``), so a shared link
opens the section its sender saw.
"""

from __future__ import annotations

import streamlit as st

FIT_VIEWS = {"models": "Catalog models × every GPU", "techniques": "Techniques × every GPU",
             "largest": "Largest model per GPU (the seed's table)"}
"""GPU fit page (``fit_view``): URL value -> label; the first is the default."""
TIME_COST_VIEWS = {"time": "Where the time goes", "shape": "Tokens/s by shape", "dataset": "Against dataset size",
                   "gpus": "Against the GPU count", "plans": "Every plan that fits", "measured": "Against measurements"}
"""Time & cost page (``tc_view``): URL value -> label; the first is the default."""
VIEWS = {"fit_view": FIT_VIEWS, "tc_view": TIME_COST_VIEWS}
"""Widget key (= URL parameter) -> its sections."""


def section_choice(key: str, help: str | None = None) -> str:
    """The chosen section of ``VIEWS[key]`` (its URL value), drawn as a horizontal radio ("Show")."""
    options = VIEWS[key]
    if st.session_state.get(key) not in options:
        st.session_state[key] = next(iter(options))
    return str(st.radio("Show", list(options), format_func=options.__getitem__, key=key, horizontal=True, help=help))
