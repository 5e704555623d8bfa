"""Readable numbers for the pages: counts, hours and dollars of any size, and user text made safe for Plotly.

Display only (no formula): a dataset of 10^21 tokens reads "1.54 × 10²¹ tokens", not "1,536,000,000,000.00M".
"""

from __future__ import annotations

import html
import re

from engine.secrets import redact_tokens

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def fmt_sci(x: float) -> str:
    """``1.54 × 10²¹``: three significant digits and a power of ten."""
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{float(mantissa):.3g} × 10{str(int(exponent)).translate(_SUPERSCRIPT)}"


def fmt_big_count(n: float) -> str:
    """Counts as people say them, to four digits (``15.36M``, ``1.536B``, ``3.2T``); beyond a thousand trillion, a power
    of ten."""
    if n >= 1e15:
        return fmt_sci(n)
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= div:
            return f"{n / div:,.4g}{suffix}"
    return f"{round(n):,}"


def fmt_gpu_hours(gpu_hours: float) -> str:
    """``'42.50'`` GPU-hours to the hundredth below 10,000, then as a count (``'655.7M'``, ``'1.2 × 10¹⁸'``)."""
    return f"{gpu_hours:,.2f}" if gpu_hours < 10_000 else fmt_big_count(gpu_hours)


def fmt_hours(hours: float) -> str:
    """``'42 min'``, ``'4.27 h'``, ``'3.1 days (74.4 h)'``, ``'2.5 years'``; beyond 10,000 years a power of ten."""
    if hours < 1:
        return f"{hours * 60:,.1f} min"
    if hours < 48:
        return f"{hours:,.2f} h"
    if hours < 2 * 8766:
        return f"{hours / 24:,.1f} days ({hours:,.0f} h)"
    years = hours / 8766  # 365.25 days
    return f"{years:,.1f} years" if years < 1e4 else f"{fmt_sci(years)} years"


def fmt_usd(usd: float | None) -> str:
    """``'$1,234.56'``, ``'$12.3M'``, ``'$4.5B'``; ``'no price'`` for None."""
    if usd is None:
        return "no price"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if usd >= div:
            return f"${usd / div:,.3g}{suffix}" if usd < 1e15 else f"${fmt_sci(usd)}"
    return f"${usd:,.2f}"


def md_usd(usd: float | None) -> str:
    """:func:`fmt_usd` for text that reaches Markdown (a caption, a metric's help): its ``$`` escaped, as two of them
    on a line would otherwise open and close Streamlit's inline maths (``$10–$15`` drawn as a formula)."""
    return fmt_usd(usd).replace("$", "\\$")


def count_of(n: int, word: str) -> str:
    """``n`` and ``word``, plural but for one ("1 GPU", "8 GPUs", "1 plan", "1,024 sequences")."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def sequences(n: int) -> str:
    """``n`` sequences, singular for one ("1 sequence", "2 sequences")."""
    return count_of(n, "sequence")


def plain(text: str, limit: int | None = None) -> str:
    """User text (a plan name, a file name) for a Plotly label: HTML-escaped, so ``<b>`` is shown, not applied, and
    cut to ``limit`` characters with an ellipsis (the hover keeps the whole text)."""
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False)


_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*_{}[]<>()#+-.!|~$&"})
ZERO_WIDTH_SPACE = "\u200b"
# GitHub-flavoured auto-links (``http://x``, ``www.x``, ``a@b.c``, ``mailto:``/``xmpp:``) and Streamlit's shortcodes
# (``:red[...]``, ``:material/home:``, ``:smile:``) are found in the text *after* backslash escapes are resolved
# (Streamlit 1.67's react-markdown + remark-gfm + remark-emoji), so escaping cannot stop them, and inside an auto-link
# the backslashes would show. A zero-width space after a ':' or '@' that touches a word, and between "www" and its
# '.', breaks every such pattern without changing what is read (checked in headless Chromium: no anchor, no image,
# no icon, no backslash shown; tests/e2e/test_browser.py).
_LINK_PARTS = re.compile(r"([:@])(?=\S)|(?i:(www))(?=\\\.)")


def md_plain(text: object) -> str:
    """Any text the app did not write itself (an exception's message, an engine warning that quotes an input, a plan,
    file, model or GPU name) made safe for every Streamlit call that renders Markdown (``st.error/warning/info/
    success/markdown/caption/toast``, widget labels): shown as typed, never as a link, image, HTML, emphasis, maths,
    colour or icon, and with any token-looking word redacted (:func:`engine.secrets.redact_tokens`). Markdown and HTML characters are backslash-escaped (CommonMark: any ASCII punctuation may be), and
    auto-link and shortcode patterns get a zero-width space (:data:`ZERO_WIDTH_SPACE`). ``tests/app/
    test_escaping_layout.py`` fails when a page draws such text without it."""
    escaped = redact_tokens(str(text)).translate(_MARKDOWN)  # and never a token-looking word (engine.secrets)
    return _LINK_PARTS.sub(lambda m: (m.group(1) or m.group(2)) + ZERO_WIDTH_SPACE, escaped)
