"""One contract for every IVectorStore: both shipped backends must pass all of it."""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from core_agent.contracts.errors import EmbeddingMismatchError, UsageError
from core_agent.contracts.vector_store import IVectorStore, VectorRecord
from providers.vectors.lancedb_store import LanceDBVectorStore
from providers.vectors.sqlite_vec_store import SqliteVecVectorStore

pytestmark = pytest.mark.anyio

MODEL = "test-model"
BACKENDS: dict[str, Callable[[Path], IVectorStore]] = {
    "sqlite_vec": lambda root: SqliteVecVectorStore(root / "core_agent.db", partitions=3),
    "lancedb": lambda root: LanceDBVectorStore(root / "lancedb"),
}


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], IVectorStore]:
    return lambda: BACKENDS[request.param](tmp_path)


@pytest.fixture
async def store(make_store: Callable[[], IVectorStore]) -> AsyncIterator[IVectorStore]:
    opened = make_store()
    yield opened
    await opened.close()


def vec(*values: float) -> list[float]:
    return list(values)


def random_records(n: int, dim: int = 8, seed: int = 7) -> list[VectorRecord]:
    rng = random.Random(seed)
    return [
        VectorRecord(
            id=f"r{i:04d}",
            vector=[rng.gauss(0, 1) for _ in range(dim)],
            text=f"text {i}",
            metadata={"parity": i % 2, "group": f"g{i % 10}", "even": i % 2 == 0},
        )
        for i in range(n)
    ]


