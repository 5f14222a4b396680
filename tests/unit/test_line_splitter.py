"""Cutting the stdio server's input into lines of bounded size."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from core_agent.stdio_server.line_channel import LineSplitter, OversizedLine

LIMIT = 16


def split(chunks: list[bytes], limit: int = LIMIT) -> list[bytes | OversizedLine]:
    splitter = LineSplitter(limit)
    out: list[bytes | OversizedLine] = []
    for chunk in chunks:
        out += splitter.feed(chunk)
    return out + splitter.end()


@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=20),
    final_newline=st.booleans(),
)
def test_any_chunking_gives_the_lines_and_one_report_per_long_line(
    lines: list[bytes], cuts: list[int], final_newline: bool
) -> None:
    stream = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    chunks = [stream[a:b] for a, b in itertools.pairwise(points)]
    expected: list[bytes | OversizedLine] = [
        line if len(line) <= LIMIT else OversizedLine(LIMIT) for line in lines
    ]
    if lines and not final_newline and not lines[-1]:
        expected.pop()  # an empty last line with no newline is no line
    assert split(chunks) == expected


def test_a_long_line_is_reported_as_soon_as_it_passes_the_limit() -> None:
    splitter = LineSplitter(LIMIT)
    assert splitter.feed(b"x" * LIMIT) == []
    assert splitter.feed(b"x") == [OversizedLine(LIMIT)]
    assert splitter.feed(b"x" * 1000) == []  # dropped as it comes
    assert splitter.feed(b"x\nnext\n") == [b"next"]
