"""Number inputs that say in words what is wrong with a typed value, and mark the results they leave stale.

Streamlit's own ``min_value``/``max_value`` refuse an out-of-range number in the browser: the widget shows a small
red "!" with the reason in a tooltip and keeps sending the previous value, so the page silently shows results for a
number that is no longer on screen. :func:`checked_number` draws the input without those bounds, checks the typed
value against :data:`LIMITS` (the same ranges the URL parser in :mod:`ui.share` applies) and, when it is out of
range, writes the reason under the input (under its row, full width, when it sits in a column) and returns the last
valid value; :func:`stale_slot` is the place at the top of the page where every such input is listed, so the reader
knows the results are not for the sidebar as shown.

Letters typed into a number box never reach the server: the browser's number field drops them and the box sends an
empty value, which Streamlit replaces by the widget's ``value`` argument (0 when none is given, so "abc" read as "0 is
out of range"). The input is therefore drawn with ``value=None`` (its value lives in the session state under its
key): an empty box stays empty, arrives as None and is said to be "not a number", the last valid value used.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from engine.memory.parallel import MAX_GPUS
from engine.scaleout.layout import MAX_DEGREE
from engine.scenario.training import MAX_MICRO_BATCH, MAX_SEQ_LEN

LIMITS: dict[str, tuple[float, float]] = {
    "micro_batch_size": (1, MAX_MICRO_BATCH), "seq_len": (1, MAX_SEQ_LEN), "grad_accum": (1, 1_000_000),
    "lora_r": (1, 65_536), "lora_alpha": (1.0, 1e9), "lora_dropout": (0.0, 0.99),
    "num_gpus": (1, MAX_GPUS), "gpus_per_node": (1, 64),
    "tc_examples": (1, 10**12), "tc_avg_tokens": (1.0, 1e7), "tc_total_tokens": (1, 10**15), "tc_epochs": (0.01, 10_000.0),
    "tc_runs": (1, 10_000), "tc_measured": (0.0, 1e9),
    "inf_concurrency": (1, 1 << 20), "inf_seq_len": (1, 1 << 21), "inf_util": (0.05, 1.0),
    # Scale out page (ui.scaleout.layout_inputs): the engine's bounds (Layout, Cluster.nodes); PP beyond the model's
    # layers is the engine's layout problem, said on the page
    "so_pp": (1, MAX_DEGREE), "so_nodes": (1, 4096), "so_gbs": (1, 1 << 20), "so_v": (1, 16),
    "so_tokens": (1, 10**15),
    # PEFT inputs (ui.peft_form) and the GPU fit page's seed-rule scenario
    "num_virtual_tokens": (1, 65_536), "galore_rank": (1, 65_536), "trainable_layers_n": (0, 100_000),
    "seed_seq_len": (1, 131_072), "seed_micro_batch": (1, 1024),
}
"""Valid range of each checked input, by widget key (= URL parameter)."""

_LAST = "_last_valid_inputs"  # {key: last valid value}
_STALE = "_stale_inputs"  # [(label, what is wrong, used)] of this run
_SLOT = "_stale_slot"
_WITHHELD = "_stale_no_results"  # this run drew no results (the page stopped on a message)
_BOUNCED = "_bounced_inputs"  # {key: typed number} of whole-number inputs given a fraction, set back on the next run


def _fmt(value: float) -> str:
    """``10,000``, ``2,048``, ``-1``, ``0.26``, ``1e+30``: whole numbers with separators, others (and numbers too long
    to read digit by digit) in short form."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


def _whole(key: str) -> bool:
    """Whether ``key`` takes whole numbers only (both of its limits are ints)."""
    lo, hi = LIMITS[key]
    return isinstance(lo, int) and isinstance(hi, int)


def _wanted(key: str) -> str:
    """``a whole number from 1 to 65,536``, ``a number from 0 to 1,000,000,000``: what ``key`` takes."""
    lo, hi = LIMITS[key]
    return f"{'a whole number' if _whole(key) else 'a number'} from {_fmt(lo)} to {_fmt(hi)}"


def range_reason(key: str, value: Any) -> str | None:
    """Why ``value`` is not valid for ``key`` (in words), or None when it is."""
    lo, hi = LIMITS[key]
    if value != value or value in (float("inf"), float("-inf")) or (_whole(key) and float(value) != int(value)) \
            or not lo <= value <= hi:
        return f"must be {'a whole number ' if _whole(key) else ''}from {_fmt(lo)} to {_fmt(hi)}"
    return None


def begin_run() -> None:
    """Forget the previous run's stale inputs (the shell calls this first in every run)."""
    st.session_state[_STALE] = []
    st.session_state.pop(_SLOT, None)
    st.session_state.pop(_WITHHELD, None)


def stale_slot() -> None:
    """Reserve the place, under the page title, where out-of-range inputs are listed."""
    st.session_state[_SLOT] = st.empty()
    _draw_stale()


