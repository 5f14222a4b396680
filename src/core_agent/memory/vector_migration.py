"""Moving vectors between backends and models: dual write, backfill, verification, re-embedding.

* ``DualWriteVectorStore`` writes every change to the current backend and the one being
  migrated to, and reads from the current one only.
* ``migrate_vectors`` backfills the target with what it lacks. It decides what to copy from
  the ids on both sides each time it runs, so a run killed half-way resumes where it stopped.
* ``verify_vectors`` compares two stores: embedding identity, ids, counts, sampled records,
  and the nearest neighbours of sampled queries (ties at the k-th distance are not
  differences).
* ``reembed_namespace`` rebuilds a namespace for a new embedding model in a staging
  namespace (resumable too) and swaps it in atomically with ``IVectorStore.replace``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import (
    CoreAgentError,
    EmbeddingMismatchError,
    UsageError,
)
from core_agent.contracts.vector_store import (
    CollectionInfo,
    IVectorStore,
    VectorHit,
    VectorRecord,
)

log = logging.getLogger(__name__)
TIE_TOLERANCE = 1e-5
VECTOR_TOLERANCE = 1e-4


class DualWriteVectorStore(IVectorStore):
    """Writes to ``primary`` and ``secondary``; reads from ``primary``.

    A write fails only if the primary fails. A secondary failure is logged and counted in
    ``secondary_failures``; ``core-agent vectors migrate`` repairs what it missed and
    ``core-agent vectors verify`` reports it.
    """

    def __init__(self, primary: IVectorStore, secondary: IVectorStore) -> None:
        self.primary = primary
        self.secondary = secondary
        self.secondary_failures = 0

    async def _mirror(self, what: str, call: Callable[[], Any]) -> None:
        try:
            await call()
        except CoreAgentError as exc:
            self.secondary_failures += 1
            log.warning("dual write: the migration target missed %s: %s", what, exc)

    async def upsert(
        self, namespace: str, records: Sequence[VectorRecord], *, embedding_model: str
    ) -> None:
        """Upsert into both stores (the primary first)."""
        await self.primary.upsert(namespace, records, embedding_model=embedding_model)
        await self._mirror(
            f"an upsert of {len(records)} record(s) into {namespace!r}",
            lambda: self.secondary.upsert(namespace, records, embedding_model=embedding_model),
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
        """Search the primary."""
        return await self.primary.search(
            namespace, query, k, embedding_model=embedding_model, where=where
        )

    async def fetch(self, namespace: str, ids: Sequence[str]) -> list[VectorRecord]:
        """Fetch from the primary."""
        return await self.primary.fetch(namespace, ids)

    async def ids(self, namespace: str) -> list[str]:
        """The primary's ids."""
        return await self.primary.ids(namespace)

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete from both; returns the primary's count."""
        deleted = await self.primary.delete(namespace, ids)
        await self._mirror(
            f"a delete of {len(ids)} id(s) in {namespace!r}",
            lambda: self.secondary.delete(namespace, ids),
        )
        return deleted

    async def count(self, namespace: str) -> int:
        """The primary's count."""
        return await self.primary.count(namespace)

    async def describe(self, namespace: str) -> CollectionInfo | None:
        """The primary's collection."""
        return await self.primary.describe(namespace)

    async def namespaces(self) -> list[str]:
        """The primary's namespaces."""
        return await self.primary.namespaces()

    async def drop(self, namespace: str) -> bool:
        """Drop in both."""
        dropped = await self.primary.drop(namespace)
        await self._mirror(f"a drop of {namespace!r}", lambda: self.secondary.drop(namespace))
        return dropped

    async def replace(self, namespace: str, source: str) -> None:
        """Replace in both."""
        await self.primary.replace(namespace, source)
        await self._mirror(
            f"a swap of {source!r} into {namespace!r}",
            lambda: self.secondary.replace(namespace, source),
        )

    async def close(self) -> None:
        """Close both."""
        try:
            await self.primary.close()
        finally:
            await self.secondary.close()


@dataclass(slots=True)
class MigrationProgress:
    """Reported after each batch."""

    namespace: str
    total: int
    already_present: int
    copied: int = 0


