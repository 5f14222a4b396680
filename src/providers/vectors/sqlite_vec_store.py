"""``IVectorStore`` on sqlite-vec, in the kernel's own SQLite database.

Each collection is a ``vec0`` table (named per generation, so a rebuilt collection can be
swapped in atomically) plus rows in ``agent_vector_records`` for ids, text, metadata and a
copy of the vector, and ``agent_vector_tags`` for metadata filters. The copy costs
``4 * dimension`` bytes per record but reading a vector back out of ``vec0`` walks a chunk's
overflow pages (about a millisecond per record at 100k), which would dominate a search.
Vectors are stored unit-length, so the L2 distance ``vec0`` computes gives the cosine
distance as ``d² / 2``.

``vec0`` searches by brute force, one thread per query. A collection is split in partitions
(a ``partition key`` column) that are searched in parallel on separate read connections, which
is what brings a top-10 over 100k vectors under 40 ms on two cores.
"""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from array import array
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from core_agent.contracts.errors import StorageError, UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.vector_store import (
    CollectionInfo,
    IVectorStore,
    VectorHit,
    VectorRecord,
)
from providers.sqlite.database import ReaderPool, SqliteDatabase, sqlite_driver, transaction
from providers.vectors.records import (
    PreparedRecord,
    check_identity,
    check_namespace,
    metadata_from_json,
    metadata_json,
    prepare,
    search_arguments,
)

BULK_WRITE_RECORDS = 1000
"""Upserts at least this large fold the WAL back into the database file in the background."""
T = TypeVar("T")
TAG_FREQUENCY_PROBE = 2000
"""Index entries counted per filter tag to find the rarest one (bounds the probe's cost)."""
POST_FILTER_OVERSAMPLING = 2.0
"""A common filter asks the unfiltered search for this many times ``k / share`` neighbours."""
POST_FILTER_MAX_DEPTH = 200
"""Deeper than this, ``vec0``'s top-k selection costs more than filtering first."""
EXACT_FILTER_MAX_ROWS = 50_000
"""Filters matching at most this many records are ranked from the records table directly."""


@dataclass(frozen=True, slots=True)
class _Collection:
    namespace: str
    table: str
    model: str
    dimension: int
    partitions: int


def _collection(conn: sqlite3.Connection, namespace: str) -> _Collection | None:
    row = conn.execute(
        "SELECT table_name, embedding_model, dimension, partitions"
        " FROM agent_vector_collections WHERE namespace = ?",
        (namespace,),
    ).fetchone()
    if row is None:
        return None
    return _Collection(namespace, row[0], row[1], int(row[2]), int(row[3]))


def _tag_count(conn: sqlite3.Connection, tag: str, limit: int) -> int:
    (seen,) = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM agent_vector_tags WHERE tag = ? LIMIT ?)",
        (tag, limit),
    ).fetchone()
    return int(seen)


def _selectivity(
    conn: sqlite3.Connection, collection: _Collection, tags: list[str]
) -> tuple[str, float | None]:
    """The filter's rarest tag, and the share of the collection carrying it when large.

    Counting stops at ``TAG_FREQUENCY_PROBE`` entries per tag, so a rare filter costs a few
    index reads; ``None`` then means "rare, filter first". Tags are not per collection, so
    the share can be overestimated (the fallback keeps results exact).
    """
    counts = {tag: _tag_count(conn, tag, TAG_FREQUENCY_PROBE) for tag in dict.fromkeys(tags)}
    rarest = min(counts, key=lambda tag: counts[tag])
    if counts[rarest] < TAG_FREQUENCY_PROBE:
        return rarest, None
    (size,) = conn.execute(
        "SELECT count(*) FROM agent_vector_records WHERE collection = ?", (collection.table,)
    ).fetchone()
    carrying = _tag_count(conn, rarest, int(size))
    return rarest, min(1.0, carrying / max(1, int(size)))


def _carrying(conn: sqlite3.Connection, rowids: list[int], tags: list[str]) -> set[int]:
    """Which of ``rowids`` carry every tag."""
    wanted = list(dict.fromkeys(tags))
    rows = conn.execute(
        "SELECT rowid FROM agent_vector_tags"
        " WHERE rowid IN (SELECT value FROM json_each(?))"
        " AND tag IN (SELECT value FROM json_each(?))"
        " GROUP BY rowid HAVING count(*) = ?",
        (json.dumps(rowids), json.dumps(wanted), len(wanted)),
    ).fetchall()
    return {int(r[0]) for r in rows}


