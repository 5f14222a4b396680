"""Which characters are CJK: one definition for every layer that judges text.

Chinese and Japanese write words without spaces between them, so code that finds words by
whitespace or a word pattern sees a whole sentence as one word. Each place that judges text (the
task classifier, chunking, the injection detector, the keyword indexes) checks for these
characters first and takes its CJK path only then, so English text is handled exactly as
before. Korean (Hangul) separates words with spaces and needs no segmentation, but its
sentence punctuation is shared, so it is included in ``CJK_CHAR`` and left out of
``SEGMENTABLE``.
"""

from __future__ import annotations

import re

_HAN = (
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0003134f"  # Extensions B to G
)
_KANA = "\u3040-\u30ff\u31f0-\u31ff"  # Hiragana, Katakana, Katakana extensions
_HANGUL = "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"

CJK_CHAR = re.compile(f"[{_HAN}{_KANA}{_HANGUL}]")
"""One Han, kana or Hangul character."""

SEGMENTABLE = re.compile(f"[{_HAN}{_KANA}]+")
"""A run of characters written without spaces between words (Chinese, Japanese)."""

HANGUL_RUN = re.compile(f"[{_HANGUL}]+")
"""A run of Hangul: a Korean word, or the part of one written against digits (2075년)."""

SENTENCE_END = "。！？；…"
"""Full-width sentence ends (and the ellipsis) that need no space after them."""


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds at least one Han, kana or Hangul character."""
    return CJK_CHAR.search(text) is not None


def count_cjk(text: str) -> int:
    """How many Han, kana or Hangul characters ``text`` holds."""
    return len(CJK_CHAR.findall(text))
