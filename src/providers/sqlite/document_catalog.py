"""``IDocumentCatalog`` on SQLite: the ``agent_documents`` table of the kernel's database."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core_agent.contracts.document_catalog import DocumentRecord, IDocumentCatalog
from core_agent.contracts.settings import AgentSettings
from providers.sqlite.database import SqliteDatabase

_COLUMNS = (
    "namespace, document_id, source, content_hash, embedding_model, chunk_count, media_type,"
    " title, ingested_at"
)


def _record(row: tuple[Any, ...]) -> DocumentRecord:
    ns, doc_id, source, content_hash, model, chunks, media_type, title, ingested = row
    return DocumentRecord(
        namespace=ns,
        document_id=doc_id,
        source=source,
        content_hash=content_hash,
        embedding_model=model,
        chunk_count=int(chunks),
        media_type=media_type,
        title=title,
        ingested_at=datetime.fromisoformat(ingested),
    )


class SqliteDocumentCatalog(IDocumentCatalog):
    """What is ingested, by namespace and document id."""

    def __init__(self, path: Path | str) -> None:
        self._db = SqliteDatabase.open(path)

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> SqliteDocumentCatalog:
        """The catalog in ``AGENT_DATA_DIR``'s database."""
        return cls(settings.database_path)

    async def get(self, namespace: str, document_id: str) -> DocumentRecord | None:
        """The record, or ``None``."""
        row = await self._db.run(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM agent_documents WHERE namespace = ? AND document_id = ?",
                (namespace, document_id),
            ).fetchone()
        )
        return _record(row) if row is not None else None

    async def put(self, record: DocumentRecord) -> None:
        """Insert or replace the record."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT OR REPLACE INTO agent_documents ({_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.namespace,
                    record.document_id,
                    record.source,
                    record.content_hash,
                    record.embedding_model,
                    record.chunk_count,
                    record.media_type,
                    record.title,
                    record.ingested_at.astimezone(UTC).isoformat(),
                ),
            )

        await self._db.run(write)

    async def delete(self, namespace: str, document_id: str) -> bool:
        """Forget the document."""
        cursor_count = await self._db.run(
            lambda conn: (
                conn.execute(
                    "DELETE FROM agent_documents WHERE namespace = ? AND document_id = ?",
                    (namespace, document_id),
                ).rowcount
            )
        )
        return int(cursor_count) > 0

    async def list(self, namespace: str) -> list[DocumentRecord]:
        """Every document in the namespace, by source."""
        rows = await self._db.run(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM agent_documents WHERE namespace = ? ORDER BY source",
                (namespace,),
            ).fetchall()
        )
        return [_record(row) for row in rows]

    async def close(self) -> None:
        """Close the database connection."""
        await self._db.close()
