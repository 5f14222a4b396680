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
    """Character offset of the passage in the document's extracted text."""
    end_offset: int | None = None
    source: str | None = None
    """Where the document came from (a path or URL)."""
    scores: dict[str, float] = field(default_factory=dict)
    """Each side's own score: ``lexical`` (BM25, larger is better) and ``vector`` (cosine
    similarity); a side that did not find the passage is absent."""
    ranks: dict[str, int] = field(default_factory=dict)
    """Each side's 1-based rank of the passage, as fused."""


class IRetriever(abc.ABC):
    """Ranks stored passages for a query (lexical, vector, or fused)."""

    @abc.abstractmethod
    async def retrieve(
        self, query: str, k: int = 10, *, namespace: str = "default"
    ) -> list[RetrievalHit]:
        """The ``k`` best passages, best first (fewer when fewer match).

        Raises:
            UsageError: ``query`` is empty or ``k`` < 1.
            StorageError: The index could not be read.
        """
