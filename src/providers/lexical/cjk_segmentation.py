"""How every keyword index turns text into terms, Chinese and Japanese included, with rjieba.

FTS5's ``unicode61`` and Tantivy's simple tokenizer split words at spaces and punctuation;
Chinese has neither between words, so a whole sentence became one term that no query
matched. ``segmented`` rewrites a text so that those tokenizers (and rank-bm25's word
pattern) see the right words: runs of Han and kana characters are cut into words, and every
CJK run (Hangul too) is set apart by spaces from the letters and digits written against it,
so the year in 公司在2075年, the chapter in 第7章 and the model number in 型号A7X处理器 are terms
of their own (``2075`` and ``年``, ``7``, ``a7x``) as they are in English text. Before that,
the text is NFKC-normalized: full-width letters and digits (第７章, ＧＰＴ－４ｏ), half-width
katakana and compatibility ideographs become the characters a query is usually typed with.
Lower-casing, ASCII folding and stemming stay with each index's own analyzer.

Every index analyzes passages and queries through this one function, so they agree on what a
term is. Text that is pure ASCII is returned as it is, so English indexing and ranking do not
change. Changing what this function returns changes the terms of every stored index: bump
``tantivy_index.ANALYZER`` (its folders are rebuilt when opened) and add a schema migration
that rebuilds the FTS5 tables, as migration 13 does.

rjieba is the Python binding of jieba-rs (the Rust port of jieba, the de-facto standard
Chinese segmenter, kept by the jieba-rs maintainer): its dictionary is compiled into the
wheel, it writes no cache file (jieba writes one to the temporary folder on first use), it
loads in about 0.1 s instead of jieba's 0.7 s and cuts about 25 times faster. It is imported
on first use, only when a text holds Han or kana characters.

Search-engine mode (``cut_for_search``) adds the shorter words inside a long one
(中华人民共和国 also gives 人民, 共和国), so a query for the shorter word finds the longer.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable

from shared.cjk_text import HANGUL_RUN, SEGMENTABLE, has_cjk

_SEGMENTABLE_SPLIT = re.compile(f"({SEGMENTABLE.pattern})")
"""Splits a text into the parts between Han and kana runs (even items) and the runs (odd)."""
_FULL_WIDTH = re.compile("[\uff01-\uff5e\u3000]")
"""Full-width ASCII and the ideographic space (str.translate took twice as long)."""
_lock = threading.Lock()
_cut: Callable[[str], list[str]] | None = None


def _cutter() -> Callable[[str], list[str]]:
    global _cut
    with _lock:
        if _cut is None:
            import rjieba  # about 0.1 s: builds its dictionary, so only when needed

            _cut = rjieba.cut_for_search
        return _cut


def _narrow(char: re.Match[str]) -> str:
    code = ord(char.group())
    return " " if code == 0x3000 else chr(code - 0xFEE0)  # as NFKC maps them


def segmented(text: str) -> str:
    """``text`` as the keyword indexes analyze it (see the module docstring).

    NFKC-normalized; each Han or kana run replaced by its words separated by spaces, and each
    Hangul run set apart by spaces. Pure ASCII text is returned unchanged.
    """
    if text.isascii():
        return text
    # Nearly every Chinese text holds full-width punctuation (，：（）), so it is not NFKC, and
    # normalize() cost as much as the cutting; mapping the full-width forms first leaves the
    # full normalization to the rare text that needs more.
    text = _FULL_WIDTH.sub(_narrow, text)
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    if not has_cjk(text):
        return text
    parts = _SEGMENTABLE_SPLIT.split(text)
    if len(parts) > 1:
        cut = _cutter()
        parts[1::2] = [" " + " ".join(cut(run)) + " " for run in parts[1::2]]
        text = "".join(parts)
    # Korean separates words with spaces already; only what is glued to them is set apart.
    return HANGUL_RUN.sub(lambda run: " " + run.group() + " ", text)
