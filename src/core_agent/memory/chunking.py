"""Token-aware chunking with overlap, keeping exact character offsets into the source text.

The text is cut into units that read well on their own (paragraphs, then sentences, then
Chinese clauses, then words, then halves of an over-long word), and units are packed
greedily into chunks of at most ``chunk_tokens`` tokens, counted by the model's tokenizer.

Chinese and Japanese end sentences with 。！？；… and no space after them, and write no spaces
between words: a sentence ends at those marks whatever follows (closing quotes stay with
it), and a sentence longer than a chunk is cut at its clause marks ，、： before anything
else, so a cut inside a word only happens for a clause longer than a whole chunk (rare at
the default 256 tokens, about 200 Han characters).

Each chunk after the first starts with the trailing units of the previous one, up to
``overlap_tokens``, so a passage cut at a boundary is whole in one of them. A chunk's text
is always ``text[start:end]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core_agent.contracts.errors import UsageError
from core_agent.contracts.token_counter import ITokenCounter
from shared.cjk_text import CJK_CHAR

_PARAGRAPH = re.compile(r"\S(?:.*?\S)?(?=[ \t\r\f\v]*\n\s*\n|\s*\Z)", re.DOTALL)
_CLOSERS = "”’」』）》】\"'"
_SENTENCE = re.compile(
    r"\S.*?(?:[.!?](?=\s)|[。！？；]+[" + _CLOSERS + r"]*|"
    # The ellipsis ends a sentence only after a CJK character: "wait… what" stays whole.
    r"(?<=" + CJK_CHAR.pattern + r")…+[" + _CLOSERS + r"]*|\Z)",
    re.DOTALL,
)
_CLAUSE = re.compile(r"\S.*?(?:[，、：]|\Z)", re.DOTALL)
_WORD = re.compile(r"\S+")
_LEVELS = (_SENTENCE, _CLAUSE, _WORD)


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document: its position, text and size in tokens."""

    index: int
    start: int
    end: int
    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class _Unit:
    start: int
    end: int
    tokens: int


class TokenChunker:
    """Splits text into overlapping chunks measured by an ``ITokenCounter``."""

    def __init__(self, counter: ITokenCounter, chunk_tokens: int = 256, overlap_tokens: int = 32):
        if chunk_tokens < 1 or not 0 <= overlap_tokens < chunk_tokens:
            raise UsageError("chunking needs chunk_tokens >= 1 and 0 <= overlap < chunk_tokens")
        self._counter = counter
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens

    def split(self, text: str) -> list[Chunk]:
        """The chunks of ``text`` in order; none for blank text."""
        units = self._units(text)
        chunks: list[Chunk] = []
        first = 0
        while first < len(units):
            last = first
            total = units[first].tokens
            while last + 1 < len(units) and total + units[last + 1].tokens <= self.chunk_tokens:
                last += 1
                total += units[last].tokens
            start, end = units[first].start, units[last].end
            piece = text[start:end]
            tokens = self._counter.count_text(piece)
            # Separators between units can add a token or two: give back units until it fits.
            while tokens > self.chunk_tokens and last > first:
                last -= 1
                end = units[last].end
                piece = text[start:end]
                tokens = self._counter.count_text(piece)
            chunks.append(Chunk(len(chunks), start, end, piece, tokens))
            if last + 1 >= len(units):
                break
            first = self._overlap_start(units, first, last)
        return chunks

    def _overlap_start(self, units: list[_Unit], first: int, last: int) -> int:
        start = last + 1
        carried = 0
        while start - 1 > first and carried + units[start - 1].tokens <= self.overlap_tokens:
            start -= 1
            carried += units[start].tokens
        return start

    def _units(self, text: str) -> list[_Unit]:
        units: list[_Unit] = []
        for paragraph in _PARAGRAPH.finditer(text):
            self._refine(text, paragraph.start(), paragraph.end(), units, level=0)
        return units

    def _refine(self, text: str, start: int, end: int, out: list[_Unit], level: int) -> None:
        tokens = self._counter.count_text(text[start:end])
        if tokens <= self.chunk_tokens:
            out.append(_Unit(start, end, tokens))
            return
        if level < len(_LEVELS):
            pattern = _LEVELS[level]
            parts = [
                (start + m.start(), start + m.end()) for m in pattern.finditer(text[start:end])
            ]
            if len(parts) > 1:
                for part_start, part_end in parts:
                    self._refine(text, part_start, part_end, out, level + 1)
                return
            self._refine(text, start, end, out, level + 1)
            return
        # One run of characters longer than a chunk (a URL, base64, ...): halve it.
        if end - start <= 1:
            out.append(_Unit(start, end, tokens))
            return
        middle = (start + end) // 2
        self._refine(text, start, middle, out, level)
        self._refine(text, middle, end, out, level)
