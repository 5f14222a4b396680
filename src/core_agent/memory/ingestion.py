"""Ingestion: load, chunk, embed, store; unchanged content is skipped.

For each document the work that can fail on bad input (reading, decoding, size limits,
chunking, embedding) is done before anything is written. Writes then go vectors first,
keyword index second, catalog record last: the record is the commit point, so a document
interrupted half-way has no record (or its old one) and the next ingestion redoes it.
Re-ingesting content whose hash and embedding model match the record is a no-op.

An application's documents (``IBusinessCapabilityProvider.documents``) are synchronised
(``sync_documents``): ingested the same way, and those it no longer offers removed.

A folder's documents reach the keyword index in batches (one write for up to
``KEYWORD_BATCH_CHUNKS`` chunks): a keyword index commit can cost more than a small file's
whole ingestion (Tantivy syncs its files to disk on each). Their records follow the batch.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Literal

import anyio.to_thread

from core_agent.contracts.business_capability_provider import (
    CapabilityDocument,
    IBusinessCapabilityProvider,
)
from core_agent.contracts.document_catalog import DocumentRecord, IDocumentCatalog
from core_agent.contracts.document_loader import IDocumentLoader, LoadedDocument
from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import CoreAgentError, EmbeddingMismatchError, UsageError
from core_agent.contracts.lexical_index import ILexicalIndex
from core_agent.contracts.vector_store import IVectorStore, VectorRecord
from core_agent.memory.chunking import Chunk, TokenChunker

IngestStatus = Literal["ingested", "unchanged", "failed", "removed"]


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What happened to one document."""

    source: str
    document_id: str
    status: IngestStatus
    chunks: int = 0
    error: str | None = None


@dataclass(slots=True)
class IngestProgress:
    """Where a running ingestion is; passed to the progress callback after each step."""

    documents_total: int | None
    """``None`` while not known (documents that arrive one at a time)."""
    documents_done: int = 0
    chunks_written: int = 0
    current: str | None = None
    results: list[IngestResult] = field(default_factory=list)


KEYWORD_BATCH_CHUNKS = 1000
KEYWORD_BATCH_DOCUMENTS = 200


@dataclass(frozen=True, slots=True)
class _VectorsStored:
    """A document whose vectors are written; its passages, stale ids and record come next."""

    result: IngestResult
    passages: list[tuple[str, str]]
    stale: list[str]
    record: DocumentRecord


_Outcome = IngestResult | _VectorsStored
_Job = tuple[str, str, Callable[[], Awaitable[_Outcome]]]
"""A document to ingest: its source, its id, and the work that checks and embeds it."""


def chunk_id(document_id: str, index: int) -> str:
    """The id of a document's ``index``-th chunk in the vector store and keyword index."""
    return f"{document_id}#{index}"