def cosine_distance(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


async def test_nearest_first_with_cosine_distances(store: IVectorStore) -> None:
    records = random_records(200)
    await store.upsert("docs", records, embedding_model=MODEL)
    query = list(records[17].vector)

    hits = await store.search("docs", query, 5, embedding_model=MODEL)

    expected = sorted(records, key=lambda r: cosine_distance(query, list(r.vector)))[:5]
    assert [h.record.id for h in hits] == [r.id for r in expected]
    assert hits[0].distance == pytest.approx(0.0, abs=1e-5)
    for hit, record in zip(hits, expected, strict=True):
        assert hit.distance == pytest.approx(cosine_distance(query, list(record.vector)), abs=1e-4)
        assert hit.record.text == record.text
        assert hit.record.metadata == record.metadata


async def test_k_larger_than_the_collection_returns_everything(store: IVectorStore) -> None:
    await store.upsert("docs", random_records(4), embedding_model=MODEL)
    hits = await store.search("docs", [1.0] * 8, 10, embedding_model=MODEL)
    assert sorted(h.record.id for h in hits) == ["r0000", "r0001", "r0002", "r0003"]


async def test_filter_applies_before_the_neighbour_search(store: IVectorStore) -> None:
    # 300 records near the query, 6 far away carrying the tag: a post-filter would find none.
    near = [
        VectorRecord(id=f"near{i}", vector=vec(1.0, 0.01 * i, 0.0), metadata={"kind": "a"})
        for i in range(300)
    ]
    far = [
        VectorRecord(id=f"far{i}", vector=vec(-1.0, 0.01 * i, 0.5), metadata={"kind": "b"})
        for i in range(6)
    ]
    await store.upsert("docs", near + far, embedding_model=MODEL)

    hits = await store.search(
        "docs", vec(1.0, 0.0, 0.0), 5, embedding_model=MODEL, where={"kind": "b"}
    )

    assert len(hits) == 5
    assert all(h.record.metadata["kind"] == "b" for h in hits)
    assert [h.record.id for h in hits] == ["far5", "far4", "far3", "far2", "far1"]


async def test_common_and_rare_filters_give_the_exact_filtered_neighbours(
    store: IVectorStore,
) -> None:
    # Large enough that a filter can match thousands of records (the common-filter path),
    # with one common value whose records all lie away from the query.
    rng = random.Random(11)
    records = []
    for i in range(4600):
        far = i >= 2500
        direction = -1.0 if far else 1.0
        records.append(
            VectorRecord(
                id=f"m{i:05d}",
                vector=[direction + rng.gauss(0, 0.3)] + [rng.gauss(0, 1) for _ in range(7)],
                metadata={
                    "side": "far" if far else "near",
                    "fifth": i % 5 == 0,
                    "hundredth": i % 100,
                },
            )
        )
    await store.upsert("docs", records, embedding_model=MODEL)
    query = [1.0, 0.2, -0.1, 0.0, 0.3, 0.0, 0.1, -0.2]

    for where in (
        {"side": "near"},
        {"side": "far"},
        {"fifth": True},
        {"fifth": False, "side": "far"},
        {"hundredth": 7, "side": "near"},
    ):
        hits = await store.search("docs", query, 10, embedding_model=MODEL, where=where)
        matching = [r for r in records if all(r.metadata[key] == v for key, v in where.items())]
        expected = sorted(matching, key=lambda r: cosine_distance(r.vector, query))[:10]
        assert [h.record.id for h in hits] == [r.id for r in expected], where


async def test_filters_match_all_keys_and_respect_value_types(store: IVectorStore) -> None:
    await store.upsert("docs", random_records(40), embedding_model=MODEL)

    both = await store.search(
        "docs", [1.0] * 8, 40, embedding_model=MODEL, where={"parity": 1, "group": "g3"}
    )
    assert sorted(h.record.id for h in both) == ["r0003", "r0013", "r0023", "r0033"]
    booleans = await store.search(
        "docs", [1.0] * 8, 40, embedding_model=MODEL, where={"even": True}
    )
    assert len(booleans) == 20
    # The string "1" is not the number 1.
    assert (
        await store.search("docs", [1.0] * 8, 5, embedding_model=MODEL, where={"parity": "1"}) == []
    )
    assert await store.search("docs", [1.0] * 8, 5, embedding_model=MODEL, where={"nope": 1}) == []


async def test_upsert_replaces_by_id(store: IVectorStore) -> None:
    await store.upsert(
        "docs", [VectorRecord("a", vec(1, 0), "old", {"v": 1})], embedding_model=MODEL
    )
    await store.upsert(
        "docs",
        [VectorRecord("a", vec(0, 1), "new", {"v": 2}), VectorRecord("b", vec(1, 0), "b")],
        embedding_model=MODEL,
    )

    assert await store.count("docs") == 2
    [hit] = await store.search("docs", vec(0, 1), 1, embedding_model=MODEL)
    assert (hit.record.id, hit.record.text, hit.record.metadata) == ("a", "new", {"v": 2})
    assert await store.search("docs", vec(0, 1), 1, embedding_model=MODEL, where={"v": 1}) == []


async def test_fetch_ids_delete_and_count(store: IVectorStore) -> None:
    await store.upsert("docs", random_records(10), embedding_model=MODEL)

    fetched = await store.fetch("docs", ["r0003", "missing", "r0001"])
    assert [r.id for r in fetched] == ["r0003", "r0001"]
    norm = math.sqrt(sum(v * v for v in fetched[0].vector))
    assert norm == pytest.approx(1.0, abs=1e-5)
    assert await store.ids("docs") == [f"r{i:04d}" for i in range(10)]

    assert await store.delete("docs", ["r0001", "r0002", "missing"]) == 2
    assert await store.count("docs") == 8
    assert "r0001" not in await store.ids("docs")
    assert await store.delete("unknown", ["x"]) == 0


async def test_namespaces_are_isolated(store: IVectorStore) -> None:
    await store.upsert("one", [VectorRecord("a", vec(1, 0))], embedding_model=MODEL)
    await store.upsert("two:sub", [VectorRecord("b", vec(1, 0, 0))], embedding_model="other")

    assert await store.namespaces() == ["one", "two:sub"]
    [hit] = await store.search("one", vec(1, 0), 5, embedding_model=MODEL)
    assert hit.record.id == "a"
    assert await store.search("missing", vec(1, 0), 5, embedding_model=MODEL) == []
    assert await store.count("missing") == 0
    assert await store.describe("missing") is None


async def test_collection_records_its_embedding_identity(store: IVectorStore) -> None:
    await store.upsert("docs", random_records(3), embedding_model=MODEL)
    info = await store.describe("docs")
    assert info is not None
    assert (info.embedding_model, info.dimension, info.count) == (MODEL, 8, 3)

    with pytest.raises(EmbeddingMismatchError, match="reembed"):
        await store.upsert("docs", random_records(1, seed=1), embedding_model="another-model")
    with pytest.raises(EmbeddingMismatchError):
        await store.search("docs", [1.0] * 8, 3, embedding_model="another-model")
    with pytest.raises(EmbeddingMismatchError):
        await store.upsert("docs", random_records(1, dim=4), embedding_model=MODEL)
    with pytest.raises(EmbeddingMismatchError):
        await store.search("docs", [1.0] * 4, 3, embedding_model=MODEL)
    assert await store.count("docs") == 3


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([VectorRecord("a", [1.0, float("nan")])], "NaN"),
        ([VectorRecord("a", [1.0, float("inf")])], "NaN or infinite"),
        ([VectorRecord("a", [0.0, 0.0])], "zero vector"),
        ([VectorRecord("a", [])], "empty"),
        ([VectorRecord("", [1.0, 0.0])], "non-empty"),
        ([VectorRecord("a", [1.0, 0.0]), VectorRecord("a", [0.0, 1.0])], "twice"),
        ([VectorRecord("a", [1.0, 0.0]), VectorRecord("b", [1.0, 0.0, 1.0])], "dimensions"),
        ([VectorRecord("a", [1.0, 0.0], metadata={"x": [1, 2]})], "strings, numbers"),  # type: ignore[dict-item]
        ([VectorRecord("a", [1.0, 0.0], metadata={"x": float("nan")})], "NaN"),
    ],
)
async def test_bad_batches_are_refused_whole(
    store: IVectorStore, records: list[VectorRecord], message: str
) -> None:
    good = VectorRecord("good", [1.0, 0.0])
    with pytest.raises(UsageError, match=message):
        await store.upsert("docs", [good, *records], embedding_model=MODEL)
    assert await store.count("docs") == 0
    assert await store.namespaces() == []


