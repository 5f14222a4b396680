r"""Untrusted text made safe to print on a terminal.

Tool output, model answers, file names and search hits can carry escape sequences that
clear the screen, rewrite earlier lines, change the window title or hide text (and bidi
controls that reorder it). ``printable`` shows every such character as a visible escape
(``\x1b``, ``\u202e``) instead of sending it to the terminal.
"""

from __future__ import annotations

import unicodedata

_KEPT = frozenset("\n\t")
_JOINER = "\u200d"
"""Zero-width joiner: it builds emoji sequences and is kept."""
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` with control, format and bidi characters shown as escapes.

    Newlines and tabs stay when ``newlines`` is set (one-line displays pass ``False``).
    """
    if text.isprintable() and not any(char in _BIDI for char in text):
        return text
    out = []
    for char in text:
        if newlines and char in _KEPT:
            out.append(char)
        elif char in _BIDI or (
            char != _JOINER and unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn")
        ):
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)
