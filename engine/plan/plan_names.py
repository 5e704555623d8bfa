"""Plan names in a shared library: what a new name may hold, and when two names are the same name.

A team library is read by everyone, so a name must not pass for another plan's (issue 25):

- **Invisible and control characters** are refused in a new name: Unicode's control (Cc: NUL, escape, ...; not the
  tab, white space that the comparison below folds, and that the CSV export neutralises at a cell's start),
  format (Cf: the bidirectional overrides U+202A-U+202E and isolates U+2066-U+2069 that reorder what is shown, the
  zero-width space, joiners and word joiner, the byte-order mark, the soft hyphen), line/paragraph separator (Zl, Zp),
  private-use and surrogate characters. ``"Llama 8B \u202eBOL"`` shows as "Llama 8B LOB" and a zero-width space
  makes a second "Llama 8B" that is not equal to the first. (Unicode TR #36, "Unicode Security Considerations",
  sec. 2 "Visual Security Issues", names both.)
- **Names that differ only in letter case, spacing or compatibility forms** are the same name
  (:func:`plan_name_key`: NFKC, case folded, white space runs as one space, none at the ends): "Plan A", "plan a",
  " Plan  A", "Plan\u00a0A" (a no-break space) and the full-width "Ｐｌａｎ Ａ" are one name. Confusable scripts
  (a Cyrillic "А" for a Latin "A") are beyond this check (TR #39's skeletons would be needed).
"""

from __future__ import annotations

import unicodedata
from typing import Sequence

_HIDDEN_CATEGORIES = {"Cc": "a control character", "Cf": "an invisible formatting character",
                      "Zl": "a line separator", "Zp": "a paragraph separator", "Co": "a private-use character",
                      "Cs": "a surrogate"}


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a new plan, or None: blank, or holding a character of :data:`_HIDDEN_CATEGORIES`
    (said by its code point and Unicode name, since it cannot be seen)."""
    if not name.strip():
        return "must hold a visible character"
    for ch in name:
        kind = None if ch == "\t" else _HIDDEN_CATEGORIES.get(unicodedata.category(ch))
        if kind is not None:
            label = unicodedata.name(ch, "") or {"\x00": "NUL", "\x1b": "ESCAPE", "\x7f": "DELETE"}.get(ch, "")
            return (f"holds {kind} (U+{ord(ch):04X}{' ' + label if label else ''}), which can make one name look like "
                    "another or hide part of it: remove it")
    return None


def plan_name_key(name: str) -> str:
    """The form two plan names are compared in: NFKC (compatibility forms such as full-width letters and the
    no-break space as their plain letters and space), case folded, white space runs as one space, none at the ends."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def same_name(name: str, names: Sequence[str]) -> str | None:
    """The first of ``names`` that is ``name`` by :func:`plan_name_key` (``name`` itself included), or None."""
    key = plan_name_key(name)
    return next((n for n in names if plan_name_key(n) == key), None)