@dataclass(frozen=True, slots=True)
class NamespaceMigration:
    """What a migration did to one namespace."""

    namespace: str
    total: int
    already_present: int
    copied: int


async def migrate_vectors(
    source: IVectorStore,
    target: IVectorStore,
    *,
    namespaces: Sequence[str] | None = None,
    batch_size: int = 500,
    overwrite: bool = False,
    progress: Callable[[MigrationProgress], None] | None = None,
) -> list[NamespaceMigration]:
    """Copy to ``target`` the records of ``source`` it does not have (all with ``overwrite``).

    Each batch is one atomic upsert, so a crash loses at most the batch in flight and a
    rerun continues from what the target holds.

    Raises:
        EmbeddingMismatchError: The target holds a namespace of another embedding model.
    """
    if batch_size < 1:
        raise UsageError("batch_size must be at least 1")
    done: list[NamespaceMigration] = []
    for namespace in namespaces or await source.namespaces():
        info = await source.describe(namespace)
        if info is None:
            raise UsageError(f"the source has no vector namespace {namespace!r}")
        existing = await target.describe(namespace)
        if existing is not None and (existing.embedding_model, existing.dimension) != (
            info.embedding_model,
            info.dimension,
        ):
            raise EmbeddingMismatchError(
                namespace,
                stored_model=existing.embedding_model,
                stored_dimension=existing.dimension,
                model=info.embedding_model,
                dimension=info.dimension,
            )
        source_ids = await source.ids(namespace)
        present = set() if overwrite else set(await target.ids(namespace))
        todo = [i for i in source_ids if i not in present]
        state = MigrationProgress(namespace, len(source_ids), len(source_ids) - len(todo))
        if progress:
            progress(state)
        for start in range(0, len(todo), batch_size):
            records = await source.fetch(namespace, todo[start : start + batch_size])
            await target.upsert(namespace, records, embedding_model=info.embedding_model)
            state.copied += len(records)
            if progress:
                progress(state)
        done.append(NamespaceMigration(namespace, state.total, state.already_present, state.copied))
    return done


@dataclass(slots=True)
class NamespaceVerification:
    """Differences found in one namespace; empty lists and equal counts mean consistent."""

    namespace: str
    identity: tuple[str, int] | None
    other_identity: tuple[str, int] | None
    count: int
    other_count: int
    only_here: list[str] = field(default_factory=list)
    only_there: list[str] = field(default_factory=list)
    different_records: list[str] = field(default_factory=list)
    different_neighbours: list[str] = field(default_factory=list)
    """Sampled query ids whose top-k differ beyond ties."""
    sampled: int = 0

    @property
    def consistent(self) -> bool:
        """Whether nothing differs."""
        return (
            self.identity == self.other_identity
            and self.count == self.other_count
            and not self.only_here
            and not self.only_there
            and not self.different_records
            and not self.different_neighbours
        )


def _same_record(a: VectorRecord, b: VectorRecord) -> bool:
    if a.text != b.text or a.metadata != b.metadata or len(a.vector) != len(b.vector):
        return False
    return all(
        math.isclose(x, y, abs_tol=VECTOR_TOLERANCE)
        for x, y in zip(a.vector, b.vector, strict=True)
    )


def _same_neighbours(a: list[VectorHit], b: list[VectorHit]) -> bool:
    ids_a = {hit.record.id for hit in a}
    ids_b = {hit.record.id for hit in b}
    if ids_a == ids_b:
        return True
    if len(a) != len(b) or not a:
        return False
    # Records at the k-th distance are interchangeable: either side may return any of them.
    edge = max(a[-1].distance, b[-1].distance)
    differing = [h for h in (*a, *b) if h.record.id not in ids_a & ids_b]
    return all(abs(h.distance - edge) <= TIE_TOLERANCE for h in differing)


