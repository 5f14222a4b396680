"""Port for finding the passages relevant to a query."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RetrievalHit:
    """A passage with where it came from and how each retriever scored it."""

    chunk_id: str
    document_id: str
    text: str
    score: float
    start_offset: int | None = None
    end_offset: int | None = None
    scores: dict[str, float] = field(default_factory=dict)
    """Per-source scores, e.g. ``{"lexical": 7.2, "vector": 0.81}``."""


class IRetriever(abc.ABC):
    """Ranks stored passages for a query (lexical, vector, or fused)."""

    @abc.abstractmethod
    async def retrieve(
        self, query: str, k: int = 10, *, namespace: str = "default"
    ) -> list[RetrievalHit]:
        """The ``k`` best passages, best first.

        Raises:
            UsageError: ``query`` is empty or ``k`` < 1.
            StorageError: The index could not be read.
        """
