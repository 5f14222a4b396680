"""One contract for every ILexicalIndex: FTS5, Tantivy and rank-bm25 all pass it."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from core_agent.contracts.errors import UsageError
from core_agent.contracts.lexical_index import ILexicalIndex
from providers.lexical.fts5_index import Fts5LexicalIndex
from providers.lexical.rank_bm25_index import RankBM25LexicalIndex
from providers.lexical.tantivy_index import TantivyLexicalIndex

pytestmark = pytest.mark.anyio

INDEXES: dict[str, Callable[[Path], ILexicalIndex]] = {
    "fts5": lambda root: Fts5LexicalIndex(root / "core_agent.db"),
    "bm25": lambda root: RankBM25LexicalIndex(root / "core_agent.db"),
    "tantivy": lambda root: TantivyLexicalIndex(root / "tantivy"),
}
PASSAGES = [
    ("p1", "SQLite FTS5 gives persistent keyword search with BM25 ranking."),
    ("p2", "LanceDB stores vectors in a folder per namespace."),
    ("p3", "Reciprocal rank fusion merges keyword and vector rankings."),
    ("p4", "The cat sat on the mat and watched the birds."),
    ("p5", "Keyword search finds exact terms; vector search finds meaning."),
]


@pytest.fixture(params=sorted(INDEXES))
def make_index(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], ILexicalIndex]:
    return lambda: INDEXES[request.param](tmp_path)


@pytest.fixture
async def index(make_index: Callable[[], ILexicalIndex]) -> AsyncIterator[ILexicalIndex]:
    opened = make_index()
    await opened.add("docs", PASSAGES)
    yield opened
    await opened.close()


async def test_passages_with_the_terms_rank_first(index: ILexicalIndex) -> None:
    hits = await index.search("docs", "keyword search", 3)
    assert {h.id for h in hits} <= {"p1", "p3", "p5"}
    assert hits[0].id in {"p5", "p1"}
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert hits[0].text == dict(PASSAGES)[hits[0].id]


async def test_no_match_gives_nothing_and_any_input_is_a_valid_query(index: ILexicalIndex) -> None:
    assert await index.search("docs", "zebra", 5) == []
    for odd in ['"unbalanced', "AND OR NOT", "col:val*", "C++ (near) -x", "   ", "?!"]:
        assert isinstance(await index.search("docs", odd, 5), list)
    assert await index.search("elsewhere", "keyword", 5) == []
    with pytest.raises(UsageError):
        await index.search("docs", "keyword", 0)


async def test_replace_delete_and_count(index: ILexicalIndex) -> None:
    await index.add("docs", [("p4", "Now about keyword indexes instead of cats.")])
    assert await index.count("docs") == 5
    assert "p4" in {h.id for h in await index.search("docs", "indexes", 5)}
    assert await index.search("docs", "mat birds", 5) == []
    assert await index.delete("docs", ["p4", "p2", "missing"]) == 2
    assert await index.count("docs") == 3
    assert "p2" not in {h.id for h in await index.search("docs", "LanceDB", 5)}


async def test_bad_batches_are_refused_whole(index: ILexicalIndex) -> None:
    with pytest.raises(UsageError, match="twice"):
        await index.add("docs", [("n1", "fresh words"), ("n1", "again")])
    with pytest.raises(UsageError, match="non-empty"):
        await index.add("docs", [("n2", "fresh words"), ("", "x")])
    assert await index.count("docs") == 5
    assert await index.search("docs", "fresh", 5) == []


async def test_index_persists_and_sees_other_writers(
    make_index: Callable[[], ILexicalIndex],
) -> None:
    first, second = make_index(), make_index()
    try:
        await first.add("docs", PASSAGES)
        assert (await second.search("docs", "LanceDB", 1))[0].id == "p2"
        await first.add("docs", [("p6", "Porcupines are prickly")])
        assert (await second.search("docs", "porcupines", 1))[0].id == "p6"
    finally:
        await first.close()
        await second.close()


async def test_any_namespace_name_is_its_own_index(index: ILexicalIndex) -> None:
    odd = ["..", ".", "", "a/b", "docs/../docs", "名前"]
    for number, name in enumerate(odd):
        await index.add(name, [(f"o{number}", f"walrus number {number}")])
    for number, name in enumerate(odd):
        assert [h.id for h in await index.search(name, "walrus", 10)] == [f"o{number}"]
    assert await index.count("docs") == 5


async def test_concurrent_writers_both_land(make_index: Callable[[], ILexicalIndex]) -> None:
    first, second = make_index(), make_index()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(first.add, "docs", [(f"a{i}", f"alpha {i}") for i in range(50)])
            group.start_soon(second.add, "docs", [(f"b{i}", f"alpha {i}") for i in range(50)])
        assert await first.count("docs") == 100
        assert len(await second.search("docs", "alpha", 200)) == 100
    finally:
        await first.close()
        await second.close()
