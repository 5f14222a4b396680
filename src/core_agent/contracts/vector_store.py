"""Port for storing and searching vectors by namespace."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MetadataValue = str | int | float | bool
"""Metadata values are flat scalars so every backend can filter on them."""


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """A vector with its id, source text and flat metadata."""

    id: str
    vector: Sequence[float]
    text: str = ""
    metadata: dict[str, MetadataValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A search result: the record and its cosine distance to the query (0 is identical)."""

    record: VectorRecord
    distance: float


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    """What a namespace holds and which embedding model produced it."""

    namespace: str
    embedding_model: str
    dimension: int
    count: int


class IVectorStore(abc.ABC):
    """Nearest-neighbour search over namespaced collections.

    A namespace is created by its first upsert and records the embedding model and dimension
    of that write; from then on it refuses vectors or queries from another model
    (``EmbeddingMismatchError``). Vectors are compared by cosine distance and may be stored
    unit-normalized, so ``fetch`` returns vectors with the stored direction, not necessarily
    the stored length. Names are 1-128 characters of letters, digits and ``_ . : -``.

    Methods are awaitable and never block the event loop; backend failures raise
    ``StorageError``.
    """

    @abc.abstractmethod
    async def upsert(
        self, namespace: str, records: Sequence[VectorRecord], *, embedding_model: str
    ) -> None:
        """Insert or replace records by id, all or none.

        Raises:
            UsageError: An empty id, duplicate ids in the batch, a zero, wrong-sized or
                non-finite vector, or metadata that is not flat scalars; nothing is written.
            EmbeddingMismatchError: The namespace holds vectors of another model or dimension.
        """

    @abc.abstractmethod
    async def search(
        self,
        namespace: str,
        query: Sequence[float],
        k: int,
        *,
        embedding_model: str,
        where: dict[str, Any] | None = None,
    ) -> list[VectorHit]:
        """The ``k`` nearest records matching ``where``, nearest first.

        ``where`` is equality on metadata values (all keys must match). The filter applies
        before the neighbour search: when ``k`` matching records exist, ``k`` are returned.
        An unknown namespace returns no hits.

        Raises:
            UsageError: ``k`` < 1, a bad query vector, or a ``where`` value that is not a
                scalar.
            EmbeddingMismatchError: The namespace holds vectors of another model or dimension.
        """

    @abc.abstractmethod
    async def fetch(self, namespace: str, ids: Sequence[str]) -> list[VectorRecord]:
        """The records with these ids that exist, in the order asked."""

    @abc.abstractmethod
    async def ids(self, namespace: str) -> list[str]:
        """Every id in the namespace, sorted (empty for an unknown namespace)."""

    @abc.abstractmethod
    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records by id; returns how many existed."""

    @abc.abstractmethod
    async def count(self, namespace: str) -> int:
        """Number of records in the namespace (0 when it does not exist)."""

    @abc.abstractmethod
    async def describe(self, namespace: str) -> CollectionInfo | None:
        """The namespace's embedding identity and size, or ``None`` when it does not exist."""

    @abc.abstractmethod
    async def namespaces(self) -> list[str]:
        """Every namespace, sorted."""

    @abc.abstractmethod
    async def drop(self, namespace: str) -> bool:
        """Remove a namespace with its records and identity; ``True`` when it existed."""

    @abc.abstractmethod
    async def replace(self, namespace: str, source: str) -> None:
        """Make ``source``'s records and identity those of ``namespace``, atomically.

        Readers see either the old collection or the new one, never a mix; ``source`` no
        longer exists afterwards. Used to swap in a collection rebuilt for a new model.

        Raises:
            UsageError: ``source`` does not exist or equals ``namespace``.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release files and connections; the store is unusable afterwards."""
