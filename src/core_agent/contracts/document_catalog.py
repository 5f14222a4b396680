"""Port for the record of what has been ingested."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """One ingested document: where it came from, its content hash and its chunks.

    Chunk ids are ``f"{document_id}#{n}"`` for ``n`` in ``range(chunk_count)``.
    """

    namespace: str
    document_id: str
    source: str
    content_hash: str
    embedding_model: str
    chunk_count: int
    media_type: str
    title: str | None
    ingested_at: datetime


class IDocumentCatalog(abc.ABC):
    """Which documents are in a namespace and from which content.

    Ingestion writes a record last, after the chunks are stored, so a record means the
    document is fully indexed. Methods are awaitable; failures raise ``StorageError``.
    """

    @abc.abstractmethod
    async def get(self, namespace: str, document_id: str) -> DocumentRecord | None:
        """The record, or ``None`` when the document was never (fully) ingested."""

    @abc.abstractmethod
    async def put(self, record: DocumentRecord) -> None:
        """Insert or replace the record for ``(namespace, document_id)``."""

    @abc.abstractmethod
    async def delete(self, namespace: str, document_id: str) -> bool:
        """Forget a document; ``True`` when it was recorded."""

    @abc.abstractmethod
    async def list(self, namespace: str) -> list[DocumentRecord]:
        """Every document in the namespace, by source."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the catalog is unusable afterwards."""