def _ranked_matches(
    conn: sqlite3.Connection,
    collection: _Collection,
    blob: bytes,
    k: int,
    rarest: str,
    tags: list[str],
) -> list[tuple[int, float]]:
    """Filter first, then rank only the matching rows.

    The walk starts from the rarest tag and checks the others row by row: a filter pairing
    a rare value with a common one (``document_id`` and ``start=0``) reads a few index
    entries, not every record of the common one. ``CROSS JOIN`` keeps SQLite from driving
    the join from the collection's records when it has no statistics.
    """
    others = [tag for tag in dict.fromkeys(tags) if tag != rarest]
    sql = (
        "SELECT t.rowid FROM agent_vector_tags t"
        " CROSS JOIN agent_vector_records r ON r.rowid = t.rowid"
        " WHERE t.tag = ? AND r.collection = ?"
    ) + "".join(
        " AND EXISTS (SELECT 1 FROM agent_vector_tags o WHERE o.tag = ? AND o.rowid = t.rowid)"
        for _ in others
    )
    candidates = [int(r[0]) for r in conn.execute(sql, (rarest, collection.table, *others))]
    if not candidates:
        return []
    if len(candidates) <= EXACT_FILTER_MAX_ROWS:
        # Few rows: compute their distances from the records' own copies.
        rows = conn.execute(
            "SELECT rowid, vec_distance_l2(vector, ?) AS d FROM agent_vector_records"
            " WHERE rowid IN (SELECT value FROM json_each(?)) ORDER BY d, rowid LIMIT ?",
            (blob, json.dumps(candidates), k),
        ).fetchall()
    else:
        rows = conn.execute(
            f"SELECT rowid, distance FROM {collection.table}"
            " WHERE embedding MATCH ? AND k = ? AND rowid IN (SELECT value FROM json_each(?))",
            (blob, k, json.dumps(candidates)),
        ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def _cosine(l2: float) -> float:
    return max(0.0, l2 * l2 / 2.0)


def _drop_collection(conn: sqlite3.Connection, collection: _Collection) -> None:
    conn.execute("DELETE FROM agent_vector_records WHERE collection = ?", (collection.table,))
    conn.execute(f"DROP TABLE IF EXISTS {collection.table}")
    conn.execute(
        "DELETE FROM agent_vector_collections WHERE namespace = ?", (collection.namespace,)
    )


class SqliteVecVectorStore(IVectorStore):
    """Vectors in ``vec0`` tables of one SQLite database (see the module docstring)."""

    def __init__(self, path: Path | str, *, partitions: int = 4) -> None:
        if partitions < 1:
            raise UsageError("partitions must be at least 1")
        self._db = SqliteDatabase.open(path)
        self._partitions = partitions
        self._readers = ReaderPool(path)
        self._driver_errors = (sqlite_driver().Error, sqlite3.Error)
        self._limiter = anyio.CapacityLimiter(partitions)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteVecVectorStore:
        """The store in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path, partitions=settings.vector_sqlite_partitions)

    async def upsert(
        self, namespace: str, records: Sequence[VectorRecord], *, embedding_model: str
    ) -> None:
        """Insert or replace records in one transaction (see ``IVectorStore.upsert``)."""
        check_namespace(namespace)
        if not records:
            return
        # Validate the batch against itself before touching the database.
        prepared = prepare(records, None)
        dimension = len(prepared[0].unit)

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                collection = _collection(conn, namespace)
                if collection is None:
                    collection = self._create(conn, namespace, embedding_model, dimension)
                check_identity(
                    namespace,
                    stored_model=collection.model,
                    stored_dimension=collection.dimension,
                    model=embedding_model,
                    dimension=dimension,
                )
                for item in prepared:
                    self._write_one(conn, collection, item)

        await self._db.run(write)
        if len(prepared) >= BULK_WRITE_RECORDS:
            self._db.checkpoint_soon()

    def _create(
        self, conn: sqlite3.Connection, namespace: str, model: str, dimension: int
    ) -> _Collection:
        if not model:
            raise UsageError("embedding_model must name the model that produced the vectors")
        table = f"agent_vec_{uuid.uuid4().hex[:16]}"
        conn.execute(
            f"CREATE VIRTUAL TABLE {table} USING vec0("
            f"shard integer partition key, embedding float[{dimension}])"
        )
        conn.execute(
            "INSERT INTO agent_vector_collections"
            " (namespace, table_name, embedding_model, dimension, partitions, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                namespace,
                table,
                model,
                dimension,
                self._partitions,
                datetime.now(UTC).isoformat(),
            ),
        )
        return _Collection(namespace, table, model, dimension, self._partitions)

    @staticmethod
    def _write_one(conn: sqlite3.Connection, collection: _Collection, item: PreparedRecord) -> None:
        record = item.record
        row = conn.execute(
            "SELECT rowid FROM agent_vector_records WHERE collection = ? AND id = ?",
            (collection.table, record.id),
        ).fetchone()
        meta = metadata_json(record.metadata)
        if row is None:
            rowid = conn.execute(
                "INSERT INTO agent_vector_records (collection, id, text, metadata_json, vector)"
                " VALUES (?, ?, ?, ?, ?)",
                (collection.table, record.id, record.text, meta, item.unit.tobytes()),
            ).lastrowid
            conn.execute(
                f"INSERT INTO {collection.table} (rowid, shard, embedding) VALUES (?, ?, ?)",
                (rowid, rowid % collection.partitions, item.unit.tobytes()),  # type: ignore[operator]
            )
        else:
            rowid = row[0]
            conn.execute(
                "UPDATE agent_vector_records SET text = ?, metadata_json = ?, vector = ?"
                " WHERE rowid = ?",
                (record.text, meta, item.unit.tobytes(), rowid),
            )
            conn.execute("DELETE FROM agent_vector_tags WHERE rowid = ?", (rowid,))
            conn.execute(
                f"UPDATE {collection.table} SET embedding = ? WHERE rowid = ?",
                (item.unit.tobytes(), rowid),
            )
        conn.executemany(
            "INSERT OR IGNORE INTO agent_vector_tags (tag, rowid) VALUES (?, ?)",
            [(tag, rowid) for tag in item.tags],
        )

    async def search(
        self,
        namespace: str,
        query: Sequence[float],
        k: int,
        *,
        embedding_model: str,
        where: dict[str, Any] | None = None,
    ) -> list[VectorHit]:
        """Exact nearest neighbours, filtered first (see ``IVectorStore.search``)."""
        unit, tags = search_arguments(namespace, query, k, where)
        collection = await self._db.run(lambda conn: _collection(conn, namespace))
        if collection is None:
            return []
        check_identity(
            namespace,
            stored_model=collection.model,
            stored_dimension=collection.dimension,
            model=embedding_model,
            dimension=len(unit),
        )
        blob = unit.tobytes()
        if tags:
            rows = await self._filtered_knn(collection, blob, k, tags)
        else:
            rows = await self._partitioned_knn(collection, blob, k)
        rows.sort(key=lambda row: (row[1], row[0]))
        best = rows[:k]
        records = await self._db.run(
            lambda conn: self._records_by_rowid(conn, collection, [rowid for rowid, _ in best])
        )
        return [
            VectorHit(record=records[rowid], distance=_cosine(distance))
            for rowid, distance in best
            if rowid in records
        ]

    async def _partitioned_knn(
        self, collection: _Collection, blob: bytes, k: int
    ) -> list[tuple[int, float]]:
        sql = (
            f"SELECT rowid, distance FROM {collection.table}"
            " WHERE embedding MATCH ? AND k = ? AND shard = ?"
        )
        found: list[tuple[int, float]] = []

        async def one(shard: int) -> None:
            try:
                rows = await anyio.to_thread.run_sync(
                    self._readers.run, sql, (blob, k, shard), limiter=self._limiter
                )
            except self._driver_errors as exc:
                raise StorageError(f"vector search in {collection.namespace!r}: {exc}") from exc
            found.extend((int(r[0]), float(r[1])) for r in rows)

        try:
            async with anyio.create_task_group() as group:
                for shard in range(collection.partitions):
                    group.start_soon(one, shard)
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return found

    async def _filtered_knn(
        self, collection: _Collection, blob: bytes, k: int, tags: list[str]
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest records carrying every tag: k results whenever k exist.

        A rare filter is applied first and only its rows are ranked. A common one (a fifth
        of the collection, say) would make that a scan of most records, so the unfiltered
        search is asked for enough neighbours to hold ``k`` matches and filtered after; it
        is exact whenever it finds them (every record it did not return is farther than all
        it did) and falls back to filtering first when it does not.
        """

        def read(fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
            return anyio.to_thread.run_sync(self._readers.call, fn)

        try:
            rarest, selectivity = await read(lambda conn: _selectivity(conn, collection, tags))
            depth = math.ceil(POST_FILTER_OVERSAMPLING * k / selectivity) if selectivity else 0
            if 0 < depth <= POST_FILTER_MAX_DEPTH:
                nearest = sorted(
                    await self._partitioned_knn(collection, blob, depth),
                    key=lambda row: (row[1], row[0]),
                )[:depth]
                matching = await read(
                    lambda conn: _carrying(conn, [rowid for rowid, _ in nearest], tags)
                )
                found = [row for row in nearest if row[0] in matching]
                if len(found) >= k or len(nearest) < depth:
                    return found[:k]
            return await read(lambda conn: _ranked_matches(conn, collection, blob, k, rarest, tags))
        except self._driver_errors as exc:
            raise StorageError(f"vector search in {collection.namespace!r}: {exc}") from exc

    @staticmethod
    def _records_by_rowid(
        conn: sqlite3.Connection, collection: _Collection, rowids: Sequence[int]
    ) -> dict[int, VectorRecord]:
        if not rowids:
            return {}
        rows = conn.execute(
            "SELECT rowid, id, text, metadata_json, vector FROM agent_vector_records"
            " WHERE rowid IN (SELECT value FROM json_each(?))",
            (json.dumps(list(rowids)),),
        ).fetchall()
        return {
            int(rowid): VectorRecord(
                id=record_id,
                vector=array("f", vector).tolist(),
                text=text,
                metadata=metadata_from_json(meta),
            )
            for rowid, record_id, text, meta, vector in rows
        }

    async def fetch(self, namespace: str, ids: Sequence[str]) -> list[VectorRecord]:
        """The stored records with these ids, in the order asked."""
        check_namespace(namespace)
        wanted = list(dict.fromkeys(ids))

        def read(conn: sqlite3.Connection) -> list[VectorRecord]:
            collection = _collection(conn, namespace)
            if collection is None or not wanted:
                return []
            rows = conn.execute(
                "SELECT rowid, id FROM agent_vector_records"
                " WHERE collection = ? AND id IN (SELECT value FROM json_each(?))",
                (collection.table, json.dumps(wanted)),
            ).fetchall()
            by_rowid = self._records_by_rowid(conn, collection, [r[0] for r in rows])
            by_id = {record.id: record for record in by_rowid.values()}
            return [by_id[i] for i in wanted if i in by_id]

        return await self._db.run(read)

    async def ids(self, namespace: str) -> list[str]:
        """Every id, sorted."""
        check_namespace(namespace)

        def read(conn: sqlite3.Connection) -> list[str]:
            collection = _collection(conn, namespace)
            if collection is None:
                return []
            rows = conn.execute(
                "SELECT id FROM agent_vector_records WHERE collection = ? ORDER BY id",
                (collection.table,),
            ).fetchall()
            return [r[0] for r in rows]

        return await self._db.run(read)

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records by id in one transaction; returns how many existed."""
        check_namespace(namespace)
        wanted = list(dict.fromkeys(ids))

        def write(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                collection = _collection(conn, namespace)
                if collection is None or not wanted:
                    return 0
                rows = conn.execute(
                    "SELECT rowid FROM agent_vector_records"
                    " WHERE collection = ? AND id IN (SELECT value FROM json_each(?))",
                    (collection.table, json.dumps(wanted)),
                ).fetchall()
                for (rowid,) in rows:
                    conn.execute(f"DELETE FROM {collection.table} WHERE rowid = ?", (rowid,))
                    conn.execute("DELETE FROM agent_vector_records WHERE rowid = ?", (rowid,))
                return len(rows)

        return await self._db.run(write)

    async def count(self, namespace: str) -> int:
        """Number of records (0 for an unknown namespace)."""
        info = await self.describe(namespace)
        return info.count if info else 0

    async def describe(self, namespace: str) -> CollectionInfo | None:
        """The collection's model, dimension and size."""
        check_namespace(namespace)

        def read(conn: sqlite3.Connection) -> CollectionInfo | None:
            collection = _collection(conn, namespace)
            if collection is None:
                return None
            (count,) = conn.execute(
                "SELECT count(*) FROM agent_vector_records WHERE collection = ?",
                (collection.table,),
            ).fetchone()
            return CollectionInfo(namespace, collection.model, collection.dimension, int(count))

        return await self._db.run(read)

    async def namespaces(self) -> list[str]:
        """Every namespace, sorted."""
        rows = await self._db.run(
            lambda conn: conn.execute(
                "SELECT namespace FROM agent_vector_collections ORDER BY namespace"
            ).fetchall()
        )
        return [r[0] for r in rows]

    async def drop(self, namespace: str) -> bool:
        """Remove the collection, its table and its records in one transaction."""
        check_namespace(namespace)

        def write(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                collection = _collection(conn, namespace)
                if collection is None:
                    return False
                _drop_collection(conn, collection)
                return True

        return await self._db.run(write)

    async def replace(self, namespace: str, source: str) -> None:
        """Point ``namespace`` at ``source``'s table and drop the old one, in one transaction."""
        check_namespace(namespace)
        check_namespace(source)
        if namespace == source:
            raise UsageError("cannot replace a vector namespace with itself")

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                incoming = _collection(conn, source)
                if incoming is None:
                    raise UsageError(f"vector namespace {source!r} does not exist")
                current = _collection(conn, namespace)
                if current is not None:
                    _drop_collection(conn, current)
                conn.execute(
                    "UPDATE agent_vector_collections SET namespace = ? WHERE namespace = ?",
                    (namespace, source),
                )

        await self._db.run(write)

    async def close(self) -> None:
        """Close the database and the read connections."""
        await self._db.close()
        self._readers.close()
