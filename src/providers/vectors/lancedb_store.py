"""``IVectorStore`` on LanceDB: one folder per namespace under ``AGENT_DATA_DIR/lancedb``.

A namespace folder holds a LanceDB table and ``collection.json``, which names the current
table and the embedding model and dimension that produced it. The manifest is replaced
atomically (``os.replace``), so swapping in a rebuilt table is a single rename. Vectors are
stored unit-length and searched by cosine distance; without an index the search is exact,
with one (``create_index``) it visits ``nprobes`` partitions and re-ranks exactly.

LanceDB is imported lazily: it is an optional extra (``pip install 'core-agent[lancedb]'``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import anyio
import anyio.to_thread

from core_agent.contracts.errors import ConfigurationError, StorageError, UsageError
from core_agent.contracts.private_files import make_private_folder
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.vector_store import (
    CollectionInfo,
    IVectorStore,
    VectorHit,
    VectorRecord,
)
from providers.vectors.records import (
    check_identity,
    check_namespace,
    metadata_from_json,
    metadata_json,
    prepare,
    search_arguments,
)

if TYPE_CHECKING:
    from lancedb.db import DBConnection
    from lancedb.table import Table

MANIFEST = "collection.json"


@dataclass(frozen=True, slots=True)
class _Manifest:
    namespace: str
    table: str
    model: str
    dimension: int


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(_sql_string(v) for v in values) + "]"


class LanceDBVectorStore(IVectorStore):
    """Vectors in LanceDB tables, a folder per namespace (see the module docstring)."""

    def __init__(self, root: Path | str, *, nprobes: int = 20, refine_factor: int = 5) -> None:
        try:
            import lancedb  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ConfigurationError(
                "the lancedb vector store needs the lancedb extra: "
                "pip install 'core-agent[lancedb]'"
            ) from exc
        self._root = Path(root)
        self._nprobes = nprobes
        self._refine_factor = refine_factor
        self._tables: dict[tuple[str, str], Table] = {}
        self._lock = anyio.Lock()
        self._closed = False

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> LanceDBVectorStore:
        """The store under ``AGENT_DATA_DIR/lancedb``."""
        return cls(settings.lancedb_dir, nprobes=settings.vector_lancedb_nprobes)

    # -- layout -------------------------------------------------------------------------

    def _folder(self, namespace: str) -> Path:
        return self._root / quote(check_namespace(namespace), safe="")

    def _manifest(self, namespace: str) -> _Manifest | None:
        path = self._folder(namespace) / MANIFEST
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StorageError(f"unreadable LanceDB manifest {path}: {exc}") from exc
        return _Manifest(namespace, data["table"], data["embedding_model"], data["dimension"])

    @staticmethod
    def _write_manifest(folder: Path, manifest: _Manifest, *, exclusive: bool) -> bool:
        """Write the manifest atomically; with ``exclusive``, only if there is none yet."""
        tmp = folder / f".{MANIFEST}.{uuid.uuid4().hex}"
        tmp.write_text(
            json.dumps(
                {
                    "namespace": manifest.namespace,
                    "table": manifest.table,
                    "embedding_model": manifest.model,
                    "dimension": manifest.dimension,
                }
            ),
            encoding="utf-8",
        )
        try:
            if exclusive:
                try:
                    os.link(tmp, folder / MANIFEST)
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, folder / MANIFEST)
                return True
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def _connect(self, folder: Path) -> DBConnection:
        import lancedb

        # Zero interval: every read sees commits made by other processes.
        return lancedb.connect(folder, read_consistency_interval=timedelta(0))

    def _table(self, manifest: _Manifest) -> Table:
        key = (manifest.namespace, manifest.table)
        table = self._tables.get(key)
        if table is None:
            table = self._connect(self._folder(manifest.namespace)).open_table(manifest.table)
            self._tables[key] = table
        return table

    @staticmethod
    def _schema(dimension: int) -> Any:
        import pyarrow as pa

        return pa.schema(
            [
                pa.field("id", pa.string(), nullable=False),
                pa.field("vector", pa.list_(pa.float32(), dimension)),
                pa.field("text", pa.string()),
                pa.field("metadata", pa.string()),
                pa.field("tags", pa.list_(pa.string())),
            ]
        )

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self._closed:
            raise StorageError("the LanceDB vector store is closed")
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except (UsageError, StorageError):
            raise
        except Exception as exc:  # LanceDB raises plain OSError/ValueError/RuntimeError
            raise StorageError(f"LanceDB at {self._root}: {exc}") from exc

    # -- IVectorStore -------------------------------------------------------------------

    async def upsert(
        self, namespace: str, records: Sequence[VectorRecord], *, embedding_model: str
    ) -> None:
        """Insert or replace records in one LanceDB commit (see ``IVectorStore.upsert``)."""
        check_namespace(namespace)
        if not records:
            return
        prepared = prepare(records, None)
        dimension = len(prepared[0].unit)
        if not embedding_model:
            raise UsageError("embedding_model must name the model that produced the vectors")

        def write() -> None:
            import pyarrow as pa

            manifest = self._manifest(namespace) or self._create(
                namespace, embedding_model, dimension
            )
            check_identity(
                namespace,
                stored_model=manifest.model,
                stored_dimension=manifest.dimension,
                model=embedding_model,
                dimension=dimension,
            )
            rows = pa.Table.from_pylist(
                [
                    {
                        "id": item.record.id,
                        "vector": item.unit.tolist(),
                        "text": item.record.text,
                        "metadata": metadata_json(item.record.metadata),
                        "tags": item.tags,
                    }
                    for item in prepared
                ],
                schema=self._schema(dimension),
            )
            (
                self._table(manifest)
                .merge_insert("id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(rows)
            )

        async with self._lock:
            await self._call(write)

    def _create(self, namespace: str, model: str, dimension: int) -> _Manifest:
        folder = self._folder(namespace)
        make_private_folder(folder)
        manifest = _Manifest(namespace, f"v_{uuid.uuid4().hex[:16]}", model, dimension)
        self._connect(folder).create_table(manifest.table, schema=self._schema(dimension))
        if not self._write_manifest(folder, manifest, exclusive=True):
            # Another process created the collection first: use theirs.
            shutil.rmtree(folder / f"{manifest.table}.lance", ignore_errors=True)
            existing = self._manifest(namespace)
            if existing is None:
                raise StorageError(f"LanceDB collection {namespace!r} vanished while created")
            return existing
        return manifest

    async def search(
        self,
        namespace: str,
        query: Sequence[float],
        k: int,
        *,
        embedding_model: str,
        where: dict[str, Any] | None = None,
    ) -> list[VectorHit]:
        """Nearest neighbours with the filter applied first (see ``IVectorStore.search``)."""
        unit, tags = search_arguments(namespace, query, k, where)

        def read() -> list[VectorHit]:
            manifest = self._manifest(namespace)
            if manifest is None:
                return []
            check_identity(
                namespace,
                stored_model=manifest.model,
                stored_dimension=manifest.dimension,
                model=embedding_model,
                dimension=len(unit),
            )
            query_builder: Any = self._table(manifest).search(
                unit.tolist(), vector_column_name="vector"
            )
            builder = (
                query_builder.distance_type("cosine")
                .nprobes(self._nprobes)
                .refine_factor(self._refine_factor)
                .limit(k)
            )
            if tags:
                builder = builder.where(f"array_has_all(tags, {_sql_list(tags)})", prefilter=True)
            rows = builder.to_list()
            return [
                VectorHit(record=self._record(row), distance=max(0.0, float(row["_distance"])))
                for row in rows
            ]

        hits: list[VectorHit] = await self._call(read)
        return hits

    @staticmethod
    def _record(row: dict[str, Any]) -> VectorRecord:
        return VectorRecord(
            id=row["id"],
            vector=[float(v) for v in row["vector"]],
            text=row["text"] or "",
            metadata=metadata_from_json(row["metadata"] or "{}"),
        )

    async def fetch(self, namespace: str, ids: Sequence[str]) -> list[VectorRecord]:
        """The stored records with these ids, in the order asked."""
        check_namespace(namespace)
        wanted = list(dict.fromkeys(ids))

        def read() -> list[VectorRecord]:
            manifest = self._manifest(namespace)
            if manifest is None or not wanted:
                return []
            rows = (
                self._table(manifest)
                .search()
                .where(f"id IN ({', '.join(_sql_string(i) for i in wanted)})")
                .limit(len(wanted))
                .to_list()
            )
            by_id = {row["id"]: self._record(row) for row in rows}
            return [by_id[i] for i in wanted if i in by_id]

        records: list[VectorRecord] = await self._call(read)
        return records

    async def ids(self, namespace: str) -> list[str]:
        """Every id, sorted."""
        check_namespace(namespace)

        def read() -> list[str]:
            manifest = self._manifest(namespace)
            if manifest is None:
                return []
            table = self._table(manifest)
            total = table.count_rows()
            if total == 0:
                return []
            column = table.search().select(["id"]).limit(total).to_arrow()["id"]
            return sorted(column.to_pylist())

        found: list[str] = await self._call(read)
        return found

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records by id in one commit; returns how many existed."""
        check_namespace(namespace)
        wanted = list(dict.fromkeys(ids))

        def write() -> int:
            manifest = self._manifest(namespace)
            if manifest is None or not wanted:
                return 0
            table = self._table(manifest)
            predicate = f"id IN ({', '.join(_sql_string(i) for i in wanted)})"
            existing = table.count_rows(predicate)
            if existing:
                table.delete(predicate)
            return int(existing)

        async with self._lock:
            deleted: int = await self._call(write)
        return deleted

    async def count(self, namespace: str) -> int:
        """Number of records (0 for an unknown namespace)."""
        info = await self.describe(namespace)
        return info.count if info else 0

    async def describe(self, namespace: str) -> CollectionInfo | None:
        """The collection's model, dimension and size."""
        check_namespace(namespace)

        def read() -> CollectionInfo | None:
            manifest = self._manifest(namespace)
            if manifest is None:
                return None
            count = self._table(manifest).count_rows()
            return CollectionInfo(namespace, manifest.model, manifest.dimension, int(count))

        info: CollectionInfo | None = await self._call(read)
        return info

    async def namespaces(self) -> list[str]:
        """Every namespace with a manifest, sorted."""

        def read() -> list[str]:
            if not self._root.is_dir():
                return []
            return sorted(
                unquote(entry.name)
                for entry in self._root.iterdir()
                if (entry / MANIFEST).is_file()
            )

        names: list[str] = await self._call(read)
        return names

    async def drop(self, namespace: str) -> bool:
        """Remove the namespace folder."""
        folder = self._folder(namespace)

        def write() -> bool:
            existed = (folder / MANIFEST).is_file()
            # Manifest first: a crash half-way leaves a folder without one, which is ignored.
            (folder / MANIFEST).unlink(missing_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
            self._forget(namespace)
            return existed

        async with self._lock:
            dropped: bool = await self._call(write)
        return dropped

    async def replace(self, namespace: str, source: str) -> None:
        """Move ``source``'s table into ``namespace``'s folder and flip its manifest."""
        check_namespace(namespace)
        check_namespace(source)
        if namespace == source:
            raise UsageError("cannot replace a vector namespace with itself")

        def write() -> None:
            incoming = self._manifest(source)
            if incoming is None:
                raise UsageError(f"vector namespace {source!r} does not exist")
            target = self._folder(namespace)
            make_private_folder(target)
            current = self._manifest(namespace)
            table = f"v_{uuid.uuid4().hex[:16]}"
            os.replace(self._folder(source) / f"{incoming.table}.lance", target / f"{table}.lance")
            # The commit point: readers switch tables with this rename.
            self._write_manifest(
                target,
                _Manifest(namespace, table, incoming.model, incoming.dimension),
                exclusive=False,
            )
            if current is not None:
                shutil.rmtree(target / f"{current.table}.lance", ignore_errors=True)
            shutil.rmtree(self._folder(source), ignore_errors=True)
            self._forget(namespace)
            self._forget(source)

        async with self._lock:
            await self._call(write)

    def _forget(self, namespace: str) -> None:
        for key in [key for key in self._tables if key[0] == namespace]:
            del self._tables[key]

    def create_index(self, namespace: str, *, partitions: int = 256, sub_vectors: int = 48) -> None:
        """Build an IVF-PQ index (blocking): faster, approximate searches on big collections."""
        manifest = self._manifest(namespace)
        if manifest is None:
            raise UsageError(f"vector namespace {namespace!r} does not exist")
        self._table(manifest).create_index(
            metric="cosine",
            vector_column_name="vector",
            num_partitions=partitions,
            num_sub_vectors=sub_vectors,
        )

    async def close(self) -> None:
        """Forget open tables; later calls raise ``StorageError``."""
        self._tables.clear()
        self._closed = True