def _draw_stale() -> None:
    slot, stale = st.session_state.get(_SLOT), st.session_state.get(_STALE) or []
    if slot is None or not stale:
        return
    items = "; ".join(f"**{label}** {wrong}, so {used} is used" for label, wrong, used in stale)
    if st.session_state.get(_WITHHELD):
        slot.warning(f"Inputs not valid: {items}. Fix the marked input.", icon=":material/history:")
        return
    slot.warning(f"Results below are not for the inputs as shown: {items}. Fix the marked input to update them.",
                 icon=":material/history:")


def results_withheld() -> None:
    """Say that this run draws no results (call it before ``st.stop()`` on a message): the banner of
    :func:`stale_slot` then lists the inputs not valid without claiming that results are drawn below."""
    st.session_state[_WITHHELD] = True
    _draw_stale()


def checked_number(container: Any, label: str, key: str, default: float, *, step: float, help: str | None = None,
                   format: str | None = None, disabled: bool = False, below: Any = None) -> Any:
    """A number input (in ``container``) checked against ``LIMITS[key]``.

    Returns the typed value when it is valid, else the last valid one (``default`` at first), after writing the
    reason under the input and listing it in the page's :func:`stale_slot`. An empty box (letters typed: the browser
    sends nothing) is "not a number", said the same way.

    ``below``: for an input in a column of a row (``st.columns``), the container the row is in (``st`` inside a
    ``with st.sidebar:`` block or on the page): the reason is written there, full width under the row, and the column
    only says "Out of range" under the input (a sentence in a half-width sidebar column wrapped a few letters a line).
    None: under the input, in ``container``.
    """
    say = container if below is None else below
    st.session_state.setdefault(key, default)
    last: dict = st.session_state.setdefault(_LAST, {})
    whole = _whole(key)
    bounced = st.session_state.setdefault(_BOUNCED, {}).pop(key, None)
    shown = st.session_state[key]
    if whole:
        # Streamlit's integer box parses the typed text with JavaScript's parseInt, so "1e30" arrives as 1 and "2.5"
        # as 2 without a word; a float box hands the server what was typed, so the reason can be said. "%.0f" shows
        # whole numbers as whole numbers; the value returned (and written to the URL) is an int.
        if bounced is not None:
            shown = float(last.get(key, default))
        elif shown is not None:
            shown = float(shown)
        step, format = float(step), format or "%.0f"
    # value=None: an emptied box (letters typed) arrives as None, not as Streamlit's fallback default (0). The box
    # then has no default to show, so the value it shows is written to the session state on every run: Streamlit
    # sends it to the browser (a page's widget is a new one, without this the box of a page switched to is empty).
    st.session_state[key] = shown
    value = container.number_input(label, value=None, step=step, key=key, help=help, format=format, disabled=disabled)
    if value is None:
        return _not_a_number(container, say, label, key, last.get(key, default), below is not None)
    if bounced is not None:
        say.error(f"{label}: {_fmt(bounced)} is not a whole number, so it is back to {_fmt(value)}.",
                  icon=":material/error:")
    reason = range_reason(key, value)
    if reason is None:
        last[key] = int(value) if whole else value
        return last[key]
    used = last.get(key, default)
    if whole and value == value and abs(value) < 1e16 and not float(value).is_integer():
        # "%.0f" would show 2.5 as "3", and typing 3 over it would change nothing: the box is set back instead
        st.session_state[_BOUNCED][key] = float(value)
        st.rerun()
    if below is not None:
        container.caption(":red[Out of range]")
    say.error(f"{label}: {_fmt(value)} is out of range; it {reason}. The results use {_fmt(used)}.",
              icon=":material/error:")
    st.session_state.setdefault(_STALE, []).append((label, f"{_fmt(value)} {reason}", _fmt(used)))
    _draw_stale()
    return used


def _not_a_number(container: Any, say: Any, label: str, key: str, used: Any, in_row: bool) -> Any:
    """Say that the box of ``key`` holds no number (empty, or letters the browser dropped) and return ``used``."""
    if in_row:
        container.caption(":red[Not a number]")
    reason = f"type {_wanted(key)}"  # the widget's own range, as range_reason's
    say.error(f"{label}: not a number; {reason}. The results use {_fmt(used)}.", icon=":material/error:")
    st.session_state.setdefault(_STALE, []).append((label, "is not a number", _fmt(used)))
    _draw_stale()
    return used


def valid_value(key: str, state: Any = None) -> Any:
    """The value a checked input stands for: its widget value when valid, else (out of range, or an empty box) its last
    valid value. ``state``: a snapshot of the session state (``st.session_state.to_dict()``) to read instead of the
    session state itself."""
    state = st.session_state if state is None else state
    value = state.get(key)
    if key in LIMITS:
        if value is None or range_reason(key, value) is not None:
            return (state.get(_LAST) or {}).get(key)
        return int(value) if _whole(key) else value
    return value