def content_hash(text: str) -> str:
    """SHA-256 of the extracted text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class IngestionPipeline:
    """Loads files (or takes text), chunks, embeds in batches and stores them."""

    def __init__(
        self,
        *,
        loaders: Sequence[IDocumentLoader],
        chunker: TokenChunker,
        embedder: IEmbedder,
        vectors: IVectorStore,
        lexical: ILexicalIndex,
        catalog: IDocumentCatalog,
        max_bytes: int = 50_000_000,
        embed_batch_size: int = 64,
    ) -> None:
        self._by_suffix: dict[str, IDocumentLoader] = {}
        for loader in loaders:
            for suffix in loader.suffixes:
                self._by_suffix.setdefault(suffix.lower(), loader)
        self._chunker = chunker
        self._embedder = embedder
        self._vectors = vectors
        self._lexical = lexical
        self._catalog = catalog
        self._max_bytes = max_bytes
        self._batch = embed_batch_size

    @property
    def suffixes(self) -> list[str]:
        """File suffixes some loader reads, sorted."""
        return sorted(self._by_suffix)

    def files(self, path: Path) -> list[Path]:
        """The files ``ingest_path`` would read, sorted.

        That is ``path`` itself, or every supported file under it (hidden files and folders
        skipped). Blocks on the file system.

        Raises:
            UsageError: ``path`` does not exist, or is a file no loader reads.
        """
        if path.is_file():
            if path.suffix.lower() not in self._by_suffix:
                raise UsageError(
                    f"no loader reads {path.suffix or 'files without a suffix'} files; "
                    f"supported: {', '.join(self.suffixes)}"
                )
            return [path]
        if not path.is_dir():
            raise UsageError(f"{path} does not exist")
        found: list[Path] = []
        for folder, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found.extend(
                Path(folder) / name
                for name in names
                if not name.startswith(".") and Path(name).suffix.lower() in self._by_suffix
            )
        return sorted(found)

    async def ingest_path(
        self,
        path: Path,
        *,
        namespace: str = "default",
        force: bool = False,
        progress: Callable[[IngestProgress], None] | None = None,
    ) -> list[IngestResult]:
        """Ingest a file or every supported file under a folder; results in file order.

        A document that fails on its input (unreadable, too large, an embedding error) is
        reported as ``failed`` and the others go on; nothing of it is written. When a store
        fails, the documents of the batch being written are reported ``failed`` too and get
        no record, so the next ingestion redoes them.

        Raises:
            UsageError: ``path`` does not exist or is an unsupported file.
        """
        files = await anyio.to_thread.run_sync(self.files, path)
        state = IngestProgress(documents_total=len(files))

        async def jobs() -> AsyncIterator[_Job]:
            for file in files:
                work = partial(self._ingest_file, file, namespace=namespace, force=force)
                yield str(file), document_id_for(file), work

        await self._ingest_each(jobs(), state, namespace, progress)
        order = {str(file): index for index, file in enumerate(files)}
        state.results.sort(key=lambda result: order[result.source])
        return state.results

    async def ingest_capability(
        self,
        capability: IBusinessCapabilityProvider,
        *,
        namespace: str = "default",
        force: bool = False,
        progress: Callable[[IngestProgress], None] | None = None,
    ) -> list[IngestResult]:
        """Synchronise a capability's documents (``sync_documents``) under its own prefix.

        They are stored as ``capability:<name>:<document_id>``, so ``knowledge_search`` finds
        them with the other documents of ``namespace``.
        """
        return await self.sync_documents(
            capability.documents(),
            prefix=capability_prefix(capability.name),
            namespace=namespace,
            force=force,
            progress=progress,
        )

    async def sync_documents(
        self,
        documents: AsyncIterable[CapabilityDocument],
        *,
        prefix: str,
        namespace: str = "default",
        force: bool = False,
        progress: Callable[[IngestProgress], None] | None = None,
    ) -> list[IngestResult]:
        """Make the namespace's documents whose ids start with ``prefix`` be ``documents``.

        Each is stored as ``prefix + document_id``: new and changed ones are ingested,
        unchanged ones (same content hash and embedding model) skipped, and the documents
        under ``prefix`` that ``documents`` no longer holds are removed (``removed``). One
        that fails is reported ``failed`` and keeps what it had; the others go on.

        Raises:
            UsageError: ``documents`` yields an id twice (nothing is removed then).
            Whatever ``documents`` raises: what was ingested before stays, nothing is removed.
        """
        state = IngestProgress(documents_total=None)
        seen: set[str] = set()

        async def jobs() -> AsyncIterator[_Job]:
            async for document in documents:
                doc_id = f"{prefix}{document.document_id}"
                if doc_id in seen:
                    raise UsageError(f"document {document.document_id!r} is offered twice")
                seen.add(doc_id)
                source = document.source or doc_id
                work = partial(
                    self._store_vectors,
                    document.text,
                    source=source,
                    doc_id=doc_id,
                    namespace=namespace,
                    media_type=document.media_type,
                    title=document.title,
                    force=force,
                )
                yield source, doc_id, work

        await self._ingest_each(jobs(), state, namespace, progress)
        for record in await self._catalog.list(namespace):
            if record.document_id.startswith(prefix) and record.document_id not in seen:
                await self.remove(namespace, record.document_id)
                state.results.append(
                    IngestResult(record.source, record.document_id, "removed", record.chunk_count)
                )
        return state.results

    async def _ingest_each(
        self,
        jobs: AsyncIterator[_Job],
        state: IngestProgress,
        namespace: str,
        progress: Callable[[IngestProgress], None] | None,
    ) -> None:
        """Run ``jobs`` in order, writing keyword passages and records in batches.

        When ``jobs`` itself raises, the batch so far is committed before the error goes on.
        """
        pending: list[_VectorsStored] = []

        def report(results: Sequence[IngestResult]) -> None:
            state.results.extend(results)
            state.documents_done += len(results)
            state.chunks_written += sum(r.chunks for r in results if r.status == "ingested")
            if progress:
                progress(state)

        async def commit_pending() -> None:
            try:
                await self._commit(namespace, pending)
            except CoreAgentError as exc:
                # Their vectors are written but no record is: the next ingestion redoes them.
                report([replace(p.result, status="failed", error=str(exc)) for p in pending])
            else:
                report([p.result for p in pending])
            pending.clear()

        try:
            async for source, doc_id, work in jobs:
                state.current = source
                if progress:
                    progress(state)
                try:
                    outcome = await work()
                except CoreAgentError as exc:
                    outcome = IngestResult(source, doc_id, "failed", error=str(exc))
                if isinstance(outcome, IngestResult):
                    report([outcome])
                    continue
                pending.append(outcome)
                if (
                    sum(len(p.passages) for p in pending) >= KEYWORD_BATCH_CHUNKS
                    or len(pending) >= KEYWORD_BATCH_DOCUMENTS
                ):
                    await commit_pending()
        except Exception:
            if pending:
                await commit_pending()
            raise
        if pending:
            await commit_pending()

    async def _ingest_file(
        self, file: Path, *, namespace: str, force: bool
    ) -> IngestResult | _VectorsStored:
        size = (await anyio.to_thread.run_sync(file.stat)).st_size
        if size > self._max_bytes:
            raise UsageError(
                f"{file} is {size:,} bytes, over the {self._max_bytes:,}-byte limit "
                "(AGENT_INGEST_MAX_BYTES); nothing was written"
            )
        loader = self._by_suffix[file.suffix.lower()]
        try:
            loaded: LoadedDocument = await anyio.to_thread.run_sync(loader.load, file)
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from exc
        return await self._store_vectors(
            loaded.text,
            source=str(file),
            doc_id=document_id_for(file),
            namespace=namespace,
            media_type=loaded.media_type,
            title=loaded.title,
            force=force,
        )

    async def ingest_text(
        self,
        text: str,
        *,
        source: str,
        document_id: str | None = None,
        namespace: str = "default",
        media_type: str = "text/plain",
        title: str | None = None,
        force: bool = False,
    ) -> IngestResult:
        """Ingest one document's text (``document_id`` defaults to ``source``).

        Raises:
            UsageError: Empty or oversized text; the namespace holds another model's vectors.
            ModelError: The embedder failed.
            StorageError: A store failed; the document is left for the next ingestion.
        """
        doc_id = document_id or source
        if not doc_id:
            raise UsageError("a document needs a source or an id")
        outcome = await self._store_vectors(
            text,
            source=source,
            doc_id=doc_id,
            namespace=namespace,
            media_type=media_type,
            title=title,
            force=force,
        )
        if isinstance(outcome, IngestResult):
            return outcome
        await self._commit(namespace, [outcome])
        return outcome.result

    async def _store_vectors(
        self,
        text: str,
        *,
        source: str,
        doc_id: str,
        namespace: str,
        media_type: str,
        title: str | None,
        force: bool,
    ) -> IngestResult | _VectorsStored:
        """Check, chunk, embed and write the vectors; ``unchanged`` when nothing is to do."""
        if len(text.encode("utf-8")) > self._max_bytes:
            raise UsageError(
                f"{source}: the text is over the {self._max_bytes:,}-byte limit "
                "(AGENT_INGEST_MAX_BYTES); nothing was written"
            )
        digest = content_hash(text)
        model = self._embedder.model_id
        previous = await self._catalog.get(namespace, doc_id)
        if (
            not force
            and previous is not None
            and previous.content_hash == digest
            and previous.embedding_model == model
        ):
            return IngestResult(source, doc_id, "unchanged", previous.chunk_count)
        chunks = self._chunker.split(text)
        if not chunks:
            raise UsageError(f"{source} has no text to ingest; nothing was written")
        info = await self._vectors.describe(namespace)
        if info is not None and (info.embedding_model, info.dimension) != (
            model,
            self._embedder.dimension,
        ):
            # Checked before embedding: the store would refuse the write anyway.
            raise EmbeddingMismatchError(
                namespace,
                stored_model=info.embedding_model,
                stored_dimension=info.dimension,
                model=model,
                dimension=self._embedder.dimension,
            )
        vectors = await self._embed(chunks)
        records = [
            VectorRecord(
                id=chunk_id(doc_id, chunk.index),
                vector=vector,
                text=chunk.text,
                metadata={
                    "document_id": doc_id,
                    "chunk": chunk.index,
                    "start": chunk.start,
                    "end": chunk.end,
                    "source": source,
                },
            )
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]
        await self._vectors.upsert(namespace, records, embedding_model=model)
        stale: list[str] = []
        if previous is not None and previous.chunk_count > len(chunks):
            stale = [chunk_id(doc_id, i) for i in range(len(chunks), previous.chunk_count)]
            await self._vectors.delete(namespace, stale)
        record = DocumentRecord(
            namespace=namespace,
            document_id=doc_id,
            source=source,
            content_hash=digest,
            embedding_model=model,
            chunk_count=len(chunks),
            media_type=media_type,
            title=title,
            ingested_at=datetime.now(UTC),
        )
        return _VectorsStored(
            IngestResult(source, doc_id, "ingested", len(chunks)),
            [(r.id, r.text) for r in records],
            stale,
            record,
        )

    async def _commit(self, namespace: str, stored: Sequence[_VectorsStored]) -> None:
        """Keyword passages of documents whose vectors are written, then their records."""
        await self._lexical.add(namespace, [p for doc in stored for p in doc.passages])
        stale = [passage_id for doc in stored for passage_id in doc.stale]
        if stale:
            await self._lexical.delete(namespace, stale)
        for doc in stored:
            await self._catalog.put(doc.record)

    async def _embed(self, chunks: Sequence[Chunk]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(chunks), self._batch):
            batch = [chunk.text for chunk in chunks[start : start + self._batch]]
            vectors.extend(await self._embedder.embed(batch))
        return vectors

    async def reindex_keywords(self, namespace: str, *, batch_size: int = 1000) -> int:
        """Fill the keyword index from the chunks the vector store holds; returns how many.

        For a namespace whose keyword index is empty or behind, such as after switching
        ``AGENT_LEXICAL_INDEX``: re-ingesting would skip the unchanged documents. Passages
        are replaced by id, so a rerun after a failure is safe.
        """
        if batch_size < 1:
            raise UsageError("batch_size must be at least 1")
        ids = await self._vectors.ids(namespace)
        for start in range(0, len(ids), batch_size):
            records = await self._vectors.fetch(namespace, ids[start : start + batch_size])
            await self._lexical.add(namespace, [(r.id, r.text) for r in records])
        return len(ids)

    async def remove(self, namespace: str, document_id: str) -> bool:
        """Delete a document's chunks and record; ``True`` when it was ingested."""
        record = await self._catalog.get(namespace, document_id)
        if record is None:
            return False
        ids = [chunk_id(document_id, i) for i in range(record.chunk_count)]
        await self._vectors.delete(namespace, ids)
        await self._lexical.delete(namespace, ids)
        return await self._catalog.delete(namespace, document_id)


def capability_prefix(name: str) -> str:
    """What the ids of capability ``name``'s documents start with."""
    return f"capability:{name}:"


def document_id_for(path: Path) -> str:
    """A file's document id: its absolute path."""
    return str(path.resolve())
