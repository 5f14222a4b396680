"""Chinese (and Japanese) word segmentation for the keyword indexes, with rjieba.

FTS5's ``unicode61`` and Tantivy's simple tokenizer split words at spaces and punctuation;
Chinese has neither between words, so a whole sentence became one term that no query
matched. Runs of Han and kana characters are cut into words here, at index time and at query
time with the same function, and the indexes add those words as whitespace-separated terms.
Text without such characters is left alone, so English indexing and ranking do not change.

rjieba is the Python binding of jieba-rs (the Rust port of jieba, the de-facto standard
Chinese segmenter, kept by the jieba-rs maintainer): its dictionary is compiled into the
wheel, it writes no cache file (jieba writes one to the temporary folder on first use), it
loads in about 0.1 s instead of jieba's 0.7 s and cuts about 25 times faster. It is imported
on first use, only when a text holds CJK characters.

Search-engine mode (``cut_for_search``) adds the shorter words inside a long one
(中华人民共和国 also gives 人民, 共和国), so a query for the shorter word finds the longer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shared.cjk_text import SEGMENTABLE

_lock = threading.Lock()
_cut: Callable[[str], list[str]] | None = None


def _cutter() -> Callable[[str], list[str]]:
    global _cut
    with _lock:
        if _cut is None:
            import rjieba  # about 0.1 s: builds its dictionary, so only when needed

            _cut = rjieba.cut_for_search
        return _cut


def cjk_words(text: str) -> list[str]:
    """The words of the Han and kana runs in ``text``, in order; none for other text."""
    runs = SEGMENTABLE.findall(text)
    if not runs:
        return []
    cut = _cutter()
    return [word for run in runs for word in cut(run) if not word.isspace()]


def segmented(text: str) -> str:
    """``text`` with each Han or kana run replaced by its words separated by spaces."""
    if SEGMENTABLE.search(text) is None:
        return text
    cut = _cutter()
    return SEGMENTABLE.sub(lambda run: " " + " ".join(cut(run.group())) + " ", text)