async def verify_vectors(
    store: IVectorStore,
    other: IVectorStore,
    *,
    namespaces: Sequence[str] | None = None,
    samples: int = 20,
    k: int = 10,
    seed: int = 0,
) -> list[NamespaceVerification]:
    """Compare two stores namespace by namespace (see the module docstring)."""
    names = namespaces or sorted(set(await store.namespaces()) | set(await other.namespaces()))
    rng = random.Random(seed)
    reports: list[NamespaceVerification] = []
    for namespace in names:
        info, other_info = await store.describe(namespace), await other.describe(namespace)
        report = NamespaceVerification(
            namespace=namespace,
            identity=(info.embedding_model, info.dimension) if info else None,
            other_identity=(other_info.embedding_model, other_info.dimension)
            if other_info
            else None,
            count=info.count if info else 0,
            other_count=other_info.count if other_info else 0,
        )
        reports.append(report)
        here, there = await store.ids(namespace), await other.ids(namespace)
        here_set, there_set = set(here), set(there)
        report.only_here = [i for i in here if i not in there_set]
        report.only_there = [i for i in there if i not in here_set]
        if info is None or other_info is None or report.identity != report.other_identity:
            continue
        common = [i for i in here if i in there_set]
        picked = rng.sample(common, min(samples, len(common)))
        report.sampled = len(picked)
        mine = {r.id: r for r in await store.fetch(namespace, picked)}
        theirs = {r.id: r for r in await other.fetch(namespace, picked)}
        model = info.embedding_model
        for record_id in picked:
            a, b = mine.get(record_id), theirs.get(record_id)
            if a is None or b is None or not _same_record(a, b):
                report.different_records.append(record_id)
                continue
            hits_a = await store.search(namespace, a.vector, k, embedding_model=model)
            hits_b = await other.search(namespace, a.vector, k, embedding_model=model)
            if not _same_neighbours(hits_a, hits_b):
                report.different_neighbours.append(record_id)
    return reports


def staging_namespace(namespace: str, model: str) -> str:
    """Where ``reembed_namespace`` builds ``namespace``'s collection for ``model``."""
    digest = hashlib.sha256(f"{namespace}\x00{model}".encode()).hexdigest()[:20]
    return f"reembed.{digest}"


@dataclass(slots=True)
class ReembedProgress:
    """Reported after each batch."""

    namespace: str
    total: int
    done: int


async def reembed_namespace(
    store: IVectorStore,
    namespace: str,
    embedder: IEmbedder,
    *,
    batch_size: int = 64,
    progress: Callable[[ReembedProgress], None] | None = None,
) -> int:
    """Rebuild ``namespace`` with ``embedder`` from the records' text; returns the count.

    Nothing changes for readers until the last step swaps the rebuilt collection in. An
    interrupted run resumes: the staging namespace keeps what was already embedded.

    Raises:
        UsageError: The namespace does not exist, already uses this model, or has a record
            without text (there is nothing to embed it from).
    """
    info = await store.describe(namespace)
    if info is None:
        raise UsageError(f"there is no vector namespace {namespace!r}")
    model = embedder.model_id
    if (info.embedding_model, info.dimension) == (model, embedder.dimension):
        raise UsageError(f"vector namespace {namespace!r} already uses {model!r}")
    staging = staging_namespace(namespace, model)
    staged = await store.describe(staging)
    if staged is not None and staged.embedding_model != model:
        await store.drop(staging)
    ids = await store.ids(namespace)
    if not ids:
        raise UsageError(f"vector namespace {namespace!r} is empty; nothing to re-embed")
    present = set(await store.ids(staging))
    gone = present - set(ids)
    if gone:
        # Deleted from the namespace since an earlier, interrupted run.
        await store.delete(staging, sorted(gone))
    todo = [i for i in ids if i not in present]
    state = ReembedProgress(namespace, len(ids), len(ids) - len(todo))
    if progress:
        progress(state)
    for start in range(0, len(todo), batch_size):
        records = await store.fetch(namespace, todo[start : start + batch_size])
        blank = [r.id for r in records if not r.text.strip()]
        if blank:
            raise UsageError(
                f"record {blank[0]!r} in {namespace!r} has no text to re-embed; nothing was "
                "swapped (delete it or give it text, then run again)"
            )
        vectors = await embedder.embed([r.text for r in records])
        await store.upsert(
            staging,
            [
                VectorRecord(id=r.id, vector=v, text=r.text, metadata=r.metadata)
                for r, v in zip(records, vectors, strict=True)
            ],
            embedding_model=model,
        )
        state.done += len(records)
        if progress:
            progress(state)
    await store.replace(namespace, staging)
    return len(ids)