async def test_bad_queries_and_names_are_refused(store: IVectorStore) -> None:
    await store.upsert("docs", random_records(3), embedding_model=MODEL)
    with pytest.raises(UsageError, match="k must be"):
        await store.search("docs", [1.0] * 8, 0, embedding_model=MODEL)
    with pytest.raises(UsageError, match="NaN"):
        await store.search("docs", [float("nan")] * 8, 3, embedding_model=MODEL)
    with pytest.raises(UsageError, match="strings, numbers"):
        await store.search("docs", [1.0] * 8, 3, embedding_model=MODEL, where={"x": None})
    for name in ["", "../escape", "a/b", "x" * 129, "spaces here"]:
        with pytest.raises(UsageError, match="invalid vector namespace"):
            await store.upsert(name, random_records(1), embedding_model=MODEL)
    with pytest.raises(UsageError, match="embedding_model"):
        await store.upsert("fresh", random_records(1), embedding_model="")


async def test_drop_and_replace(store: IVectorStore) -> None:
    await store.upsert("docs", random_records(5), embedding_model=MODEL)
    rebuilt = [VectorRecord(f"n{i}", [1.0, float(i)], f"new {i}") for i in range(3)]
    await store.upsert("docs.rebuild", rebuilt, embedding_model="new-model")

    await store.replace("docs", "docs.rebuild")

    info = await store.describe("docs")
    assert info is not None
    assert (info.embedding_model, info.dimension, info.count) == ("new-model", 2, 3)
    assert await store.describe("docs.rebuild") is None
    hits = await store.search("docs", [1.0, 0.0], 1, embedding_model="new-model")
    assert hits[0].record.id == "n0"
    with pytest.raises(UsageError, match="does not exist"):
        await store.replace("docs", "missing")

    assert await store.drop("docs") is True
    assert await store.drop("docs") is False
    assert await store.namespaces() == []
    # A dropped namespace can start over with another model.
    await store.upsert("docs", random_records(2), embedding_model=MODEL)
    assert await store.count("docs") == 2


async def test_records_survive_reopening(make_store: Callable[[], IVectorStore]) -> None:
    first = make_store()
    await first.upsert("docs", random_records(20), embedding_model=MODEL)
    await first.close()

    second = make_store()
    try:
        assert await second.count("docs") == 20
        hits = await second.search(
            "docs", list(random_records(20)[5].vector), 1, embedding_model=MODEL
        )
        assert hits[0].record.id == "r0005"
    finally:
        await second.close()
