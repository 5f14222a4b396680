"""Token-aware chunking: offsets are exact, nothing is lost, sizes hold, overlap is real."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core_agent.contracts.errors import UsageError
from core_agent.memory.chunking import TokenChunker
from providers.tiktoken_token_counter import TiktokenTokenCounter

COUNTER = TiktokenTokenCounter()


def covered(text: str, chunker: TokenChunker) -> None:
    chunks = chunker.split(text)
    seen = [False] * len(text)
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.tokens == COUNTER.count_text(chunk.text)
        for i in range(chunk.start, chunk.end):
            seen[i] = True
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and not seen[i]]
    assert not missing, f"characters {missing[:5]} are in no chunk"
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(a.start < b.start for a, b in itertools.pairwise(chunks))


def test_paragraphs_sentences_and_the_last_line_all_land_in_chunks() -> None:
    text = (
        "# Retrieval\n\nHybrid retrieval fuses BM25 with vectors. It uses RRF.\n\n"
        "The sqlite-vec backend stores vectors in the same database.\n"
    )
    chunks = TokenChunker(COUNTER, chunk_tokens=12, overlap_tokens=0).split(text)
    assert chunks[-1].text.endswith("same database.")
    covered(text, TokenChunker(COUNTER, chunk_tokens=12, overlap_tokens=0))


def test_chunks_respect_the_budget_and_overlap() -> None:
    sentences = [f"Sentence number {i} talks about topic {i % 7}." for i in range(60)]
    text = " ".join(sentences)
    chunker = TokenChunker(COUNTER, chunk_tokens=40, overlap_tokens=12)
    chunks = chunker.split(text)
    assert len(chunks) > 5
    assert all(c.tokens <= 40 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        assert after.start < before.end, "consecutive chunks share their boundary sentence"
    covered(text, chunker)


def test_a_run_longer_than_a_chunk_is_split_without_losing_characters() -> None:
    blob = "QmFzZTY0" * 400  # one 3200-character "word"
    chunker = TokenChunker(COUNTER, chunk_tokens=50, overlap_tokens=5)
    chunks = chunker.split(f"Header line.\n\n{blob}\n\nFooter line.")
    assert all(c.tokens <= 50 for c in chunks)
    covered(f"Header line.\n\n{blob}\n\nFooter line.", chunker)


CHINESE = (
    "习惯的养成依赖于重复。每天在同一时间阅读二十分钟，比周末一次读三个小时更容易坚持！"
    "把新习惯和已有的习惯绑在一起，例如喝完早茶就打开书，会让开始变得毫不费力。"
    "你会问：“如果某天忘了怎么办？”不必自责，第二天接着读就好；重要的是不要连续两天中断……"
    "慢慢地，阅读会像刷牙一样自然。"
)
SENTENCE_ENDS = ("。", "！", "？”", "；", "……")


def test_chinese_text_is_cut_at_its_sentence_ends_and_measured_in_tokens() -> None:
    chunker = TokenChunker(COUNTER, chunk_tokens=60, overlap_tokens=0)
    chunks = chunker.split(CHINESE * 3)
    assert len(chunks) >= 6
    assert all(c.tokens <= 60 for c in chunks)
    assert all(c.text.endswith(SENTENCE_ENDS) for c in chunks), [c.text[-3:] for c in chunks]
    covered(CHINESE * 3, chunker)


def test_a_chinese_sentence_longer_than_a_chunk_is_cut_at_its_commas() -> None:
    sentence = "，".join(["我们在周末整理了书架上的旧书"] * 12) + "。"
    chunker = TokenChunker(COUNTER, chunk_tokens=30, overlap_tokens=0)
    chunks = chunker.split(sentence)
    assert len(chunks) > 1
    assert all(c.text.endswith(("，", "。")) for c in chunks)  # never inside a word
    covered(sentence, chunker)


def test_blank_text_has_no_chunks_and_bad_sizes_are_refused() -> None:
    assert TokenChunker(COUNTER).split(" \n\n\t") == []
    with pytest.raises(UsageError):
        TokenChunker(COUNTER, chunk_tokens=10, overlap_tokens=10)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from([*"abc xyz.!?\n\t,;é漢字🙂", "\n\n", ". ", "word ", "longerword"]),
        max_size=200,
    ).map("".join),
    st.integers(min_value=4, max_value=64),
    st.integers(min_value=0, max_value=3),
)
def test_any_text_is_covered_exactly(text: str, size: int, overlap: int) -> None:
    covered(text, TokenChunker(COUNTER, chunk_tokens=size, overlap_tokens=min(overlap, size - 1)))
