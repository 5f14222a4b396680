"""Port for storing and searching vectors by namespace."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """A vector with its id, source text and flat metadata."""

    id: str
    vector: Sequence[float]
    text: str = ""
    metadata: dict[str, str | int | float | bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A search result: the record and its distance to the query (smaller is closer)."""

    record: VectorRecord
    distance: float


class IVectorStore(abc.ABC):
    """Nearest-neighbour search over namespaced collections.

    Each namespace records the embedding model and dimension that produced it and refuses
    vectors from another. Methods are awaitable; failures raise ``StorageError``.
    """

    @abc.abstractmethod
    async def upsert(
        self, namespace: str, records: Sequence[VectorRecord], *, embedding_model: str
    ) -> None:
        """Insert or replace records, all or none.

        Raises:
            UsageError: Wrong dimension, non-finite values or another embedding model.
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
        """The ``k`` nearest records matching ``where`` (equality on metadata).

        The filter applies before the neighbour search: when ``k`` matching records exist,
        ``k`` are returned.
        """

    @abc.abstractmethod
    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records by id; returns how many existed."""

    @abc.abstractmethod
    async def count(self, namespace: str) -> int:
        """Number of records in the namespace (0 when it does not exist)."""
