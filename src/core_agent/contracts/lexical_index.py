"""Port for keyword (lexical) search over passages."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LexicalHit:
    """A passage, its text and its lexical relevance (larger is better; BM25 when shipped)."""

    id: str
    score: float
    text: str


class ILexicalIndex(abc.ABC):
    """A keyword index over passages, by namespace.

    Queries are plain text: adapters tokenize them and never interpret operators, so any
    user input is a valid query. Methods are awaitable; failures raise ``StorageError``.
    """

    @abc.abstractmethod
    async def add(self, namespace: str, passages: Sequence[tuple[str, str]]) -> None:
        """Index ``(id, text)`` pairs, replacing passages with the same id, all or none.

        Raises:
            UsageError: An empty id or duplicate ids in the batch.
        """

    @abc.abstractmethod
    async def search(self, namespace: str, query: str, k: int) -> list[LexicalHit]:
        """The ``k`` most relevant passages, best first; none when no query term occurs.

        Raises:
            UsageError: ``k`` < 1.
        """

    @abc.abstractmethod
    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Remove passages by id; returns how many existed."""

    @abc.abstractmethod
    async def count(self, namespace: str) -> int:
        """Number of passages in the namespace."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the index is unusable afterwards."""
